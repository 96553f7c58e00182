package tests

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestDebugListener: Go's profiler is served only when DEBUG_LISTEN_ADDR
// (--debug-listen) is set, on its own listener, never on the API's.
func TestDebugListener(t *testing.T) {
	t.Parallel()
	t.Run("off by default", func(t *testing.T) {
		t.Parallel()
		s := startServer(t)
		status, _, _ := s.doRaw(t, http.MethodGet, "/debug/pprof/cmdline", "", nil, nil)
		if status != http.StatusNotFound {
			t.Errorf("GET /debug/pprof/cmdline on the API listener: %d, want 404", status)
		}
		if strings.Contains(s.logs.String(), "debug listener") {
			t.Errorf("a debug listener was started without DEBUG_LISTEN_ADDR:\n%s", s.logs.String())
		}
	})
	t.Run("on its own listener", func(t *testing.T) {
		t.Parallel()
		s := startServerWith(t, serverOptions{Env: []string{"DEBUG_LISTEN_ADDR=127.0.0.1:0"}})
		var addr string
		s.waitForLog(t, "the debug listener", func(rec map[string]any) bool {
			if rec["msg"] != "debug listener (pprof)" {
				return false
			}
			addr, _ = rec["addr"].(string)
			return true
		})
		if addr == "" || "http://"+addr == s.URL {
			t.Fatalf("debug listener address %q (API at %s)", addr, s.URL)
		}
		resp, err := http.Get("http://" + addr + "/debug/pprof/cmdline")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "serve") {
			t.Errorf("GET /debug/pprof/cmdline on the debug listener: %d %q", resp.StatusCode, body)
		}
		status, _, _ := s.doRaw(t, http.MethodGet, "/debug/pprof/cmdline", "", nil, nil)
		if status != http.StatusNotFound {
			t.Errorf("GET /debug/pprof/cmdline on the API listener: %d, want 404", status)
		}
	})
}
