package httpapi_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/repolock/repolock/internal/cputime"
	"github.com/repolock/repolock/internal/httpapi"
	"github.com/repolock/repolock/internal/tenants"
)

// BenchmarkServeHTTP is the CPU per request of the server's middleware
// chain and handlers as repolock serve runs them (the token cache on, the
// access log as JSON at INFO into a file, one write per line), without
// net/http's connection handling: requests go to Server.ServeHTTP with a
// recorder. cpu-ns/op is the process's CPU time (user + system) per
// request, which on a shared machine moves much less than the wall time;
// for acquire it includes lib/pq's side of the group-committed insert (32
// concurrent requesters), not Postgres'. The rate limit is off (one
// tenant sends everything). Make bench-http measures the whole binary.
func BenchmarkServeHTTP(b *testing.B) {
	logs, err := os.Create(filepath.Join(b.TempDir(), "access.log"))
	if err != nil {
		b.Fatal(err)
	}
	defer logs.Close()
	e := newAPIEnv(b, func(_ *apiEnv, cfg *httpapi.Config) {
		cfg.Logger = slog.New(slog.NewJSONHandler(logs, nil))
		cfg.RateLimit = 0
	}, func(e *apiEnv, cfg *httpapi.Config) {
		cache := tenants.NewCache(tenants.CacheConfig{Logger: cfg.Logger})
		cfg.Tenants = tenants.New(e.db, cache)
	})
	token := e.tenant("bench")
	srv := e.ts.Config.Handler
	serve := func(b *testing.B, method, path string, body []byte, want int) {
		req := httptest.NewRequest(method, path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		if rec.Code != want {
			b.Fatalf("%s %s: %d %s", method, path, rec.Code, rec.Body.String())
		}
	}
	b.Run("me", func(b *testing.B) {
		serve(b, http.MethodGet, "/v1/me", nil, 200) // the token cached
		b.ReportAllocs()
		defer cputime.Report(b)()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				serve(b, http.MethodGet, "/v1/me", nil, 200)
			}
		})
	})
	var n atomic.Int64
	b.Run("acquire", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(16) // 32 requesters on 2 CPUs: batches form
		defer cputime.Report(b)()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				body := fmt.Appendf(nil, `{"repo_url":"https://github.com/bench/r-%d"}`, n.Add(1))
				serve(b, http.MethodPost, "/v1/locks/acquire", body, 200)
			}
		})
	})
}
