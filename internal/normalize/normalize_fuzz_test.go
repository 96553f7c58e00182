package normalize

import (
	"slices"
	"strings"
	"testing"
)

// delims are the characters that end a host or user component.
const delims = "@/:[]?#\\%" + " \t\r\n"

// FuzzRepoURL checks the properties every input must have:
//
//   - RepoURL never panics;
//   - an error matches ErrInvalidURL, is an *Error, and its message is one of
//     the fixed reasons (so it cannot echo a token from the input);
//   - a key is non-empty, at most MaxLength bytes, printable ASCII without
//     space, '?', '#', '\' or '@' (so no user info anywhere); it is host/path
//     with a non-empty path; its host part (everything before the first '/')
//     is lower case and holds no '%'; it has no empty, "." or ".." segment and
//     does not end in ".git";
//   - a key re-normalizes to itself (idempotency), and ParseKey, the
//     documented check for stored keys, returns it unchanged
//     (RepoURL(x) = k implies ParseKey(k) = k); no key has a ':' before its
//     first '/' outside IPv6 brackets, so git cannot read a key as scp;
//   - StripUserInfo accepts what RepoURL accepts, its result normalizes to the
//     same key and has no '@' before the first '/' of its authority; it
//     rejects what RepoURL rejects, with the same error.
//
// Rules v2 keep their own properties (checkV2), and v3 rejects everything v2
// rejects.
//
// The seed corpus is every input of the table tests, so plain `go test` runs
// them through these properties too.
func FuzzRepoURL(f *testing.F) {
	for _, tc := range acceptCases {
		f.Add(tc.in)
		f.Add(tc.want)
	}
	for _, tc := range rejectCases {
		f.Add(tc.in)
	}
	for _, in := range benchCorpus {
		f.Add(in)
	}
	v2, err := New(Rules{Version: 2})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, in string) {
		checkV2(t, v2, in)
		k, err := RepoURL(in)
		if err != nil {
			checkError(t, in, err)
			if _, err2 := StripUserInfo(in); err2 == nil || err2.Error() != err.Error() {
				t.Fatalf("StripUserInfo(%q) error %v, RepoURL error %v", in, err2, err)
			}
			if _, err2 := Default().DisplayURL(in); err2 == nil || err2.Error() != err.Error() {
				t.Fatalf("DisplayURL(%q) error %v, RepoURL error %v", in, err2, err)
			}
			return
		}
		checkKey(t, in, k)
		// DisplayURL (the stored repo_url) never changes the key.
		d, err := Default().DisplayURL(in)
		if err != nil {
			t.Fatalf("DisplayURL(%q): %v, RepoURL accepted it", in, err)
		}
		if k2, err := RepoURL(d); err != nil || k2 != k {
			t.Fatalf("DisplayURL(%q) = %q, which gives %q, %v; want %q", in, d, k2, err, k)
		}
	})
}

// FuzzEquivalentSpellings builds several spellings of one repository from a
// user, host and path and checks that all the spellings RepoURL accepts give
// one key (the under-blocking direction; FuzzRepoURL covers the rest). The
// spellings differ in syntax (URL, scp-like, key form), scheme, default port,
// user info, host case, trailing ".git" and slashes.
func FuzzEquivalentSpellings(f *testing.F) {
	f.Add("git", "github.com", "argoproj/test")
	f.Add("alice", "GitLab.com", "g/sub/r")
	f.Add("org", "ssh.dev.azure.com", "v3/org/proj/repo")
	f.Add("git", "h.example", "2222/o/r")
	f.Add("u", "bücher.example", "o/r")
	f.Add("x", "192.0.2.1", "./o/../r")
	f.Fuzz(func(t *testing.T, user, host, path string) {
		// The spellings only name one repository when the host and user are
		// single components.
		if host == "" || path == "" || strings.ContainsAny(host, delims) || strings.ContainsAny(user, delims) {
			return
		}
		spellings := []string{
			"ssh://" + user + "@" + host + "/" + path,
			"ssh://" + host + ":22/" + path + ".git",
			user + "@" + host + ":" + path,
			user + "@" + host + ":/" + path + "/",
			"https://" + host + "/" + path,
			"https://" + user + ":tok@" + host + ":443/" + path + ".git/",
			"git://" + asciiUpper(host) + "/" + path,
			" http://" + host + "//" + path + "/ ",
			host + "/" + path,
		}
		if strings.Contains(path, "%") {
			// git sends an scp path verbatim and decodes a URL path once:
			// "h:o/r%41" and "ssh://h/o/r%41" are two paths (v3).
			spellings = slices.Delete(spellings, 2, 4)
		}
		var first Key
		var firstIn string
		for _, in := range spellings {
			k, err := RepoURL(in)
			if err != nil {
				checkError(t, in, err)
				continue
			}
			checkKey(t, in, k)
			if first == "" {
				first, firstIn = k, in
			} else if k != first {
				t.Fatalf("one repository, two keys: RepoURL(%q) = %q, RepoURL(%q) = %q", firstIn, first, in, k)
			}
		}
	})
}

func asciiUpper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

// FuzzNormalizerAliases checks the key properties under configured aliases
// (the GitLab-on-2222 and Bitbucket Server deployment of the tests): a key
// n returns is a fixed point of n.RepoURL and n.ParseKey, StripUserInfo
// agrees, and errors are the fixed reasons.
func FuzzNormalizerAliases(f *testing.F) {
	for _, s := range []string{
		"ssh://git@gitlab.example.com:2222/g/sub/r.git", "https://gitlab.example.com/g/r",
		"ssh://git@bitbucket.example.com:7999/proj/repo.git", "https://bitbucket.example.com/scm/proj/repo",
		"bitbucket.example.com+7999/scm/x", "gitlab.example.com+2222/a", "git@gitlab.example.com:2222/g/r",
	} {
		f.Add(s)
	}
	for _, tc := range acceptCases {
		f.Add(tc.in)
	}
	f.Fuzz(func(t *testing.T, in string) {
		n := fuzzNormalizer(t)
		k, err := n.RepoURL(in)
		if err != nil {
			checkError(t, in, err)
			return
		}
		if k2, err := n.RepoURL(string(k)); err != nil || k2 != k {
			t.Fatalf("n.RepoURL(%q) = %q, n.RepoURL of that = %q, %v", in, k, k2, err)
		}
		if k3, err := n.ParseKey(string(k)); err != nil || k3 != k {
			t.Fatalf("n.RepoURL(%q) = %q, n.ParseKey of that = %q, %v", in, k, k3, err)
		}
		s, err := n.StripUserInfo(in)
		if err != nil {
			t.Fatalf("n.StripUserInfo(%q): %v", in, err)
		}
		if k4, err := n.RepoURL(s); err != nil || k4 != k {
			t.Fatalf("n.StripUserInfo(%q) = %q, which gives %q, %v; want %q", in, s, k4, err, k)
		}
	})
}

func fuzzNormalizer(t *testing.T) *Normalizer {
	t.Helper()
	return deploymentNormalizer(t)
}

// checkV2 checks rules v2 on in: an error is a fixed reason and current
// rules reject in too; a key is a fixed point of v2's RepoURL and ParseKey,
// and StripUserInfo agrees.
func checkV2(t *testing.T, v2 *Normalizer, in string) {
	t.Helper()
	k, err := v2.RepoURL(in)
	if err != nil {
		checkError(t, in, err)
		if k3, err3 := RepoURL(in); err3 == nil {
			t.Fatalf("v2 rejects %q (%v), v3 accepts it (%q): v3 must reject what v2 rejects", in, err, k3)
		}
		return
	}
	if k2, err := v2.RepoURL(string(k)); err != nil || k2 != k {
		t.Fatalf("v2: RepoURL(%q) = %q, RepoURL of that = %q, %v", in, k, k2, err)
	}
	if k2, err := v2.ParseKey(string(k)); err != nil || k2 != k {
		t.Fatalf("v2: RepoURL(%q) = %q, ParseKey of that = %q, %v", in, k, k2, err)
	}
	s, err := v2.StripUserInfo(in)
	if err != nil {
		t.Fatalf("v2: StripUserInfo(%q): %v", in, err)
	}
	if k2, err := v2.RepoURL(s); err != nil || k2 != k {
		t.Fatalf("v2: StripUserInfo(%q) = %q, which gives %q, %v; want %q", in, s, k2, err, k)
	}
}
