package console

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/repolock/repolock/internal/apps"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/httpapi/httpapitest"
	"github.com/repolock/repolock/internal/tenants"
)

const testAdminToken = "rla_console_test_admin_token"

// clock is an injectable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type env struct {
	t     *testing.T
	db    *database.DB
	ui    *Console
	srv   *httptest.Server
	clock *clock
	// The pool's services, the ones the console acts through (built once
	// for db by httpapitest.Config, as `api serve` builds them).
	tenants *tenants.Service
	apps    *apps.Service
}

// newEnv serves a console on a fresh database, mounted on Echo as `api
// serve` mounts it. The clock starts at the wall clock, so rows stamped by
// the database's now() fall in the pages' windows; tests only move it
// forward.
func newEnv(t *testing.T, mod ...func(*Config)) *env {
	t.Helper()
	t.Parallel()
	db := dbtest.New(t)
	clk := &clock{now: time.Now()}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	// The GC collector, the sync store and the domain services, wired as
	// `api serve` wires them.
	api := httpapitest.Config(t, db, logger, testAdminToken)
	cfg := Config{DB: db, AdminToken: testAdminToken, AuthGuard: api.AuthGuard, Now: clk.Now, Logger: logger, Collector: api.GC, Sync: api.Sync,
		Tenants: api.Tenants, Locks: api.Locks, Apps: api.Apps, Watch: api.Watch}
	for _, m := range mod {
		m(&cfg)
	}
	ui, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	ui.Mount(e)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return &env{t: t, db: db, ui: ui, srv: srv, clock: clk, tenants: api.Tenants, apps: api.Apps}
}

// browser is an HTTP client with a cookie jar that does not follow
// redirects.
type browser struct {
	e  *env
	hc *http.Client
}

func (e *env) browser() *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{e: e, hc: &http.Client{
		Jar:           jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

type response struct {
	Status int
	Header http.Header
	Body   string
}

func (b *browser) do(req *http.Request) response {
	b.e.t.Helper()
	resp, err := b.hc.Do(req)
	if err != nil {
		b.e.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		b.e.t.Fatal(err)
	}
	return response{Status: resp.StatusCode, Header: resp.Header, Body: string(body)}
}

func (b *browser) get(path string) response {
	b.e.t.Helper()
	req, err := http.NewRequest(http.MethodGet, b.e.srv.URL+path, nil)
	if err != nil {
		b.e.t.Fatal(err)
	}
	return b.do(req)
}

func (b *browser) post(path string, form url.Values) response {
	b.e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.e.srv.URL+path, strings.NewReader(form.Encode()))
	if err != nil {
		b.e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return b.do(req)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// signIn signs in with the admin token and returns the session's CSRF token.
func (b *browser) signIn() string {
	b.e.t.Helper()
	return b.signInWith(testAdminToken)
}

// signInWith signs in with token.
func (b *browser) signInWith(token string) string {
	b.e.t.Helper()
	r := b.post("/ui/login", url.Values{"token": {token}})
	if r.Status != http.StatusSeeOther || r.Header.Get("Location") != "/ui/" {
		b.e.t.Fatalf("sign in: %d %s", r.Status, r.Header.Get("Location"))
	}
	return b.csrf()
}

// csrf reads the CSRF token from the overview's sign-out form.
func (b *browser) csrf() string {
	b.e.t.Helper()
	r := b.get("/ui/")
	m := csrfRE.FindStringSubmatch(r.Body)
	if r.Status != http.StatusOK || m == nil {
		b.e.t.Fatalf("no csrf token on the overview (%d)", r.Status)
	}
	return m[1]
}

// form is a state-changing form with the CSRF token.
func form(csrf string, kv ...string) url.Values {
	v := url.Values{"csrf": {csrf}}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	return v
}

func (e *env) tenant(name string) (tenants.Tenant, string) {
	e.t.Helper()
	u, tok, err := e.tenants.Create(context.Background(), name, "")
	if err != nil {
		e.t.Fatal(err)
	}
	return u, tok
}

func (e *env) app(tenantID, name, repoURL string) (apps.Application, error) {
	return e.apps.CreateApplication(context.Background(), tenantID, apps.NewApplication{Name: name, RepoURL: repoURL})
}

func (e *env) mustApp(tenantID, name, repoURL string) apps.Application {
	e.t.Helper()
	a, err := e.app(tenantID, name, repoURL)
	if err != nil {
		e.t.Fatal(err)
	}
	return a
}

func (e *env) count(query string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.db.GetContext(context.Background(), &n, query, args...); err != nil {
		e.t.Fatal(err)
	}
	return n
}

func wantStatus(t *testing.T, r response, want int) {
	t.Helper()
	if r.Status != want {
		t.Fatalf("status %d, want %d; body:\n%s", r.Status, want, r.Body)
	}
}

func wantContains(t *testing.T, r response, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if !strings.Contains(r.Body, s) {
			t.Errorf("body does not contain %q:\n%s", s, r.Body)
		}
	}
}

func wantNotContains(t *testing.T, r response, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if strings.Contains(r.Body, s) {
			t.Errorf("body contains %q", s)
		}
	}
}

var nextRE = regexp.MustCompile(`<a href="([^"]+)" rel="next">`)

// nextLinkOf is the "next page" link of the list paged by param ("" when
// none).
func nextLinkOf(r response, param string) string {
	re := regexp.MustCompile(`data-param="` + regexp.QuoteMeta(param) + `">(?:<a href="[^"]+">« first page</a>)?<a href="([^"]+)" rel="next">`)
	m := re.FindStringSubmatch(r.Body)
	if m == nil {
		return ""
	}
	return strings.ReplaceAll(m[1], "&amp;", "&")
}

// nextLink is the page's "next page" link, unescaped ("" when none).
func nextLink(r response) string {
	m := nextRE.FindStringSubmatch(r.Body)
	if m == nil {
		return ""
	}
	return strings.ReplaceAll(m[1], "&amp;", "&")
}
