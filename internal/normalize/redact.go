package normalize

// StripUserInfo returns the URL as given (surrounding whitespace trimmed) with
// any user info removed: "https://user:tok@h/o/r" gives "https://h/o/r" and
// "git@host:o/r" gives "host:o/r". It is what the service stores as the
// repository URL "as given".
//
// It rejects exactly what RepoURL rejects, with the same errors, and for every
// accepted input RepoURL(result) equals RepoURL(raw). (Since Version 2 a
// user-less "h:2222/o/r" is scp-like, as git reads it, so deleting the user
// never changes the reading.)
func StripUserInfo(raw string) (string, error) {
	return defaultNormalizer.StripUserInfo(raw)
}

// StripUserInfo is the package-level StripUserInfo under n's rules.
func (n *Normalizer) StripUserInfo(raw string) (string, error) {
	p, err := parse(raw)
	if err != nil {
		return "", err
	}
	if _, err := n.key(p); err != nil {
		return "", err
	}
	s := p.s
	if p.userEnd == p.userStart {
		return s, nil
	}
	return s[:p.userStart] + s[p.userEnd:], nil
}
