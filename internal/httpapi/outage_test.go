package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/repolock/repolock/internal/contracttest"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/httpapi"
	"github.com/repolock/repolock/internal/httpapi/httpapitest"
	"github.com/repolock/repolock/internal/tenants"
)

// outageEnv is a server whose pool reaches Postgres through a fault
// injecting proxy.
type outageEnv struct {
	*apiEnv
	proxy *dbtest.Proxy
	token string
}

func newOutageEnv(t *testing.T, adjust func(*httpapi.Config)) *outageEnv {
	t.Helper()
	direct, url := dbtest.NewWithURL(t)
	p, purl := dbtest.NewProxy(t, url)
	db, err := database.Open(t.Context(), purl, database.PoolConfig{MaxOpenConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	_, token, err := tenants.New(direct, nil).Create(context.Background(), "outage", "")
	if err != nil {
		t.Fatal(err)
	}
	cfg := httpapitest.Config(t, db, nil, adminToken)
	if adjust != nil {
		adjust(&cfg)
	}
	srv, err := httpapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return &outageEnv{apiEnv: &apiEnv{t: t, ts: ts, db: db, contract: contracttest.New(t)}, proxy: p, token: token}
}

// want503 checks the one shape of an outage: 503, code unavailable,
// Retry-After.
func (e *outageEnv) want503(method, path, token, body string) string {
	e.t.Helper()
	var b []byte
	var hdr http.Header
	if body != "" {
		b = []byte(body)
		hdr = http.Header{"Content-Type": {"application/json"}}
	}
	status, h, out := e.send(method, path, token, hdr, b)
	var resp struct {
		Error struct{ Code, Message string }
	}
	if status != http.StatusServiceUnavailable || json.Unmarshal(out, &resp) != nil || resp.Error.Code != "unavailable" || h.Get("Retry-After") != "1" {
		e.t.Fatalf("%s %s: %d %s Retry-After %q; want 503 unavailable with Retry-After 1", method, path, status, out, h.Get("Retry-After"))
	}
	return resp.Error.Message
}

// TestDatabaseOutageIs503: with the database refusing connections, every
// kind of route (tenant, admin, readiness, writes) answers 503 with
// Retry-After, never 500; the first request after it is back succeeds.
func TestDatabaseOutageIs503(t *testing.T) {
	t.Parallel()
	e := newOutageEnv(t, nil)
	if status, _, out := e.send(http.MethodGet, "/v1/me", e.token, nil, nil); status != http.StatusOK {
		t.Fatalf("before the outage: %d %s", status, out)
	}
	e.proxy.Refuse()
	for _, r := range []struct{ method, path, token, body string }{
		{http.MethodGet, "/v1/me", e.token, ""},
		{http.MethodPost, "/v1/locks/acquire", e.token, `{"repo_url":"https://github.com/acme/outage"}`},
		{http.MethodPost, "/v1/applications", e.token, `{"name":"a","repo_url":"https://github.com/acme/app"}`},
		{http.MethodGet, "/v1/applications", e.token, ""},
		{http.MethodGet, "/v1/admin/users", adminToken, ""},
		{http.MethodPost, "/v1/admin/users", adminToken, `{"name":"new"}`},
		{http.MethodGet, "/readyz", "", ""},
	} {
		msg := e.want503(r.method, r.path, r.token, r.body)
		if r.path != "/readyz" && msg != "the database is unavailable; try again" {
			t.Errorf("%s %s: message %q", r.method, r.path, msg)
		}
	}
	if status, _, _ := e.send(http.MethodGet, "/healthz", "", nil, nil); status != http.StatusOK {
		t.Fatalf("healthz during the outage: %d", status)
	}
	e.proxy.Restore()
	if status, _, out := e.send(http.MethodPost, "/v1/locks/acquire", e.token, http.Header{"Content-Type": {"application/json"}},
		[]byte(`{"repo_url":"https://github.com/acme/outage"}`)); status != http.StatusOK {
		t.Fatalf("first request after the outage: %d %s", status, out)
	}
}

// TestResetConnectionsFirstRequestSucceeds: every pooled connection is
// reset while idle (a database restart); the next request of each kind
// succeeds.
func TestResetConnectionsFirstRequestSucceeds(t *testing.T) {
	t.Parallel()
	e := newOutageEnv(t, nil)
	for i := range 3 {
		e.proxy.Reset()
		status, _, out := e.send(http.MethodPost, "/v1/locks/acquire", e.token, http.Header{"Content-Type": {"application/json"}},
			[]byte(`{"repo_url":"https://github.com/acme/reset`+string(rune('a'+i))+`"}`))
		if status != http.StatusOK {
			t.Fatalf("round %d: acquire after a reset: %d %s", i, status, out)
		}
		e.proxy.Reset()
		if status, _, out := e.send(http.MethodGet, "/v1/admin/users", adminToken, nil, nil); status != http.StatusOK {
			t.Fatalf("round %d: list after a reset: %d %s", i, status, out)
		}
	}
}

// TestNotReady: until Config.Ready says so, API routes answer 503 with
// Retry-After; the probes, metrics and the document answer.
func TestNotReady(t *testing.T) {
	t.Parallel()
	var ready atomic.Bool
	e := newOutageEnv(t, func(cfg *httpapi.Config) {
		cfg.Ready = func() error {
			if !ready.Load() {
				return errors.New("waiting for the database")
			}
			return nil
		}
	})
	msg := e.want503(http.MethodGet, "/v1/me", e.token, "")
	if msg != "the service is starting: waiting for the database; try again" {
		t.Errorf("message %q", msg)
	}
	e.want503(http.MethodPost, "/v1/admin/users", adminToken, `{"name":"x"}`)
	if msg := e.want503(http.MethodGet, "/readyz", "", ""); !strings.Contains(msg, "waiting for the database") {
		t.Errorf("readyz message %q", msg)
	}
	for _, p := range []string{"/healthz", "/metrics", "/openapi.json"} {
		if status, _, _ := e.send(http.MethodGet, p, "", nil, nil); status != http.StatusOK {
			t.Errorf("%s while not ready: %d", p, status)
		}
	}
	ready.Store(true)
	for _, p := range []string{"/v1/me", "/readyz"} {
		if status, _, out := e.send(http.MethodGet, p, e.token, nil, nil); status != http.StatusOK {
			t.Errorf("%s when ready: %d %s", p, status, out)
		}
	}
}
