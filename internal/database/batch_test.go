package database_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/repolock/repolock/internal/database"
)

// unconnectedPool is a pool that never connects: the Batcher reads only its
// size.
func unconnectedPool(t *testing.T, maxOpen int) *database.DB {
	t.Helper()
	db, err := database.New("postgres://127.0.0.1:1/none?sslmode=disable", database.PoolConfig{MaxOpenConns: maxOpen})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// gate is a run function whose batches block until released, recording
// each batch it was given.
type gate struct {
	mu      sync.Mutex
	batches [][]int
	running int
	maxRun  int
	release chan struct{}
	started chan int // the size of each batch, as it starts
}

func newGate() *gate {
	return &gate{release: make(chan struct{}), started: make(chan int, 1000)}
}

// run fails a batch holding a negative number (as a constraint would); the
// Batcher then runs each of its calls alone.
func (g *gate) run(ctx context.Context, in []int) ([]string, error) {
	g.mu.Lock()
	g.batches = append(g.batches, slices.Clone(in))
	g.running++
	g.maxRun = max(g.maxRun, g.running)
	g.mu.Unlock()
	g.started <- len(in)
	<-g.release
	g.mu.Lock()
	g.running--
	g.mu.Unlock()
	out := make([]string, len(in))
	for i, v := range in {
		if v < 0 {
			return nil, fmt.Errorf("negative %d", v)
		}
		out[i] = fmt.Sprintf("out-%d", v)
	}
	return out, nil
}

// waitFor polls cond (the Batcher's state changes in other goroutines).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

type outcome struct {
	in  int
	out string
	err error
}

func doAll(ctx context.Context, b *database.Batcher[int, string], ins []int, results chan<- outcome) {
	for _, v := range ins {
		go func() {
			out, err := b.Do(ctx, v)
			results <- outcome{v, out, err}
		}()
	}
}

// TestBatcherGroupsCallsThatArriveWhileABatchRuns: the first call runs
// alone at once; the calls that arrive while it runs wait and then go as one
// batch; every caller gets its own result, and a call that fails the batch
// (-3) fails alone: the others are re-run one by one and succeed.
func TestBatcherGroupsCallsThatArriveWhileABatchRuns(t *testing.T) {
	t.Parallel()
	g := newGate()
	b := database.NewBatcher(unconnectedPool(t, 20), "test", database.BatchConfig[int]{StallAfter: time.Hour}, g.run)
	ctx := context.Background()
	results := make(chan outcome, 100)

	doAll(ctx, b, []int{0}, results)
	if n := <-g.started; n != 1 {
		t.Fatalf("first batch has %d calls, want 1 (a lone call must not wait)", n)
	}
	ins := []int{1, 2, -3, 4, 5, 6, 7, 8, 9, 10}
	doAll(ctx, b, ins, results)
	waitFor(t, "10 calls wait", func() bool { return b.Stats().Waiting == len(ins) })
	if st := b.Stats(); st.InFlight != 1 || st.Batches != 1 {
		t.Fatalf("stats %+v: a second batch started before a full one was waiting", st)
	}
	close(g.release)
	if n := <-g.started; n != len(ins) {
		t.Fatalf("second batch has %d calls, want %d", n, len(ins))
	}
	for range len(ins) + 1 {
		o := <-results
		switch {
		case o.in < 0 && (o.err == nil || o.err.Error() != fmt.Sprintf("negative %d", o.in)):
			t.Errorf("call %d: err %v, want its own error", o.in, o.err)
		case o.in >= 0 && (o.err != nil || o.out != fmt.Sprintf("out-%d", o.in)):
			t.Errorf("call %d: got %q, %v", o.in, o.out, o.err)
		}
	}
	if st := b.Stats(); st.Batches != 2 || st.Calls != 11 {
		t.Errorf("stats %+v, want 2 batches of 11 calls", st)
	}
	waitFor(t, "the leader to leave", func() bool { return b.Stats().InFlight == 0 })
}

// TestBatcherSecondBatchOnlyWhenAFullOneWaits: with one batch running, a
// second starts (up to MaxInFlight) only once MaxSize calls wait; batches
// never exceed MaxSize.
func TestBatcherSecondBatchOnlyWhenAFullOneWaits(t *testing.T) {
	t.Parallel()
	g := newGate()
	b := database.NewBatcher(unconnectedPool(t, 20), "test", database.BatchConfig[int]{MaxSize: 4, MaxInFlight: 2, StallAfter: time.Hour}, g.run)
	ctx := context.Background()
	results := make(chan outcome, 100)
	doAll(ctx, b, []int{0}, results)
	<-g.started
	doAll(ctx, b, []int{1, 2, 3}, results)
	waitFor(t, "3 calls wait", func() bool { return b.Stats().Waiting == 3 })
	if st := b.Stats(); st.InFlight != 1 {
		t.Fatalf("stats %+v: 3 waiting calls (MaxSize 4) started a second batch", st)
	}
	doAll(ctx, b, []int{4}, results)
	if n := <-g.started; n != 4 {
		t.Fatalf("the second batch has %d calls, want 4", n)
	}
	// Two batches run; a third does not start (MaxInFlight 2), however
	// many wait.
	doAll(ctx, b, []int{5, 6, 7, 8, 9, 10, 11, 12, 13}, results)
	waitFor(t, "9 calls wait", func() bool { return b.Stats().Waiting == 9 })
	if st := b.Stats(); st.InFlight != 2 {
		t.Fatalf("stats %+v, want 2 in flight", st)
	}
	close(g.release)
	for range 14 {
		if o := <-results; o.err != nil {
			t.Errorf("call %d: %v", o.in, o.err)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.maxRun != 2 {
		t.Errorf("at most %d batches ran at once, want 2", g.maxRun)
	}
	for _, batch := range g.batches {
		if len(batch) > 4 {
			t.Errorf("batch %v exceeds MaxSize 4", batch)
		}
	}
}

// TestBatcherKeysNeverShareABatch: calls with a key in common go in
// different batches, in arrival order; the others are not held back.
func TestBatcherKeysNeverShareABatch(t *testing.T) {
	t.Parallel()
	g := newGate()
	keys := func(v int) []string {
		if v >= 100 {
			return []string{fmt.Sprint("n", v/100)}
		}
		return []string{fmt.Sprint("k", v%10)}
	}
	b := database.NewBatcher(unconnectedPool(t, 20), "test", database.BatchConfig[int]{Keys: keys, StallAfter: time.Hour}, g.run)
	ctx := context.Background()
	results := make(chan outcome, 100)
	doAll(ctx, b, []int{1000}, results)
	<-g.started
	// 1 and 11 share k1; 2 and 12 share k2; 3 is alone; 201 and 202
	// share n2.
	ins := []int{1, 11, 2, 12, 3, 201, 202}
	doAll(ctx, b, ins, results)
	waitFor(t, "7 calls wait", func() bool { return b.Stats().Waiting == len(ins) })
	close(g.release)
	for range len(ins) + 1 {
		if o := <-results; o.err != nil {
			t.Errorf("call %d: %v", o.in, o.err)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, batch := range g.batches {
		seen := map[string]int{}
		for _, v := range batch {
			for _, k := range keys(v) {
				if w, ok := seen[k]; ok {
					t.Errorf("batch %v holds %d and %d, which share key %s", batch, w, v, k)
				}
				seen[k] = v
			}
		}
	}
	if len(g.batches) != 3 {
		t.Errorf("batches %v: want 3 (the lone first call, then two for the clashing keys)", g.batches)
	}
}

// TestBatcherCallerGivesUp: a caller whose context ends while it waits
// returns at once and its call is never run; when every caller of a running
// batch gives up, the batch's context ends.
func TestBatcherCallerGivesUp(t *testing.T) {
	t.Parallel()
	statementDone := make(chan struct{})
	started := make(chan []int, 10)
	run := func(ctx context.Context, in []int) ([]string, error) {
		started <- in
		<-ctx.Done()
		close(statementDone)
		return nil, ctx.Err()
	}
	b := database.NewBatcher(unconnectedPool(t, 20), "test", database.BatchConfig[int]{StallAfter: time.Hour}, run)
	first, cancelFirst := context.WithCancel(context.Background())
	firstErr := make(chan error, 1)
	go func() { _, err := b.Do(first, 1); firstErr <- err }()
	<-started

	queued, cancelQueued := context.WithCancel(context.Background())
	queuedErr := make(chan error, 1)
	go func() { _, err := b.Do(queued, 2); queuedErr <- err }()
	waitFor(t, "the second call waits", func() bool { return b.Stats().Waiting == 1 })
	cancelQueued()
	if err := <-queuedErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("queued caller: %v, want context.Canceled", err)
	}
	select {
	case <-statementDone:
		t.Fatal("the batch's context ended while its caller still waited")
	default:
	}
	cancelFirst()
	if err := <-firstErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("first caller: %v, want context.Canceled", err)
	}
	<-statementDone
	waitFor(t, "the leader to leave", func() bool { return b.Stats().InFlight == 0 })
	select {
	case in := <-started:
		t.Fatalf("a batch %v ran the call whose caller gave up", in)
	default:
	}
}

// TestBatcherStalledBatchDoesNotHoldUpTheOthers: a batch that does not
// finish (a statement waiting for a row another transaction holds) holds
// up the calls behind it only for StallAfter: then another batch starts
// beside it, and the calls complete while the first batch is still stuck.
func TestBatcherStalledBatchDoesNotHoldUpTheOthers(t *testing.T) {
	t.Parallel()
	stuck := make(chan struct{})
	run := func(ctx context.Context, in []int) ([]string, error) {
		if slices.Contains(in, 0) {
			<-stuck
		}
		out := make([]string, len(in))
		for i, v := range in {
			out[i] = fmt.Sprint(v)
		}
		return out, nil
	}
	b := database.NewBatcher(unconnectedPool(t, 20), "test", database.BatchConfig[int]{StallAfter: 5 * time.Millisecond, MaxInFlight: 2}, run)
	ctx := context.Background()
	results := make(chan outcome, 100)
	doAll(ctx, b, []int{0}, results)
	waitFor(t, "the first batch runs", func() bool { return b.Stats().Batches == 1 })
	doAll(ctx, b, []int{1, 2, 3, 4, 5}, results)
	for range 5 {
		if o := <-results; o.err != nil || o.out != fmt.Sprint(o.in) {
			t.Errorf("call %d: %q %v", o.in, o.out, o.err)
		}
	}
	select {
	case o := <-results:
		t.Fatalf("the stuck call returned: %+v", o)
	default:
	}
	if st := b.Stats(); st.InFlight > 2 {
		t.Errorf("stats %+v: more than MaxInFlight batches", st)
	}
	close(stuck)
	if o := <-results; o.in != 0 || o.err != nil {
		t.Errorf("the stuck call: %+v", o)
	}
	waitFor(t, "the leaders to leave", func() bool { return b.Stats().InFlight == 0 })
}

// TestBatcherRunPanics: a run function that panics fails its batch's calls
// with an error instead of leaving them waiting; the Batcher goes on.
func TestBatcherRunPanics(t *testing.T) {
	t.Parallel()
	run := func(ctx context.Context, in []int) ([]string, error) {
		if in[0] == 1 {
			panic("boom")
		}
		return make([]string, len(in)), nil
	}
	b := database.NewBatcher(unconnectedPool(t, 20), "test", database.BatchConfig[int]{}, run)
	if _, err := b.Do(context.Background(), 1); err == nil {
		t.Fatal("a panicking batch returned no error")
	}
	if _, err := b.Do(context.Background(), 2); err != nil {
		t.Fatalf("the next batch: %v", err)
	}
}

// TestBatcherFailedStatement: a statement that fails because the
// connection was lost fails every call of the batch, marked as of unknown
// outcome, without running them again; any other failure runs each call
// alone, so that only the call that caused it fails.
func TestBatcherFailedStatement(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		batchErr error
		wantRuns int // statements: the held one, the batch, then the calls alone
	}{
		{"connection lost", io.ErrUnexpectedEOF, 2},
		{"constraint", errors.New("constraint of 2"), 2 + 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			release := make(chan struct{})
			var mu sync.Mutex
			var runs [][]int
			run := func(_ context.Context, in []int) ([]string, error) {
				mu.Lock()
				runs = append(runs, slices.Clone(in))
				mu.Unlock()
				switch {
				case in[0] == 0:
					<-release // the held batch
				case len(in) > 1:
					return nil, tc.batchErr
				case in[0] == 2:
					return nil, errors.New("constraint of 2")
				}
				out := make([]string, len(in))
				for i, v := range in {
					out[i] = fmt.Sprint(v)
				}
				return out, nil
			}
			b := database.NewBatcher(unconnectedPool(t, 20), "test", database.BatchConfig[int]{StallAfter: time.Hour}, run)
			results := make(chan outcome, 10)
			doAll(context.Background(), b, []int{0}, results)
			waitFor(t, "the held batch runs", func() bool { return b.Stats().Batches == 1 })
			doAll(context.Background(), b, []int{1, 2, 3}, results)
			waitFor(t, "3 calls wait", func() bool { return b.Stats().Waiting == 3 })
			close(release)
			for range 4 {
				o := <-results
				switch {
				case o.in == 0:
				case errors.Is(tc.batchErr, io.ErrUnexpectedEOF):
					if !errors.Is(o.err, database.ErrCommitOutcomeUnknown) {
						t.Errorf("call %d: %v, want ErrCommitOutcomeUnknown", o.in, o.err)
					}
				case o.in == 2:
					if o.err == nil || o.err.Error() != "constraint of 2" {
						t.Errorf("call 2: %v, want its constraint error", o.err)
					}
				case o.err != nil || o.out != fmt.Sprint(o.in):
					t.Errorf("call %d: %q %v, want success", o.in, o.out, o.err)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(runs) != tc.wantRuns {
				t.Errorf("statements run: %v, want %d", runs, tc.wantRuns)
			}
		})
	}
}

// TestBatcherNames: a Batcher is registered on its pool under its name at
// construction (BatchStats, metrics); a second one of the same name on the
// same pool is a wiring bug and panics; another pool may use the name.
func TestBatcherNames(t *testing.T) {
	t.Parallel()
	db := unconnectedPool(t, 20)
	run := func(_ context.Context, in []int) ([]string, error) {
		out := make([]string, len(in))
		for i, v := range in {
			out[i] = fmt.Sprint(v)
		}
		return out, nil
	}
	a := database.NewBatcher(db, "a", database.BatchConfig[int]{}, run)
	if st, ok := db.BatchStats()["a"]; !ok || st != (database.BatchStats{}) {
		t.Fatalf("stats of a new Batcher: %+v, %v; want zero, present", st, ok)
	}
	if out, err := a.Do(t.Context(), 7); err != nil || out != "7" {
		t.Fatalf("Do = %q, %v", out, err)
	}
	if st := db.BatchStats()["a"]; st.Batches != 1 || st.Calls != 1 {
		t.Fatalf("stats after one call: %+v", st)
	}
	func() {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), `"a"`) {
				t.Fatalf("a second Batcher named a: recovered %v, want a panic naming it", r)
			}
		}()
		database.NewBatcher(db, "a", database.BatchConfig[string]{}, func(context.Context, []string) ([]int, error) { return nil, nil })
	}()
	database.NewBatcher(unconnectedPool(t, 20), "a", database.BatchConfig[int]{}, run)
	if got := len(db.BatchStats()); got != 1 {
		t.Fatalf("%d Batchers on the pool, want 1", got)
	}
}

// TestPoolMetrics: a pool given a registry registers its pool statistics
// and its Batchers' counts there, under the names docs/operations.md
// lists; a second pool on the same registry is an error.
func TestPoolMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	db, err := database.New("postgres://127.0.0.1:1/none?sslmode=disable", database.PoolConfig{MaxOpenConns: 7, Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b := database.NewBatcher(db, "x.insert", database.BatchConfig[int]{}, func(_ context.Context, in []int) ([]string, error) {
		return make([]string, len(in)), nil
	})
	for range 3 {
		if _, err := b.Do(t.Context(), 1); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]float64{
		`go_sql_max_open_connections{db_name="repolock"}`:     7,
		`repolock_db_batches_total{statement="x.insert"}`:     3,
		`repolock_db_batch_calls_total{statement="x.insert"}`: 3,
	}
	got := gather(t, reg)
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
	if _, err := database.New("postgres://127.0.0.1:1/none?sslmode=disable", database.PoolConfig{Metrics: reg}); err == nil {
		t.Error("a second pool on the same registry: no error")
	}
}

// gather returns the registry's samples by name{labels}.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			name := mf.GetName()
			if len(labels) > 0 {
				name += "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.GetCounter() != nil:
				out[name] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[name] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}
