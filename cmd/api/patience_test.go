package main

import (
	"context"
	"strings"
	"testing"

	"github.com/repolock/repolock/internal/dbtest"
)

// TestCommandsWaitForTheDatabase: api gc, rekey, report and migrate, started
// while the database refuses connections, log what they wait for, retry
// with backoff and finish once it comes back (a failover within
// --connect-timeout); with --connect-timeout 0 they fail at once, as before.
func TestCommandsWaitForTheDatabase(t *testing.T) {
	t.Parallel()
	c := newGCCLI(t)
	c.orphans(3)
	proxy, proxied := dbtest.NewProxy(t, c.env["DATABASE_URL"])
	c.env["DATABASE_URL"] = proxied
	c.env["CONNECT_TIMEOUT"] = "2m"
	c.env["LOG_LEVEL"] = "info"
	c.env["LOG_FORMAT"] = "text"
	commands := []struct {
		name string
		args []string
		out  string // on stdout once it ran
	}{
		{"gc", []string{"gc", "--min-age", "1m"}, `"deleted": 3`},
		{"rekey", []string{"rekey", "--dry-run", "--quiet"}, `"stale_locks"`},
		{"report", []string{"report", "gc_runs", "--format", "csv"}, "status"},
		{"migrate", []string{"migrate", "version"}, ""},
	}
	for _, cmd := range commands {
		t.Run(cmd.name, func(t *testing.T) {
			proxy.Refuse()
			var out, errb syncBuffer
			e := &env{stdout: &out, stderr: &errb, getenv: func(k string) string { return c.env[k] }}
			exited := make(chan int, 1)
			go func() { exited <- run(context.Background(), e, cmd.args) }()
			errb.waitForLine(t, exited, "waiting for the database", "attempt=2", "connection refused")
			proxy.Restore()
			if code := <-exited; code != 0 {
				t.Fatalf("api %s after the database came back: exit %d\nstdout:\n%s\nstderr:\n%s", cmd.name, code, out.String(), errb.String())
			}
			if !strings.Contains(errb.String(), "the database is back") {
				t.Fatalf("api %s did not log that the database is back:\n%s", cmd.name, errb.String())
			}
			if !strings.Contains(out.String(), cmd.out) {
				t.Fatalf("api %s printed:\n%s\nwant %q", cmd.name, out.String(), cmd.out)
			}
		})
	}

	t.Run("no patience", func(t *testing.T) {
		proxy.Refuse()
		defer proxy.Restore()
		c.env["CONNECT_TIMEOUT"] = "0"
		defer func() { c.env["CONNECT_TIMEOUT"] = "2m" }()
		code, _, stderr := c.run(context.Background(), "gc")
		if code != 1 || !strings.Contains(stderr, "connection refused") || strings.Contains(stderr, "waiting for the database") {
			t.Fatalf("api gc with CONNECT_TIMEOUT=0 while refused: exit %d\n%s", code, stderr)
		}
	})
	t.Run("gives up", func(t *testing.T) {
		proxy.Refuse()
		defer proxy.Restore()
		code, _, stderr := c.run(context.Background(), "gc", "--connect-timeout", "600ms")
		if code != 1 || !strings.Contains(stderr, "gave up waiting for the database") {
			t.Fatalf("api gc --connect-timeout 600ms while refused: exit %d\n%s", code, stderr)
		}
	})
	t.Run("negative", func(t *testing.T) {
		code, _, stderr := c.run(context.Background(), "gc", "--connect-timeout", "-1s")
		if code != 2 || !strings.Contains(stderr, "--connect-timeout must not be negative") {
			t.Fatalf("api gc --connect-timeout -1s: exit %d\n%s", code, stderr)
		}
	})
}
