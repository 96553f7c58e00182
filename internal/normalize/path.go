package normalize

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// checkPath checks a raw URL or key path before net/url sees it:
//
//   - a literal '@' is rejected. In "https://user:to/ken@h/o/r" the '/' in the
//     password ends the authority, so the host is "user", the port "to" and
//     the rest of the token would land in the path, and so in the key, which
//     other tenants may see. No forge allows '@' in repository paths; an
//     encoded "%40" is accepted (and stays encoded in the key).
//   - malformed percent-escapes ("%", "%4", "%zz") are reported with a
//     precise reason.
func checkPath(s string) error {
	if strings.IndexByte(s, '@') >= 0 {
		return invalid(reasonPathAt)
	}
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			continue
		}
		if i+2 >= len(s) || unhex(s[i+1]) < 0 || unhex(s[i+2]) < 0 {
			return invalid(reasonPercent)
		}
		i += 2
	}
	return nil
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// normalizePath turns a raw (possibly percent-encoded) path into canonical
// segments:
//
//   - every escape is decoded, except that encoded '/' and '\' are rejected
//     (they would change the segment structure, and servers disagree on them)
//     and encoded control, formatting and whitespace characters other than
//     the space are rejected (as they are when not encoded);
//   - the decoded path must be UTF-8; it is put in NFC and lower-cased;
//   - empty and "." segments are dropped (this also collapses repeated and
//     strips leading and trailing slashes); a ".." segment (also decoded
//     from "%2e%2e", ".%2e", "%2e.") is rejected: curl resolves it (RFC 3986,
//     where it removes an empty segment too) while ssh and git:// pass it on
//     raw, so no reading is right for every transport;
//   - for ssh and scp-like paths (ssh true) a leading "~" segment is dropped
//     (home-relative is read as absolute, the documented merge) and a
//     leading "~user" segment is rejected;
//   - trailing ".git" is stripped from the last segment, repeatedly, and a
//     segment that becomes empty is dropped;
//   - each segment is re-encoded (see encodeSegment), so "%41", "A" and "a",
//     or "%21" and "!", give the same key.
func normalizePath(raw string, ssh bool) ([]string, error) {
	var buf []byte
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '%' {
			buf = append(buf, c)
			continue
		}
		if i+2 >= len(raw) {
			return nil, invalid(reasonPercent)
		}
		hi, lo := unhex(raw[i+1]), unhex(raw[i+2])
		if hi < 0 || lo < 0 {
			return nil, invalid(reasonPercent)
		}
		v := byte(hi<<4 | lo)
		if v == '/' || v == '\\' {
			return nil, invalid(reasonEncodedSlash)
		}
		buf = append(buf, v)
		i += 2
	}
	if !utf8.Valid(buf) {
		return nil, invalid(reasonPathUTF8)
	}
	s := string(buf)
	for _, r := range s {
		if r != ' ' && (unicode.IsSpace(r) || unicode.IsControl(r) || unicode.Is(unicode.Cf, r)) {
			return nil, invalid(reasonEncodedControl)
		}
	}
	s, err := foldCase(s)
	if err != nil {
		return nil, err
	}

	segs := make([]string, 0, 4)
	for seg := range strings.SplitSeq(s, "/") {
		switch seg {
		case "", ".":
		case "..":
			return nil, invalid(reasonDotDot)
		default:
			segs = append(segs, seg)
		}
	}
	if ssh && len(segs) > 0 && strings.HasPrefix(segs[0], "~") {
		if segs[0] != "~" {
			return nil, invalid(reasonTildeUser)
		}
		segs = segs[1:]
	}
	for len(segs) > 0 {
		last := segs[len(segs)-1]
		if !strings.HasSuffix(last, ".git") {
			break
		}
		switch last = strings.TrimSuffix(last, ".git"); last {
		case "":
			segs = segs[:len(segs)-1] // "o/r/.git" is the repository o/r
		case ".", "..":
			return nil, invalid(reasonRepoName)
		default:
			segs[len(segs)-1] = last
		}
	}
	if len(segs) == 0 {
		return nil, invalid(reasonNoPath)
	}
	for i, seg := range segs {
		segs[i] = encodeSegment(seg)
	}
	return segs, nil
}

// foldCase lower-cases s. ASCII is the common case; for anything else the
// result is put in NFC before and after lower-casing, until stable, so that
// composed and decomposed spellings agree and the result is idempotent.
func foldCase(s string) (string, error) {
	if isASCII(s) {
		return strings.ToLower(s), nil
	}
	s = norm.NFC.String(s)
	for range 4 {
		t := norm.NFC.String(strings.ToLower(s))
		if t == s {
			return s, nil
		}
		s = t
	}
	return "", invalid(reasonPathUTF8)
}

// encodeSegment percent-encodes (upper-case hex) every byte of a decoded,
// lower-cased segment except the RFC 3986 unreserved characters, the
// sub-delimiters and ':'. Keys are thus ASCII, contain no '/', '?', '#', '@',
// '%' or whitespace that is not part of an escape, and decode back to the
// same segment.
func encodeSegment(seg string) string {
	n := 0
	for i := 0; i < len(seg); i++ {
		if !pathLiteral(seg[i]) {
			n++
		}
	}
	if n == 0 {
		return seg
	}
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(seg)+2*n)
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if pathLiteral(c) {
			b = append(b, c)
			continue
		}
		b = append(b, '%', hex[c>>4], hex[c&15])
	}
	return string(b)
}

func pathLiteral(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '-', '.', '_', '~', // unreserved
		'!', '$', '&', '\'', '(', ')', '*', '+', ',', ';', '=', // sub-delims
		':':
		return true
	}
	return false
}
