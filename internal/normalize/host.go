package normalize

import (
	"net/netip"
	"strings"

	"golang.org/x/net/idna"
)

// idnaProfile converts internationalized host names to ASCII (punycode). It
// spells out the options of idna.Lookup (UTS #46 mapping for lookup,
// non-transitional, STD3 rules, hyphen and joiner checks, Bidi rule) rather
// than using idna.Lookup itself, whose configuration "may change over time":
// a silent change would change keys. Upgrading golang.org/x/net or Go (which
// selects the Unicode tables) still can; see docs/normalization.md.
var idnaProfile = idna.New(
	idna.MapForLookup(),
	idna.Transitional(false),
	idna.BidiRule(),
	idna.CheckHyphens(true),
	idna.CheckJoiners(true),
)

const (
	maxHostLen  = 253
	maxLabelLen = 63
)

// normalizeHost returns the canonical form of a host: lower case; one
// trailing dot removed; internationalized names in punycode; IPv6 literals
// canonical (RFC 5952) in brackets; IPv4-mapped IPv6 as plain IPv4.
func normalizeHost(h string) (string, error) {
	if h == "" {
		return "", invalid(reasonNoHost)
	}
	if h[0] == '[' {
		return normalizeIPv6(h)
	}
	if strings.IndexByte(h, '%') >= 0 {
		// net/url would decode these; git and curl do not agree on it.
		return "", invalid(reasonHostPercent)
	}
	if strings.ContainsAny(h, "[]") {
		return "", invalid(reasonHost)
	}
	if !isASCII(h) {
		a, err := toASCII(h)
		if err != nil {
			return "", err
		}
		h = a
	} else {
		h = strings.ToLower(h)
		h = strings.TrimSuffix(h, ".")
		if hasACELabel(h) {
			// "xn--" labels are validated (and so get the same key as the
			// Unicode spelling only when they are well-formed).
			a, err := toASCII(h)
			if err != nil {
				return "", err
			}
			h = a
		}
	}
	if err := checkHostname(h); err != nil {
		return "", err
	}
	return h, nil
}

func toASCII(h string) (string, error) {
	a, err := idnaProfile.ToASCII(h)
	if err != nil || !isASCII(a) {
		return "", invalid(reasonIDNA)
	}
	a = strings.TrimSuffix(a, ".")
	// The conversion must be stable, or keys would not be idempotent.
	if b, err := idnaProfile.ToASCII(a); err != nil || b != a {
		return "", invalid(reasonIDNA)
	}
	return a, nil
}

func hasACELabel(h string) bool {
	return strings.HasPrefix(h, "xn--") || strings.Contains(h, ".xn--")
}

// checkHostname validates a lower-case ASCII host name: dot-separated labels
// of letters, digits, '-' and '_' (underscores occur in internal host names),
// no label empty, starting or ending with '-' (a leading '-' is also how
// ssh option injection looks), and numeric-looking names must be canonical
// dotted-quad IPv4 addresses.
func checkHostname(h string) error {
	if h == "" {
		return invalid(reasonNoHost)
	}
	if len(h) > maxHostLen {
		return invalid(reasonHostTooLong)
	}
	labels := strings.Split(h, ".")
	for _, l := range labels {
		if l == "" || l[0] == '-' || l[len(l)-1] == '-' {
			return invalid(reasonHost)
		}
		if len(l) > maxLabelLen {
			return invalid(reasonHostTooLong)
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return invalid(reasonHost)
			}
		}
	}
	// curl and the resolver read "127.1", "0x7f.0.0.1", "2130706433" and
	// "127.000.0.1" as 127.0.0.1 (inet_aton). Rather than reproduce that,
	// a name whose last label looks numeric must be a canonical dotted quad.
	if last := labels[len(labels)-1]; isDigits(last) || strings.HasPrefix(last, "0x") {
		a, err := netip.ParseAddr(h)
		if err != nil || !a.Is4() || a.String() != h {
			return invalid(reasonIPv4)
		}
	}
	return nil
}

func normalizeIPv6(h string) (string, error) {
	if len(h) < 2 || h[len(h)-1] != ']' {
		return "", invalid(reasonIPv6)
	}
	inner := h[1 : len(h)-1]
	if strings.IndexByte(inner, '%') >= 0 {
		return "", invalid(reasonIPv6Zone)
	}
	a, err := netip.ParseAddr(inner)
	if err != nil || !a.Is6() || a.Zone() != "" {
		return "", invalid(reasonIPv6)
	}
	if a.Is4In6() {
		// [::ffff:192.0.2.1] connects to 192.0.2.1.
		return a.Unmap().String(), nil
	}
	return "[" + a.String() + "]", nil
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
