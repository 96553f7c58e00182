package httpapi_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/repolock/repolock/internal/apps"
	"github.com/repolock/repolock/internal/httpapi"
)

// FuzzHTTP sends fuzzed request bodies and path parameters to every route
// of the real server on a real database (a fresh one per fuzzing process)
// and checks the properties of every answer: never a 5xx, every error in
// the one JSON error shape, and no secret of the request (the caller's
// token, a value in a secret-carrying field such as "password") echoed.
//
// `make test` runs the seed corpus (as every `go test` does); `make fuzz`
// fuzzes for FUZZTIME.
func FuzzHTTP(f *testing.F) {
	var routes []*echo.Route
	e := newAPIEnv(f, withRateLimit(0, 0), withRoutes(func(s *httpapi.Server) {
		for _, r := range s.Echo.Routes() {
			// /metrics and the document answer no JSON errors and take
			// no input worth fuzzing.
			if r.Path == "/metrics" || strings.HasPrefix(r.Path, "/openapi") {
				continue
			}
			routes = append(routes, r)
		}
	}))
	alice := e.tenant("alice")
	e.tenant("bob")
	seeds := []struct {
		route, method, flags uint8
		param                string
		body                 string
	}{
		{0, 0, 0, "alice", `{"name":"a","display_name":"A"}`},
		{1, 0, 0, "a\x00b", `{"name":"a","display_name":"a\u0000b"}`},
		{2, 1, 1, "%00", `{"NAME":"a","Repo_URL":"https://github.com/a/b","name":"b"}`},
		{3, 0, 0, "alice", `{"name":"c","repo_url":"https://github.com/a/b","secret_ref":"ghp_0123456789abcdefghij0123456789abcdef"}`},
		{4, 0, 0, "x", `{"name":"c","repo_url":"https://github.com/a/b","password":"hunter2-SECRET"}`},
		{5, 0, 2, "\xff\xfe", "{\"name\":\"\xff\"}"},
		{6, 2, 0, "../../etc/passwd", `{"name":"a","name":"b"}`},
		{7, 0, 0, "main", `{"events":[{"cursor":1,"repo":"r","rev":"1"}]}`},
		{8, 0, 0, strings.Repeat("a", 600), `[1,2,3]`},
		{9, 0, 0, "a/b", `{"message":"line1\nline2","metadata":{"k":"v\u0000"}}`},
		{10, 0, 0, "did:plc:a", `{"repo_url":"git@github.com:a/b.git"}`},
		{11, 3, 3, "", `{"name":1e400}`},
		{12, 0, 0, "x", `{"Token":"rlt_zzzzzzzzzzzzzzzzzzzzzzzz"}`},
		{13, 0, 0, "x", `{"name":"a"} trailing`},
		{14, 0, 0, "x", `{"a":{"b":{"c":[{"d":"\u0001"}]}}}`},
		{15, 0, 0, "00000000-0000-0000-0000-000000000000", `{}`},
		// Surrogates (as UTF-8 and as JSON escapes), overlong encodings and
		// code points beyond U+10FFFF, escaped and raw.
		{16, 0, 0, "\xed\xa0\x80", `{"name":"\ud800"}`},
		{17, 0, 2, "%ed%b0%80", `{"name":"a","display_name":"\udc00"}`},
		{18, 0, 0, "\xc0\xaf", `{"repo_url":"https://github.com/a/\ud83d"}`},
		{19, 0, 2, "%c0%80", `{"message":"a\ud800b","metadata":{"k":"\udfff"}}`},
		{20, 1, 2, "%f4%90%80%80", `{"name":"\ud83d\ude00"}`},
		{21, 0, 2, "%e0%80%af", `{"events":[{"repo":"\ud800","rev":"1","cursor":1}]}`},
	}
	for _, s := range seeds {
		f.Add(s.route, s.method, s.flags, s.param, []byte(s.body))
	}
	methods := []string{"", http.MethodGet, http.MethodPost, http.MethodPatch, http.MethodPut, http.MethodDelete, http.MethodHead}
	f.Fuzz(func(t *testing.T, routeIdx, methodIdx, flags uint8, param string, body []byte) {
		r := routes[int(routeIdx)%len(routes)]
		method := methods[int(methodIdx)%len(methods)]
		if method == "" {
			method = r.Method
		}
		v := param
		if flags&2 == 0 {
			v = escapePathParam(param)
		}
		segs := strings.Split(r.Path, "/")
		for i, seg := range segs {
			if strings.HasPrefix(seg, ":") || seg == "*" {
				segs[i] = v
			}
		}
		path := strings.Join(segs, "/")
		token := alice
		if strings.HasPrefix(r.Path, "/v1/admin") {
			token = adminToken
		}
		if flags&1 != 0 {
			token = ""
		}
		ct := "application/json"
		if flags&4 != 0 {
			ct = "text/plain"
		}
		te := e.on(t)
		req, err := http.NewRequestWithContext(t.Context(), method, te.ts.URL+path, bytes.NewReader(body))
		if err != nil {
			return // not a request a client can send
		}
		req.Header.Set("Content-Type", ct)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		status, hdr, out := doRequest(t, te, req)
		if status >= 500 {
			t.Fatalf("%s %s %q: %d %s", method, path, body, status, out)
		}
		if status >= 400 && method != http.MethodHead {
			var resp struct {
				Error map[string]any `json:"error"`
			}
			if err := json.Unmarshal(out, &resp); err != nil || resp.Error["code"] == nil || resp.Error["message"] == nil ||
				!strings.HasPrefix(hdr.Get("Content-Type"), "application/json") {
				t.Fatalf("%s %s %q: %d is not the JSON error shape: %s", method, path, body, status, out)
			}
		}
		if token != "" && bytes.Contains(out, []byte(token)) {
			t.Fatalf("%s %s: the caller's token is echoed: %s", method, path, out)
		}
		for _, secret := range secretValues(body) {
			if bytes.Contains(out, []byte(secret)) {
				t.Fatalf("%s %s %q: the secret %q is echoed: %s", method, path, body, secret, out)
			}
		}
	})
}

// escapePathParam escapes a path parameter as a client does, "/" included.
func escapePathParam(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-_.~:", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		b.WriteString("%" + strings.ToUpper(string("0123456789abcdef"[c>>4])+string("0123456789abcdef"[c&15])))
	}
	return b.String()
}

// secretValues returns the values of the body's secret-carrying fields
// (apps.SecretFields, any case, at any depth) and of a secret_ref that
// holds a token: what the answer must never contain.
func secretValues(body []byte) []string {
	var v any
	if json.Unmarshal(body, &v) != nil {
		return nil
	}
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && len(s) >= 8 {
					for _, f := range apps.SecretFields {
						if strings.EqualFold(k, f) {
							out = append(out, s)
						}
					}
					if strings.EqualFold(k, "secret_ref") && (strings.HasPrefix(s, "ghp_") || strings.Contains(s, "-----BEGIN")) {
						out = append(out, s)
					}
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(v)
	return out
}

func doRequest(t *testing.T, e *apiEnv, req *http.Request) (int, http.Header, []byte) {
	t.Helper()
	res, err := e.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(res.Body); err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, res.Header, buf.Bytes()
}
