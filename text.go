package repolock

import (
	"unicode/utf8"
)

// TextMode says which control characters a text field accepts.
type TextMode int

const (
	// SingleLine text (the default of every field) is valid UTF-8 without
	// NUL or any other control character (C0, DEL, C1), CR and LF included.
	SingleLine TextMode = iota
	// MultiLine text also accepts tab, LF and CR (commit messages and
	// metadata values say so in the API document).
	MultiLine
)

// ValidateText checks that s is text a field may hold: valid UTF-8, no NUL
// and no control characters (MultiLine allows tab, LF and CR). It is the one
// text rule of every request field, path parameter and query parameter of
// the HTTP API; the error (invalid_argument) names field, never echoes s.
func ValidateText(field, s string, mode TextMode) error {
	if !utf8.ValidString(s) {
		return Errorf(EInvalid, "%s is not valid UTF-8", field)
	}
	for _, r := range s {
		if r == 0 {
			return Errorf(EInvalid, "%s must not contain NUL bytes", field)
		}
		if isControl(r) {
			if mode == MultiLine && (r == '\t' || r == '\n' || r == '\r') {
				continue
			}
			if r == '\n' || r == '\r' {
				return Errorf(EInvalid, "%s must be a single line (no CR or LF)", field)
			}
			return Errorf(EInvalid, "%s must not contain control characters (U+%04X)", field, r)
		}
	}
	return nil
}

func isControl(r rune) bool { return r < 0x20 || (r >= 0x7f && r <= 0x9f) }
