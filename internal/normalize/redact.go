package normalize

// StripUserInfo returns the URL as given (surrounding whitespace trimmed) with
// any user info removed: "https://user:tok@h/o/r" gives "https://h/o/r" and
// "git@host:o/r" gives "host:o/r". It is what the service stores as the
// repository URL "as given".
//
// It rejects exactly what RepoURL rejects, with the same errors, and for every
// accepted input RepoURL(result) equals RepoURL(raw). One case needs more
// than deleting the user: in "git@h:2222/o/r" the path is "2222/o/r", but
// "h:2222/o/r" is the key form with port 2222, so the result is
// "ssh://h/2222/o/r" (same key as the input).
func StripUserInfo(raw string) (string, error) {
	p, err := parse(raw)
	if err != nil {
		return "", err
	}
	if _, err := p.key(); err != nil {
		return "", err
	}
	s := p.s
	if p.userEnd == p.userStart {
		return s, nil
	}
	out := s[:p.userStart] + s[p.userEnd:]
	if p.form == formSCP && isPortPrefix(p.scpPath) {
		host := s[p.userEnd : len(s)-len(p.scpPath)-1]
		out = "ssh://" + host + "/" + p.scpPath
	}
	return out, nil
}
