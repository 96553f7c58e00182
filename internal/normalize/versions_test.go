package normalize

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestSupportedVersions(t *testing.T) {
	got := Supported()
	if !slices.Equal(got, []int{2, 3}) {
		t.Fatalf("Supported() = %v, want [2 3]", got)
	}
	if got[len(got)-1] != Version {
		t.Fatalf("the last supported version %d is not Version %d", got[len(got)-1], Version)
	}
	got[0] = 99 // a copy
	if Supported()[0] != 2 {
		t.Fatal("Supported() returned the package's slice")
	}
	if Default().Version() != Version || (&Normalizer{}).Version() != Version {
		t.Fatalf("Default().Version() = %d, zero Normalizer %d; want %d", Default().Version(), (&Normalizer{}).Version(), Version)
	}
	aliases := []Alias{{From: mustEndpoint(t, "gitlab.example.com+2222"), To: mustEndpoint(t, "gitlab.example.com")}}
	for _, v := range Supported() {
		n, err := ForVersion(v, aliases)
		if err != nil {
			t.Fatalf("ForVersion(%d): %v", v, err)
		}
		if n.Version() != v || n.Rules().Version != v || len(n.Rules().Aliases) != 1 {
			t.Fatalf("ForVersion(%d): Version() %d, Rules() %+v", v, n.Version(), n.Rules())
		}
		if k, err := n.RepoURL("ssh://git@gitlab.example.com:2222/g/r.git"); err != nil || k != "gitlab.example.com/g/r" {
			t.Fatalf("ForVersion(%d) with aliases: %q, %v", v, k, err)
		}
		m, err := New(n.Rules())
		if err != nil || m.Version() != v {
			t.Fatalf("New(ForVersion(%d).Rules()) = %v, %v", v, m, err)
		}
	}
	n, err := New(Rules{})
	if err != nil || n.Version() != Version || n.Rules().Version != Version {
		t.Fatalf("New(Rules{}) = version %d, %v; want %d", n.Version(), err, Version)
	}
	if n.Fingerprint() != "" {
		t.Fatalf("Fingerprint without aliases = %q", n.Fingerprint())
	}
	for _, v := range []int{-1, 1, 4, 100} {
		_, err := New(Rules{Version: v})
		checkError(t, "version", err)
		if !strings.Contains(err.Error(), reasonVersion) {
			t.Errorf("New(Rules{Version: %d}) error %v", v, err)
		}
		if _, err := ForVersion(v, nil); !errors.Is(err, ErrInvalidURL) {
			t.Errorf("ForVersion(%d) error %v", v, err)
		}
	}
	if _, err := ForVersion(0, nil); err == nil || !strings.Contains(err.Error(), reasonVersion) {
		t.Errorf("ForVersion(0) error %v, want %q", err, reasonVersion)
	}
	// A bad alias set is rejected under every version.
	if _, err := ForVersion(2, []Alias{{From: aliases[0].From, To: aliases[0].From}}); err == nil {
		t.Error("ForVersion(2) accepted an alias to itself")
	}
}

// The bug of issue 24: git sends "git@h:/o/te%73t" and
// "ssh://git@h/o/te%2573t" as one path, "/o/te%73t", to one host. v2 gives
// them two keys; v3 one.
func TestV3ScpPercentOneKey(t *testing.T) {
	v2, err := ForVersion(2, nil)
	if err != nil {
		t.Fatal(err)
	}
	groups := []struct {
		want string
		in   []string
	}{
		{"h.example/o/te%2573t", []string{
			"git@h.example:/o/te%73t", "h.example:/o/te%73t", "git@h.example:~/o/te%73t", "h.example:~/o/te%73t",
			"git@h.example:o/te%73t", "ssh://git@h.example/o/te%2573t", "ssh://h.example/o/te%2573t",
			"ssh://git@h.example/~/o/te%2573t", "git+ssh://git@h.example/o/te%2573t",
		}},
		{"h.example/o/te%2520t", []string{
			"git@h.example:/o/te%20t", "h.example:/o/te%20t", "git@h.example:~/o/te%20t", "h.example:~/o/te%20t",
			"ssh://git@h.example/o/te%2520t", "ssh://h.example/o/te%2520t", "ssh://git@h.example/~/o/te%2520t",
		}},
		{"h.example/o/te%252573t", []string{"git@h.example:/o/te%2573t", "ssh://git@h.example/o/te%252573t"}},
		{"h.example/o/test", []string{"git@h.example:/o/test", "ssh://git@h.example/o/te%73t", "git://h.example/o/te%73t", "https://h.example/o/te%73t"}},
	}
	for _, g := range groups {
		v2keys := map[Key]bool{}
		for _, in := range g.in {
			k, err := RepoURL(in)
			if err != nil || string(k) != g.want {
				t.Errorf("v3 RepoURL(%q) = %q, %v; want %q", in, k, err, g.want)
			}
			if k2, err := v2.RepoURL(in); err == nil {
				v2keys[k2] = true
			}
		}
		if g.want != "h.example/o/test" && len(v2keys) < 2 {
			t.Errorf("v2 gives %v to %q: the v2 bug is gone, or v2 changed", v2keys, g.in)
		}
	}
}

func TestNextForTest(t *testing.T) {
	base := deploymentNormalizer(t)
	rewrite := func(k Key) Key {
		if h, p, ok := strings.Cut(string(k), "/"); ok && h == "old.example" {
			return Key("new.example/" + p)
		}
		return k
	}
	next := NextForTest(base, rewrite)
	if next.Version() != base.Version()+1 || next.Rules().Version != Version+1 {
		t.Fatalf("Version() = %d, Rules().Version %d; want %d", next.Version(), next.Rules().Version, Version+1)
	}
	if next.Fingerprint() != base.Fingerprint() || len(next.Rules().Aliases) != len(base.Rules().Aliases) {
		t.Fatalf("NextForTest lost the aliases")
	}
	for in, want := range map[string]string{
		"git@old.example:o/r.git":                       "new.example/o/r",
		"https://new.example/o/r":                       "new.example/o/r",
		"old.example/o/r":                               "new.example/o/r",
		"https://github.com/o/r":                        "github.com/o/r",
		"ssh://git@gitlab.example.com:2222/g/sub/r.git": "gitlab.example.com/g/sub/r",
	} {
		k, err := next.RepoURL(in)
		if err != nil || string(k) != want {
			t.Errorf("next.RepoURL(%q) = %q, %v; want %q", in, k, err, want)
			continue
		}
		if k2, err := next.ParseKey(string(k)); err != nil || k2 != k {
			t.Errorf("next.ParseKey(%q) = %q, %v", k, k2, err)
		}
		if k2, err := next.ParseKey("old.example/o/r"); err != nil || k2 != "new.example/o/r" {
			t.Errorf("next.ParseKey of the old key = %q, %v; want the new key", k2, err)
		}
		if s, err := next.StripUserInfo(in); err != nil || strings.Contains(s, "git@") {
			t.Errorf("next.StripUserInfo(%q) = %q, %v", in, s, err)
		}
	}
	for _, in := range []string{"file:///tmp/r", "https://h/o/r?x", "git@ssh.dev.azure.com:v3/o/te%2573t/r"} {
		if _, err := next.RepoURL(in); err == nil {
			t.Errorf("next.RepoURL(%q) accepted what base rejects", in)
		}
	}
	// N+2 from N+1.
	next2 := NextForTest(next, func(k Key) Key { return k })
	if next2.Version() != Version+2 {
		t.Fatalf("NextForTest(NextForTest) version %d", next2.Version())
	}
	if k, _ := next2.RepoURL("https://old.example/o/r"); k != "new.example/o/r" {
		t.Fatalf("next2 key %q", k)
	}
	// The v2 rules are a base like any other.
	v2, _ := ForVersion(2, nil)
	if k, _ := NextForTest(v2, rewrite).RepoURL("git@h.example:o/te%73t"); k != "h.example/o/test" {
		t.Fatalf("NextForTest(v2) key %q", k)
	}
	mustPanic(t, "not idempotent", func() {
		NextForTest(base, func(k Key) Key { return k + "x" }).RepoURL("https://h.example/o/r")
	})
	mustPanic(t, "not canonical", func() {
		NextForTest(base, func(Key) Key { return "H.example/o/r.git" }).RepoURL("https://h.example/o/r")
	})
	mustPanic(t, "nil", func() { NextForTest(nil, rewrite) })
	mustPanic(t, "nil", func() { NextForTest(base, nil) })
}

func mustPanic(t *testing.T, want string, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		if s, _ := r.(string); !strings.Contains(s, want) {
			t.Errorf("panic %v, want one mentioning %q", r, want)
		}
	}()
	f()
}

// TestPredecessors: version 3's predecessors of a key are the version 2
// keys of the spellings v3 keys apart from it but v2 keyed elsewhere (a
// literal '%' of an scp path); a key without "%25" has none.
func TestPredecessors(t *testing.T) {
	v2, err := ForVersion(2, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, raw := range []string{"git@h.example:/o/te%73t", "git@h.example:o/te%73t", "h.example:~/o/te%20t", "git@h.example:o/a%73b%74c"} {
		k3, err := Default().RepoURL(raw)
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		k2, err := v2.RepoURL(raw)
		if err != nil {
			t.Fatalf("%s under v2: %v", raw, err)
		}
		if k2 == k3 {
			t.Fatalf("%s keys alike under v2 and v3 (%s): not a case of the change", raw, k3)
		}
		if ps := Default().Predecessors(k3); !slices.Contains(ps, k2) {
			t.Errorf("Predecessors(%s) = %q, want it to hold the v2 key %s of %s", k3, ps, k2, raw)
		}
	}
	if ps := Default().Predecessors("github.com/o/r"); len(ps) != 0 {
		t.Errorf("Predecessors of a key without %%25: %q", ps)
	}
	if ps := v2.Predecessors("h.example/o/te%2573t"); len(ps) != 0 {
		t.Errorf("v2 has no predecessors: %q", ps)
	}
	next := NextForTest(Default(), func(k Key) Key { return k }, func(k Key) []Key { return []Key{"old.example/x"} })
	if ps := next.Predecessors("new.example/x"); !slices.Equal(ps, []Key{"old.example/x"}) {
		t.Errorf("NextForTest's predecessors: %q", ps)
	}
}
