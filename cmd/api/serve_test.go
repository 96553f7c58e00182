package main

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/repolock/repolock/internal/gc"
	"github.com/repolock/repolock/internal/httpapi"
	"github.com/repolock/repolock/internal/tenants"
)

// TestServeConfigOff: every serve setting that can be off is off at the
// same value on its flag (or variable) as in serveConfig, which hands it
// unchanged to the component it configures: 0 for the rate limit, the GC
// interval and the token cache, "" for the debug listener, negative for
// retention (kept forever). Reading the configuration connects to nothing
// (the database URL names no server).
func TestServeConfigOff(t *testing.T) {
	t.Parallel()
	base := map[string]string{"DATABASE_URL": "postgres://nowhere.invalid/db"}
	read := func(t *testing.T, envv map[string]string, args ...string) serveConfig {
		t.Helper()
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for k, v := range envv {
			m[k] = v
		}
		var out, errb strings.Builder
		cfg, err := readServeConfig(&env{stdout: &out, stderr: &errb, getenv: func(k string) string { return m[k] }}, args)
		if err != nil {
			t.Fatalf("readServeConfig: %v (stderr %q)", err, errb.String())
		}
		return cfg
	}
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))

	on := read(t, nil)
	if on.RateLimit != httpapi.DefaultRateLimit || on.GC.Interval != 10*time.Minute || on.TokenCache.Size != tenants.DefaultCacheSize ||
		on.DebugListen != "" || on.MetricsRefresh != 30*time.Second || on.Retention != (gc.Retention{Events: gc.DefaultEventRetention, Runs: gc.DefaultRunRetention, RunsKept: gc.DefaultRunsKept}) {
		t.Fatalf("defaults: %+v", on)
	}
	if newTokenCache(on.TokenCache, nil, discard) == nil {
		t.Fatal("the token cache is off by default")
	}

	for name, off := range map[string]serveConfig{
		"environment": read(t, map[string]string{"RATE_LIMIT": "0", "GC_INTERVAL": "0", "TOKEN_CACHE_SIZE": "0", "EVENT_RETENTION": "-1s", "GC_RUN_RETENTION": "-1s"}),
		"flags":       read(t, nil, "--rate-limit", "0", "--gc-interval", "0", "--token-cache-size", "0", "--event-retention", "-1s", "--gc-run-retention", "-1s", "--debug-listen", ""),
	} {
		if off.RateLimit != 0 || off.GC != (gcLoopConfig{}) || off.TokenCache.Size != 0 || off.DebugListen != "" || off.Retention.Events >= 0 || off.Retention.Runs >= 0 {
			t.Errorf("%s: not off: %+v", name, off)
		}
		if newTokenCache(off.TokenCache, nil, discard) != nil {
			t.Errorf("%s: TOKEN_CACHE_SIZE=0 built a token cache", name)
		}
	}
	// The log buffer: 100ms by default, off at 0, never negative.
	if on.LogBuffer != DefaultLogBuffer {
		t.Errorf("log buffer default: %v", on.LogBuffer)
	}
	if off := read(t, map[string]string{"LOG_BUFFER": "0"}); off.LogBuffer != 0 {
		t.Errorf("LOG_BUFFER=0: %v", off.LogBuffer)
	}
	if off := read(t, nil, "--log-buffer", "0"); off.LogBuffer != 0 {
		t.Errorf("--log-buffer 0: %v", off.LogBuffer)
	}
	var out, errb strings.Builder
	if _, err := readServeConfig(&env{stdout: &out, stderr: &errb, getenv: func(k string) string {
		return map[string]string{"DATABASE_URL": "postgres://nowhere.invalid/db", "LOG_BUFFER": "-1s"}[k]
	}}, nil); err == nil {
		t.Error("LOG_BUFFER=-1s accepted")
	}
	// The share of the pool and the charging of batches: on by default,
	// off at 0.
	if on.PoolShare != 0.5 || on.PoolShareWait != time.Second || on.RateRowsPerRequest != httpapi.DefaultRateRowsPerRequest {
		t.Errorf("share defaults: %v %v %v", on.PoolShare, on.PoolShareWait, on.RateRowsPerRequest)
	}
	for name, off := range map[string]serveConfig{
		"environment": read(t, map[string]string{"TENANT_POOL_SHARE": "0", "TENANT_POOL_WAIT": "0", "RATE_ROWS_PER_REQUEST": "0"}),
		"flags":       read(t, nil, "--tenant-pool-share", "0", "--tenant-pool-wait", "0", "--rate-rows-per-request", "0"),
	} {
		if off.PoolShare != 0 || off.PoolShareWait != 0 || off.RateRowsPerRequest != 0 {
			t.Errorf("%s: share settings not off: %v %v %v", name, off.PoolShare, off.PoolShareWait, off.RateRowsPerRequest)
		}
		srv, err := buildServer(off, discard)
		if err != nil {
			t.Fatalf("%s: buildServer: %v", name, err)
		}
		if srv.http == nil {
			t.Fatalf("%s: no server", name)
		}
		srv.close()
	}
	// The fleet heartbeat: on by default (the rate limit is the fleet's),
	// off at 0 (per-process limits, no membership built).
	if on.FleetHeartbeat != 2*time.Second {
		t.Errorf("fleet heartbeat default: %v", on.FleetHeartbeat)
	}
	for name, off := range map[string]serveConfig{
		"environment": read(t, map[string]string{"FLEET_HEARTBEAT": "0"}),
		"flags":       read(t, nil, "--fleet-heartbeat", "0"),
	} {
		if off.FleetHeartbeat != 0 {
			t.Errorf("%s: fleet heartbeat not off: %v", name, off.FleetHeartbeat)
		}
		srv, err := buildServer(off, discard)
		if err != nil {
			t.Fatalf("%s: buildServer: %v", name, err)
		}
		if srv.fleet != nil {
			t.Errorf("%s: FLEET_HEARTBEAT=0 built a fleet membership", name)
		}
		srv.close()
	}
	if srv, err := buildServer(on, discard); err != nil || srv.fleet == nil {
		t.Errorf("defaults: buildServer %v, fleet membership %v; want one", err, srv != nil && srv.fleet != nil)
	} else {
		srv.close()
	}
	// A negative rate was always off too; it is 0 in the configuration.
	if got := read(t, map[string]string{"RATE_LIMIT": "-5"}).RateLimit; got != 0 {
		t.Errorf("RATE_LIMIT=-5: RateLimit %v, want 0 (off)", got)
	}
}

// TestServeConfigRefused: values that are neither a setting nor off stop
// serve before anything connects, with the exit status they always had.
func TestServeConfigRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  map[string]string
		code int
		want string
	}{
		{map[string]string{"GC_INTERVAL": "-1s"}, 1, "--gc-interval must not be negative"},
		{map[string]string{"GC_BATCH_SIZE": "0"}, 1, "--gc-batch-size must be 1.."},
		{map[string]string{"ALIAS_REFRESH": "0"}, 2, "--alias-refresh must be positive"},
		{map[string]string{"METRICS_REFRESH": "0"}, 2, "--metrics-refresh must be positive"},
		{map[string]string{"EVENT_RETENTION": "1h"}, 2, "event retention must be at least 24h"},
		{map[string]string{"TOKEN_CACHE_SIZE": "-1"}, 1, "must not be negative"},
		{map[string]string{"ADMIN_TOKEN": "x"}, 2, "the admin token is 1 bytes; at least 32 are required"},
		{map[string]string{"ADMIN_TOKEN": strings.Repeat("a", 31)}, 2, "the admin token is 31 bytes"},
		{map[string]string{"TLS_CERT_FILE": "/nonexistent/cert.pem"}, 2, "--tls-cert-file and --tls-key-file go together"},
		{map[string]string{"TENANT_POOL_SHARE": "1.5"}, 2, "--tenant-pool-share must be a fraction from 0 (off) to 1"},
		{map[string]string{"TENANT_POOL_SHARE": "-0.1"}, 2, "--tenant-pool-share must be a fraction from 0 (off) to 1"},
		{map[string]string{"TENANT_POOL_WAIT": "-1ms"}, 2, "--tenant-pool-wait must not be negative"},
		{map[string]string{"RATE_ROWS_PER_REQUEST": "-1"}, 2, "--rate-rows-per-request must not be negative"},
		{map[string]string{"FLEET_HEARTBEAT": "50ms"}, 2, "--fleet-heartbeat must be at least 100ms (0 is off), got 50ms"},
		{map[string]string{"FLEET_HEARTBEAT": "-1s"}, 2, "--fleet-heartbeat must be at least 100ms (0 is off), got -1s"},
	} {
		envv := map[string]string{"DATABASE_URL": "postgres://nowhere.invalid/db"}
		for k, v := range tc.env {
			envv[k] = v
		}
		code, stdout, stderr := cli(t, envv, "serve")
		if code != tc.code || !strings.Contains(stderr, tc.want) || stdout != "" || strings.Contains(stderr, "listening") {
			t.Errorf("serve with %v: exit %d, stderr %q; want %d and %q", tc.env, code, stderr, tc.code, tc.want)
		}
	}
}

// TestServeConfigAdminToken: a token of 32 bytes or more is accepted, a
// shorter one only with ALLOW_WEAK_ADMIN_TOKEN, and ADMIN_TOKEN_FILE is
// read when ADMIN_TOKEN is not set.
func TestServeConfigAdminToken(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("rla_"+strings.Repeat("f", 48)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"ADMIN_TOKEN": strings.Repeat("a", 32)}, strings.Repeat("a", 32)},
		{map[string]string{"ADMIN_TOKEN": "dev", "ALLOW_WEAK_ADMIN_TOKEN": "1"}, "dev"},
		{map[string]string{"ADMIN_TOKEN_FILE": file}, "rla_" + strings.Repeat("f", 48)},
		{map[string]string{"ADMIN_TOKEN": strings.Repeat("b", 40), "ADMIN_TOKEN_FILE": file}, strings.Repeat("b", 40)},
		{map[string]string{"ADMIN_TOKEN_FILE": file + ".missing"}, ""}, // generated by buildServer
	} {
		envv := map[string]string{"DATABASE_URL": "postgres://nowhere.invalid/db"}
		for k, v := range tc.env {
			envv[k] = v
		}
		var out, errb strings.Builder
		cfg, err := readServeConfig(&env{stdout: &out, stderr: &errb, getenv: func(k string) string { return envv[k] }}, nil)
		if err != nil || cfg.AdminToken != tc.want {
			t.Errorf("%v: token %q, err %v; want %q", tc.env, cfg.AdminToken, err, tc.want)
		}
	}
}

// TestAdminTokenGenerated: with no token set, buildServer generates one
// into ADMIN_TOKEN_FILE (mode 0600, not overwriting an existing file), and
// logs the file's path, never the token.
func TestAdminTokenGenerated(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "admin-token")
	var out, errb strings.Builder
	envv := map[string]string{"DATABASE_URL": "postgres://nowhere.invalid/db", "ADMIN_TOKEN_FILE": file}
	cfg, err := readServeConfig(&env{stdout: &out, stderr: &errb, getenv: func(k string) string { return envv[k] }}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	srv, err := buildServer(cfg, slog.New(slog.NewJSONHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	srv.close()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(b))
	fi, err := os.Stat(file)
	if err != nil || fi.Mode().Perm() != 0o600 || len(token) < MinAdminTokenLen {
		t.Fatalf("token file: mode %v, %d bytes, %v", fi.Mode(), len(token), err)
	}
	if !strings.Contains(logs.String(), file) || strings.Contains(logs.String(), token) {
		t.Fatalf("logs must name the file and not hold the token:\n%s", logs.String())
	}
	if _, err := generateAdminToken(file); err == nil {
		t.Fatal("an existing token file was overwritten")
	}
}
