package console

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/apps"
	"github.com/repolock/repolock/internal/authguard"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/locks"
	"github.com/repolock/repolock/internal/syncstate"
	"github.com/repolock/repolock/internal/tenants"
)

func TestSignIn(t *testing.T) {
	e := newEnv(t)
	_, tenantToken := e.tenant("alice")
	b := e.browser()

	r := b.get("/ui")
	wantStatus(t, r, http.StatusMovedPermanently)
	if got := r.Header.Get("Location"); got != "/ui/" {
		t.Errorf("/ui: Location %q", got)
	}
	r = b.get("/ui/")
	wantStatus(t, r, http.StatusSeeOther)
	if got := r.Header.Get("Location"); got != "/ui/login?next=%2Fui%2F" {
		t.Errorf("Location %q", got)
	}
	wantStatus(t, b.get("/ui/login"), http.StatusOK)

	cases := []struct {
		name, token string
		status      int
		msg         string
	}{
		{"empty", "", http.StatusUnauthorized, "Enter the admin token."},
		{"wrong", "rla_wrong", http.StatusUnauthorized, "That token is not valid."},
		{"admin token with a suffix", testAdminToken + "x", http.StatusUnauthorized, "That token is not valid."},
		{"tenant token", tenantToken, http.StatusForbidden, "That is a tenant token. Only the admin token can sign in to the console."},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := b.post("/ui/login", url.Values{"token": {c.token}})
			wantStatus(t, r, c.status)
			wantContains(t, r, c.msg)
			if r.Header.Get("Set-Cookie") != "" {
				t.Errorf("a refused sign-in set a cookie: %s", r.Header.Get("Set-Cookie"))
			}
		})
	}
	if n := e.count(`SELECT count(*) FROM console_sessions`); n != 0 {
		t.Fatalf("%d sessions after refused sign-ins", n)
	}

	r = b.post("/ui/login", url.Values{"token": {testAdminToken}, "next": {"/ui/gc"}})
	wantStatus(t, r, http.StatusSeeOther)
	if got := r.Header.Get("Location"); got != "/ui/gc" {
		t.Errorf("Location %q, want /ui/gc", got)
	}
	ck := r.Header.Get("Set-Cookie")
	for _, want := range []string{CookieName + "=", "Path=/", "HttpOnly", "SameSite=Strict", "Max-Age=43200"} {
		if !strings.Contains(ck, want) {
			t.Errorf("cookie %q lacks %q", ck, want)
		}
	}
	if strings.Contains(ck, "Secure") {
		t.Errorf("cookie over plain HTTP is Secure: %q", ck)
	}
	wantStatus(t, b.get("/ui/gc"), http.StatusOK)
	if n := e.count(`SELECT count(*) FROM console_sessions`); n != 1 {
		t.Fatalf("%d sessions, want 1", n)
	}
	// The cookie holds the id; the table only its hash.
	if n := e.count(`SELECT count(*) FROM console_sessions WHERE encode(id_hash, 'escape') LIKE '%' || $1 || '%'`,
		strings.SplitN(strings.TrimPrefix(ck, CookieName+"="), ";", 2)[0]); n != 0 {
		t.Fatal("the session id is stored in clear")
	}
}

// signIn posts token to /ui/login from addr, straight to the handler (so
// that the test chooses the client address).
func (e *env) signIn(addr, token string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/ui/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.RemoteAddr = addr + ":40000"
	w := httptest.NewRecorder()
	e.ui.ServeHTTP(w, req)
	return w
}

// TestSignInThrottledPerAddress: an address that spent its budget of
// failures is refused everything, the correct token included, until the
// budget refills; another address signs in meanwhile.
func TestSignInThrottledPerAddress(t *testing.T) {
	e := newEnv(t)
	const guesser, operator = "192.0.2.1", "192.0.2.2"
	for range authguard.DefaultPerAddressBurst {
		if w := e.signIn(guesser, "rla_guess"); w.Code != http.StatusUnauthorized {
			t.Fatalf("wrong token within the budget: %d, want 401", w.Code)
		}
	}
	for _, tok := range []string{"rla_guess", testAdminToken} {
		w := e.signIn(guesser, tok)
		if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "6" || w.Header().Get("Set-Cookie") != "" {
			t.Fatalf("over the budget: %d, Retry-After %q, Set-Cookie %q; want 429, 6 and none",
				w.Code, w.Header().Get("Retry-After"), w.Header().Get("Set-Cookie"))
		}
	}
	if w := e.signIn(operator, testAdminToken); w.Code != http.StatusSeeOther {
		t.Fatalf("another address's correct token: %d, want 303", w.Code)
	}
	// One failure's worth comes back every 6 s of the (injected) clock.
	e.clock.Advance(6 * time.Second)
	if w := e.signIn(guesser, testAdminToken); w.Code != http.StatusSeeOther {
		t.Fatalf("after the refill: %d, want 303", w.Code)
	}
}

// TestSignInFloodDoesNotLockOutOperator: wrong tokens from many addresses,
// concurrently, exhaust the global budget (they then get 429 with
// Retry-After), and the operator's correct token from an address of its
// own signs in every time.
func TestSignInFloodDoesNotLockOutOperator(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.AuthGuard = authguard.New(authguard.Config{PerAddressRate: 0.001, PerAddressBurst: 3,
			GlobalRate: 0.001, GlobalBurst: 20, MaxAddresses: 1000})
	})
	const attackers, perAttacker, signIns = 40, 4, 10
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		statuses = map[int]int{}
		bad      []string
	)
	for i := range attackers {
		wg.Go(func() {
			for range perAttacker {
				w := e.signIn(fmt.Sprintf("198.51.100.%d", i+1), "rla_guess")
				mu.Lock()
				statuses[w.Code]++
				if w.Code == http.StatusTooManyRequests && w.Header().Get("Retry-After") == "" {
					bad = append(bad, "429 without Retry-After")
				}
				mu.Unlock()
			}
		})
	}
	for range signIns {
		wg.Go(func() {
			if w := e.signIn("203.0.113.9", testAdminToken); w.Code != http.StatusSeeOther {
				mu.Lock()
				bad = append(bad, fmt.Sprintf("the operator's sign-in answered %d", w.Code))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(bad) > 0 {
		t.Fatal(bad)
	}
	// 20 failures fit the global budget; the other 140 are refused.
	if statuses[http.StatusUnauthorized] != 20 || statuses[http.StatusTooManyRequests] != attackers*perAttacker-20 || len(statuses) != 2 {
		t.Fatalf("wrong tokens answered %v, want 20 × 401 and the rest 429", statuses)
	}
	if w := e.signIn("203.0.113.9", testAdminToken); w.Code != http.StatusSeeOther {
		t.Fatalf("after the flood: %d", w.Code)
	}
}

func TestSignInRedirectStaysInConsole(t *testing.T) {
	e := newEnv(t)
	for _, next := range []string{"https://evil.example/", "//evil.example/ui/", "/v1/admin/users", "/ui/\\evil"} {
		r := e.browser().post("/ui/login", url.Values{"token": {testAdminToken}, "next": {next}})
		wantStatus(t, r, http.StatusSeeOther)
		if got := r.Header.Get("Location"); got != "/ui/" {
			t.Errorf("next=%q: Location %q, want /ui/", next, got)
		}
	}
}

func TestAPITokensDoNotOpenPages(t *testing.T) {
	e := newEnv(t)
	_, tenantToken := e.tenant("alice")
	for _, tok := range []string{testAdminToken, tenantToken} {
		req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/ui/tenants", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		r := e.browser().do(req)
		wantStatus(t, r, http.StatusSeeOther)
	}
}

func TestSecureCookieOverTLS(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.TrustForwardedProto = true })
	for _, c := range []struct {
		name string
		mod  func(*http.Request)
	}{
		{"tls", func(r *http.Request) { r.TLS = &tls.ConnectionState{} }},
		{"forwarded proto", func(r *http.Request) { r.Header.Set("X-Forwarded-Proto", "https") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodPost, "/ui/login", strings.NewReader(url.Values{"token": {testAdminToken}}.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			c.mod(req)
			w := httptest.NewRecorder()
			e.ui.ServeHTTP(w, req)
			if w.Code != http.StatusSeeOther {
				t.Fatalf("status %d", w.Code)
			}
			ck := w.Header().Get("Set-Cookie")
			for _, want := range []string{"__Host-" + CookieName + "=", "Secure", "HttpOnly", "SameSite=Strict", "Path=/"} {
				if !strings.Contains(ck, want) {
					t.Errorf("cookie %q lacks %q", ck, want)
				}
			}
			if w.Header().Get("Strict-Transport-Security") == "" {
				t.Error("no HSTS over TLS")
			}
		})
	}
}

func TestForwardedProtoNotTrustedByDefault(t *testing.T) {
	e2 := newEnv(t)
	req := httptest.NewRequest(http.MethodPost, "/ui/login", strings.NewReader(url.Values{"token": {testAdminToken}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Forwarded-Proto", "https")
	w := httptest.NewRecorder()
	e2.ui.ServeHTTP(w, req)
	if ck := w.Header().Get("Set-Cookie"); strings.Contains(ck, "Secure") {
		t.Errorf("X-Forwarded-Proto trusted without TrustForwardedProto: %q", ck)
	}
}

var inlineScriptRE = regexp.MustCompile(`<script(\s[^>]*)?>[^<]|<script>|\son[a-z]+=|javascript:|style="`)

func TestSecurityHeadersOnEveryPage(t *testing.T) {
	e := newEnv(t)
	alice, _ := e.tenant("alice")
	e.mustApp(alice.ID, "a", "https://github.com/org/repo")
	b := e.browser()
	b.signIn()
	pages := []string{"/ui/", "/ui/ownership", "/ui/ownership?url=github.com/org/repo", "/ui/ownership?tenant=alice",
		"/ui/denials", "/ui/denials.csv", "/ui/gc", "/ui/sync", "/ui/tenants", "/ui/tenants/alice/delete",
		"/ui/static/console.css", "/ui/static/console.js", "/ui/nope"}
	anon := e.browser()
	for _, p := range pages {
		for _, who := range []*browser{b, anon} {
			r := who.get(p)
			csp := r.Header.Get("Content-Security-Policy")
			for _, want := range []string{"default-src 'none'", "script-src 'self'", "frame-ancestors 'none'", "form-action 'self'"} {
				if !strings.Contains(csp, want) {
					t.Errorf("%s: CSP %q lacks %q", p, csp, want)
				}
			}
			if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
				t.Errorf("%s: CSP allows inline code: %q", p, csp)
			}
			if got := r.Header.Get("X-Content-Type-Options"); got != "nosniff" {
				t.Errorf("%s: X-Content-Type-Options %q", p, got)
			}
			if got := r.Header.Get("Referrer-Policy"); got != "no-referrer" {
				t.Errorf("%s: Referrer-Policy %q", p, got)
			}
			if got := r.Header.Get("X-Frame-Options"); got != "DENY" {
				t.Errorf("%s: X-Frame-Options %q", p, got)
			}
			if strings.HasPrefix(r.Header.Get("Content-Type"), "text/html") {
				if m := inlineScriptRE.FindString(r.Body); m != "" {
					t.Errorf("%s: inline script or style %q", p, m)
				}
				if got := r.Header.Get("Cache-Control"); got != "no-store" {
					t.Errorf("%s: Cache-Control %q", p, got)
				}
			}
		}
	}
	wantStatus(t, b.get("/ui/nope"), http.StatusNotFound)
	// A path the console serves, with a method it does not take: 405 with
	// Allow, whatever the session.
	for _, tc := range []struct{ method, path, allow string }{
		{http.MethodGet, "/ui/logout", "POST"},
		{http.MethodGet, "/ui/gc/dry-run", "POST"},
		{http.MethodPut, "/ui/tenants/alice/revoke", "GET, HEAD, POST"},
		{http.MethodDelete, "/ui/tenants", "GET, HEAD, POST"},
		{http.MethodPut, "/ui/ownership", "GET, HEAD"},
	} {
		req, err := http.NewRequest(tc.method, e.srv.URL+tc.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		r := b.do(req)
		if r.Status != http.StatusMethodNotAllowed || r.Header.Get("Allow") != tc.allow {
			t.Errorf("%s %s: %d, Allow %q; want 405, Allow %q", tc.method, tc.path, r.Status, r.Header.Get("Allow"), tc.allow)
		}
	}
	if ct := b.get("/ui/static/console.js").Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/javascript") {
		t.Errorf("console.js Content-Type %q", ct)
	}
}

func TestSessionExpiry(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.SessionTTL = time.Hour })
	b := e.browser()
	csrf := b.signIn()
	e.clock.Advance(time.Hour - time.Second)
	wantStatus(t, b.get("/ui/tenants"), http.StatusOK)
	e.clock.Advance(time.Second)
	r := b.get("/ui/tenants")
	wantStatus(t, r, http.StatusSeeOther)
	if got := r.Header.Get("Location"); got != "/ui/login?next=%2Fui%2Ftenants" {
		t.Errorf("Location %q", got)
	}
	r = b.post("/ui/tenants", form(csrf, "name", "late"))
	wantStatus(t, r, http.StatusForbidden)
	wantContains(t, r, "Your session has expired")
	if n := e.count(`SELECT count(*) FROM cluster_users`); n != 0 {
		t.Fatalf("an expired session created a tenant")
	}
	// The next sign-in deletes the expired session row.
	b.signIn()
	if n := e.count(`SELECT count(*) FROM console_sessions`); n != 1 {
		t.Fatalf("%d session rows, want 1 (the expired one deleted)", n)
	}
}

func TestDefaultSessionTTLIs12h(t *testing.T) {
	e := newEnv(t)
	b := e.browser()
	b.signIn()
	e.clock.Advance(12*time.Hour - time.Minute)
	wantStatus(t, b.get("/ui/"), http.StatusOK)
	e.clock.Advance(time.Minute)
	wantStatus(t, b.get("/ui/"), http.StatusSeeOther)
}

func TestSignOut(t *testing.T) {
	e := newEnv(t)
	b := e.browser()
	csrf := b.signIn()
	wantStatus(t, b.post("/ui/logout", url.Values{}), http.StatusForbidden)
	wantStatus(t, b.get("/ui/"), http.StatusOK)
	// Keep the cookie to replay it after signing out.
	u, _ := url.Parse(e.srv.URL)
	old := b.hc.Jar.Cookies(u)
	r := b.post("/ui/logout", form(csrf))
	wantStatus(t, r, http.StatusSeeOther)
	if got := r.Header.Get("Location"); got != "/ui/login" {
		t.Errorf("Location %q", got)
	}
	if n := e.count(`SELECT count(*) FROM console_sessions`); n != 0 {
		t.Fatalf("%d sessions after sign-out", n)
	}
	wantStatus(t, b.get("/ui/"), http.StatusSeeOther)
	replay := e.browser()
	replay.hc.Jar.SetCookies(u, old)
	wantStatus(t, replay.get("/ui/"), http.StatusSeeOther)
}

func TestCSRFRefused(t *testing.T) {
	e := newEnv(t)
	alice, _ := e.tenant("alice")
	csrfApp := e.mustApp(alice.ID, "a", "https://github.com/org/repo")
	b := e.browser()
	csrf := b.signIn()
	other := e.browser()
	otherCSRF := other.signIn()
	if otherCSRF == csrf {
		t.Fatal("two sessions share a CSRF token")
	}
	posts := []struct {
		path string
		form url.Values
	}{
		{"/ui/tenants", url.Values{"name": {"mallory"}}},
		{"/ui/tenants/alice/revoke", url.Values{"confirm": {"alice"}}},
		{"/ui/tenants/alice/delete", url.Values{"confirm": {"alice"}}},
		{"/ui/gc/dry-run", url.Values{}},
		{"/ui/gc/run", url.Values{}},
		{"/ui/locks/" + csrfApp.LockID + "/transfer", url.Values{"to": {"alice"}, "references": {"delete"}}},
		{"/ui/logout", url.Values{}},
	}
	// The right token with its first character changed (a fixed "x" would
	// be the right token itself when the token starts with x).
	wrong := "x" + csrf[1:]
	if csrf[0] == 'x' {
		wrong = "y" + csrf[1:]
	}
	for _, p := range posts {
		for name, tok := range map[string]string{"missing": "", "wrong": wrong, "another session's": otherCSRF} {
			f := url.Values{}
			for k, v := range p.form {
				f[k] = v
			}
			if tok != "" {
				f.Set("csrf", tok)
			}
			r := b.post(p.path, f)
			if r.Status != http.StatusForbidden || !strings.Contains(r.Body, "CSRF token is missing or wrong") {
				t.Errorf("%s with %s token: %d", p.path, name, r.Status)
			}
		}
	}
	// Nothing happened.
	if n := e.count(`SELECT count(*) FROM cluster_users`); n != 1 {
		t.Errorf("%d tenants, want 1", n)
	}
	if n := e.count(`SELECT count(*) FROM api_tokens WHERE revoked_at IS NULL`); n != 1 {
		t.Errorf("%d live tokens, want 1", n)
	}
	if n := e.count(`SELECT count(*) FROM gc_runs`); n != 0 {
		t.Errorf("%d gc runs, want 0", n)
	}
	if n := e.count(`SELECT count(*) FROM console_sessions`); n != 2 {
		t.Errorf("%d sessions, want 2", n)
	}
	// GET on a POST route is not a way around it: 405, naming the method
	// the route takes.
	if r := b.get("/ui/gc/run"); r.Status != http.StatusMethodNotAllowed || r.Header.Get("Allow") != "POST" {
		t.Errorf("GET /ui/gc/run: %d, Allow %q; want 405, Allow POST", r.Status, r.Header.Get("Allow"))
	}
	if n := e.count(`SELECT count(*) FROM gc_runs`); n != 0 {
		t.Errorf("GET ran the gc")
	}
}

func TestOverview(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	alice, _ := e.tenant("alice")
	bob, _ := e.tenant("bob")
	e.mustApp(alice.ID, "a1", "https://github.com/org/one")
	e.mustApp(alice.ID, "a2", "https://github.com/org/two")
	if _, err := e.app(bob.ID, "b1", "git@github.com:org/one.git"); !repolock.IsCode(err, repolock.ERepositoryClaimed) {
		t.Fatalf("bob's claim: %v", err)
	}
	st := syncstate.New(e.db, syncstate.Options{})
	if _, _, err := st.PutHost(ctx, alice.ID, "pds.example", nil); err != nil {
		t.Fatal(err)
	}
	b := e.browser()
	b.signIn()
	r := b.get("/ui/")
	wantStatus(t, r, http.StatusOK)
	wantContains(t, r,
		`<span class="n" id="count-tenants">2</span> tenants`,
		`<span class="n" id="count-locks">2</span> locks`,
		`<span class="n">2</span> applications`,
		`<span class="n">0</span> credentials`,
		`<span class="n">1</span> sync hosts`,
		"No GC run is recorded yet.",
		"Denials per hour, last 24 hours",
		`<span class="key s-denied"></span> denied 1 · peak 1/h`,
		`<span class="key s-acquired"></span> acquired 2 <span class="key s-denied"></span> denied 1`,
		`<svg class="chart"`,
	)
	// One bar per non-empty hour and kind: 1 on the denial chart, 2 on the
	// week chart (acquired and denied, same hour); each chart is drawn
	// twice, wide and narrow (for a phone).
	if n := strings.Count(r.Body, `<rect class="s-`); n != 6 {
		t.Errorf("%d bars, want 6", n)
	}
	if n := strings.Count(r.Body, `<svg class="chart narrow" viewBox="0 0 400 190"`); n != 2 {
		t.Errorf("%d narrow charts, want 2", n)
	}
	// "Last GC run" is the last real run (issue 30: it showed a dry run),
	// and says when a dry run came after it.
	wantStatus(t, b.post("/ui/gc/dry-run", form(b.csrf())), http.StatusOK)
	r = b.get("/ui/")
	wantContains(t, r, "No GC run is recorded yet (only dry runs).", `id="later-dry-run"`, "A dry run came after it")
	wantNotContains(t, r, `<span class="badge st-succeeded">succeeded</span>`)
	wantStatus(t, b.post("/ui/gc/run", form(b.csrf())), http.StatusOK)
	r = b.get("/ui/")
	wantContains(t, r, `<p id="last-gc-run"><span class="badge st-succeeded">succeeded</span>`)
	wantNotContains(t, r, `id="later-dry-run"`)
	wantStatus(t, b.post("/ui/gc/dry-run", form(b.csrf())), http.StatusOK)
	r = b.get("/ui/")
	wantContains(t, r, `<p id="last-gc-run"><span class="badge st-succeeded">succeeded</span>`, `id="later-dry-run"`)
}

func TestOwnership(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	alice, _ := e.tenant("alice")
	bob, _ := e.tenant("bob")
	e.mustApp(alice.ID, "web", "https://github.com/Org/Repo.git")
	if _, err := e.app(bob.ID, "steal", "ssh://git@github.com/org/repo"); !repolock.IsCode(err, repolock.ERepositoryClaimed) {
		t.Fatalf("bob's claim: %v", err)
	}
	b := e.browser()
	b.signIn()
	for _, spelling := range []string{"https://github.com/Org/Repo.git", "git@github.com:org/repo", "HTTPS://GITHUB.COM/org/repo/"} {
		r := b.get("/ui/ownership?url=" + url.QueryEscape(spelling))
		wantStatus(t, r, http.StatusOK)
		wantContains(t, r, `<code id="lock-key">github.com/org/repo</code>`, `<strong id="owner">alice</strong>`,
			`<td>application</td><td>alice</td><td>web</td><td><code>https://github.com/Org/Repo.git</code>`,
			`<span class="badge ev-acquired">acquired</span>`, `<span class="badge ev-denied">denied</span>`)
	}
	// Event history paginates newest first.
	r := b.get("/ui/ownership?url=github.com/org/repo&page_size=1")
	wantStatus(t, r, http.StatusOK)
	wantContains(t, r, "ev-denied")
	wantNotContains(t, r, "ev-acquired")
	next := nextLinkOf(r, "before")
	if !strings.HasPrefix(next, "/ui/ownership?") || !strings.Contains(next, "url=github.com%2Forg%2Frepo") {
		t.Fatalf("next link %q lost the filter", next)
	}
	r = b.get(next)
	wantContains(t, r, "ev-acquired")
	wantNotContains(t, r, "ev-denied")
	if nextLinkOf(r, "before") != "" {
		t.Error("a next link on the last page")
	}

	// Holders paginate: applications first, then credentials.
	e.mustApp(alice.ID, "web2", "git@github.com:org/repo")
	if _, err := e.apps.CreateRepositoryCredential(ctx, alice.ID, apps.NewRepositoryCredential{
		Name: "deploy", RepoURL: "https://github.com/org/repo", SecretRef: "vault:kv/deploy"}); err != nil {
		t.Fatal(err)
	}
	var seen []string
	holderRE := regexp.MustCompile(`<td>(application|credential)</td><td>alice</td><td>([a-z0-9]+)</td>`)
	for page, link := 0, "/ui/ownership?url=github.com/org/repo&page_size=1"; link != ""; page++ {
		if page > 5 {
			t.Fatal("holders do not end")
		}
		r := b.get(link)
		wantStatus(t, r, http.StatusOK)
		wantContains(t, r, "Held by 2 Application(s) and 1 Credential(s)")
		for _, m := range holderRE.FindAllStringSubmatch(r.Body, -1) {
			seen = append(seen, m[1]+":"+m[2])
		}
		link = nextLinkOf(r, "holders_after")
	}
	if got := strings.Join(seen, ","); got != "application:web,application:web2,credential:deploy" {
		t.Errorf("holders over the pages: %s", got)
	}
	wantStatus(t, b.get("/ui/ownership?url=github.com/org/repo&holders_after=bogus"), http.StatusBadRequest)

	r = b.get("/ui/ownership?url=" + url.QueryEscape("https://github.com/free/repo"))
	wantStatus(t, r, http.StatusOK)
	wantContains(t, r, `<code id="lock-key">github.com/free/repo</code>`, "Nobody holds this URL")

	r = b.get("/ui/ownership?url=" + url.QueryEscape("file:///etc/passwd"))
	wantStatus(t, r, http.StatusBadRequest)
	wantContains(t, r, "file:// URLs are local paths, not repository URLs")

	// By tenant: its locks, through locks.List's pages.
	e.mustApp(alice.ID, "api", "https://gitlab.com/org/api")
	r = b.get("/ui/ownership?tenant=alice&page_size=1")
	wantStatus(t, r, http.StatusOK)
	wantContains(t, r, "holds 2 lock(s), 3 application(s), 1 credential(s)", "<code>github.com/org/repo</code>")
	r = b.get(nextLink(r))
	wantContains(t, r, "<code>gitlab.com/org/api</code>")
	wantStatus(t, b.get("/ui/ownership?tenant=nobody"), http.StatusNotFound)
	wantStatus(t, b.get("/ui/ownership?tenant=alice&page_token=W1tbW1tb"), http.StatusBadRequest)
}

func TestDenials(t *testing.T) {
	e := newEnv(t)
	alice, _ := e.tenant("alice")
	bob, _ := e.tenant("bob")
	carol, _ := e.tenant("carol")
	e.mustApp(alice.ID, "a", "https://github.com/org/repo")
	e.mustApp(alice.ID, "b", "https://github.com/org/other")
	// bob is refused org/repo twice (one coalesced row counting 2), carol
	// once, and bob once on org/other: three rows, four denials.
	for i, c := range []struct {
		who tenants.Tenant
		url string
	}{{bob, "git@github.com:org/repo.git"}, {carol, "git@github.com:org/repo.git"}, {bob, "https://github.com/org/repo/"}, {bob, "https://github.com/org/other"}} {
		if _, err := e.app(c.who.ID, "x"+string(rune('0'+i)), c.url); !repolock.IsCode(err, repolock.ERepositoryClaimed) {
			t.Fatalf("claim %d: %v", i, err)
		}
	}
	b := e.browser()
	b.signIn()
	r := b.get("/ui/denials")
	wantStatus(t, r, http.StatusOK)
	if n := strings.Count(r.Body, `<td>alice</td></tr>`); n != 3 {
		t.Errorf("%d denial rows shown, want 3", n)
	}
	if n := strings.Count(r.Body, `<td class="times">2</td><td>bob</td><td><a href="/ui/ownership?url=github.com%2forg%2frepo">`); n != 1 {
		t.Errorf("bob's two denials of org/repo: %d coalesced rows with count 2, want 1\n%s", n, r.Body)
	}
	r = b.get("/ui/denials?requester=bob&since=24h")
	if n := strings.Count(r.Body, `<td>bob</td>`); n != 2 || strings.Contains(r.Body, "<td>carol</td>") {
		t.Errorf("requester filter: %d rows of bob", n)
	}
	r = b.get("/ui/denials?url=" + url.QueryEscape("HTTPS://github.com/Org/Repo") + "&owner=alice")
	wantContains(t, r, "Key: <code>github.com/org/repo</code>")
	if n := strings.Count(r.Body, `<td>alice</td></tr>`); n != 2 {
		t.Errorf("url filter: %d rows, want 2", n)
	}
	r = b.get("/ui/denials?owner=bob")
	wantContains(t, r, "No denials match.")

	// Pagination keeps the filters.
	r = b.get("/ui/denials?owner=alice&page_size=2")
	if n := strings.Count(r.Body, `<td>alice</td></tr>`); n != 2 {
		t.Fatalf("page 1: %d rows", n)
	}
	next := nextLink(r)
	if !strings.Contains(next, "owner=alice") || !strings.Contains(next, "before=") {
		t.Fatalf("next link %q", next)
	}
	r = b.get(next)
	if n := strings.Count(r.Body, `<td>alice</td></tr>`); n != 1 || nextLink(r) != "" {
		t.Fatalf("page 2: %d rows, next %q", n, nextLink(r))
	}
	wantContains(t, r, "<td>bob</td>") // the oldest denial was bob's

	wantStatus(t, b.get("/ui/denials?since=2w"), http.StatusBadRequest)
	wantStatus(t, b.get("/ui/denials?before=-1"), http.StatusBadRequest)
	wantStatus(t, b.get("/ui/denials?page_size=501"), http.StatusBadRequest)

	// CSV with the same filters.
	r = b.get("/ui/denials.csv?requester=bob")
	wantStatus(t, r, http.StatusOK)
	if ct := r.Header.Get("Content-Type"); ct != "text/csv; charset=utf-8" {
		t.Errorf("Content-Type %q", ct)
	}
	if cd := r.Header.Get("Content-Disposition"); cd != `attachment; filename="denials.csv"` {
		t.Errorf("Content-Disposition %q", cd)
	}
	lines := strings.Split(strings.TrimSpace(r.Body), "\n")
	if len(lines) != 3 || lines[0] != "event_id,denied_at,last_denied_at,denials,git_repository_url,requested_by,owner,reason,reserved_prefix" {
		t.Fatalf("csv:\n%s", r.Body)
	}
	// Newest first: org/other once, then org/repo twice (coalesced).
	for i, suffix := range []string{",1,github.com/org/other,bob,alice,claimed,", ",2,github.com/org/repo,bob,alice,claimed,"} {
		if !strings.HasSuffix(lines[i+1], suffix) {
			t.Errorf("csv row %d %q, want suffix %q", i+1, lines[i+1], suffix)
		}
	}
	// The page links the CSV of its filters.
	wantContains(t, b.get("/ui/denials?requester=bob"), `href="/ui/denials.csv?requester=bob"`)
}

// oldUnreferencedLock makes a lock no Application or Credential holds,
// created an hour ago (older than the GC's default minimum age).
func (e *env) oldUnreferencedLock(tenantID, key string) {
	e.t.Helper()
	dbtest.NewLock(e.t, e.db, tenantID, key, time.Hour)
}

func TestGC(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	alice, _ := e.tenant("alice")
	e.mustApp(alice.ID, "kept", "https://github.com/org/kept")
	e.oldUnreferencedLock(alice.ID, "github.com/org/orphan")
	b := e.browser()
	csrf := b.signIn()

	r := b.get("/ui/gc")
	wantStatus(t, r, http.StatusOK)
	wantContains(t, r, "No runs recorded.")

	r = b.post("/ui/gc/dry-run", form(csrf))
	wantStatus(t, r, http.StatusOK)
	wantContains(t, r, `would collect <strong id="would-collect">1</strong> lock(s)`,
		"<td><code>github.com/org/orphan</code></td><td>alice</td>", "Showing the first 1 of 1")
	wantNotContains(t, r, "github.com/org/kept")
	if n := e.count(`SELECT count(*) FROM RepositoryLockOwner`); n != 2 {
		t.Fatalf("a dry run deleted locks: %d left", n)
	}

	// Another process holds the lease: run now is skipped.
	if _, err := e.db.ExecContext(ctx, `INSERT INTO gc_leases (name, holder, expires_at) VALUES ('gc', 'other:1:x', now() + interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	r = b.post("/ui/gc/run", form(csrf))
	wantStatus(t, r, http.StatusOK)
	wantContains(t, r, `<span class="badge st-skipped">skipped</span> another collection is running.`)
	if n := e.count(`SELECT count(*) FROM RepositoryLockOwner`); n != 2 {
		t.Fatalf("a skipped run deleted locks")
	}
	if _, err := e.db.ExecContext(ctx, `DELETE FROM gc_leases`); err != nil {
		t.Fatal(err)
	}

	r = b.post("/ui/gc/run", form(csrf))
	wantStatus(t, r, http.StatusOK)
	wantContains(t, r, "collected <strong>1</strong> of 1 lock(s)")
	if n := e.count(`SELECT count(*) FROM RepositoryLockOwner WHERE git_repository_url = 'github.com/org/orphan'`); n != 0 {
		t.Fatal("run now did not collect the orphan")
	}
	if n := e.count(`SELECT count(*) FROM repository_lock_events WHERE event = 'collected'`); n != 1 {
		t.Fatalf("%d collected events", n)
	}
	if n := e.count(`SELECT count(*) FROM gc_runs WHERE trigger = 'api'`); n != 2 {
		t.Fatalf("%d recorded runs, want 2 (the dry run and the run)", n)
	}

	// The runs list paginates, newest first.
	r = b.get("/ui/gc?page_size=1")
	if n := strings.Count(r.Body, "<td>api</td>"); n != 1 {
		t.Fatalf("%d runs on page 1", n)
	}
	wantNotContains(t, r, "dry run</span></td>")
	r = b.get(nextLink(r))
	wantContains(t, r, `<span class="badge">dry run</span></td>`)
	if nextLink(r) != "" {
		t.Error("a next link on the last page")
	}
	wantStatus(t, b.get("/ui/gc?page_token=bogus"), http.StatusBadRequest)
}

func TestSync(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	alice, _ := e.tenant("alice")
	bob, _ := e.tenant("bob")
	st := syncstate.New(e.db, syncstate.Options{})
	for _, h := range []struct {
		tenant string
		host   string
	}{{alice.ID, "pds.a.example"}, {alice.ID, "pds.b.example"}, {bob.ID, "relay.example"}} {
		if _, _, err := st.PutHost(ctx, h.tenant, h.host, nil); err != nil {
			t.Fatal(err)
		}
	}
	rev := syncstate.NewTID(time.Now().Add(-time.Minute), 1)
	if _, err := st.ApplyEvents(ctx, alice.ID, "pds.a.example", []syncstate.Event{
		{Cursor: 1, Repo: "did:plc:one", Rev: rev}, {Cursor: 2, Repo: "did:plc:two", Rev: rev},
	}); err != nil {
		t.Fatal(err)
	}
	b := e.browser()
	b.signIn()
	r := b.get("/ui/sync?page_size=2")
	wantStatus(t, r, http.StatusOK)
	wantContains(t, r, `<td>alice</td><td><a href="/ui/sync/alice/pds.a.example">pds.a.example</a></td><td>2</td>`, "pds.b.example")
	wantNotContains(t, r, "relay.example")
	r = b.get(nextLink(r))
	wantContains(t, r, `<td>bob</td><td><a href="/ui/sync/bob/relay.example">relay.example</a></td><td>—</td>`)

	r = b.get("/ui/sync/alice/pds.a.example?page_size=1")
	wantStatus(t, r, http.StatusOK)
	wantContains(t, r, "<code>did:plc:one</code></td><td><span class=\"badge\">never_indexed</span>")
	r = b.get(nextLink(r))
	wantContains(t, r, "<code>did:plc:two</code></td><td><span class=\"badge\">never_indexed</span>")
	wantStatus(t, b.get("/ui/sync/alice/nope.example"), http.StatusNotFound)
	wantStatus(t, b.get("/ui/sync/nobody/pds.a.example"), http.StatusNotFound)
}

var tokenRE = regexp.MustCompile(`<code class="token" id="new-token">(rlt_[A-Za-z0-9_-]+)</code>`)

func TestTenants(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	b := e.browser()
	csrf := b.signIn()

	r := b.post("/ui/tenants", form(csrf, "name", "alice", "display_name", "Alice's team"))
	wantStatus(t, r, http.StatusCreated)
	m := tokenRE.FindStringSubmatch(r.Body)
	if m == nil {
		t.Fatalf("no token shown:\n%s", r.Body)
	}
	u, err := e.tenants.Authenticate(ctx, m[1])
	if err != nil || u.Name != "alice" || u.DisplayName != "Alice's team" {
		t.Fatalf("the shown token: %+v %v", u, err)
	}
	// Shown once: not on the list page.
	r = b.get("/ui/tenants")
	wantNotContains(t, r, m[1], "new-token")
	wantContains(t, r, `<a href="/ui/ownership?tenant=alice">alice</a>`)

	r = b.post("/ui/tenants", form(csrf, "name", "alice"))
	wantStatus(t, r, http.StatusConflict)
	wantContains(t, r, "a user named &#34;alice&#34; already exists")
	r = b.post("/ui/tenants", form(csrf, "name", "Not Valid"))
	wantStatus(t, r, http.StatusBadRequest)
	wantContains(t, r, "user name must be 1-63 characters", `value="Not Valid"`)

	// Revoke: asks for the name first, as delete does (issue 30).
	r = b.get("/ui/tenants")
	wantContains(t, r, `<a class="button" href="/ui/tenants/alice/revoke">Revoke tokens…</a>`)
	r = b.get("/ui/tenants/alice/revoke")
	wantStatus(t, r, http.StatusOK)
	wantContains(t, r, "ends its 1 active token(s) at once", `name="confirm"`)
	for _, confirm := range []string{"", "alic", "bob"} {
		r = b.post("/ui/tenants/alice/revoke", form(csrf, "confirm", confirm))
		wantStatus(t, r, http.StatusBadRequest)
		wantContains(t, r, "Type the tenant&#39;s name to confirm.")
	}
	if _, err := e.tenants.Authenticate(ctx, m[1]); err != nil {
		t.Fatalf("an unconfirmed revoke revoked: %v", err)
	}
	r = b.post("/ui/tenants/alice/revoke", form(csrf, "confirm", "alice"))
	wantStatus(t, r, http.StatusOK)
	wantContains(t, r, "Revoked 1 token(s) of alice.")
	// A link cannot make the page print a notice.
	r = b.get("/ui/tenants?revoked=Call+555-0100&count=all&notice=x")
	wantStatus(t, r, http.StatusOK)
	wantNotContains(t, r, "555-0100", `class="notice"`)
	if _, err := e.tenants.Authenticate(ctx, m[1]); !repolock.IsCode(err, repolock.EUnauthenticated) {
		t.Fatalf("revoked token still works: %v", err)
	}
	wantStatus(t, b.post("/ui/tenants/nobody/revoke", form(csrf, "confirm", "nobody")), http.StatusNotFound)
	wantStatus(t, b.get("/ui/tenants/nobody/revoke"), http.StatusNotFound)
	// No active tokens left: the action is shown disabled.
	wantContains(t, b.get("/ui/tenants"), `<button type="button" disabled title="no active tokens">Revoke tokens…</button>`)

	// Delete: the confirmation names what will be released.
	e.mustApp(u.ID, "web", "https://github.com/org/web")
	e.mustApp(u.ID, "api", "https://github.com/org/api")
	bob, _ := e.tenant("bob")
	r = b.get("/ui/tenants/alice/delete")
	wantStatus(t, r, http.StatusOK)
	wantContains(t, r, "removes 2 application(s), 0 credential(s)", "releases 2 lock(s)",
		"<li><code>github.com/org/web</code></li>", "<li><code>github.com/org/api</code></li>")
	r = b.post("/ui/tenants/alice/delete", form(csrf, "confirm", "alic"))
	wantStatus(t, r, http.StatusBadRequest)
	wantContains(t, r, "Type the tenant&#39;s name to confirm.")
	if n := e.count(`SELECT count(*) FROM cluster_users WHERE name = 'alice'`); n != 1 {
		t.Fatal("deleted without confirmation")
	}
	r = b.post("/ui/tenants/alice/delete", form(csrf, "confirm", "alice"))
	wantStatus(t, r, http.StatusOK)
	wantContains(t, r, "Deleted tenant <strong>alice</strong>: 2 application(s), 0 credential(s) removed, 2 lock(s) released.")
	if n := e.count(`SELECT count(*) FROM repository_lock_events WHERE event = 'released' AND cluster_user_name = 'alice'`); n != 2 {
		t.Fatalf("%d released events", n)
	}
	// Released: bob can take the URL now.
	e.mustApp(bob.ID, "web", "https://github.com/org/web")
	wantStatus(t, b.get("/ui/tenants/alice/delete"), http.StatusNotFound)

	// The list paginates by name, and its links point at the list.
	for _, n := range []string{"carol", "dave"} {
		e.tenant(n)
	}
	r = b.get("/ui/tenants?page_size=2")
	wantContains(t, r, ">bob</a>", ">carol</a>")
	wantNotContains(t, r, ">dave</a>")
	next := nextLink(r)
	if next != "/ui/tenants?after=carol&page_size=2" {
		t.Fatalf("next %q", next)
	}
	r = b.get(next)
	wantContains(t, r, ">dave</a>")
	wantNotContains(t, r, ">bob</a>")
}

func TestWhen(t *testing.T) {
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	c := &Console{cfg: Config{Now: func() time.Time { return now }}}
	for _, tc := range []struct {
		t    time.Time
		want string
	}{
		{now.Add(-5 * time.Second), "just now"},
		{now.Add(-42 * time.Second), "42 s ago"},
		{now.Add(-5 * time.Minute), "5 min ago"},
		{now.Add(-3 * time.Hour), "3 h ago"},
		{now.Add(-72 * time.Hour), "3 d ago"},
		{now.Add(4 * time.Minute), "in 4 min"},
	} {
		if got := c.ago(tc.t); got != tc.want {
			t.Errorf("ago(%v) = %q, want %q", tc.t, got, tc.want)
		}
	}
	got := string(c.when(time.Date(2026, 11, 24, 13, 0, 0, 0, time.FixedZone("CET", 3600))))
	if !strings.Contains(got, ">2026-11-24 12:00:00 UTC</time>") || !strings.Contains(got, "just now") {
		t.Errorf("when: %s", got)
	}
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -1234: "-1,234"} {
		if got := formatInt(n); got != want {
			t.Errorf("formatInt(%d) = %q", n, got)
		}
	}
}

// Sessions live in the database: a session made on one replica opens pages
// on another, and signing out on either ends it everywhere.
func TestSessionSharedAcrossReplicas(t *testing.T) {
	e := newEnv(t)
	e2 := e.replica(t, testAdminToken)

	b1 := e.browser()
	b1.signIn()
	u1, _ := url.Parse(e.srv.URL)
	u2, _ := url.Parse(e2.srv.URL)
	b2 := e2.browser()
	b2.hc.Jar.SetCookies(u2, b1.hc.Jar.Cookies(u1))
	wantStatus(t, b2.get("/ui/tenants"), http.StatusOK)
	wantStatus(t, b2.post("/ui/logout", form(b2.csrf())), http.StatusSeeOther)
	wantStatus(t, b1.get("/ui/tenants"), http.StatusSeeOther)
}

// replica is another Console on e's database, running with adminToken.
func (e *env) replica(t *testing.T, adminToken string) *env {
	cfg := e.ui.cfg
	cfg.AdminToken = adminToken
	other, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(other)
	t.Cleanup(srv.Close)
	return &env{t: t, db: e.db, ui: other, srv: srv, clock: e.clock, tenants: e.tenants, apps: e.apps}
}

// TestSessionEndsWithTokenRotation: a session is bound to the admin token
// that opened it. A process running with a rotated token refuses it (and
// accepts its own), and RevokeSessions ends every session.
func TestSessionEndsWithTokenRotation(t *testing.T) {
	e := newEnv(t)
	const rotated = "rla_console_test_rotated_admin_token"
	b1 := e.browser()
	b1.signIn()
	csrf := b1.csrf()
	wantStatus(t, b1.get("/ui/tenants"), http.StatusOK)

	// The same cookie on a process with the rotated token: signed out,
	// and its forms are refused.
	e2 := e.replica(t, rotated)
	u1, _ := url.Parse(e.srv.URL)
	u2, _ := url.Parse(e2.srv.URL)
	old := e2.browser()
	old.hc.Jar.SetCookies(u2, b1.hc.Jar.Cookies(u1))
	r := old.get("/ui/gc")
	wantStatus(t, r, http.StatusSeeOther)
	if loc := r.Header.Get("Location"); !strings.HasPrefix(loc, "/ui/login") {
		t.Fatalf("old session on the rotated process: Location %q", loc)
	}
	wantStatus(t, old.post("/ui/tenants", form(csrf, "name", "mallory")), http.StatusForbidden)
	if n := e.count(`SELECT count(*) FROM cluster_users WHERE name = 'mallory'`); n != 0 {
		t.Fatal("the old session created a tenant")
	}
	// The old token does not sign in there; the new one does.
	if w := e2.signIn("192.0.2.7", testAdminToken); w.Code != http.StatusUnauthorized {
		t.Fatalf("old token on the rotated process: %d", w.Code)
	}
	b2 := e2.browser()
	b2.signInWith(rotated)
	wantStatus(t, b2.get("/ui/tenants"), http.StatusOK)

	// Revoke: every session ends, on every process.
	n, err := RevokeSessions(t.Context(), e.db)
	if err != nil || n != 2 {
		t.Fatalf("RevokeSessions: %d %v, want 2", n, err)
	}
	wantStatus(t, b1.get("/ui/tenants"), http.StatusSeeOther)
	wantStatus(t, b2.get("/ui/tenants"), http.StatusSeeOther)
}

// TestLeases: the Leases page lists every tenant's valid leases with their
// holder and fencing token, page by page; an expired lease is not listed.
func TestLeases(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	alice, _ := e.tenant("alice")
	bob, _ := e.tenant("bob")
	for _, l := range []struct {
		tenant, key, holder string
		token               int64
		valid               bool
	}{
		{alice.ID, "indexer/pds.a", "host-1:42", 7, true},
		{alice.ID, "repositories/site/branches/main", "ci", 3, true},
		{bob.ID, "cron/nightly", "host-2:9", 12, true},
		{bob.ID, "cron/expired", "gone", 1, false},
	} {
		expires := "clock_timestamp() + interval '1 hour'"
		if !l.valid {
			expires = "clock_timestamp() - interval '1 second'"
		}
		if _, err := e.db.ExecContext(ctx, `INSERT INTO leases (cluster_user_id, key, token, holder, ttl_ms, acquired_at, expires_at)
			VALUES ($1, $2, $3, $4, 15000, clock_timestamp(), `+expires+`)`, l.tenant, l.key, l.token, l.holder); err != nil {
			t.Fatal(err)
		}
	}
	b := e.browser()
	b.signIn()
	r := b.get("/ui/leases?page_size=2")
	wantStatus(t, r, http.StatusOK)
	wantContains(t, r, `<td>alice</td><td>indexer/pds.a</td><td>host-1:42</td><td>7</td>`, `<td>repositories/site/branches/main</td><td>ci</td><td>3</td>`)
	wantNotContains(t, r, "cron/nightly")
	r = b.get(nextLink(r))
	wantContains(t, r, `<td>bob</td><td>cron/nightly</td><td>host-2:9</td><td>12</td>`)
	wantNotContains(t, r, "cron/expired")
}

// TestEventStream: a signed-in operator's GET /ui/events streams every lock
// event as a "change" Server-Sent Event (with the strict CSP); signed out
// it redirects to the sign-in page; the overview and the ownership page
// point console.js at it.
func TestEventStream(t *testing.T) {
	e := newEnv(t)
	b := e.browser()
	if r := b.get("/ui/events"); r.Status != http.StatusSeeOther {
		t.Fatalf("signed out: %d", r.Status)
	}
	b.signIn()
	for _, page := range []string{"/ui/", "/ui/ownership"} {
		if r := b.get(page); !strings.Contains(r.Body, `data-events="/ui/events"`) || !strings.Contains(r.Body, "live (at each lock event)") {
			t.Fatalf("%s does not follow the events", page)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.srv.URL+"/ui/events", nil)
	resp, err := b.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" ||
		!strings.Contains(resp.Header.Get("Content-Security-Policy"), "script-src 'self'") {
		t.Fatalf("stream: %d %v", resp.StatusCode, resp.Header)
	}
	r := bufio.NewReader(resp.Body)
	if line, err := r.ReadString('\n'); err != nil || line != "retry: 2000\n" {
		t.Fatalf("first line %q %v", line, err)
	}
	u, _ := e.tenant("alice")
	e.mustApp(u.ID, "web", "https://github.com/acme/web")
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if rest, ok := strings.CutPrefix(line, "data: "); ok {
			if !strings.Contains(rest, `"kind":"acquired"`) || !strings.Contains(rest, `"normalized_url":"github.com/acme/web"`) {
				t.Fatalf("event %s", rest)
			}
			return
		}
	}
}

// TestTransferForm: the ownership page's transfer form (behind the CSRF
// check) refuses while the owner has references, naming them, and
// transfers with references deleted; the lock's open handover and a
// tenant's pending handovers are shown.
func TestTransferForm(t *testing.T) {
	e := newEnv(t)
	alice, _ := e.tenant("alice")
	bob, _ := e.tenant("bob")
	app := e.mustApp(alice.ID, "web", "https://github.com/org/repo")
	b := e.browser()
	csrf := b.signIn()
	r := b.get("/ui/ownership?url=github.com/org/repo")
	wantStatus(t, r, http.StatusOK)
	if !strings.Contains(r.Body, `action="/ui/locks/`+app.LockID+`/transfer"`) {
		t.Fatalf("no transfer form on the ownership page")
	}
	r = b.post("/ui/locks/"+app.LockID+"/transfer", form(csrf, "to", "bob"))
	if r.Status != http.StatusConflict || !strings.Contains(r.Body, "still used by alice") || !strings.Contains(r.Body, "application web") {
		t.Fatalf("refused transfer: %d %s", r.Status, r.Body)
	}
	r = b.post("/ui/locks/"+app.LockID+"/transfer", form(csrf, "to", "nobody"))
	wantStatus(t, r, http.StatusNotFound)
	r = b.post("/ui/locks/"+app.LockID+"/transfer", form(csrf, "to", "bob", "references", "delete"))
	if r.Status != http.StatusOK || !strings.Contains(r.Body, "Transferred github.com/org/repo from alice to bob (1 reference(s) deleted)") {
		t.Fatalf("transfer: %d %s", r.Status, r.Body)
	}
	if n := e.count(`SELECT count(*) FROM RepositoryLockOwner WHERE cluster_user_id = $1`, bob.ID); n != 1 {
		t.Fatalf("bob owns %d locks, want 1", n)
	}
	// An open handover shows on the lock and on both tenants' pages.
	if _, err := e.ui.cfg.Locks.OfferHandover(context.Background(), locks.OfferRequest{TenantID: bob.ID, LockID: app.LockID, To: "alice"}); err != nil {
		t.Fatal(err)
	}
	r = b.get("/ui/ownership?url=github.com/org/repo")
	if !strings.Contains(r.Body, `id="handover"`) || !strings.Contains(r.Body, "Offered to <strong>alice</strong> by bob") {
		t.Fatalf("no handover on the lock's page: %s", r.Body)
	}
	for _, tc := range []struct{ tenant, dir string }{{"alice", "received"}, {"bob", "offered"}} {
		r = b.get("/ui/ownership?tenant=" + tc.tenant)
		if !strings.Contains(r.Body, "Pending handovers of "+tc.tenant) || !strings.Contains(r.Body, "<td>"+tc.dir+"</td>") {
			t.Errorf("%s's page has no %s handover", tc.tenant, tc.dir)
		}
	}
}

// TestHomeRedirectsToConsole: / is the console's door (issue 30: it was a
// JSON 404), for GET and HEAD; the redirect is not permanent.
func TestHomeRedirectsToConsole(t *testing.T) {
	e := newEnv(t)
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		req, _ := http.NewRequest(method, e.srv.URL+"/", nil)
		r := e.browser().do(req)
		wantStatus(t, r, http.StatusFound)
		if got := r.Header.Get("Location"); got != "/ui/" {
			t.Errorf("%s /: Location %q, want /ui/", method, got)
		}
	}
	// Only / itself: other unknown paths stay 404.
	wantStatus(t, e.browser().get("/nothing-here"), http.StatusNotFound)
}
