package normalize

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
)

// Rules version 2 must key exactly as it did when it was current, forever:
// locks keyed under v2 stay in databases until they are re-keyed, and claims
// compute their v2 keys to check them. testdata/v2_keys.txt records, for
// every input of the table tests, the oracle corpus, the bench corpus, the
// percent and upper-case-scheme spellings and 3,000 fixed random spellings,
// what the v2 code returned (a key, or the rejection reason). It was
// generated once, from the code before v3 existed (commit "normalize: record
// the keys of rules v2"); it is never regenerated.

const v2GoldenFile = "testdata/v2_keys.txt"

// percentSpellings are the spellings of issue 24: git sends an scp-like path
// verbatim and decodes ssh:// and git:// paths once, so "git@h:/o/te%73t" and
// "ssh://git@h/o/te%2573t" reach one repository (path "/o/te%73t").
func percentSpellings() []string {
	var c []string
	for _, p := range []string{"te%73t", "te%2573t", "te%20t", "te%2520t", "test", "te%2525t", "te%252573t"} {
		c = append(c,
			"git@h.example:/o/"+p, "git@h.example:o/"+p, "h.example:/o/"+p, "h.example:o/"+p,
			"git@h.example:~/o/"+p, "h.example:~/o/"+p,
			"ssh://git@h.example/o/"+p, "ssh://h.example/o/"+p, "ssh://git@h.example/~/o/"+p,
			"ssh://h.example/~/o/"+p, "git+ssh://git@h.example/o/"+p,
			"git://h.example/o/"+p, "https://h.example/o/"+p, "http://h.example/o/"+p,
			"h.example/o/"+p,
		)
	}
	c = append(c,
		// Other escapes in scp paths: git sends them verbatim too.
		"git@h.example:o/r%2Egit", "git@h.example:o/r%2egit", "git@h.example:%7e/o/r",
		"git@h.example:%7E/o/r", "git@h.example:o/r%40v1", "git@h.example:o/%2E/r", "git@h.example:o/r%41",
		"git@h.example:o/r%2a", "git@h.example:o/r%2A", "ssh://git@h.example/o/r%252Egit",
		"ssh://git@h.example/%257e/o/r", "ssh://git@h.example/o/r%2540v1", "ssh://git@h.example/o/r%2541",
		"https://h.example/o/r%2541", "git@h.example:o/r%2F", "git@h.example:o/r%0A", "git@h.example:o/r%FF",
		// Azure DevOps: its SSH server decodes the path it receives.
		"git@ssh.dev.azure.com:v3/org/te%73t/repo", "ssh://git@ssh.dev.azure.com/v3/org/te%2573t/repo",
		"ssh://git@ssh.dev.azure.com/v3/org/te%73t/repo", "https://dev.azure.com/org/te%73t/_git/repo",
		"git@ssh.dev.azure.com:v3/org/My%2520Project/repo", "ssh://git@ssh.dev.azure.com/v3/org/My%2520Project/repo",
		"git@ssh.dev.azure.com:v3/org/My%20Project/repo", "ssh://git@ssh.dev.azure.com/v3/org/My%20Project/repo",
		"https://dev.azure.com/org/My%2520Project/_git/repo", "org@vs-ssh.visualstudio.com:v3/org/te%73t/repo",
		"ssh://org@vs-ssh.visualstudio.com/v3/org/te%2573t/repo", "git@ssh.dev.azure.com:other/te%73t",
		"ssh://git@ssh.dev.azure.com:2222/v3/org/te%2573t/repo",
	)
	return c
}

// upperSchemeSpellings: git 2.39 refuses them ("'remote-SSH' is not a git
// command"); see docs/normalization.md, "Upper-case schemes".
func upperSchemeSpellings() []string {
	return []string{
		"SSH://git@h.example/o/r", "ssh://git@h.example/o/r", "HTTPS://h.example/o/r", "https://h.example/o/r",
		"Https://h.example/o/r", "HTTP://h.example/o/r", "GIT://h.example/o/r", "Git://h.example/o/r",
		"GIT+SSH://git@h.example/o/r", "Ssh+Git://git@h.example/o/r", "SSH://git@h.example:2222/o/r",
		"HTTPS://user:tok@h.example:8443/o/r", "FILE:///tmp/r", "SSH://git@ssh.github.com:443/o/r",
	}
}

func goldenResult(k Key, err error) string {
	if err != nil {
		return "error: " + err.(*Error).Reason
	}
	return "key: " + string(k)
}

func TestV2KeysGolden(t *testing.T) {
	n := v2Normalizer(t)
	f, err := os.Open(v2GoldenFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	lines := 0
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		qin, qwant, ok := strings.Cut(line, "\t")
		if !ok {
			t.Fatalf("bad line %q", line)
		}
		in, err1 := strconv.Unquote(qin)
		want, err2 := strconv.Unquote(qwant)
		if err1 != nil || err2 != nil {
			t.Fatalf("bad line %q", line)
		}
		lines++
		k, err := n.RepoURL(in)
		if got := goldenResult(k, err); got != want {
			t.Errorf("v2 RepoURL(%q) = %s, want %s (v2 must never change)", in, got, want)
		}
		if err != nil {
			continue
		}
		if k2, err := n.ParseKey(string(k)); err != nil || k2 != k {
			t.Errorf("v2 ParseKey(%q) = %q, %v", k, k2, err)
		}
		if s, err := n.StripUserInfo(in); err != nil {
			t.Errorf("v2 StripUserInfo(%q): %v", in, err)
		} else if k3, err := n.RepoURL(s); err != nil || k3 != k {
			t.Errorf("v2 RepoURL(StripUserInfo(%q)) = %q, %v; want %q", in, k3, err, k)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if lines < 3000 {
		t.Fatalf("%s has %d cases, want at least 3000", v2GoldenFile, lines)
	}
}

// v2Normalizer is the normalizer of rules version 2.
func v2Normalizer(t *testing.T) *Normalizer {
	t.Helper()
	n, err := New(Rules{Version: 2})
	if err != nil {
		t.Fatal(err)
	}
	if n.Version() != 2 {
		t.Fatalf("Version() = %d, want 2", n.Version())
	}
	return n
}
