package main

import (
	"context"
	"strings"
	"testing"

	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/gc"
)

// TestCommandsWaitForTheDatabase: repolock gc, rekey, report and migrate, started
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
			t.Fatalf("repolock gc with CONNECT_TIMEOUT=0 while refused: exit %d\n%s", code, stderr)
		}
	})
	t.Run("gives up", func(t *testing.T) {
		proxy.Refuse()
		defer proxy.Restore()
		code, _, stderr := c.run(context.Background(), "gc", "--connect-timeout", "600ms")
		if code != 1 || !strings.Contains(stderr, "gave up waiting for the database") {
			t.Fatalf("repolock gc --connect-timeout 600ms while refused: exit %d\n%s", code, stderr)
		}
	})
	t.Run("negative", func(t *testing.T) {
		code, _, stderr := c.run(context.Background(), "gc", "--connect-timeout", "-1s")
		if code != 2 || !strings.Contains(stderr, "--connect-timeout must not be negative") {
			t.Fatalf("repolock gc --connect-timeout -1s: exit %d\n%s", code, stderr)
		}
	})
}

// TestGCWaitsThroughAnOutage: a COMMIT cut while repolock gc loads the keying
// rules (the database went away) is retried once the database answers; a
// collection cut mid-run (the database refusing connections while it
// deletes batches) is run again once it is back. The command exits 0 (collected, or skipped while the cut
// run's lease stands), as a scheduled GC through a failover should.
func TestGCWaitsThroughAnOutage(t *testing.T) {
	t.Parallel()
	c := newGCCLI(t)
	proxy, proxied := dbtest.NewProxy(t, c.env["DATABASE_URL"])
	c.env["DATABASE_URL"] = proxied
	c.env["LOG_FORMAT"] = "text"
	c.env["LOG_LEVEL"] = "info"
	c.env["CONNECT_TIMEOUT"] = "1m"

	t.Run("commit cut while loading", func(t *testing.T) {
		c.orphans(3)
		cut := proxy.CutNextCommit()
		code, stdout, stderr := c.run(context.Background(), "gc", "--min-age", "1m")
		select {
		case <-cut:
		default:
			t.Fatalf("no COMMIT was cut:\n%s", stderr)
		}
		if code != 0 || !strings.Contains(stderr, `waiting_for="the database, to load the keying rules"`) || !strings.Contains(stderr, "the database is back") {
			t.Fatalf("repolock gc with a COMMIT cut: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		if r := decodeRun(t, stdout); r.Status != gc.StatusSucceeded || r.Deleted != 3 {
			t.Fatalf("run after the outage = %+v", r)
		}
	})
	t.Run("database gone mid-run", func(t *testing.T) {
		c.orphans(20000) // 200 batches of 100: long enough to be cut
		var out, errb syncBuffer
		e := &env{stdout: &out, stderr: &errb, getenv: func(k string) string { return c.env[k] }}
		exited := make(chan int, 1)
		go func() {
			exited <- run(context.Background(), e, []string{"gc", "--min-age", "1m", "--batch-size", "100"})
		}()
		errb.waitForLine(t, exited, "gc: run started")
		proxy.Refuse() // the database goes away mid-run (a reset alone is retried by the pool)
		errb.waitForLine(t, exited, "waiting for the database", "to run the collection again")
		proxy.Restore()
		if code := <-exited; code != 0 {
			t.Fatalf("repolock gc cut mid-run: exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
		}
		if r := decodeRun(t, out.String()); r.Status != gc.StatusSucceeded && r.Status != gc.StatusSkipped {
			t.Fatalf("run after the outage = %+v", r)
		}
	})
}
