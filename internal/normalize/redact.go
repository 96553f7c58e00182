package normalize

import "strings"

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

// DisplayURL returns the URL to store and show for raw: StripUserInfo,
// except that the user name of an ssh URL or of the scp-like form is kept
// when it is a plain login name ("git@github.com:o/r.git" stays as it is:
// without its user it would not clone). What can be a secret is still
// removed: any user info of http(s) (a token is a valid HTTPS user name),
// a user with a password, and a user that looks like a token
// (SecretShaped). It never changes the key: it rejects what RepoURL
// rejects, and RepoURL(DisplayURL(raw)) == RepoURL(raw), since the key of
// an ssh URL never holds its user.
func (n *Normalizer) DisplayURL(raw string) (string, error) {
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
	if p.ssh && isLoginName(s[p.userStart:p.userEnd-1]) {
		return s, nil
	}
	return s[:p.userStart] + s[p.userEnd:], nil
}

// isLoginName reports whether user is an ssh login name worth keeping: 1 to
// 64 characters of letters, digits, '.', '_' and '-', starting with a letter,
// a digit or '_', and not SecretShaped.
func isLoginName(user string) bool {
	if user == "" || len(user) > 64 || user[0] == '-' || user[0] == '.' {
		return false
	}
	for i := 0; i < len(user); i++ {
		c := user[i]
		if !(isLetter(c) || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	_, secret := SecretShaped(user)
	return !secret
}

// tokenShapes are the prefixes of well-known access tokens, and what they
// are.
var tokenShapes = []struct{ prefix, kind string }{
	{"ghp_", "a GitHub personal access token"}, {"gho_", "a GitHub OAuth token"}, {"ghu_", "a GitHub user-to-server token"},
	{"ghs_", "a GitHub server-to-server token"}, {"ghr_", "a GitHub refresh token"}, {"github_pat_", "a GitHub fine-grained access token"},
	{"glpat-", "a GitLab personal access token"}, {"gldt-", "a GitLab deploy token"}, {"glrt-", "a GitLab runner token"},
	{"glptt-", "a GitLab pipeline trigger token"}, {"gloas-", "a GitLab OAuth application secret"},
	{"ATBB", "a Bitbucket app password"}, {"ATCTT", "a Bitbucket access token"}, {"BBDC-", "a Bitbucket Data Center access token"},
	{"xoxb-", "a Slack bot token"}, {"xoxp-", "a Slack user token"},
	{"AKIA", "an AWS access key ID"}, {"ASIA", "an AWS temporary access key ID"},
}

// SecretShaped reports whether s (a whole value, or one part of one) looks
// like an access token: a known token prefix followed by at least 16 more
// characters, a JWT ("eyJ" and three dot-separated base64url parts), or a
// long run of letters and digits of both kinds (40 or more characters).
// It returns what it looks like, to name in an error; the value itself is
// never named.
func SecretShaped(s string) (string, bool) {
	for _, t := range tokenShapes {
		if len(s) >= len(t.prefix)+16 && strings.HasPrefix(s, t.prefix) {
			return t.kind, true
		}
	}
	if strings.HasPrefix(s, "eyJ") && strings.Count(s, ".") == 2 && len(s) >= 20 {
		return "a JSON Web Token", true
	}
	if len(s) >= 40 {
		var letters, digits bool
		for i := 0; i < len(s); i++ {
			c := s[i]
			switch {
			case isLetter(c):
				letters = true
			case '0' <= c && c <= '9':
				digits = true
			case c == '_' || c == '-':
			default:
				return "", false
			}
		}
		if letters && digits {
			return "a token", true
		}
	}
	return "", false
}
