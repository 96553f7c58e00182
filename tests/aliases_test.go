package tests

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/repolock/repolock/client"
)

// TestOneKeyForOneURLUnderAliases: with a configured alias that has a port
// (gitlab.example.com+2222 -> gitlab.example.com), one URL gets one key on
// every surface: GET /v1/normalize, the acquire and application create
// answers, the CLI's normalize and locks owner against the same database,
// and the console's ownership page (issue 23: the console keyed under the
// built-in rules, then failed the locks check with invalid_argument; the
// CLI printed the built-in key).
func TestOneKeyForOneURLUnderAliases(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx := t.Context()
	const (
		raw  = "ssh://git@gitlab.example.com:2222/o/r.git"
		want = "gitlab.example.com/o/r"
	)
	alice := s.tenant(t, "alice")
	bob := s.tenant(t, "bob")

	// The alias routes refresh the server's rules before they answer: the
	// next request keys under the alias, with no wait.
	a, err := s.admin(t).CreateAlias(ctx, client.CreateAliasRequest{From: "gitlab.example.com+2222", To: "gitlab.example.com"})
	if err != nil || a.From != "gitlab.example.com+2222" || a.To != "gitlab.example.com" {
		t.Fatalf("create alias: %v %+v", err, a)
	}

	// The HTTP API.
	if n, err := alice.Normalize(ctx, raw); err != nil || n.Normalized != want {
		t.Fatalf("GET /v1/normalize: %v %+v, want %q", err, n, want)
	}
	acq, err := alice.AcquireLock(ctx, raw)
	if err != nil || !acq.Acquired || acq.NormalizedURL != want || acq.LockID == "" {
		t.Fatalf("acquire: %v %+v, want %q", err, acq, want)
	}
	app, err := alice.CreateApplication(ctx, client.CreateApplicationRequest{Name: "web", RepoURL: raw})
	if err != nil || app.NormalizedURL != want || app.LockID != acq.LockID {
		t.Fatalf("create application: %v %+v, want %q on lock %s", err, app, want, acq.LockID)
	}
	// The alias target's own spelling is the same repository: claimed.
	_, err = bob.AcquireLock(ctx, "https://gitlab.example.com/o/r")
	if ce := wantAPIError(t, "bob's acquire", err, http.StatusConflict, client.CodeRepositoryClaimed, ""); ce.Owner() != "alice" {
		t.Fatalf("bob's acquire: owner %q, want alice", ce.Owner())
	}

	// The CLI, against the same database.
	out, errOut, code := runCLI(t, s.DatabaseURL, "normalize", raw)
	if code != 0 || out != want+"\n" || errOut != "" {
		t.Fatalf("repolock normalize: %d %q %q, want %q", code, out, errOut, want)
	}
	out, errOut, code = runCLI(t, s.DatabaseURL, "locks", "owner", raw)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "NORMALIZED URL") ||
		strings.Join(strings.Fields(lines[1])[:5], " ") != want+" alice "+acq.LockID+" 1 0" {
		t.Fatalf("repolock locks owner: %d %q %q", code, out, errOut)
	}

	// The console, signed in with the admin token as an operator is.
	status, page := s.console(t).get(t, "/ui/ownership?url="+url.QueryEscape(raw))
	if status != http.StatusOK || !strings.Contains(page, `<code id="lock-key">`+want+`</code>`) ||
		!strings.Contains(page, `<strong id="owner">alice</strong>`) || !strings.Contains(page, acq.LockID) {
		t.Fatalf("console ownership: %d\n%s", status, page)
	}
}

// consoleSession is an HTTP client signed in to the console (/ui/) with
// the admin token: the console is HTML, outside api/openapi.yaml.
type consoleSession struct {
	base string
	hc   *http.Client
}

// console signs in to the console's login form with the admin token, as
// the browser tests do, and returns the session.
func (s *server) console(t *testing.T) *consoleSession {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &consoleSession{base: s.URL, hc: &http.Client{Jar: jar, Timeout: time.Minute}}
	res, err := c.hc.PostForm(s.URL+"/ui/login", url.Values{"token": {s.AdminToken}})
	if err != nil {
		t.Fatalf("console sign-in: %v", err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	// The sign-in redirects to the overview, which only a session sees.
	if res.StatusCode != http.StatusOK || res.Request.URL.Path != "/ui/" {
		t.Fatalf("console sign-in: %d at %s\n%s", res.StatusCode, res.Request.URL, body)
	}
	return c
}

// get fetches a console page and returns its status and HTML.
func (c *consoleSession) get(t *testing.T, path string) (int, string) {
	t.Helper()
	res, err := c.hc.Get(c.base + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return res.StatusCode, string(body)
}
