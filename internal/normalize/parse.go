package normalize

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	giturls "github.com/whilp/git-urls"
)

// form is the syntax an input was read in.
type form int

const (
	// formURL is scheme://[user@]host[:port]/path.
	formURL form = iota
	// formSCP is git's scp-like [user@]host:path. It has no port.
	formSCP
	// formKey is the canonical key syntax host[+port]/path (no scheme, no
	// user). It is accepted so that keys re-normalize to themselves.
	formKey
)

// parsed is an input after parsing and per-component normalization, before
// the alias table is applied.
type parsed struct {
	form form
	host string // normalized: lower case, ASCII (punycode), IPv6 in brackets
	port int    // 0 when absent or equal to the scheme's default
	segs []string

	// ssh is set for paths git sends over ssh (ssh URLs and scp-like).
	ssh bool
	// scpPath is the raw path of the scp-like form, as git sends it
	// (rules v3 key it verbatim; segs holds it decoded, as v2 keys it).
	scpPath string

	// For StripUserInfo: s is the trimmed input, and s[userStart:userEnd] is
	// the "user@" part (userEnd == userStart when there is none).
	s                  string
	userStart, userEnd int
}

// defaultPorts are the ports dropped from keys, per accepted scheme.
var defaultPorts = map[string]int{
	"https":   443,
	"http":    80,
	"ssh":     22,
	"git+ssh": 22,
	"ssh+git": 22,
	"git":     9418,
}

// schemeNames are names that, seen as the host of an scp-like URL
// ("https:host/path", "file:/tmp/r"), are far more likely a mangled scheme
// than a host. Such inputs are rejected.
var schemeNames = map[string]bool{
	"http": true, "https": true, "ssh": true, "git": true, "file": true,
	"ftp": true, "ftps": true, "rsync": true, "ext": true, "fd": true,
}

// RepoURL normalizes a Git repository URL into its canonical key. Every error
// it returns satisfies errors.Is(err, ErrInvalidURL) and is an *Error whose
// message never contains any part of the input.
func RepoURL(raw string) (Key, error) {
	return defaultNormalizer.RepoURL(raw)
}

func parse(raw string) (*parsed, error) {
	// The length cap comes first: nothing below, and in particular not
	// git-urls' regexp, sees more than MaxLength bytes.
	if len(raw) > MaxLength {
		return nil, invalid(reasonTooLong)
	}
	if !utf8.ValidString(raw) {
		return nil, invalid(reasonUTF8)
	}
	// U+FEFF is not White_Space, so TrimSpace would keep a leading BOM; it is
	// rejected anywhere, with its own message.
	if strings.ContainsRune(raw, '\uFEFF') {
		return nil, invalid(reasonBOM)
	}
	s := strings.TrimSpace(raw)
	if s == "" {
		return nil, invalid(reasonEmpty)
	}
	// git's "<transport>::<address>" remote-helper syntax (ext::, fd::, ...)
	// can run commands; it is never a repository URL. Checked before the
	// character scan so that "ext::sh -c x" gets the telling message.
	if isHelperSyntax(s) {
		return nil, invalid(reasonHelper)
	}
	for _, r := range s {
		switch {
		case unicode.IsSpace(r):
			return nil, invalid(reasonSpace)
		case unicode.IsControl(r):
			return nil, invalid(reasonControl)
		case unicode.Is(unicode.Cf, r):
			return nil, invalid(reasonFormat)
		}
	}
	// No accepted form has a query or fragment; rejecting the characters
	// outright also covers git-urls, which would otherwise read anything after
	// an scp path as a "query".
	if strings.IndexByte(s, '?') >= 0 {
		return nil, invalid(reasonQuery)
	}
	if strings.IndexByte(s, '#') >= 0 {
		return nil, invalid(reasonFragment)
	}
	if isLocalPath(s) {
		return nil, invalid(reasonLocal)
	}
	if strings.IndexByte(s, '\\') >= 0 {
		return nil, invalid(reasonBackslash)
	}
	if scheme, rest, ok := splitScheme(s); ok {
		return parseURL(s, scheme, rest)
	}
	if strings.Contains(s, "://") {
		// "://" after something that is not a scheme ("tok_en://h/o/r",
		// "git@h:o/r://x"): git would read an scp-like URL with a strange
		// host or path, but this is a mangled URL. (Keys never contain it.)
		return nil, invalid(reasonMalformed)
	}
	if s[0] == '[' {
		// "[ipv6]/path" and "[ipv6]+port/path" are the key form. git reads
		// every other bracketed scheme-less spelling as scp-like, where the
		// brackets may hold a user and a port ("[git@h:2222]:o/r" is port
		// 2222); those are rejected (use the ssh:// form).
		if end := strings.IndexByte(s, ']'); end > 0 && (end+1 == len(s) || s[end+1] == '/' || s[end+1] == '+') {
			return parseKey(s)
		}
		return nil, invalid(reasonScpIPv6)
	}
	colon := strings.IndexByte(s, ':')
	slash := strings.IndexByte(s, '/')
	if colon < 0 || (slash >= 0 && slash < colon) {
		// No ':' before the first '/': the canonical key form
		// host[+port]/path. (git itself would take this for a relative local
		// path; see docs/normalization.md.)
		return parseKey(s)
	}
	// Everything else is scp-like, exactly as git's url_is_local_not_ssh
	// decides: [user@]host:rest, with rest the path (also when it starts
	// with digits: "h:2222/o/r" is port 22, path "2222/o/r").
	return parseSCP(s, colon)
}

// isHelperSyntax reports whether s starts with "<transport>::", the way git's
// transport_get detects a remote helper.
func isHelperSyntax(s string) bool {
	i := 0
	for i < len(s) && isSchemeChar(s[i], i == 0) {
		i++
	}
	return i > 0 && strings.HasPrefix(s[i:], "::")
}

func isSchemeChar(c byte, first bool) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		return true
	case '0' <= c && c <= '9', c == '+', c == '-', c == '.':
		return !first
	}
	return false
}

// splitScheme splits "scheme://rest". Like git's is_url, the part before
// "://" must consist of scheme characters, or the input is not a URL at all.
func splitScheme(s string) (scheme, rest string, ok bool) {
	i := strings.Index(s, "://")
	if i <= 0 {
		return "", "", false
	}
	for j := 0; j < i; j++ {
		if !isSchemeChar(s[j], j == 0) {
			return "", "", false
		}
	}
	return s[:i], s[i+3:], true
}

// isLocalPath reports the local-path spellings: absolute and relative paths,
// home-relative paths, UNC paths and Windows drive paths. (Git treats a
// Windows drive letter as a path, not as an scp host named "C".)
func isLocalPath(s string) bool {
	switch s[0] {
	case '/', '\\', '.', '~':
		return true
	}
	return isDrivePath(s)
}

func isDrivePath(s string) bool {
	if len(s) < 2 || s[1] != ':' || !isLetter(s[0]) {
		return false
	}
	return len(s) == 2 || s[2] == '/' || s[2] == '\\'
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

// parseURL handles scheme://[user@]host[:port]/path.
func parseURL(s, rawScheme, rest string) (*parsed, error) {
	scheme := strings.ToLower(rawScheme)
	switch scheme {
	case "https", "http", "ssh", "git", "git+ssh", "ssh+git":
	case "file":
		return nil, invalid(reasonFileScheme)
	default:
		return nil, invalid(reasonScheme)
	}

	authority, rawPath := rest, ""
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		authority, rawPath = rest[:i], rest[i:]
	}
	p := &parsed{form: formURL, s: s, ssh: isSSHScheme(scheme)}
	p.userStart = len(rawScheme) + len("://")
	p.userEnd = p.userStart
	hostPort := authority
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		// Parsers disagree on which '@' ends the user info; refuse to guess.
		if strings.IndexByte(authority, '@') != at {
			return nil, invalid(reasonUserAt)
		}
		hostPort = authority[at+1:]
		p.userEnd = p.userStart + at + 1
		if isSSHScheme(scheme) && strings.IndexByte(authority[:at], ':') >= 0 {
			// git hands "user:pw@host:port" to ssh as one host argument
			// and drops the port; ssh has no password in its URL.
			return nil, invalid(reasonSSHPassword)
		}
		if scheme == "git" {
			// git:// has no user: git hands "user@host" to the resolver
			// (or proxy) as the host name.
			return nil, invalid(reasonGitUser)
		}
	}
	rawHost, rawPort, err := splitHostPort(hostPort)
	if err != nil {
		return nil, err
	}
	if p.host, err = normalizeHost(rawHost); err != nil {
		return nil, err
	}
	if p.port, err = parsePort(rawPort); err != nil {
		return nil, err
	}
	if p.port == defaultPorts[scheme] {
		p.port = 0
	}
	if err := checkPath(rawPath); err != nil {
		return nil, err
	}

	// Let git-urls (net/url underneath) parse it too, and insist it agrees
	// with the split above; a disagreement means an ambiguous URL. git-urls
	// does not know the "ssh+git" alias, so it is given its synonym.
	gitScheme := scheme
	if gitScheme == "ssh+git" {
		gitScheme = "git+ssh"
	}
	u, err := giturls.ParseTransport(gitScheme + "://" + rest)
	if err != nil {
		// net/url's messages quote the input (user info included), so they
		// are never passed on.
		if strings.Contains(err.Error(), "userinfo") {
			return nil, invalid(reasonUserInfo)
		}
		return nil, invalid(reasonMalformed)
	}
	if u.Host != hostPort || (u.User != nil) != (p.userEnd > p.userStart) ||
		u.Opaque != "" || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return nil, invalid(reasonMalformed)
	}
	if p.segs, err = normalizePath(rawPath, isSSHScheme(scheme)); err != nil {
		return nil, err
	}
	return p, nil
}

func isSSHScheme(scheme string) bool {
	return scheme == "ssh" || scheme == "git+ssh" || scheme == "ssh+git"
}

// parseSCP handles git's scp-like [user@]host:path; colon is the index of the
// first ':' in s, which comes before any '/'.
func parseSCP(s string, colon int) (*parsed, error) {
	hostPart, rawPath := s[:colon], s[colon+1:]
	p := &parsed{form: formSCP, s: s, ssh: true, scpPath: rawPath}
	rawHost := hostPart
	if at := strings.LastIndexByte(hostPart, '@'); at >= 0 {
		if strings.IndexByte(hostPart, '@') != at {
			return nil, invalid(reasonUserAt)
		}
		rawHost = hostPart[at+1:]
		p.userEnd = at + 1
	}
	switch {
	case rawHost == "":
		return nil, invalid(reasonNoHost)
	case rawHost[0] == '[':
		return nil, invalid(reasonScpIPv6)
	case strings.ContainsAny(s, "[]"):
		return nil, invalid(reasonScpChar)
	case rawPath == "":
		return nil, invalid(reasonNoPath)
	case len(rawHost) == 1 && isLetter(rawHost[0]) && rawPath[0] == '/':
		// "c:/o/r" is a drive path; "git@c:/o/r" is rejected too, or
		// StripUserInfo could not return "c:/o/r".
		return nil, invalid(reasonLocal)
	}
	if lh := strings.ToLower(rawHost); schemeNames[lh] {
		if lh == "file" {
			return nil, invalid(reasonLocal)
		}
		return nil, invalid(reasonNoSlashes)
	}
	var err error
	if p.host, err = normalizeHost(rawHost); err != nil {
		return nil, err
	}
	// The scp path is passed to the ssh server verbatim. Only a conservative
	// set of bytes is accepted: letters, digits, ".", "_", "-", "/", "~"
	// (home-relative paths, see normalizePath) and well-formed
	// percent-escapes (Azure DevOps project names with spaces arrive as
	// "%20"). Anything else (":", "@", non-ASCII, ...) is rejected with "use
	// the ssh:// form".
	if err := checkSCPPath(rawPath); err != nil {
		return nil, err
	}
	// git-urls parses the scp syntax too, and must agree on the host. It is
	// given the normalized (ASCII) host, so that internationalized hosts
	// work, no user (its user pattern rejects common user names such as
	// "first.last" that OpenSSH accepts), and the path with '%' and '~'
	// masked (its path pattern lacks them; checkSCPPath vetted them).
	masked := strings.NewReplacer("%", "_", "~", "_").Replace(rawPath)
	// git-urls (the chainguard-dev fork, see go.mod) refuses more than
	// gitURLsMaxLen bytes. The input is capped at MaxLength, but the ASCII
	// host can be longer than the input's (punycode), and such an scp
	// string can still give a key within MaxLength (".git" is dropped):
	// v1.0.0 accepted it. Its regexp matches any non-empty prefix of a path
	// checkSCPPath vetted exactly as the whole path, so it is given the
	// longest prefix that fits; the rules, and every key, stay as they were
	// (TestSCPLongerThanGitURLsCap).
	if room := gitURLsMaxLen - len(p.host) - 1; len(masked) > room && room > 0 {
		masked = masked[:room]
	}
	u, err := giturls.ParseScp(p.host + ":" + masked)
	if err != nil || u.RawQuery != "" {
		return nil, invalid(reasonScpChar)
	}
	if u.Host != p.host || u.Path != masked || u.User != nil {
		return nil, invalid(reasonMalformedScp)
	}
	if p.segs, err = normalizePath(rawPath, true); err != nil {
		return nil, err
	}
	return p, nil
}

// gitURLsMaxLen is the longest input giturls.ParseScp accepts (the
// chainguard-dev fork's maxLen, its fix of GHSA-3f2q-6294-fmq5).
const gitURLsMaxLen = 2048

func checkSCPPath(s string) error {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '.', c == '_', c == '-', c == '/', c == '~':
		case c == '%':
			if i+2 >= len(s) || unhex(s[i+1]) < 0 || unhex(s[i+2]) < 0 {
				return invalid(reasonPercent)
			}
			i += 2
		default:
			return invalid(reasonScpChar)
		}
	}
	return nil
}

// parseKey handles the canonical key form host[+port]/path.
func parseKey(s string) (*parsed, error) {
	slash := strings.IndexByte(s, '/')
	if slash < 0 {
		if s[0] == '[' || strings.IndexByte(s, ':') >= 0 {
			return nil, invalid(reasonNoPath)
		}
		// A single word: git reads it as a relative path.
		return nil, invalid(reasonLocal)
	}
	authority, rawPath := s[:slash], s[slash:]
	if strings.IndexByte(authority, '@') >= 0 {
		// User info needs a scheme or the scp-like syntax.
		return nil, invalid(reasonHost)
	}
	p := &parsed{form: formKey, s: s}
	rawHost, rawPort, err := splitKeyAuthority(authority)
	if err != nil {
		return nil, err
	}
	if p.host, err = normalizeHost(rawHost); err != nil {
		return nil, err
	}
	if p.port, err = parsePort(rawPort); err != nil {
		return nil, err
	}
	if err := checkPath(rawPath); err != nil {
		return nil, err
	}
	if p.segs, err = normalizePath(rawPath, false); err != nil {
		return nil, err
	}
	return p, nil
}

// splitKeyAuthority splits the authority of the key form, host[+port] or
// [ipv6][+port]. A '+' cannot occur in a host name, so the split is
// unambiguous, and unlike ':' it makes no spelling scp-like to git.
func splitKeyAuthority(a string) (host, port string, err error) {
	if a == "" {
		return "", "", invalid(reasonNoHost)
	}
	if a[0] == '[' {
		end := strings.IndexByte(a, ']')
		if end < 0 {
			return "", "", invalid(reasonIPv6)
		}
		host, after := a[:end+1], a[end+1:]
		switch {
		case after == "":
			return host, "", nil
		case after[0] == '+' && after != "+":
			return host, after[1:], nil
		}
		return "", "", invalid(reasonHost)
	}
	if i := strings.LastIndexByte(a, '+'); i >= 0 {
		if i == len(a)-1 {
			return "", "", invalid(reasonPortNaN)
		}
		return a[:i], a[i+1:], nil
	}
	return a, "", nil
}

// splitHostPort splits host[:port] or [ipv6][:port]. An empty port ("h:") is
// returned as "" like an absent one (RFC 3986: the scheme default applies).
func splitHostPort(hp string) (host, port string, err error) {
	if hp == "" {
		return "", "", invalid(reasonNoHost)
	}
	if hp[0] == '[' {
		end := strings.IndexByte(hp, ']')
		if end < 0 {
			return "", "", invalid(reasonIPv6)
		}
		host, after := hp[:end+1], hp[end+1:]
		switch {
		case after == "":
			return host, "", nil
		case after[0] == ':':
			return host, after[1:], nil
		}
		return "", "", invalid(reasonHost)
	}
	if i := strings.LastIndexByte(hp, ':'); i >= 0 {
		return hp[:i], hp[i+1:], nil
	}
	return hp, "", nil
}

// parsePort parses a decimal port; "" means none (0). Leading zeros are
// accepted and dropped, as curl and OpenSSH read them.
func parsePort(s string) (int, error) {
	if s == "" {
		return 0, nil
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, invalid(reasonPortNaN)
		}
	}
	s = strings.TrimLeft(s, "0")
	if s == "" || len(s) > 5 {
		return 0, invalid(reasonPortRange)
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, invalid(reasonPortRange)
	}
	return n, nil
}

// render writes host[+port]/seg/seg.
func render(host string, port int, segs []string) (Key, error) {
	var b strings.Builder
	n := len(host) + 6
	for _, s := range segs {
		n += len(s) + 1
	}
	b.Grow(n)
	b.WriteString(host)
	if port != 0 {
		b.WriteByte('+')
		b.WriteString(strconv.Itoa(port))
	}
	for _, s := range segs {
		b.WriteByte('/')
		b.WriteString(s)
	}
	if b.Len() > MaxLength {
		// Percent-encoding and punycode can grow an input; a key that is
		// too long would not re-normalize to itself.
		return "", invalid(reasonKeyTooLong)
	}
	return Key(b.String()), nil
}
