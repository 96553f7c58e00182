package tests

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

func TestNormalizeHTTPAndCLI(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	token := s.createTenant(t, "norm")

	same := []string{
		"git@GITHUB.com:argoproj/test",
		"https://github.com/argoproj/test.git",
		"ssh://git@github.com:22/argoproj/test",
		"git://github.com/argoproj/test",
		" https://github.com/argoproj/test/ ",
		"https://user:tok@github.com:443/argoproj/test.git/",
	}
	for _, raw := range same {
		status, resp := s.do(t, http.MethodGet, "/v1/normalize?url="+url.QueryEscape(raw), token, nil)
		if status != 200 || resp["normalized"] != "github.com/argoproj/test" || resp["version"] != float64(2) {
			t.Fatalf("%q: %d %v", raw, status, resp)
		}
		if in, _ := resp["input"].(string); strings.Contains(in, "tok") || strings.Contains(in, "user") {
			t.Fatalf("%q: credentials echoed in input: %q", raw, in)
		}
	}
	// The admin token is a valid token too.
	if status, _ := s.do(t, http.MethodGet, "/v1/normalize?url=github.com/o/r", s.AdminToken, nil); status != 200 {
		t.Fatalf("admin token: %d", status)
	}
	if status, resp := s.do(t, http.MethodGet, "/v1/normalize?url=github.com/o/r", "", nil); status != 401 || errorCode(resp) != "unauthenticated" {
		t.Fatalf("no token: %d %v", status, resp)
	}
	bad := map[string]string{
		"":                              "URL is empty",
		"file:///tmp/r":                 "file://",
		"/tmp/r":                        "local paths",
		"ext::sh -c x":                  "",
		"https://github.com/o/r?x=1":    "query strings are not allowed",
		"git@github.com:o/r name":       "whitespace",
		"https://u:s3cret@h/o/r?x=1#ff": "",
		// v2: '..' is rejected on every transport (issue 10, hole 1).
		"https://github.com/o/r//..":          "'..' segment",
		"https://u:s3cret@github.com/x//../o": "'..' segment",
		"git@github.com:o/%2e%2e/r":           "'..' segment",
		"ssh://git@h/~alice/r":                "'~user' paths",
	}
	for raw, reason := range bad {
		status, resp := s.do(t, http.MethodGet, "/v1/normalize?url="+url.QueryEscape(raw), token, nil)
		if status != 400 || errorCode(resp) != "invalid_argument" || !strings.Contains(errorMessage(resp), reason) {
			t.Fatalf("%q: %d %v, want 400 mentioning %q", raw, status, resp, reason)
		}
		if strings.Contains(errorMessage(resp), "s3cret") {
			t.Fatalf("%q: error message leaks the password", raw)
		}
	}
	if status, resp := s.do(t, http.MethodGet, "/v1/normalize", token, nil); status != 400 || errorCode(resp) != "invalid_argument" {
		t.Fatalf("missing url: %d %v", status, resp)
	}

	// v2: ported keys are host+port/path; scheme-less host:DIGITS/path is
	// scp-like with or without a user, as git reads it; a leading ~ on ssh
	// paths is dropped.
	for raw, want := range map[string]string{
		"github.com:1234/repo":                           "github.com/1234/repo",
		"git@github.com:1234/repo":                       "github.com/1234/repo",
		"ssh.github.com:443/o/r":                         "github.com/443/o/r",
		"ssh://git@h.example/~/o/r":                      "h.example/o/r",
		"git@ssh.dev.azure.com:v3/org/My%20Project/repo": "dev.azure.com/org/my%20project/_git/repo",
		"h.example+8443/o/r":                             "h.example+8443/o/r",
	} {
		status, resp := s.do(t, http.MethodGet, "/v1/normalize?url="+url.QueryEscape(raw), token, nil)
		if status != 200 || resp["normalized"] != want {
			t.Fatalf("%q: %d %v, want %q", raw, status, resp, want)
		}
	}

	out, errOut, code := runCLI(t, s.DatabaseURL, "normalize", "git@GITHUB.com:argoproj/test", "https://h:8443/o/r", "git@h:2222/o/r", "h:2222/o/r")
	if code != 0 || out != "github.com/argoproj/test\nh+8443/o/r\nh/2222/o/r\nh/2222/o/r\n" {
		t.Fatalf("normalize CLI: %d %q %q", code, out, errOut)
	}
	out, errOut, code = runCLI(t, s.DatabaseURL, "normalize", "https://a:s3cret@github.com/o/r", "https://github.com/o/r?x=1")
	if code != 1 || out != "github.com/o/r\n" || !strings.Contains(errOut, "argument 2: invalid repository URL: query strings are not allowed") || strings.Contains(errOut, "s3cret") {
		t.Fatalf("normalize CLI with an invalid URL: %d %q %q", code, out, errOut)
	}
}
