package httpapi_test

import (
	"net/http"
	"testing"
)

func TestZZProbe(t *testing.T) {
	e := newAPIEnv(t)
	alice := e.tenant("alice")
	for _, p := range []struct{ m, path, tok, body string }{
		{"GET", "/v1/appl%69cations", alice, ""},
		{"OPTIONS", "/v1/me", alice, ""},
		{"OPTIONS", "/v1/applications", alice, ""},
		{"GET", "/v1/repositories/r/branches/a%ffb", alice, ""},
		{"GET", "/v1/repositories/r/objects/a%ffb", alice, ""},
		{"POST", "/v1/admin/users", adminToken, `{"name":"x","display_name":"\ud800"}`},
	} {
		ct := ""
		if p.body != "" {
			ct = "application/json"
		}
		st, h, b := e.raw(p.m, p.path, p.tok, ct, []byte(p.body))
		t.Logf("%s %s -> %d Allow=%q %s", p.m, p.path, st, h.Get("Allow"), b)
	}
	_ = http.MethodGet
}
