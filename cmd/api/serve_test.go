package main

import (
	"io"
	"log/slog"
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
		on.DebugListen != "" || on.Retention != (gc.Retention{Events: gc.DefaultEventRetention, Runs: gc.DefaultRunRetention, RunsKept: gc.DefaultRunsKept}) {
		t.Fatalf("defaults: %+v", on)
	}
	if newTokenCache(on.TokenCache, "", nil, discard) == nil {
		t.Fatal("the token cache is off by default")
	}

	for name, off := range map[string]serveConfig{
		"environment": read(t, map[string]string{"RATE_LIMIT": "0", "GC_INTERVAL": "0", "TOKEN_CACHE_SIZE": "0", "EVENT_RETENTION": "-1s", "GC_RUN_RETENTION": "-1s"}),
		"flags":       read(t, nil, "--rate-limit", "0", "--gc-interval", "0", "--token-cache-size", "0", "--event-retention", "-1s", "--gc-run-retention", "-1s", "--debug-listen", ""),
	} {
		if off.RateLimit != 0 || off.GC != (gcLoopConfig{}) || off.TokenCache.Size != 0 || off.DebugListen != "" || off.Retention.Events >= 0 || off.Retention.Runs >= 0 {
			t.Errorf("%s: not off: %+v", name, off)
		}
		if newTokenCache(off.TokenCache, "", nil, discard) != nil {
			t.Errorf("%s: TOKEN_CACHE_SIZE=0 built a token cache", name)
		}
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
		{map[string]string{"EVENT_RETENTION": "1h"}, 2, "event retention must be at least 24h"},
		{map[string]string{"TOKEN_CACHE_SIZE": "-1"}, 1, "must not be negative"},
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
