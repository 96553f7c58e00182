package repolock_test

import (
	"testing"

	"github.com/repolock/repolock"
)

func TestValidateText(t *testing.T) {
	for _, tc := range []struct {
		s    string
		mode repolock.TextMode
		want string // "" = valid
	}{
		{"alice", repolock.SingleLine, ""},
		{"Ünïcödé ✓", repolock.SingleLine, ""},
		{"", repolock.SingleLine, ""},
		{"a\x00b", repolock.SingleLine, "f must not contain NUL bytes"},
		{"a\x00b", repolock.MultiLine, "f must not contain NUL bytes"},
		{"a\xffb", repolock.SingleLine, "f is not valid UTF-8"},
		{"a\nb", repolock.SingleLine, "f must be a single line (no CR or LF)"},
		{"a\rb", repolock.SingleLine, "f must be a single line (no CR or LF)"},
		{"a\nb\r\n\tc", repolock.MultiLine, ""},
		{"a\tb", repolock.SingleLine, "f must not contain control characters (U+0009)"},
		{"a\x1bb", repolock.MultiLine, "f must not contain control characters (U+001B)"},
		{"a\u007fb", repolock.SingleLine, "f must not contain control characters (U+007F)"},
		{"a\u0085b", repolock.SingleLine, "f must not contain control characters (U+0085)"},
	} {
		err := repolock.ValidateText("f", tc.s, tc.mode)
		got := ""
		if err != nil {
			if !repolock.IsCode(err, repolock.EInvalid) {
				t.Errorf("%q: code %s", tc.s, repolock.ErrorCode(err))
			}
			got = repolock.ErrorMessage(err)
		}
		if got != tc.want {
			t.Errorf("ValidateText(%q, %d) = %q, want %q", tc.s, tc.mode, got, tc.want)
		}
	}
}
