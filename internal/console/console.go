// Package console is the operator console served by `api serve` under /ui/:
// server-rendered pages (html/template, embedded with the static assets)
// that answer who owns a repository, why a tenant was refused, whether the
// GC ran and which mirrors need a re-index, and let an operator manage
// tenants and run the GC.
//
// Operators sign in with the admin token; a session lives in the
// console_sessions table (so every replica knows it), its cookie is
// HttpOnly, SameSite=Strict and Secure over TLS, and every state-changing
// form carries the session's CSRF token. Pages work without JavaScript; a
// small external script adds table filtering and live refresh. Every
// response carries a Content-Security-Policy without inline scripts.
//
// All domain calls and reads go through data.go.
package console

import (
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/apps"
	"github.com/repolock/repolock/internal/authguard"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/gc"
	"github.com/repolock/repolock/internal/locks"
	"github.com/repolock/repolock/internal/syncstate"
	"github.com/repolock/repolock/internal/tenants"
	"github.com/repolock/repolock/internal/watch"
)

// Prefix is where the console is mounted.
const Prefix = "/ui"

// DefaultSessionTTL is how long a sign-in lasts.
const DefaultSessionTTL = 12 * time.Hour

// Config configures the console.
type Config struct {
	DB     *database.DB
	Logger *slog.Logger
	// AdminToken is the token operators sign in with. Required. A session
	// is bound to the token that opened it: once the process runs with
	// another token, the sessions opened with the old one are refused.
	AdminToken string
	// AuthGuard throttles failed sign-ins per client address and globally
	// (internal/authguard); cmd/api shares one with the HTTP API, so an
	// address has one budget on both. Required.
	AuthGuard *authguard.Guard
	// TrustForwardedFor counts sign-in failures against the address a
	// trusted proxy appended to X-Forwarded-For (authguard.ClientAddr).
	TrustForwardedFor bool
	// Collector runs the GC for "dry run now" and "run now": the process's
	// one collector (cmd/api wires the same one into the API and the loop,
	// so console runs show in the GC metrics). Required.
	Collector *gc.Collector
	// Sync is the sync-state store the Sync page reads. Required.
	Sync *syncstate.Store
	// Tenants, Locks and Apps are the services the console acts through,
	// the same ones the HTTP API serves (the console keys URLs under
	// Locks.Rules(), as the API does). Required.
	Tenants *tenants.Service
	Locks   *locks.Service
	Apps    *apps.Service
	// ReportsDB, when set, is a read replica (REPORTS_DATABASE_URL) the
	// read-only statistics read from: the dashboard's counts and charts and
	// the lock event log (and its CSV). Everything an operator acts on
	// (tenants, owners, GC runs) reads DB. Optional; nil means DB.
	ReportsDB *database.DB
	// SessionTTL is the server-side lifetime of a session (default 12 h).
	SessionTTL time.Duration
	// TrustForwardedProto treats "X-Forwarded-Proto: https" as TLS (Secure,
	// __Host- cookies and HSTS) for deployments behind a TLS-terminating
	// proxy (serve: TRUST_FORWARDED_PROTO). Only enable it when the proxy
	// always sets the header.
	TrustForwardedProto bool
	// Now is the clock (default time.Now); tests inject one.
	Now func() time.Time
	// PageSize is the default number of rows per list page (default 50).
	PageSize int
	// Watch, when set, serves GET /ui/events: the lock events as
	// Server-Sent Events (the admin's view), which the overview and the
	// ownership pages follow while "live" is ticked. Optional; nil: the
	// overview refreshes on its timer and the ownership page is not live.
	Watch *watch.Service
}

// Console is the console's http.Handler.
type Console struct {
	cfg Config
	// tokenKey is the key sessions are bound to the admin token with
	// (bindingOf).
	tokenKey []byte
	data     *data
	mux      *http.ServeMux
	// patterns are the mux's patterns but the catch-all (Routes).
	patterns []string
	pages    map[string]*template.Template
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// New builds the console.
func New(cfg Config) (*Console, error) {
	if cfg.DB == nil {
		return nil, errors.New("console: Config.DB is required")
	}
	if cfg.AdminToken == "" {
		return nil, errors.New("console: Config.AdminToken is required")
	}
	if cfg.AuthGuard == nil {
		return nil, errors.New("console: Config.AuthGuard is required")
	}
	if cfg.Collector == nil || cfg.Sync == nil || cfg.Tenants == nil || cfg.Locks == nil || cfg.Apps == nil {
		return nil, errors.New("console: Config.Collector, Config.Sync, Config.Tenants, Config.Locks and Config.Apps are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.PageSize <= 0 {
		cfg.PageSize = 50
	}
	c := &Console{cfg: cfg, data: newData(cfg), mux: http.NewServeMux(), tokenKey: tokenKey(cfg.AdminToken)}
	if err := c.parseTemplates(); err != nil {
		return nil, err
	}
	c.routes()
	return c, nil
}

// Mount serves the console on e under /ui and /ui/, and makes it the
// server's home page: GET / redirects (302) to /ui/, so a newcomer who
// opens the address `make run` printed finds the console, not a JSON 404.
func (c *Console) Mount(e *echo.Echo) {
	h := echo.WrapHandler(c)
	e.Any(Prefix, h)
	e.Any(Prefix+"/*", h)
	home := func(ec echo.Context) error { return ec.Redirect(http.StatusFound, Prefix+"/") }
	e.GET("/", home)
	e.HEAD("/", home)
}

func (c *Console) now() time.Time { return c.cfg.Now().UTC() }

func (c *Console) routes() {
	static, _ := fs.Sub(staticFS, "static")
	c.handle("GET /ui/static/", http.StripPrefix("/ui/static/", staticHandler(static)))
	c.handleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusMovedPermanently)
	})
	c.handleFunc("GET /ui/login", c.loginForm)
	c.handleFunc("POST /ui/login", c.login)
	c.handleFunc("POST /ui/logout", c.auth(c.logout))
	c.handleFunc("GET /ui/{$}", c.auth(c.overview))
	if c.cfg.Watch != nil {
		c.handleFunc("GET /ui/events", c.auth(c.events))
	}
	c.handleFunc("GET /ui/ownership", c.auth(c.ownership))
	c.handleFunc("POST /ui/locks/{id}/transfer", c.auth(c.transferLock))
	c.handleFunc("GET /ui/denials", c.auth(c.denials))
	c.handleFunc("GET /ui/denials.csv", c.auth(c.denialsCSV))
	c.handleFunc("GET /ui/gc", c.auth(c.gcPage))
	c.handleFunc("POST /ui/gc/dry-run", c.auth(c.gcDryRun))
	c.handleFunc("POST /ui/gc/run", c.auth(c.gcRun))
	c.handleFunc("GET /ui/sync", c.auth(c.syncPage))
	c.handleFunc("GET /ui/sync/{tenant}/{host}", c.auth(c.syncHost))
	c.handleFunc("GET /ui/leases", c.auth(c.leasesPage))
	c.handleFunc("GET /ui/reservations", c.auth(c.reservationsPage))
	c.handleFunc("POST /ui/reservations", c.auth(c.addReservation))
	c.handleFunc("POST /ui/reservations/{id}/delete", c.auth(c.removeReservation))
	c.handleFunc("POST /ui/handovers/{id}/withdraw", c.auth(c.withdrawHandover))
	c.handleFunc("GET /ui/tenants", c.auth(c.tenantsPage))
	c.handleFunc("POST /ui/tenants", c.auth(c.createTenant))
	c.handleFunc("GET /ui/tenants/{name}/revoke", c.auth(c.confirmRevoke))
	c.handleFunc("POST /ui/tenants/{name}/revoke", c.auth(c.revokeTokens))
	c.handleFunc("GET /ui/tenants/{name}/delete", c.auth(c.confirmDelete))
	c.handleFunc("POST /ui/tenants/{name}/delete", c.auth(c.deleteTenant))
	c.mux.HandleFunc("/ui/", func(w http.ResponseWriter, r *http.Request) {
		if allow := c.allowedMethods(r); len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			c.errorPage(w, r, nil, http.StatusMethodNotAllowed,
				"This page does not accept "+r.Method+"; it accepts "+strings.Join(allow, " and ")+".")
			return
		}
		c.errorPage(w, r, nil, http.StatusNotFound, "There is no such page.")
	})
}

// handle registers pattern on the mux and records it for Routes.
func (c *Console) handle(pattern string, h http.Handler) {
	c.mux.Handle(pattern, h)
	c.patterns = append(c.patterns, pattern)
}

func (c *Console) handleFunc(pattern string, h http.HandlerFunc) { c.handle(pattern, h) }

// Routes returns the patterns the console serves, in net/http.ServeMux
// syntax ("GET /ui/tenants/{name}/delete"; a pattern ending in "/" serves
// the paths under it), all but the catch-all that answers 404 and 405. The
// hostile-input tests enumerate them, so a new page is covered at once.
func (c *Console) Routes() []string { return append([]string(nil), c.patterns...) }

// allowedMethods returns the methods the console serves r's path with,
// when r's own method is not one of them (the catch-all /ui/ pattern then
// matched r): a GET on a form's POST route answers 405 with Allow, not 404.
// Only the pattern is looked up; nothing runs.
func (c *Console) allowedMethods(r *http.Request) []string {
	var allow []string
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		if method == r.Method {
			continue
		}
		probe := r.Clone(r.Context())
		probe.Method = method
		if _, pattern := c.mux.Handler(probe); pattern != "" && pattern != "/ui/" {
			allow = append(allow, method)
		}
	}
	if len(allow) > 0 && allow[0] == http.MethodGet {
		// A GET pattern serves HEAD too.
		allow = append([]string{http.MethodGet, http.MethodHead}, allow[1:]...)
	}
	return allow
}

// contentSecurityPolicy allows only the console's own scripts, styles and
// forms, no framing and no plugins. Charts are inline SVG elements, not
// images, and use presentation attributes, not style attributes.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// ServeHTTP sets the security headers on every response and dispatches.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Permissions-Policy", "camera=(), microphone=(), geolocation=()")
	if c.isTLS(r) {
		h.Set("Strict-Transport-Security", "max-age=31536000")
	}
	if !strings.HasPrefix(r.URL.Path, "/ui/static/") {
		h.Set("Cache-Control", "no-store")
	}
	if msg := checkAddress(r); msg != "" {
		c.errorPage(w, r, nil, http.StatusBadRequest, msg)
		return
	}
	c.mux.ServeHTTP(w, r)
}

// checkAddress returns why r's path or query is not text
// (repolock.ValidateText: invalid UTF-8, NUL, control characters), or "".
// Every path value and query parameter of every page passes it before any
// handler runs, so none reaches a statement.
func checkAddress(r *http.Request) string {
	if err := repolock.ValidateText("The address", r.URL.Path, repolock.SingleLine); err != nil {
		return repolock.ErrorMessage(err) + "."
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return "The address's query is not validly escaped."
	}
	for name, vs := range q {
		if err := repolock.ValidateText("A query parameter name", name, repolock.SingleLine); err != nil {
			return repolock.ErrorMessage(err) + "."
		}
		for _, v := range vs {
			if err := repolock.ValidateText("The query parameter "+name, v, repolock.SingleLine); err != nil {
				return repolock.ErrorMessage(err) + "."
			}
		}
	}
	return ""
}

// checkForm is checkAddress for the fields of a posted form.
func checkForm(r *http.Request) string {
	if err := r.ParseForm(); err != nil {
		return "The form is not validly encoded."
	}
	for name, vs := range r.PostForm {
		for _, v := range vs {
			if err := repolock.ValidateText("The field "+name, v, repolock.SingleLine); err != nil {
				return repolock.ErrorMessage(err) + "."
			}
		}
	}
	return ""
}

// staticHandler serves the embedded assets; they change only with the
// binary, so a short cache is safe.
func staticHandler(fsys fs.FS) http.Handler {
	fileServer := http.FileServerFS(fsys)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "" || strings.HasSuffix(r.URL.Path, "/") {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Cache-Control", "public, max-age=300")
		fileServer.ServeHTTP(w, r)
	})
}

// handlerFunc is a page handler of a signed-in operator.
type handlerFunc func(w http.ResponseWriter, r *http.Request, s *session)

// auth lets signed-in operators through. Others are sent to the sign-in
// page (GET) or refused (POST: 403, the form cannot be replayed after
// signing in). POSTs must carry the session's CSRF token.
func (c *Console) auth(next handlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, err := c.sessionOf(r)
		if err != nil {
			c.errorPage(w, r, nil, http.StatusServiceUnavailable, "The database is not reachable.")
			c.cfg.Logger.ErrorContext(r.Context(), "console: session lookup", "error", err.Error())
			return
		}
		if s == nil {
			if r.Method == http.MethodGet {
				http.Redirect(w, r, "/ui/login?next="+urlQueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			c.errorPage(w, r, nil, http.StatusForbidden, "Your session has expired. Sign in again.")
			return
		}
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
			if !checkCSRF(r, s) {
				c.errorPage(w, r, s, http.StatusForbidden, "The form's CSRF token is missing or wrong. Reload the page and try again.")
				return
			}
			if msg := checkForm(r); msg != "" {
				c.errorPage(w, r, s, http.StatusBadRequest, msg)
				return
			}
		}
		next(w, r, s)
	}
}
