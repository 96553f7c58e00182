// Package tests holds end-to-end tests: they build the real binary, start
// `repolock serve` on a free port against a fresh database, and talk to it over
// HTTP, exactly as an operator or a client would.
package tests

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/repolock/repolock/client"
	"github.com/repolock/repolock/internal/contracttest"
	"github.com/repolock/repolock/internal/dbtest"
)

// binPath is the api binary built once by TestMain.
var binPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "repolock-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "api")
	build := exec.Command("go", "build", "-o", binPath, "../cmd/api")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building the api binary failed:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// server is a running `repolock serve` process.
type server struct {
	URL         string // http://127.0.0.1:PORT
	AdminToken  string
	DatabaseURL string
	Bin         string

	cmd    *exec.Cmd
	logs   *syncBuffer
	exited chan struct{}
	err    error // Wait's result, valid after exited is closed
}

// serverOptions tweak startServer.
type serverOptions struct {
	// DatabaseURL, when set, is used instead of a fresh empty database.
	DatabaseURL string
	Env         []string
	Args        []string
	// NoWaitReady returns as soon as the server listens, without waiting
	// for it to log "ready" (database reached, migrations applied).
	NoWaitReady bool
}

// startServer starts `repolock serve` on a free port against a fresh, empty
// database (the server migrates it on start) and stops it when t ends,
// failing the test if it does not exit cleanly on SIGTERM.
func startServer(t *testing.T) *server {
	t.Helper()
	return startServerWith(t, serverOptions{})
}

func startServerWith(t testing.TB, opts serverOptions) *server {
	t.Helper()
	dbURL := opts.DatabaseURL
	if dbURL == "" {
		dbURL = dbtest.NewDatabase(t, false)
	}
	s := &server{
		AdminToken:  "rla_" + randomHex(16),
		DatabaseURL: dbURL,
		Bin:         binPath,
		logs:        &syncBuffer{},
		exited:      make(chan struct{}),
	}
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--log-format", "json", "--log-level", "debug"}, opts.Args...)
	s.cmd = exec.Command(binPath, args...)
	s.cmd.Env = append(cleanEnv(), "DATABASE_URL="+dbURL, "ADMIN_TOKEN="+s.AdminToken)
	s.cmd.Env = append(s.cmd.Env, opts.Env...)
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	s.cmd.Stdout = s.logs
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start repolock serve: %v", err)
	}
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			s.logs.WriteLine(line)
			if !sent {
				var rec struct {
					Msg  string `json:"msg"`
					Addr string `json:"addr"`
				}
				if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "listening" {
					addrc <- rec.Addr
					sent = true
				}
			}
		}
	}()
	go func() {
		s.err = s.cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(func() {
		s.stop(t)
		if t.Failed() {
			t.Logf("server logs:\n%s", s.logs.String())
		}
	})
	select {
	case addr := <-addrc:
		s.URL = "http://" + addr
		if !opts.NoWaitReady {
			s.waitForLog(t, "ready", func(rec map[string]any) bool { return rec["msg"] == "ready" })
		}
	case <-s.exited:
		t.Fatalf("repolock serve exited before listening: %v\n%s", s.err, s.logs.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("repolock serve did not start listening within 60s\n%s", s.logs.String())
	}
	return s
}

// stop sends SIGTERM and waits for a clean exit.
func (s *server) stop(t testing.TB) {
	t.Helper()
	select {
	case <-s.exited:
	default:
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(30 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.exited
			t.Errorf("repolock serve did not exit within 30s of SIGTERM")
			return
		}
	}
	if s.err != nil {
		t.Errorf("repolock serve exited with %v", s.err)
	}
}

// createTenant creates a tenant over the admin API (with the public client)
// and returns its token.
func (s *server) createTenant(t testing.TB, name string) string {
	t.Helper()
	u, err := s.admin(t).CreateUser(t.Context(), client.CreateUserRequest{Name: name})
	if err != nil {
		t.Fatalf("create tenant %s: %v", name, err)
	}
	if u.Token == "" || u.Name != name {
		t.Fatalf("create tenant %s: got %+v", name, u)
	}
	return u.Token
}

// client is the public Go client acting with token (empty for none); its
// traffic is validated against api/openapi.yaml (a violation fails t).
// Tests use it for every call it has; raw HTTP (do, doRaw) is for tests of
// raw HTTP behaviour.
func (s *server) client(t testing.TB, token string) *client.Client {
	// No retries: the tests assert the status of every single answer.
	return client.New(s.URL, client.WithToken(token), client.WithHTTPClient(s.httpClient(t)), client.WithRetryPolicy(client.RetryPolicy{MaxAttempts: 1}))
}

// admin is the public client with the admin token.
func (s *server) admin(t testing.TB) *client.Client { return s.client(t, s.AdminToken) }

// tenant creates a tenant and returns the public client acting as it.
func (s *server) tenant(t *testing.T, name string) *client.Client {
	t.Helper()
	return s.client(t, s.createTenant(t, name))
}

// do sends a JSON request (body nil for none) with a bearer token (empty for
// none) and decodes a JSON object response (nil for an empty body).
func (s *server) do(t testing.TB, method, path, token string, body any) (int, map[string]any) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	hdr := http.Header{}
	if body != nil {
		hdr.Set("Content-Type", "application/json")
	}
	status, _, raw := s.doRaw(t, method, path, token, hdr, r)
	if len(bytes.TrimSpace(raw)) == 0 {
		return status, nil
	}
	var resp map[string]any
	if err := json.Unmarshal(raw, &resp); err != nil {
		t.Fatalf("%s %s: status %d: response is not a JSON object: %q", method, path, status, raw)
	}
	return status, resp
}

// doRaw sends a request with the given headers and returns status, headers
// and body.
func (s *server) doRaw(t testing.TB, method, path, token string, hdr http.Header, body io.Reader) (int, http.Header, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, s.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range hdr {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	// Every exchange is validated against the document (a violation fails t).
	res, err := s.httpClient(t).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return res.StatusCode, res.Header, raw
}

// httpClient is an HTTP client whose exchanges are validated against
// api/openapi.yaml; a violation fails t. Requests time out after a minute.
func (s *server) httpClient(t testing.TB) *http.Client {
	return &http.Client{Transport: contracttest.New(t).Transport(t, nil), Timeout: time.Minute}
}

// runCLI runs the api binary with args and the database URL in the
// environment, returning stdout, stderr and the exit code.
func runCLI(t *testing.T, dbURL string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	cmd.Env = append(cleanEnv(), "DATABASE_URL="+dbURL, "LOG_FORMAT=text")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code = 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("run api %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return out.String(), errb.String(), code
}

// wantAPIError fails t unless err is the *client.Error of an answer with
// the status and code whose message contains msg; it returns the error.
func wantAPIError(t *testing.T, what string, err error, status int, code client.Code, msg string) *client.Error {
	t.Helper()
	var ce *client.Error
	if !errors.As(err, &ce) || ce.StatusCode != status || ce.Code != code || !strings.Contains(ce.Message, msg) {
		t.Fatalf("%s: got %v, want %d %s containing %q", what, err, status, code, msg)
	}
	return ce
}

// errorCode returns resp["error"]["code"].
func errorCode(resp map[string]any) string {
	e, _ := resp["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

// errorMessage returns resp["error"]["message"].
func errorMessage(resp map[string]any) string {
	e, _ := resp["error"].(map[string]any)
	m, _ := e["message"].(string)
	return m
}

// cleanEnv is the environment without variables that would change the
// binary's behaviour under test.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case k == "DATABASE_URL", k == "MIGRATE_DATABASE_URL", k == "REPORTS_DATABASE_URL", k == "DB_PREPARED_STATEMENTS", k == "ADMIN_TOKEN", k == "LISTEN_ADDR", k == "MIGRATE_ON_START",
			k == "LOG_LEVEL", k == "LOG_FORMAT", k == "REQUEST_TIMEOUT", k == "SHUTDOWN_TIMEOUT", k == "DEBUG_LISTEN_ADDR",
			k == "GOGC", k == "GOMEMLIMIT",
			strings.HasPrefix(k, "GC_"):
			continue
		}
		env = append(env, kv)
	}
	return env
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// syncBuffer collects a process's output safely across goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	// changed is closed (and forgotten) at the next write: waitForLog's
	// wake-up.
	changed chan struct{}
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.notifyLocked()
	return b.buf.Write(p)
}

func (b *syncBuffer) WriteLine(line string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.notifyLocked()
	b.buf.WriteString(line)
	b.buf.WriteByte('\n')
}

func (b *syncBuffer) notifyLocked() {
	if b.changed != nil {
		close(b.changed)
		b.changed = nil
	}
}

// snapshot returns the output so far and a channel closed at the next write.
func (b *syncBuffer) snapshot() (string, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.changed == nil {
		b.changed = make(chan struct{})
	}
	return b.buf.String(), b.changed
}

// waitForLog waits until the server writes a JSON log line for which match
// is true, woken by each write (no polling). It fails the test if the
// server exits first or nothing matches within a minute.
func (s *server) waitForLog(t testing.TB, what string, match func(rec map[string]any) bool) {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		out, changed := s.logs.snapshot()
		for _, line := range strings.Split(out, "\n") {
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) == nil && match(rec) {
				return
			}
		}
		select {
		case <-changed:
		case <-s.exited:
			t.Fatalf("repolock serve exited while waiting for %s", what)
		case <-deadline:
			t.Fatalf("repolock serve did not log %s within a minute", what)
		}
	}
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
