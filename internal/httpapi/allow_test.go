package httpapi_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/repolock/repolock/internal/httpapi"
)

// TestAllowIsTrue: on every route (from the router), with every method and
// with a static segment escaped ("%69" for "i", which Echo routes as
// written), a 405 names in Allow only methods that the same path is really
// served with (none of them answers 405 or "no such route"), and OPTIONS,
// which no route serves, answers in the documented error shape.
func TestAllowIsTrue(t *testing.T) {
	t.Parallel()
	var routes []*echo.Route
	e := newAPIEnv(t, withRateLimit(0, 0), withRoutes(func(s *httpapi.Server) {
		for _, r := range s.Echo.Routes() {
			if !strings.HasPrefix(r.Path, "/ui") && r.Path != "/metrics" {
				routes = append(routes, r)
			}
		}
	}))
	alice := e.tenant("alice")
	hc := e.ts.Client()
	do := func(method, path string) (int, http.Header, map[string]any) {
		token := alice
		if strings.HasPrefix(path, "/v1/admin") {
			token = adminToken
		}
		req, _ := http.NewRequestWithContext(t.Context(), method, e.ts.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var body struct {
			Error map[string]any `json:"error"`
		}
		_ = json.NewDecoder(res.Body).Decode(&body)
		return res.StatusCode, res.Header, body.Error
	}
	seen := map[string]bool{}
	for _, r := range routes {
		path := strings.NewReplacer(":name", "alice", ":id", "00000000-0000-0000-0000-000000000000").Replace(r.Path)
		if i := strings.IndexAny(path, ":*"); i >= 0 {
			path = substitute(r.Path, "alice")[0]
		}
		variants := []string{path}
		if i := strings.IndexByte(path, 'i'); i >= 0 {
			variants = append(variants, path[:i]+"%69"+path[i+1:])
		}
		for _, p := range variants {
			if seen[p] {
				continue
			}
			seen[p] = true
			for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions} {
				st, h, body := do(m, p)
				if m == http.MethodOptions && st != http.StatusMethodNotAllowed && st != http.StatusNotFound {
					t.Errorf("OPTIONS %s: %d, want 405 or 404", p, st)
				}
				if m == http.MethodOptions && (body["code"] == nil || body["message"] == nil) {
					t.Errorf("OPTIONS %s: %d without the error shape", p, st)
				}
				if st != http.StatusMethodNotAllowed {
					continue
				}
				allow := h.Get("Allow")
				if allow == "" || (m != http.MethodHead && body["code"] != "method_not_allowed") {
					t.Errorf("%s %s: 405 with Allow %q and %v", m, p, allow, body)
					continue
				}
				for _, a := range strings.Split(allow, ", ") {
					if st2, _, b2 := do(a, p); st2 == http.StatusMethodNotAllowed || (st2 == http.StatusNotFound && (a == http.MethodHead || b2["message"] == "no such route")) {
						t.Errorf("%s %s: 405 with Allow %q, but %s answers %d %v", m, p, allow, a, st2, b2)
					}
				}
			}
		}
	}
	// The cases.
	if st, h, body := do(http.MethodGet, "/v1/appl%69cations"); st == http.StatusMethodNotAllowed {
		t.Errorf("GET /v1/appl%%69cations: 405 with Allow %q %v", h.Get("Allow"), body)
	}
	if st, h, body := do(http.MethodOptions, "/v1/me"); st != http.StatusMethodNotAllowed || h.Get("Allow") != "GET" ||
		body["message"] != "method OPTIONS is not allowed here; allowed: GET" {
		t.Errorf("OPTIONS /v1/me: %d Allow %q %v", st, h.Get("Allow"), body)
	}
	if st, _, body := do(http.MethodOptions, "/v1/no-such-thing"); st != http.StatusNotFound || body["code"] != "not_found" {
		t.Errorf("OPTIONS on an unknown path: %d %v", st, body)
	}
}
