package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/repolock/repolock/internal/dbtest"
)

// TestEventsCommand: repolock events prints the cursor of now; with --after the
// events since, filtered by --user and --kinds; --follow prints an event
// committed while it runs.
func TestEventsCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, url := dbtest.NewWithURL(t)
	svc := testServices(t, db)
	alice, _, err := svc.tenants.Create(ctx, "alice", "")
	if err != nil {
		t.Fatal(err)
	}
	bob, _, err := svc.tenants.Create(ctx, "bob", "")
	if err != nil {
		t.Fatal(err)
	}
	getenv := func(k string) string {
		if k == "DATABASE_URL" {
			return url
		}
		return ""
	}
	run := func(ctx context.Context, stdout io.Writer, args ...string) (int, string) {
		var errb bytes.Buffer
		code := run(ctx, &env{stdout: stdout, stderr: &errb, getenv: getenv}, args)
		return code, errb.String()
	}
	var out bytes.Buffer
	code, stderr := run(ctx, &out, "events")
	cursor, ok := strings.CutPrefix(strings.TrimSpace(stderr), "cursor: ")
	if code != 0 || !ok || out.Len() != 0 {
		t.Fatalf("repolock events: %d %q %q", code, out.String(), stderr)
	}
	// A cursor is bound to its scope: alice's view has its own.
	_, stderr = run(ctx, &out, "events", "--user", "alice")
	aliceCursor := strings.TrimPrefix(strings.TrimSpace(stderr), "cursor: ")
	if _, err := svc.locks.Acquire(ctx, alice.ID, "https://github.com/acme/one"); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.locks.Acquire(ctx, bob.ID, "https://github.com/bob/one"); err != nil {
		t.Fatal(err)
	}
	// The horizon may trail behind other tests' transactions, and it is
	// not monotonic from one read to the next: a transaction of another
	// database that ends between a read's snapshot and its look at pg_locks
	// still counts (docs/watch.md). So every read that expects events asks
	// again until they are there.
	readUntil := func(lines int, args ...string) string {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			out.Reset()
			code, stderr := run(ctx, &out, args...)
			if code != 0 {
				t.Fatalf("repolock %s: %d %s", strings.Join(args, " "), code, stderr)
			}
			if strings.Count(out.String(), "\n") >= lines || time.Now().After(deadline) {
				return out.String()
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if lines := strings.Split(strings.TrimSpace(readUntil(2, "events", "--after", cursor)), "\n"); len(lines) != 2 || !strings.Contains(lines[0], "acquired   github.com/acme/one  alice") || !strings.Contains(lines[1], "github.com/bob/one  bob") {
		t.Fatalf("repolock events --after:\n%s", out.String())
	}
	if got := readUntil(1, "events", "--after", aliceCursor, "--user", "alice", "--json"); strings.Count(got, "\n") != 1 || !strings.Contains(got, `"normalized_url":"github.com/acme/one"`) {
		t.Fatalf("repolock events --user alice --json: %q", got)
	}
	out.Reset()
	if code, _ = run(ctx, &out, "events", "--after", cursor, "--kinds", "denied"); code != 0 || out.Len() != 0 {
		t.Fatalf("repolock events --kinds denied: %d %q", code, out.String())
	}
	if code, stderr = run(ctx, &out, "events", "--kinds", "exploded"); code != 2 {
		t.Fatalf("unknown kind: %d %s", code, stderr)
	}

	// --follow prints what comes while it runs.
	fctx, stop := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	done := make(chan int)
	go func() {
		code, _ := run(fctx, pw, "events", "--follow", "--user", "alice")
		pw.Close()
		done <- code
	}()
	got := make(chan string, 1)
	go func() {
		lines := bufio.NewScanner(pr)
		if lines.Scan() {
			got <- lines.Text()
		}
		close(got)
	}()
	// Acquire until one shows: the follower takes its starting cursor when
	// it has connected, which the test cannot see.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		if _, err := svc.locks.Acquire(ctx, alice.ID, fmt.Sprintf("https://github.com/acme/f%d", i)); err != nil {
			t.Fatal(err)
		}
		select {
		case line := <-got:
			if !strings.Contains(line, "acquired   github.com/acme/f") {
				t.Fatalf("--follow printed %q", line)
			}
		case <-tick.C:
			if i > 300 {
				t.Fatal("--follow printed nothing")
			}
			continue
		}
		break
	}
	stop()
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if code := <-done; code != 0 {
		t.Fatalf("--follow exited %d", code)
	}
}
