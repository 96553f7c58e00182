package httpapi_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/repolock/repolock/internal/contracttest"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/httpapi"
	"github.com/repolock/repolock/internal/httpapi/httpapitest"
)

const adminToken = "rla_test_admin_token"

// apiEnv is the real handler stack (httpapi.New) served by httptest on a
// fresh, fully migrated database, with the database at hand for seeding and
// checking rows. Every test of the package uses it.
type apiEnv struct {
	t  testing.TB
	ts *httptest.Server
	db *database.DB
	// logs holds the server's JSON logs (debug level and up) when the env
	// was made withLogs; it is nil otherwise.
	logs *logBuffer
	// registry is the server's metrics registry.
	registry *prometheus.Registry

	addRoutes []func(*httpapi.Server)
	// contract validates every exchange of send against api/openapi.yaml
	// (test-only routes, under testRoutesPrefix, only for the error shape).
	contract *contracttest.Validator
}

// testRoutesPrefix is where withRoutes' routes live: the document does not
// have them, so the validator checks only their error bodies.
const testRoutesPrefix = "/v1/admin/test/"

// envOption adjusts the server's Config (and the env) before httpapi.New.
type envOption func(*apiEnv, *httpapi.Config)

// withRequestTimeout sets Config.RequestTimeout.
func withRequestTimeout(d time.Duration) envOption {
	return func(_ *apiEnv, cfg *httpapi.Config) { cfg.RequestTimeout = d }
}

// withEventStreams sets the event streams' heartbeat and write timeout.
func withEventStreams(heartbeat, writeTimeout time.Duration) envOption {
	return func(_ *apiEnv, cfg *httpapi.Config) {
		cfg.EventsHeartbeat, cfg.EventsWriteTimeout = heartbeat, writeTimeout
	}
}

// withRoutes adds test-only routes to the built server before it serves.
// They must live under testRoutesPrefix.
func withRoutes(add func(*httpapi.Server)) envOption {
	return func(e *apiEnv, _ *httpapi.Config) { e.addRoutes = append(e.addRoutes, add) }
}

// withLogs captures the server's logs in e.logs.
func withLogs() envOption {
	return func(e *apiEnv, cfg *httpapi.Config) {
		e.logs = &logBuffer{}
		cfg.Logger = slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
}

func newAPIEnv(t testing.TB, opts ...envOption) *apiEnv {
	t.Helper()
	// dbtest pools are already capped (dbtest.PoolSize): max_connections is
	// shared by every test process, so do not raise them here.
	db := dbtest.New(t)
	e := &apiEnv{t: t, db: db, contract: contracttest.New(t).WithUndocumented(testRoutesPrefix)}
	cfg := httpapi.Config{
		DB:         db,
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		AdminToken: adminToken,
		RateLimit:  httpapi.DefaultRateLimit, // serve's default
	}
	for _, opt := range opts {
		opt(e, &cfg)
	}
	// The services, wired as cmd/api serve wires them (httpapitest), on a
	// registry of the test's own and with the logger the options chose.
	svc := httpapitest.Config(t, db, cfg.Logger, adminToken)
	cfg.Registry, cfg.GC, cfg.Repositories, cfg.Sync, cfg.Leases = svc.Registry, svc.GC, svc.Repositories, svc.Sync, svc.Leases
	if cfg.AuthGuard == nil {
		cfg.AuthGuard = svc.AuthGuard
	}
	if cfg.Tenants == nil {
		cfg.Tenants = svc.Tenants
	}
	cfg.Locks, cfg.Apps, cfg.Rekey, cfg.Aliases, cfg.Reports = svc.Locks, svc.Apps, svc.Rekey, svc.Aliases, svc.Reports
	cfg.Watch = svc.Watch
	e.registry = cfg.Registry
	srv, err := httpapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, add := range e.addRoutes {
		add(srv)
	}
	e.ts = httptest.NewServer(srv)
	t.Cleanup(e.ts.Close)
	return e
}

// on is the env reporting to t, a subtest of the env's test.
func (e *apiEnv) on(t *testing.T) *apiEnv {
	c := *e
	c.t = t
	return &c
}

// logBuffer is a bytes.Buffer safe to write from the server's goroutines
// while the test reads it.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// send sends body (already encoded; nil for none) with the token (when not
// empty) and the extra headers, and returns the status, the headers and the
// raw response.
func (e *apiEnv) send(method, path, token string, hdr http.Header, body []byte) (int, http.Header, []byte) {
	e.t.Helper()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, e.ts.URL+path, r)
	if err != nil {
		e.t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	// Every exchange is validated against the document; a violation fails
	// the (sub)test that sent it.
	hc := &http.Client{Transport: e.contract.Transport(e.t, e.ts.Client().Transport)}
	res, err := hc.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return res.StatusCode, res.Header, out
}

// raw sends body (already encoded; nil for none) with the content type (when
// not empty) and returns the status, the headers and the raw response.
func (e *apiEnv) raw(method, path, token, contentType string, body []byte) (int, http.Header, []byte) {
	e.t.Helper()
	var hdr http.Header
	if contentType != "" {
		hdr = http.Header{"Content-Type": {contentType}}
	}
	return e.send(method, path, token, hdr, body)
}

// object decodes a response that must be a JSON object; an empty response is
// nil.
func (e *apiEnv) object(method, path string, status int, out []byte) map[string]any {
	e.t.Helper()
	if len(out) == 0 {
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		e.t.Fatalf("%s %s: %d %q is not a JSON object", method, path, status, out)
	}
	return m
}

// callRaw sends body as is with the content type and decodes the JSON
// object answered (nil for an empty response).
func (e *apiEnv) callRaw(method, path, token, contentType string, body []byte) (int, map[string]any) {
	e.t.Helper()
	status, _, out := e.raw(method, path, token, contentType, body)
	return status, e.object(method, path, status, out)
}

// call sends body as JSON (nil for none) and decodes the JSON object
// answered (nil for an empty response).
func (e *apiEnv) call(method, path, token string, body any) (int, map[string]any) {
	e.t.Helper()
	if body == nil {
		return e.callRaw(method, path, token, "", nil)
	}
	return e.callRaw(method, path, token, "application/json", mustJSON(e.t, body))
}

// must calls and fails unless the status is want.
func (e *apiEnv) must(want int, method, path, token string, body any) map[string]any {
	e.t.Helper()
	status, resp := e.call(method, path, token, body)
	if status != want {
		e.t.Fatalf("%s %s: status %d, want %d: %v", method, path, status, want, resp)
	}
	return resp
}

// wantErr calls and checks the status and the error code, and that the
// error has a message.
func (e *apiEnv) wantErr(status int, code, method, path, token string, body any) {
	e.t.Helper()
	st, resp := e.call(method, path, token, body)
	expectError(e.t, method+" "+path, st, resp, status, code, "")
	if msg, _ := errorOf(resp)["message"].(string); msg == "" {
		e.t.Fatalf("%s %s: error without a message: %v", method, path, resp)
	}
}

// newTenant creates a tenant through the admin API and returns its id and
// token.
func (e *apiEnv) newTenant(name string) (id, token string) {
	e.t.Helper()
	resp := e.must(http.StatusCreated, http.MethodPost, "/v1/admin/users", adminToken, map[string]any{"name": name})
	return resp["id"].(string), resp["token"].(string)
}

// tenant creates a tenant through the admin API and returns its token.
func (e *apiEnv) tenant(name string) string {
	e.t.Helper()
	_, token := e.newTenant(name)
	return token
}

// exec runs a statement on the server's database.
func (e *apiEnv) exec(query string, args ...any) {
	e.t.Helper()
	if _, err := e.db.ExecContext(e.t.Context(), query, args...); err != nil {
		e.t.Fatalf("%s: %v", query, err)
	}
}

// errorOf is the "error" object of an error response (nil if there is none).
func errorOf(resp map[string]any) map[string]any {
	e, _ := resp["error"].(map[string]any)
	return e
}

// expectError checks status, code and (when msg is not empty) the exact
// message.
func expectError(t testing.TB, what string, status int, resp map[string]any, wantStatus int, wantCode, wantMsg string) {
	t.Helper()
	e := errorOf(resp)
	if status != wantStatus || e["code"] != wantCode || (wantMsg != "" && e["message"] != wantMsg) {
		t.Fatalf("%s: got %d %v, want %d %s %q", what, status, resp, wantStatus, wantCode, wantMsg)
	}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
