package ui

// The harness of the browser tests: the real binary, built once from the
// main module (../../cmd/api), served against a fresh database
// (internal/dbtest, through the replace in go.mod), and a few API calls as
// the admin and as tenants. A module of its own keeps chromedp out of the
// main module's dependencies (as deploy/kubernetes/validate keeps kustomize
// out): `go test ./...` at the root never builds it; make test-ui and
// make screenshots run it here.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/repolock/repolock/internal/dbtest"
)

// repoRoot is the main module's directory.
const repoRoot = "../.."

var binPath string

func TestMain(m *testing.M) {
	os.Exit(func() int {
		if os.Getenv("REPOLOCK_UI_TEST") != "1" {
			return m.Run() // every test skips
		}
		dir, err := os.MkdirTemp("", "repolock-ui-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		binPath = filepath.Join(dir, "repolock")
		build := exec.Command("go", "build", "-o", binPath, "./cmd/api")
		build.Dir = repoRoot
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build the binary:", err)
			return 1
		}
		return m.Run()
	}())
}

// server is a running `repolock serve`.
type server struct {
	URL, AdminToken string
	cmd             *exec.Cmd
}

// startServer serves a fresh database on a free port.
func startServer(t *testing.T) *server {
	t.Helper()
	dbURL := dbtest.NewDatabase(t, false)
	s := &server{AdminToken: "rla_" + strings.Repeat("ab", 16)}
	s.cmd = exec.Command(binPath, "serve", "--listen", "127.0.0.1:0", "--log-format", "json", "--gc-interval", "0")
	s.cmd.Env = append(os.Environ(), "DATABASE_URL="+dbURL, "ADMIN_TOKEN="+s.AdminToken)
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.cmd.Process.Kill(); _ = s.cmd.Wait() })
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sent := false
		for sc.Scan() {
			var rec struct{ Msg, Addr string }
			if !sent && json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "listening" {
				addr <- rec.Addr
				sent = true
			}
		}
	}()
	select {
	case a := <-addr:
		s.URL = "http://" + a
	case <-time.After(60 * time.Second):
		t.Fatal("repolock serve did not listen within 60 s")
	}
	// Ready: migrations applied.
	deadline := time.Now().Add(60 * time.Second)
	for {
		res, err := http.Get(s.URL + "/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("repolock serve not ready: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// do sends body as JSON with token and returns the status and the decoded
// answer.
func (s *server) do(t *testing.T, method, path, token string, body any) (int, map[string]any) {
	t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, err := http.NewRequest(method, s.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(res.Body).Decode(&out)
	return res.StatusCode, out
}

// createTenant creates the tenant name and returns its token.
func (s *server) createTenant(t *testing.T, name string) string {
	t.Helper()
	st, out := s.do(t, http.MethodPost, "/v1/admin/users", s.AdminToken, map[string]any{"name": name})
	if st != http.StatusCreated {
		t.Fatalf("create tenant %s: %d %v", name, st, out)
	}
	return out["token"].(string)
}
