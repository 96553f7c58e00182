package repostate_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/repostate"
	"github.com/repolock/repolock/internal/repostate/kv/kvtest"
)

// TestConcurrentCommitsOneBranch: 16 goroutines commit to one branch at
// once. Every commit lands exactly once in the log (no lost update), the
// log is one first-parent chain, and generations count up by one.
func TestConcurrentCommitsOneBranch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// Generous retries: every commit must eventually win.
	svc := e.service(e.raw, repostate.RetryPolicy{MaxAttempts: 1000, BaseDelay: time.Millisecond, MaxDelay: 20 * time.Millisecond})
	tenant := newTenant()
	e.create(tenant, "busy")
	const (
		workers   = 16
		perWorker = 5
	)
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		mu    sync.Mutex
		ids   = map[string]string{} // message -> id
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := range perWorker {
				msg := fmt.Sprintf("worker %d commit %d", w, i)
				c, err := svc.Commit(context.Background(), tenant, "busy", "main", repostate.CommitParams{Message: msg})
				if err != nil {
					t.Errorf("%s: %v", msg, err)
					return
				}
				mu.Lock()
				ids[msg] = c.ID
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	if t.Failed() {
		return
	}
	log, next, err := svc.Log(e.ctx, tenant, "busy", "main", "", 1000)
	if err != nil || next != "" {
		t.Fatalf("Log: next %q, %v", next, err)
	}
	if len(log) != workers*perWorker+1 {
		t.Fatalf("log has %d commits, want %d", len(log), workers*perWorker+1)
	}
	seen := map[string]int{}
	for i, c := range log {
		seen[c.Message]++
		if want := len(log) - i; c.Generation != want {
			t.Fatalf("commit %d has generation %d, want %d", i, c.Generation, want)
		}
		if i+1 < len(log) && (len(c.Parents) != 1 || c.Parents[0] != log[i+1].ID) {
			t.Fatalf("commit %d's parent %v is not the next commit in the log %s", i, c.Parents, log[i+1].ID)
		}
	}
	for msg, id := range ids {
		if seen[msg] != 1 {
			t.Fatalf("%q appears %d times in the log, want once", msg, seen[msg])
		}
		if got, err := svc.GetCommit(e.ctx, tenant, "busy", id); err != nil || got.Message != msg {
			t.Fatalf("GetCommit(%s) = %+v, %v", id, got, err)
		}
	}
	if seen[repostate.InitialCommitMessage] != 1 {
		t.Fatal("the initial commit is not at the end of the log")
	}
}

// TestCommitRetryLimit: when the branch moves before every attempt's
// SetIf, Commit makes exactly MaxAttempts attempts and fails with 409
// conflict, reporting the attempts.
func TestCommitRetryLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tenant := newTenant()
	e.create(tenant, "moving")
	other := e.service(e.raw, repostate.RetryPolicy{})
	for _, maxAttempts := range []int{1, 3, 7} {
		svc := e.service(e.faults, repostate.RetryPolicy{MaxAttempts: maxAttempts, BaseDelay: time.Microsecond, MaxDelay: time.Millisecond})
		var (
			mu       sync.Mutex
			attempts int
			moveErr  error
		)
		e.faults.SetHook(func(ctx context.Context, w kvtest.Write) error {
			if w.Op != "SetIf" || string(w.Key) != "branches/main" {
				return nil
			}
			mu.Lock()
			attempts++
			mu.Unlock()
			// Another writer gets in first, every time.
			if _, err := other.Commit(ctx, tenant, "moving", "main", repostate.CommitParams{Message: "interloper"}); err != nil {
				moveErr = err
			}
			return nil
		})
		_, err := svc.Commit(e.ctx, tenant, "moving", "main", repostate.CommitParams{Message: "unlucky"})
		e.faults.SetHook(nil)
		if moveErr != nil {
			t.Fatal(moveErr)
		}
		wantCode(t, "commit that never wins", err, repolock.EConflict)
		if attempts != maxAttempts {
			t.Fatalf("MaxAttempts %d: %d attempts", maxAttempts, attempts)
		}
		if got := repolock.ErrorDetails(err)["attempts"]; got != maxAttempts {
			t.Fatalf("error details attempts = %v, want %d", got, maxAttempts)
		}
		log, _, err := other.Log(e.ctx, tenant, "moving", "main", "", 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range log {
			if c.Message == "unlucky" {
				t.Fatal("the failed commit is in the log")
			}
		}
	}
}

// TestConcurrentCommitsLowRetryLimit: with 2 attempts each, 16 racing
// committers either land once or fail with conflict; the log holds exactly
// those that landed.
func TestConcurrentCommitsLowRetryLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	svc := e.service(e.raw, repostate.RetryPolicy{MaxAttempts: 2, BaseDelay: time.Microsecond, MaxDelay: time.Microsecond})
	tenant := newTenant()
	e.create(tenant, "race")
	const workers = 16
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		results = make([]error, workers)
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, results[w] = svc.Commit(context.Background(), tenant, "race", "main", repostate.CommitParams{Message: fmt.Sprintf("w%d", w)})
		}()
	}
	close(start)
	wg.Wait()
	landed := map[string]bool{}
	for w, err := range results {
		switch {
		case err == nil:
			landed[fmt.Sprintf("w%d", w)] = true
		case !repolock.IsCode(err, repolock.EConflict):
			t.Fatalf("worker %d: %v, want nil or conflict", w, err)
		}
	}
	// A conditional write only fails because another one succeeded, so
	// however the attempts interleave, someone lands.
	if len(landed) == 0 {
		t.Fatalf("no commit landed among %d committers: every failure must be caused by a success", workers)
	}
	log, _, err := svc.Log(e.ctx, tenant, "race", "main", "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != len(landed)+1 {
		t.Fatalf("log has %d commits, %d landed", len(log), len(landed))
	}
	for _, c := range log[:len(log)-1] {
		if !landed[c.Message] {
			t.Fatalf("log holds %q, which did not land", c.Message)
		}
		delete(landed, c.Message)
	}
	t.Logf("%d of %d committers landed within 2 attempts", len(log)-1, workers)
}

func TestCommitIDIsContentAddressed(t *testing.T) {
	t.Parallel()
	base := repostate.Commit{
		Version: 1, Committer: "a", Message: "m", MetaRangeID: "r",
		CreationDate: time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC),
		Parents:      []string{"p"}, Metadata: map[string]string{"x": "1", "y": "2"}, Generation: 2,
	}
	id := repostate.CommitID(base)
	if len(id) != 64 {
		t.Fatalf("id %q", id)
	}
	same := base
	same.ID = "ignored"
	same.Metadata = map[string]string{"y": "2", "x": "1"}
	same.CreationDate = base.CreationDate.In(time.FixedZone("X", 3600))
	if repostate.CommitID(same) != id {
		t.Fatal("equal commits have different ids")
	}
	noMeta := base
	noMeta.Metadata, noMeta.Parents = nil, nil
	emptyMeta := base
	emptyMeta.Metadata, emptyMeta.Parents = map[string]string{}, []string{}
	if repostate.CommitID(noMeta) != repostate.CommitID(emptyMeta) {
		t.Fatal("nil and empty metadata/parents hash differently")
	}
	changes := []func(c *repostate.Commit){
		func(c *repostate.Commit) { c.Version = 2 },
		func(c *repostate.Commit) { c.Committer = "b" },
		func(c *repostate.Commit) { c.Message = "m2" },
		func(c *repostate.Commit) { c.MetaRangeID = "r2" },
		func(c *repostate.Commit) { c.CreationDate = c.CreationDate.Add(time.Nanosecond) },
		func(c *repostate.Commit) { c.Parents = []string{"q"} },
		func(c *repostate.Commit) { c.Metadata = map[string]string{"x": "1"} },
		func(c *repostate.Commit) { c.Generation = 3 },
	}
	for i, change := range changes {
		c := base
		c.Metadata = map[string]string{"x": "1", "y": "2"}
		change(&c)
		if repostate.CommitID(c) == id {
			t.Fatalf("change %d did not change the id", i)
		}
	}
}

func TestLogPaging(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tenant := newTenant()
	e.create(tenant, "paged")
	for i := range 11 {
		e.clock.Advance(time.Second)
		e.commit(tenant, "paged", "main", fmt.Sprintf("c%02d", i))
	}
	var msgs []string
	from, pages := "", 0
	for {
		page, next, err := e.svc.Log(e.ctx, tenant, "paged", "main", from, 5)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, c := range page {
			msgs = append(msgs, c.Message)
		}
		if next == "" {
			break
		}
		from = next
	}
	want := []string{"c10", "c09", "c08", "c07", "c06", "c05", "c04", "c03", "c02", "c01", "c00", repostate.InitialCommitMessage}
	if fmt.Sprint(msgs) != fmt.Sprint(want) || pages != 3 {
		t.Fatalf("log over %d pages = %v, want %v over 3", pages, msgs, want)
	}
	_, _, err := e.svc.Log(e.ctx, tenant, "paged", "main", "not-a-commit", 5)
	wantCode(t, "Log from a bad token", err, repolock.EInvalid)
	_, _, err = e.svc.Log(e.ctx, tenant, "paged", "nope", "", 5)
	wantCode(t, "Log of a missing branch", err, repolock.ENotFound)
}
