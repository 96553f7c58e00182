package syncstate

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
)

// TestConcurrentEventsIndexResultsAndResets runs event batches from two
// hosts (so repositories move back and forth), index results, listings and
// resets against the same repositories at once. Retries are switched off,
// so a deadlock would surface as an error: locks are taken in one order.
// While it runs, a watcher checks that last_indexed_rev and
// first_cursor_since_reset (for an unchanged host) never decrease; at the
// end last_indexed_rev is exactly the largest indexed rev of each
// repository and the host cursors the largest cursor sent.
func TestConcurrentEventsIndexResultsAndResets(t *testing.T) {
	t.Parallel()
	f := newFixture(t, dbtest.Pool(database.PoolConfig{Retry: database.RetryPolicy{MaxAttempts: 1}}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hosts := []string{"a.example", "b.example"}
	for _, h := range hosts {
		f.putHost(t, h)
	}
	repos := make([]string, 12)
	for i := range repos {
		repos[i] = fmt.Sprintf("did:plc:%02d", i)
	}
	// Half the repositories exist before the run, half are created by it.
	for _, r := range repos[:6] {
		f.indexed(t, r, hosts[0], rev(0), 0)
	}

	var (
		revCounter  atomic.Int64
		mu          sync.Mutex
		maxIndexed  = map[string]string{}
		maxCursor   = map[string]int64{}
		maxFirst    = map[string]int64{}
		wg          sync.WaitGroup
		errs        = make(chan error, 100)
		writersDone = make(chan struct{})
	)
	for _, r := range repos[:6] {
		maxIndexed[r] = rev(0)
	}
	nextRev := func() string { return rev(int(revCounter.Add(1))) }
	fail := func(err error) {
		select {
		case errs <- err:
		default:
		}
	}

	// Two event streams per host, on disjoint cursor ranges.
	for hi, h := range hosts {
		for stream := 0; stream < 2; stream++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(hi), uint64(stream)))
				cursor := int64(stream) * 1_000_000
				for range 25 {
					var events []Event
					for range 1 + rng.IntN(10) {
						cursor++
						events = append(events, Event{Cursor: cursor, Repo: repos[rng.IntN(len(repos))], Rev: nextRev(), TooBig: rng.IntN(10) == 0})
					}
					if _, err := f.store.ApplyEvents(ctx, f.tenant, h, events); err != nil {
						fail(fmt.Errorf("events on %s: %w", h, err))
						return
					}
					mu.Lock()
					maxCursor[h] = max(maxCursor[h], cursor)
					mu.Unlock()
				}
			}()
		}
	}
	// Indexers.
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range 40 {
				r, h := repos[rng.IntN(len(repos))], hosts[rng.IntN(len(hosts))]
				host, err := f.store.GetHost(ctx, f.tenant, h)
				if err != nil {
					fail(err)
					return
				}
				rv := nextRev()
				if _, err := f.store.RecordIndexed(ctx, f.tenant, r, IndexResult{Host: h, Rev: rv, CursorBefore: host.FirstCursorSinceReset}); err != nil {
					fail(fmt.Errorf("indexed %s: %w", r, err))
					return
				}
				mu.Lock()
				if rv > maxIndexed[r] {
					maxIndexed[r] = rv
				}
				mu.Unlock()
			}
		}()
	}
	// A lister and a resetter.
	wg.Add(2)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(3, 3))
		for range 20 {
			h := hosts[rng.IntN(len(hosts))]
			host, err := f.store.GetHost(ctx, f.tenant, h)
			if err != nil {
				fail(err)
				return
			}
			var listed []ListedRepo
			for _, i := range rng.Perm(len(repos))[:4] {
				listed = append(listed, ListedRepo{Repo: repos[i], Rev: nextRev()})
			}
			if _, err := f.store.RecordListing(ctx, f.tenant, h, host.FirstCursorSinceReset, listed); err != nil {
				fail(fmt.Errorf("listing: %w", err))
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		for i := range 10 {
			h := hosts[i%2]
			first := int64(500_000 + i*10)
			if _, err := f.store.Connect(ctx, f.tenant, h, Connection{OutdatedCursor: true, FirstCursor: &first}); err != nil {
				fail(fmt.Errorf("connect: %w", err))
				return
			}
			mu.Lock()
			maxFirst[h] = max(maxFirst[h], first)
			mu.Unlock()
		}
	}()
	// The watcher.
	var watcher sync.WaitGroup
	watcher.Add(1)
	go func() {
		defer watcher.Done()
		type seen struct {
			host string
			lir  string
			fcsr int64
		}
		last := map[string]seen{}
		for {
			select {
			case <-writersDone:
				return
			default:
			}
			rs, _, err := f.store.ListRepositories(ctx, f.tenant, ListOptions{PageSize: MaxPageSize})
			if err != nil {
				fail(err)
				return
			}
			for _, r := range rs {
				p, ok := last[r.Repo]
				if ok && r.LastIndexedRev < p.lir {
					fail(fmt.Errorf("%s: last_indexed_rev went back from %s to %s", r.Repo, p.lir, r.LastIndexedRev))
				}
				if ok && p.host == r.Host && r.FirstCursorSinceReset < p.fcsr {
					fail(fmt.Errorf("%s: first_cursor_since_reset went back from %d to %d", r.Repo, p.fcsr, r.FirstCursorSinceReset))
				}
				last[r.Repo] = seen{r.Host, r.LastIndexedRev, r.FirstCursorSinceReset}
			}
		}
	}()
	wg.Wait()
	close(writersDone)
	watcher.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}

	for _, r := range repos {
		got := f.repo(t, r)
		if want := maxIndexed[r]; got.LastIndexedRev != want {
			t.Errorf("%s: last_indexed_rev %q, want the largest indexed rev %q", r, got.LastIndexedRev, want)
		}
		if got.FirstCursorSinceReset > 0 && got.FirstCursorSinceReset > maxFirst[got.Host] && got.FirstCursorSinceReset > maxCursor[got.Host] {
			t.Errorf("%s: first_cursor_since_reset %d beyond anything host %s reached", r, got.FirstCursorSinceReset, got.Host)
		}
	}
	for _, h := range hosts {
		got := f.host(t, h)
		if got.Cursor == nil || *got.Cursor != maxCursor[h] || got.FirstCursorSinceReset != maxFirst[h] {
			t.Errorf("host %s: cursor %v fcsr %d, want %d and %d", h, got.Cursor, got.FirstCursorSinceReset, maxCursor[h], maxFirst[h])
		}
	}
}

// TestBatchIsAllOrNothing injects a failure on one repository of a batch:
// no repository and not the host's cursor may change.
func TestBatchIsAllOrNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.putHost(t, pds)
	f.indexed(t, "did:a", pds, rev(1), 0)
	f.events(t, pds, Event{Cursor: 1, Repo: "did:a", Rev: rev(2)})
	if _, err := f.db.ExecContext(ctx, `
		CREATE FUNCTION test_poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.repo = 'did:poison' AND NEW.first_rev_since_reset IS NOT NULL THEN
				RAISE EXCEPTION 'injected failure';
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER test_poison BEFORE INSERT OR UPDATE ON sync_repositories
			FOR EACH ROW EXECUTE FUNCTION test_poison();`); err != nil {
		t.Fatal(err)
	}
	for name, apply := range map[string]func(context.Context, string, string, []Event) (EventsResult, error){
		"batch": f.store.ApplyEvents, "one-by-one": f.store.applyEventsOneByOne,
	} {
		_, err := apply(ctx, f.tenant, pds, []Event{
			{Cursor: 2, Repo: "did:a", Rev: rev(3)},
			{Cursor: 3, Repo: "did:new", Rev: rev(3)},
			{Cursor: 4, Repo: "did:poison", Rev: rev(3)},
		})
		if err == nil {
			t.Fatalf("%s: the injected failure did not surface", name)
		}
		f.assertRepo(t, "did:a", ind{Host: pds, LIR: rev(1), LFR: rev(2)})
		if _, err := f.store.GetRepository(ctx, f.tenant, "did:new"); err == nil {
			t.Fatalf("%s: did:new was created by a failed batch", name)
		}
		if h := f.host(t, pds); *h.Cursor != 1 {
			t.Fatalf("%s: host cursor moved to %d by a failed batch", name, *h.Cursor)
		}
	}
}

// TestInvariantTriggers: SQL that bypasses the package cannot break the
// never-decrease invariants either.
func TestInvariantTriggers(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.putHost(t, pds)
	f.putHost(t, "other.example")
	f.connect(t, pds, true, ptr(int64(100)))
	f.events(t, pds, Event{Cursor: 100, Repo: "did:a", Rev: rev(5)})
	f.indexed(t, "did:a", pds, rev(5), 100)

	for _, tc := range []struct {
		name, sql, constraint string
	}{
		{"last_indexed_rev back", `UPDATE sync_repositories SET last_indexed_rev = $1 WHERE repo = 'did:a'`, "sync_repositories_last_indexed_rev_never_decreases"},
		{"last_indexed_rev unset", `UPDATE sync_repositories SET last_indexed_rev = NULL WHERE repo = 'did:a' AND $1 <> ''`, "sync_repositories_last_indexed_rev_never_decreases"},
		{"repository cursor back", `UPDATE sync_repositories SET first_cursor_since_reset = 99 WHERE repo = 'did:a' AND $1 <> ''`, "sync_repositories_first_cursor_never_decreases"},
		{"host cursor back", `UPDATE sync_hosts SET cursor = 99 WHERE name = 'pds.example.com' AND $1 <> ''`, "sync_hosts_cursor_never_decreases"},
		{"host first cursor back", `UPDATE sync_hosts SET first_cursor_since_reset = 99 WHERE name = 'pds.example.com' AND $1 <> ''`, "sync_hosts_first_cursor_never_decreases"},
	} {
		_, err := f.db.ExecContext(ctx, tc.sql, rev(4))
		if database.PQCode(err) != database.CodeCheckViolation || database.Constraint(err) != tc.constraint {
			t.Errorf("%s: err %v (code %q, constraint %q), want 23514 on %s", tc.name, err, database.PQCode(err), database.Constraint(err), tc.constraint)
		}
	}
	// Moving to another host may lower the repository's cursor: it is a
	// value of another sequence.
	if _, err := f.db.ExecContext(ctx, `
		UPDATE sync_repositories SET host_id = (SELECT id FROM sync_hosts WHERE name = 'other.example'), first_cursor_since_reset = 0
		WHERE repo = 'did:a'`); err != nil {
		t.Fatalf("move with a lower cursor: %v", err)
	}
	f.assertRepo(t, "did:a", ind{Host: "other.example", LIR: rev(5), FRSR: rev(5), FCSR: 0})
}
