package tests

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/repolock/repolock/internal/dbtest"
)

// makeRun starts `make run` in the repository with env, in its own process
// group (killed at cleanup), and returns its stdout lines as they come.
func makeRun(t *testing.T, env ...string) (*exec.Cmd, <-chan string, *syncBuffer) {
	t.Helper()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make here")
	}
	cmd := exec.Command("make", "--no-print-directory", "-C", "..", "run")
	cmd.Env = append(cleanEnv(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	return cmd, lines, stderr
}

// TestMakeRunFirstHour: what a newcomer sees on `make run` (issue 30): the
// console, API, OpenAPI and metrics URLs, each answering, and / leading to
// the console.
func TestMakeRunFirstHour(t *testing.T) {
	dbURL := dbtest.NewDatabase(t, false)
	port := freePort(t)
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	_, lines, stderr := makeRun(t, "DATABASE_URL="+dbURL, "ADMIN_TOKEN=rla_"+randomHex(16), "LISTEN_ADDR=127.0.0.1:"+strconv.Itoa(port))
	want := map[string]string{"Console": base + "/ui/", "OpenAPI": base + "/openapi.yaml", "Metrics": base + "/metrics"}
	var out strings.Builder
	deadline := time.After(3 * time.Minute)
	for len(want) > 0 {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("make run ended; stdout:\n%s\nstderr:\n%s", out.String(), stderr.String())
			}
			out.WriteString(line + "\n")
			f := strings.Fields(line)
			if len(f) >= 2 && want[f[0]] == f[1] {
				delete(want, f[0])
			}
		case <-deadline:
			t.Fatalf("make run did not print %v; stdout:\n%s\nstderr:\n%s", want, out.String(), stderr.String())
		}
	}
	hc := &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string) *http.Response {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
			res, err := hc.Do(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusServiceUnavailable {
					return res
				}
			}
			if ctx.Err() != nil {
				t.Fatalf("GET %s: %v; stderr:\n%s", path, err, stderr.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if res := get("/"); res.StatusCode != http.StatusFound || res.Header.Get("Location") != "/ui/" {
		t.Errorf("GET /: %d, Location %q; want 302 to /ui/", res.StatusCode, res.Header.Get("Location"))
	}
	for _, path := range []string{"/ui/login", "/openapi.yaml", "/metrics"} {
		if res := get(path); res.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %d", path, res.StatusCode)
		}
	}
}

// TestMakeRunPortBusy: with the port taken, make run stops before it
// starts anything and names the port (it printed "port  is in use").
func TestMakeRunPortBusy(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	cmd, lines, stderr := makeRun(t, "LISTEN_ADDR=127.0.0.1:"+port)
	for range lines {
	}
	if err := cmd.Wait(); err == nil {
		t.Fatal("make run with a busy port: exit 0")
	}
	msg := stderr.String()
	if !strings.Contains(msg, "127.0.0.1:"+port+" is busy (port "+port+" is in use") || !strings.Contains(msg, "LISTEN_ADDR=127.0.0.1:PORT make run") {
		t.Errorf("make run's message:\n%s", msg)
	}
}
