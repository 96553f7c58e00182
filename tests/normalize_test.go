package tests

import (
	"net/http"
	"strings"
	"testing"

	"github.com/repolock/repolock/client"
)

func TestNormalizeHTTPAndCLI(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx := t.Context()
	token := s.createTenant(t, "norm")
	tenant := s.client(t, token)

	same := []string{
		"git@GITHUB.com:argoproj/test",
		"https://github.com/argoproj/test.git",
		"ssh://git@github.com:22/argoproj/test",
		"git://github.com/argoproj/test",
		" https://github.com/argoproj/test/ ",
		"https://user:tok@github.com:443/argoproj/test.git/",
	}
	for _, raw := range same {
		n, err := tenant.Normalize(ctx, raw)
		if err != nil || n.Normalized != "github.com/argoproj/test" || n.Version != 3 {
			t.Fatalf("%q: %v %+v", raw, err, n)
		}
		if strings.Contains(n.Input, "tok") || strings.Contains(n.Input, "user") {
			t.Fatalf("%q: credentials echoed in input: %q", raw, n.Input)
		}
	}
	// The admin token is a valid token too.
	if _, err := s.admin(t).Normalize(ctx, "github.com/o/r"); err != nil {
		t.Fatalf("admin token: %v", err)
	}
	_, err := s.client(t, "").Normalize(ctx, "github.com/o/r")
	wantAPIError(t, "no token", err, 401, client.CodeUnauthenticated, "")
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
		_, err := tenant.Normalize(ctx, raw)
		ce := wantAPIError(t, raw, err, 400, client.CodeInvalidArgument, reason)
		if strings.Contains(ce.Message, "s3cret") {
			t.Fatalf("%q: error message leaks the password", raw)
		}
	}
	// Without the parameter at all (the client always sends it): raw HTTP.
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
		n, err := tenant.Normalize(ctx, raw)
		if err != nil || n.Normalized != want {
			t.Fatalf("%q: %v %+v, want %q", raw, err, n, want)
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
