package tests

import (
	"net/http"
	"testing"
)

// TestAccessLogBuffer: the binary's access lines reach its output with the
// log buffer at its default (written by the buffer's interval, with no
// other line to push them out) and with LOG_BUFFER=0 (at once); the
// buffer's flush at exit is TestGracefulShutdown's "stopped" line.
func TestAccessLogBuffer(t *testing.T) {
	t.Parallel()
	for name, env := range map[string][]string{"default": nil, "off": {"LOG_BUFFER=0"}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := startServerWith(t, serverOptions{Env: env})
			id := "access-line-" + name
			status, _, _ := s.doRaw(t, http.MethodGet, "/v1/me", s.AdminToken, http.Header{"X-Request-Id": {id}}, nil)
			if status != http.StatusForbidden {
				t.Fatalf("GET /v1/me with the admin token: %d", status)
			}
			s.waitForLog(t, "the access line", func(rec map[string]any) bool {
				return rec["msg"] == "request" && rec["request_id"] == id && rec["status"] == float64(http.StatusForbidden)
			})
		})
	}
}
