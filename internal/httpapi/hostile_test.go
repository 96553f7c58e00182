package httpapi_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/repolock/repolock/internal/console"
	"github.com/repolock/repolock/internal/httpapi"
)

// hostileValues are path values (as sent: escaped) that are not text, or
// are text only in a broken decoder: invalid UTF-8, NUL, control
// characters (C0, DEL, C1), UTF-16 surrogates encoded as UTF-8, overlong
// encodings (of '/', NUL and '.'), code points beyond U+10FFFF, and a
// literal "\ud800" (text: it must reach the handler and be refused or
// found missing like any name).
var hostileValues = []string{
	"%ff", "a%ffb", "%fe%ff", "a%00b", "%00", "a%0ab", "a%0db", "a%09b", "%1b%5b31m", "%7f", "%c2%85",
	"%ed%a0%80", "a%ed%b0%80b", "%ed%a0%bd%ed%b8%80",
	"%c0%af", "%c0%80", "%e0%80%af", "%f0%80%80%af", "%c0%ae%c0%ae",
	"%f4%90%80%80", "%f8%88%80%80%80",
	"%5Cud800", "%25ff", "..%2f..%2fetc",
}

// surrogateBodies hold lone surrogate escapes where a string is expected.
var surrogateBodies = []string{
	`{"name":"\ud800"}`,
	`{"name":"a","display_name":"\udc00"}`,
	`{"name":"a","repo_url":"https://github.com/a/\ud83d"}`,
	`{"events":[{"repo":"\udfff","rev":"1","cursor":1}]}`,
	`{"message":"a\ud800b","metadata":{"k":"\ud800"}}`,
}

// withConsole mounts the operator console on the server, as `api serve`
// does, with the services of the test's Config, and hands it to *ui.
func withConsole(ui **console.Console) envOption {
	return func(e *apiEnv, cfg *httpapi.Config) {
		e.addRoutes = append(e.addRoutes, func(s *httpapi.Server) {
			c, err := console.New(console.Config{DB: cfg.DB, Logger: cfg.Logger, AdminToken: cfg.AdminToken, AuthGuard: cfg.AuthGuard,
				Collector: cfg.GC, Sync: cfg.Sync, Tenants: cfg.Tenants, Locks: cfg.Locks, Apps: cfg.Apps})
			if err != nil {
				e.t.Fatal(err)
			}
			c.Mount(s.Echo)
			*ui = c
		})
	}
}

// substitute returns the paths of route (Echo's ":name" and "*", or
// ServeMux's "{name}", "{name...}", "{$}" and a trailing "/") with v in
// each wildcard in turn, the others "alice".
func substitute(route, v string) []string {
	segs := strings.Split(route, "/")
	var wild []int
	for i, seg := range segs {
		switch {
		case seg == "{$}":
			segs[i] = ""
		case strings.HasPrefix(seg, ":"), seg == "*", strings.HasPrefix(seg, "{"):
			wild = append(wild, i)
		}
	}
	if strings.HasSuffix(route, "/") && !strings.HasSuffix(route, "{$}") {
		segs[len(segs)-1] = "{rest}"
		wild = append(wild, len(segs)-1)
	}
	var paths []string
	for _, w := range wild {
		s := append([]string(nil), segs...)
		for _, o := range wild {
			s[o] = "alice"
		}
		s[w] = v
		paths = append(paths, strings.Join(s, "/"))
	}
	return paths
}

// TestHostileInputCorpus sends every hostile value in every path value of
// every route, API and console (enumerated from the router and from
// console.Routes, so a new route is covered at once), the same values in
// the query, and lone surrogate escapes in the bodies of every route that
// takes one. No answer is a 5xx; every API error has the JSON error shape;
// a lone surrogate is never accepted.
func TestHostileInputCorpus(t *testing.T) {
	t.Parallel()
	var ui *console.Console
	var routes []*echo.Route
	e := newAPIEnv(t, withRateLimit(0, 0), withConsole(&ui), withRoutes(func(s *httpapi.Server) {
		for _, r := range s.Echo.Routes() {
			if r.Path == "/metrics" || strings.HasPrefix(r.Path, "/openapi") {
				continue
			}
			routes = append(routes, r)
		}
	}))
	alice := e.tenant("alice")
	tokenOf := func(path string) string {
		if strings.HasPrefix(path, "/v1/admin") {
			return adminToken
		}
		return alice
	}

	var fails []string
	send := func(hc *http.Client, base, method, path, token, body string, jsonErrors bool) int {
		req, err := http.NewRequestWithContext(t.Context(), method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer res.Body.Close()
		var out bytes.Buffer
		if _, err := out.ReadFrom(res.Body); err != nil {
			t.Fatal(err)
		}
		if res.StatusCode >= 500 {
			fails = append(fails, method+" "+path+" "+body+": "+res.Status+" "+firstLine(out.String()))
		}
		if jsonErrors && res.StatusCode >= 400 && method != http.MethodHead {
			var resp struct {
				Error map[string]any `json:"error"`
			}
			if json.Unmarshal(out.Bytes(), &resp) != nil || resp.Error["code"] == nil {
				fails = append(fails, method+" "+path+": "+res.Status+" not the JSON error shape: "+firstLine(out.String()))
			}
		}
		return res.StatusCode
	}

	// The API (and the console's mount, /ui/*), through the served stack.
	api := e.ts.Client()
	requests := 0
	for _, r := range routes {
		for _, v := range hostileValues {
			paths := substitute(r.Path, v)
			if len(paths) == 0 {
				paths = []string{r.Path}
			}
			for _, p := range paths {
				send(api, e.ts.URL, r.Method, p+"?page_token="+v+"&after="+v, tokenOf(r.Path), "", !strings.HasPrefix(r.Path, "/ui"))
				requests++
			}
		}
		if strings.HasPrefix(r.Path, "/ui") {
			continue // the console takes forms, below
		}
		switch r.Method {
		case http.MethodPost, http.MethodPut, http.MethodPatch:
			p := strings.NewReplacer(":name", "alice", ":id", "00000000-0000-0000-0000-000000000000").Replace(r.Path)
			if strings.Contains(p, ":") || strings.Contains(p, "*") {
				p = substitute(r.Path, "alice")[0]
			}
			// A route that reads its body refuses an unknown field; one
			// that takes none (POST /v1/admin/gc) ignores any body.
			decodes := send(api, e.ts.URL, r.Method, p, tokenOf(r.Path), `{"no_such_field_anywhere":1}`, true) == http.StatusBadRequest
			for _, body := range surrogateBodies {
				if st := send(api, e.ts.URL, r.Method, p, tokenOf(r.Path), body, true); decodes && st != http.StatusBadRequest {
					fails = append(fails, r.Method+" "+p+" "+body+": a lone surrogate answered "+http.StatusText(st))
				}
				requests++
			}
		}
	}

	// The console's routes, signed in (so that every handler runs), both
	// as served (behind the API's middleware) and on its own.
	direct := httptest.NewServer(ui)
	defer direct.Close()
	for _, base := range []string{e.ts.URL, direct.URL} {
		jar, _ := cookiejar.New(nil)
		hc := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		res, err := hc.PostForm(base+"/ui/login", url.Values{"token": {adminToken}})
		if err != nil || res.StatusCode != http.StatusSeeOther {
			t.Fatalf("console sign-in: %v %v", res, err)
		}
		res.Body.Close()
		res, err = hc.Get(base + "/ui/")
		if err != nil {
			t.Fatal(err)
		}
		var page bytes.Buffer
		_, _ = page.ReadFrom(res.Body)
		res.Body.Close()
		m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page.String())
		if m == nil {
			t.Fatal("no CSRF token on the console's overview")
		}
		for _, pattern := range ui.Routes() {
			method, route, _ := strings.Cut(pattern, " ")
			for _, v := range hostileValues {
				paths := substitute(route, v)
				if len(paths) == 0 {
					paths = []string{route}
				}
				for _, p := range paths {
					q := "?after=" + v + "&next=" + v + "&tenant=" + v
					if method == http.MethodPost {
						req, _ := http.NewRequestWithContext(t.Context(), method, base+p+q,
							strings.NewReader("csrf="+m[1]+"&name="+v+"&confirm="+v+"&token="+v))
						req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
						res, err := hc.Do(req)
						if err != nil {
							t.Fatal(err)
						}
						res.Body.Close()
						if res.StatusCode >= 500 {
							fails = append(fails, "console "+method+" "+p+": "+res.Status)
						}
					} else {
						send(hc, base, method, p+q, "", "", false)
					}
					requests++
				}
			}
		}
	}
	if len(fails) > 0 {
		t.Fatalf("%d of %d requests failed:\n%s", len(fails), requests, strings.Join(fails, "\n"))
	}
	t.Logf("%d hostile requests, 0 × 5xx", requests)
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}
