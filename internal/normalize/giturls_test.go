package normalize

import (
	"strings"
	"testing"
)

// TestSCPLongerThanGitURLsCap: the git-urls fork (go.mod's replace) refuses
// scp strings over 2048 bytes; an input within MaxLength whose punycode
// host makes the string it is given longer, and whose key fits, is still
// accepted with the key v1.0.0 gave it, and one byte more is still too
// long (docs/normalization.md, "Dependencies and pins").
func TestSCPLongerThanGitURLsCap(t *testing.T) {
	for _, tc := range []struct {
		name, head, tail, wantHead string
	}{
		// "ééé" is 6 bytes, "xn--9caaa" 9: the scp string is 2051 bytes,
		// the key (no ".git") 2047.
		{"idn host, .git", "ééé.example:o/", ".git", "xn--9caaa.example/o/"},
		{"idn host, user, escapes", "git@ééé.example:o/%20", "/.git", "xn--9caaa.example/o/%2520"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mid := strings.Repeat("a", MaxLength-len(tc.head)-len(tc.tail))
			in := tc.head + mid + tc.tail
			if len(in) != MaxLength {
				t.Fatalf("len(in) = %d", len(in))
			}
			if len(strings.Replace(in, "ééé", "xn--9caaa", 1)) <= gitURLsMaxLen {
				t.Fatalf("the case does not exceed git-urls' cap")
			}
			k, err := RepoURL(in)
			if err != nil {
				t.Fatalf("RepoURL: %v", err)
			}
			if want := tc.wantHead + mid; string(k) != want {
				t.Fatalf("key = %.40q... (%d bytes), want %.40q... (%d bytes)", k, len(k), want, len(want))
			}
			checkKey(t, in, k)
			if _, err := RepoURL(in + "a"); err == nil {
				t.Fatalf("an input of %d bytes was accepted", len(in)+1)
			}
		})
	}
}
