package client_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"

	"github.com/repolock/repolock/client"
	"github.com/repolock/repolock/internal/contracttest"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/httpapi/httpapitest"
)

const adminToken = "rla_client_test_admin_token"

// The server the Examples run against (started in TestMain).
var (
	serverURL string
	// exampleTransport validates the Examples' traffic against the document.
	exampleTransport http.RoundTripper
)

// mainTB lets TestMain use the test helpers (dbtest, contracttest) that take
// a testing.TB: it implements the methods they call. A reported error fails
// the run after m.Run.
type mainTB struct {
	testing.TB
	cleanups []func()
	failed   atomic.Bool
}

func (m *mainTB) Helper()          {}
func (m *mainTB) Cleanup(f func()) { m.cleanups = append(m.cleanups, f) }
func (m *mainTB) Errorf(format string, args ...any) {
	m.failed.Store(true)
	fmt.Fprintf(os.Stderr, "TestMain: "+format+"\n", args...)
}
func (m *mainTB) Fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "TestMain: "+format+"\n", args...)
	os.Exit(1)
}
func (m *mainTB) Fatal(args ...any) {
	fmt.Fprintln(os.Stderr, append([]any{"TestMain:"}, args...)...)
	os.Exit(1)
}

func TestMain(m *testing.M) {
	tb := &mainTB{}
	srv := newServer(tb)
	ts := httptest.NewServer(srv)
	serverURL = ts.URL
	exampleTransport = contracttest.New(tb).Transport(tb, nil)
	code := m.Run()
	ts.Close()
	for i := len(tb.cleanups) - 1; i >= 0; i-- {
		tb.cleanups[i]()
	}
	if code == 0 && tb.failed.Load() {
		code = 1
	}
	os.Exit(code)
}

// newServer builds the real handler stack on a fresh database. It is the
// one place that knows how the server is constructed.
func newServer(tb testing.TB) http.Handler {
	return httpapitest.New(tb, dbtest.New(tb), adminToken)
}

// env is a server on its own database with clients whose traffic is
// validated against the document (a violation fails t).
type env struct {
	t     *testing.T
	url   string
	hc    *http.Client
	admin *client.Client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ts := httptest.NewServer(newServer(t))
	t.Cleanup(ts.Close)
	hc := &http.Client{Transport: contracttest.New(t).Transport(t, nil)}
	return &env{t: t, url: ts.URL, hc: hc, admin: client.New(ts.URL, client.WithToken(adminToken), client.WithHTTPClient(hc))}
}

// tenant creates a tenant and returns a client acting as it.
func (e *env) tenant(name string) *client.Client {
	e.t.Helper()
	u, err := e.admin.CreateUser(e.t.Context(), client.CreateUserRequest{Name: name})
	if err != nil {
		e.t.Fatalf("create tenant %s: %v", name, err)
	}
	return client.New(e.url, client.WithToken(u.Token), client.WithHTTPClient(e.hc))
}
