package normalize

import (
	"strings"
	"testing"
)

func mustEndpoint(t *testing.T, s string) Endpoint {
	t.Helper()
	e, err := ParseEndpoint(s)
	if err != nil {
		t.Fatalf("ParseEndpoint(%q): %v", s, err)
	}
	return e
}

// The two deployments of issue 10: GitLab with SSH on 2222, Bitbucket
// Server with SSH on 7999 and HTTPS under /scm/.
func deploymentNormalizer(t *testing.T) *Normalizer {
	t.Helper()
	n, err := New(Rules{Aliases: []Alias{
		{From: mustEndpoint(t, "gitlab.example.com+2222"), To: mustEndpoint(t, "gitlab.example.com")},
		{From: mustEndpoint(t, "bitbucket.example.com+7999"), To: mustEndpoint(t, "bitbucket.example.com/scm")},
	}})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return n
}

func TestNormalizerConfiguredAliases(t *testing.T) {
	n := deploymentNormalizer(t)
	groups := []struct {
		want string
		in   []string
	}{
		{"gitlab.example.com/g/sub/r", []string{
			"ssh://git@gitlab.example.com:2222/g/sub/r.git",
			"https://gitlab.example.com/g/sub/r.git",
			"git@gitlab.example.com:g/sub/r.git",
			"gitlab.example.com+2222/g/sub/r",
		}},
		{"bitbucket.example.com/scm/proj/repo", []string{
			"ssh://git@bitbucket.example.com:7999/proj/repo.git",
			"https://bitbucket.example.com/scm/proj/repo.git",
			"https://user@bitbucket.example.com:443/scm/PROJ/repo",
		}},
	}
	for _, g := range groups {
		for _, in := range g.in {
			k, err := n.RepoURL(in)
			if err != nil || string(k) != g.want {
				t.Errorf("n.RepoURL(%q) = %q, %v; want %q", in, k, err, g.want)
			}
			if k2, err := n.ParseKey(string(k)); err != nil || k2 != k {
				t.Errorf("n.ParseKey(%q) = %q, %v; want itself", k, k2, err)
			}
			if s, err := n.StripUserInfo(in); err != nil {
				t.Errorf("n.StripUserInfo(%q): %v", in, err)
			} else if k3, _ := n.RepoURL(s); k3 != k {
				t.Errorf("n.RepoURL(n.StripUserInfo(%q)) = %q, want %q", in, k3, k)
			}
		}
	}
	// Not aliased: other ports, other hosts; and the default normalizer
	// knows none of it.
	for in, want := range map[string]string{
		"ssh://git@gitlab.example.com:2223/g/r":          "gitlab.example.com+2223/g/r",
		"ssh://git@bitbucket.example.com:7998/proj/repo": "bitbucket.example.com+7998/proj/repo",
		"https://other.example.com/g/r":                  "other.example.com/g/r",
	} {
		if k, err := n.RepoURL(in); err != nil || string(k) != want {
			t.Errorf("n.RepoURL(%q) = %q, %v; want %q", in, k, err, want)
		}
	}
	if k, _ := RepoURL("ssh://git@gitlab.example.com:2222/g/r"); k != "gitlab.example.com+2222/g/r" {
		t.Errorf("package RepoURL applied a configured alias: %q", k)
	}
	if got := n.Rules().Aliases; len(got) != 2 {
		t.Errorf("Rules() = %v", got)
	}
}

func TestParseEndpoint(t *testing.T) {
	for in, want := range map[string]Endpoint{
		"GitLab.Example.com+02222": {Host: "gitlab.example.com", Port: 2222},
		"h.example/SCM/":           {Host: "h.example", Prefix: "scm"},
		"[0::1]+8443/a/b":          {Host: "[::1]", Port: 8443, Prefix: "a/b"},
	} {
		e, err := ParseEndpoint(in)
		if err != nil || e != want {
			t.Errorf("ParseEndpoint(%q) = %+v, %v; want %+v", in, e, err, want)
		}
		if e2, err := ParseEndpoint(e.String()); err != nil || e2 != e {
			t.Errorf("ParseEndpoint(%q.String()) = %+v, %v", in, e2, err)
		}
	}
	for in, reason := range map[string]string{
		"":             reasonAliasEndpoint,
		"h.example+0":  reasonPortRange,
		"h.exa mple":   reasonHost,
		"h.example/..": reasonDotDot,
	} {
		if _, err := ParseEndpoint(in); err == nil || !strings.Contains(err.Error(), reason) {
			t.Errorf("ParseEndpoint(%q) error %v, want %q", in, err, reason)
		}
	}
}

func TestNewRejectsBadAliases(t *testing.T) {
	ep := func(s string) Endpoint { return mustEndpoint(t, s) }
	cases := []struct {
		name    string
		aliases []Alias
		reason  string
	}{
		{"not canonical", []Alias{{From: Endpoint{Host: "GitLab.example.com", Port: 2222}, To: ep("gitlab.example.com")}}, reasonAliasCanonical},
		{"port out of range", []Alias{{From: Endpoint{Host: "h.example", Port: 70000}, To: ep("h.example")}}, reasonPortRange},
		{"to itself", []Alias{{From: ep("h.example+2222"), To: ep("h.example+2222")}}, reasonAliasSame},
		{"built-in host as source", []Alias{{From: ep("www.github.com"), To: ep("h.example")}}, reasonAliasBuiltin},
		{"built-in host as target", []Alias{{From: ep("h.example"), To: ep("ssh.dev.azure.com")}}, reasonAliasBuiltin},
		{"sources overlap", []Alias{{From: ep("h.example+2222"), To: ep("h.example")}, {From: ep("h.example+2222/a"), To: ep("h.example/b")}}, reasonAliasOverlap},
		{"chain", []Alias{{From: ep("a.example"), To: ep("b.example")}, {From: ep("b.example"), To: ep("c.example")}}, reasonAliasChain},
		{"target under its own source", []Alias{{From: ep("h.example/a"), To: ep("h.example/a/b")}}, reasonAliasChain},
		{"source under a target", []Alias{{From: ep("a.example"), To: ep("h.example")}, {From: ep("h.example/x"), To: ep("c.example")}}, reasonAliasChain},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(Rules{Aliases: tc.aliases})
			if err == nil || !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("New error %v, want %q", err, tc.reason)
			}
			checkError(t, tc.name, err)
		})
	}
}

func TestParseKeyOnlyReadsKeys(t *testing.T) {
	for _, in := range []string{
		"https://github.com/o/r", "git@github.com:o/r", "github.com:o/r", "h.example:8443/o/r",
		"/tmp/r", "~/r", "github.com", "", "github.com/o/r?x", "[::1]:22/o/r",
	} {
		if k, err := ParseKey(in); err == nil {
			t.Errorf("ParseKey(%q) = %q, want an error (not key syntax)", in, k)
		} else {
			checkError(t, in, err)
		}
	}
	for in, want := range map[string]string{
		"github.com/o/r":      "github.com/o/r",
		"h.example+8443/o/r":  "h.example+8443/o/r",
		"[::1]+22/o/r":        "[::1]+22/o/r",
		"GitHub.com/O/R.git/": "github.com/o/r", // not canonical: another key
		"ssh.github.com/o/r":  "github.com/o/r", // aliased
	} {
		if k, err := ParseKey(in); err != nil || string(k) != want {
			t.Errorf("ParseKey(%q) = %q, %v; want %q", in, k, err, want)
		}
	}
}

func TestFingerprint(t *testing.T) {
	gl := Alias{From: Endpoint{Host: "gitlab.example.com", Port: 2222}, To: Endpoint{Host: "gitlab.example.com"}}
	bb := Alias{From: Endpoint{Host: "bitbucket.example.com", Port: 7999}, To: Endpoint{Host: "bitbucket.example.com", Prefix: "scm"}}
	a, err := New(Rules{Aliases: []Alias{gl, bb}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Rules{Aliases: []Alias{bb, gl}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Rules{Aliases: []Alias{gl}})
	if err != nil {
		t.Fatal(err)
	}
	if got := Default().Fingerprint(); got != "" {
		t.Errorf("Default().Fingerprint() = %q, want \"\"", got)
	}
	if a.Fingerprint() != b.Fingerprint() {
		t.Errorf("fingerprint depends on order: %q vs %q", a.Fingerprint(), b.Fingerprint())
	}
	if len(a.Fingerprint()) != 16 || a.Fingerprint() == c.Fingerprint() {
		t.Errorf("fingerprints %q, %q: want 16 hex digits, different sets differ", a.Fingerprint(), c.Fingerprint())
	}
}
