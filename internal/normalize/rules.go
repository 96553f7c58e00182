package normalize

import (
	"slices"
	"strconv"
	"strings"
)

// Endpoint is one side of a configured alias: a host, a port (0 for the
// scheme default) and a path prefix of whole segments ("" for none). All
// three are in canonical key form: Host as a key's host (lower-case ASCII,
// punycode, IPv6 in brackets), Prefix as a key's path ("scm", "git/team").
type Endpoint struct {
	Host   string
	Port   int
	Prefix string
}

// String renders the endpoint in key syntax, host[+port][/prefix]; it is
// what ParseEndpoint reads.
func (e Endpoint) String() string {
	var b strings.Builder
	b.WriteString(e.Host)
	if e.Port != 0 {
		b.WriteByte('+')
		b.WriteString(strconv.Itoa(e.Port))
	}
	if e.Prefix != "" {
		b.WriteByte('/')
		b.WriteString(e.Prefix)
	}
	return b.String()
}

// ParseEndpoint reads an endpoint in key syntax, host[+port][/prefix], and
// returns it in canonical form (so "GitLab.Example.com+02222" is host
// "gitlab.example.com", port 2222).
func ParseEndpoint(s string) (Endpoint, error) {
	if s == "" || len(s) > MaxLength {
		return Endpoint{}, invalid(reasonAliasEndpoint)
	}
	authority, prefix, _ := strings.Cut(s, "/")
	rawHost, rawPort, err := splitKeyAuthority(authority)
	if err != nil {
		return Endpoint{}, err
	}
	var e Endpoint
	if e.Host, err = normalizeHost(rawHost); err != nil {
		return Endpoint{}, err
	}
	if e.Port, err = parsePort(rawPort); err != nil {
		return Endpoint{}, err
	}
	if prefix != "" {
		if err := checkPath(prefix); err != nil {
			return Endpoint{}, err
		}
		segs, err := normalizePath(prefix, false)
		if err != nil {
			return Endpoint{}, err
		}
		e.Prefix = strings.Join(segs, "/")
	}
	return e, nil
}

// validate reports whether e is canonical.
func (e Endpoint) validate() error {
	if e.Port < 0 || e.Port > 65535 {
		return invalid(reasonPortRange)
	}
	if c, err := ParseEndpoint(e.String()); err != nil {
		return err
	} else if c != e {
		return invalid(reasonAliasCanonical)
	}
	return nil
}

func (e Endpoint) prefixSegs() []string {
	if e.Prefix == "" {
		return nil
	}
	return strings.Split(e.Prefix, "/")
}

// match reports whether a key with this host, port and segments lies under
// e, and returns the segments after the prefix.
func (e Endpoint) match(host string, port int, segs []string) ([]string, bool) {
	if host != e.Host || port != e.Port {
		return nil, false
	}
	pre := e.prefixSegs()
	if len(segs) < len(pre) || !slices.Equal(segs[:len(pre)], pre) {
		return nil, false
	}
	return segs[len(pre):], true
}

// Alias is a per-deployment alias: every key under From is rewritten to the
// same path under To. Examples (docs/normalization.md):
//
//	GitLab, SSH on 2222:       {gitlab.example.com+2222} -> {gitlab.example.com}
//	Bitbucket Server, /scm/:   {bitbucket.example.com+7999} -> {bitbucket.example.com/scm}
//
// so ssh://git@bitbucket.example.com:7999/proj/repo.git and
// https://bitbucket.example.com/scm/proj/repo.git get one key.
type Alias struct {
	From Endpoint
	To   Endpoint
}

// Validate checks one alias on its own: both endpoints canonical, different,
// and not endpoints of the built-in alias table (a built-in alias would
// shadow or re-rewrite them). New checks the set as a whole.
func (a Alias) Validate() error {
	if err := a.From.validate(); err != nil {
		return err
	}
	if err := a.To.validate(); err != nil {
		return err
	}
	if a.From == a.To {
		return invalid(reasonAliasSame)
	}
	if builtinHost(a.From.Host, a.From.Port) || builtinHost(a.To.Host, a.To.Port) {
		return invalid(reasonAliasBuiltin)
	}
	return nil
}

// Rules is the configuration of a Normalizer: the version of the built-in
// rules and the per-deployment aliases.
type Rules struct {
	// Version is the rules version to key under: 0 means Version (the
	// current one); otherwise one of Supported(). A version keys exactly as
	// it did when it was current.
	Version int
	// Aliases are the per-deployment aliases, applied after the built-in
	// alias table. Their order does not matter (New rejects overlaps).
	Aliases []Alias
}

// Normalizer applies the built-in rules of one version plus a validated
// Rules value. Build one with New, ForVersion or Default (a zero Normalizer
// keys under the current Version without aliases). A Normalizer is
// immutable and safe for concurrent use.
//
// The package-level RepoURL, StripUserInfo and ParseKey use Default: the
// current Version, no configured aliases.
type Normalizer struct {
	version int     // 0 means Version
	aliases []Alias // validated
	next    *successor
}

var defaultNormalizer = &Normalizer{version: Version}

// Default returns the Normalizer with the built-in rules of the current
// Version only.
func Default() *Normalizer { return defaultNormalizer }

// New validates r and returns a Normalizer for it. It rejects a Version
// that is neither 0 nor one of Supported(). Besides Alias.Validate on each
// entry it rejects alias sets in which one From lies under another (the
// rewrite would depend on order) and in which a To lies under some From
// (the rewrite would not be a fixed point, and keys not idempotent).
// Every error is an *Error (invalid_argument).
func New(r Rules) (*Normalizer, error) {
	v := r.Version
	if v == 0 {
		v = Version
	}
	if !slices.Contains(supportedVersions, v) {
		return nil, invalid(reasonVersion)
	}
	as := slices.Clone(r.Aliases)
	for i, a := range as {
		if err := a.Validate(); err != nil {
			return nil, err
		}
		for j, b := range as {
			if i != j && under(a.From, b.From) {
				return nil, invalid(reasonAliasOverlap)
			}
			if under(a.To, b.From) || under(b.From, a.To) {
				return nil, invalid(reasonAliasChain)
			}
		}
	}
	return &Normalizer{version: v, aliases: as}, nil
}

// Rules returns a copy of the rules n keys under, with Version filled in
// (never 0).
func (n *Normalizer) Rules() Rules {
	return Rules{Version: n.Version(), Aliases: slices.Clone(n.aliases)}
}

// Version returns the rules version n keys under (stored next to its keys
// as normalizer_version).
func (n *Normalizer) Version() int {
	if n.version == 0 {
		return Version
	}
	return n.version
}

// under reports whether endpoint a lies under (or is) endpoint b.
func under(a, b Endpoint) bool {
	_, ok := b.match(a.Host, a.Port, a.prefixSegs())
	return ok
}

func (n *Normalizer) applyConfigured(host string, port int, segs []string) (string, int, []string) {
	for _, a := range n.aliases {
		if rest, ok := a.From.match(host, port, segs); ok {
			out := append(a.To.prefixSegs(), rest...)
			if len(out) == 0 {
				return host, port, segs
			}
			return a.To.Host, a.To.Port, out
		}
	}
	return host, port, segs
}

// RepoURL is the package-level RepoURL under n's rules.
func (n *Normalizer) RepoURL(raw string) (Key, error) {
	p, err := parse(raw)
	if err != nil {
		return "", err
	}
	return n.key(p)
}

// ParseKey checks a stored key: it reads s in key syntax only,
// host[+port]/path (no scheme, no user, no scp form), and returns its
// canonical form under n's rules. For every key k that n returns,
// n.ParseKey(string(k)) == k; a string that is not a canonical key gives
// another key or an error.
func (n *Normalizer) ParseKey(s string) (Key, error) {
	if len(s) > MaxLength {
		return "", invalid(reasonTooLong)
	}
	if s == "" {
		return "", invalid(reasonEmpty)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || c == '?' || c == '#' || c == '\\' {
			return "", invalid(reasonKeySyntax)
		}
	}
	colon, slash := strings.IndexByte(s, ':'), strings.IndexByte(s, '/')
	if s[0] == '/' || s[0] == '.' || s[0] == '~' || slash < 0 || (colon >= 0 && colon < slash && s[0] != '[') {
		return "", invalid(reasonKeySyntax)
	}
	p, err := parseKey(s)
	if err != nil {
		return "", err
	}
	return n.key(p)
}

// ParseKey is Default().ParseKey: the check for stored keys. For every key k
// that RepoURL returns, ParseKey(string(k)) == k.
func ParseKey(s string) (Key, error) { return defaultNormalizer.ParseKey(s) }

// key applies the path rules of n's version, the built-in and the
// configured aliases, and renders the key.
func (n *Normalizer) key(p *parsed) (Key, error) {
	if n.next != nil {
		return n.next.key(p)
	}
	segs := p.segs
	if n.Version() >= 3 {
		var err error
		if segs, err = pathV3(p); err != nil {
			return "", err
		}
	}
	host, port, segs := applyAliases(p.host, p.port, segs)
	host, port, segs = n.applyConfigured(host, port, segs)
	return render(host, port, segs)
}
