package database

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Batcher runs concurrent calls of one write as one statement: group commit.
//
// Each call of a hot autocommit write (an acquire, a create) costs Postgres
// a statement and a transaction: parse/bind/execute, a snapshot, a commit
// and its WAL flush. Under load most of that is per statement, not per row
// (make bench-http measures it). A Batcher lets the calls that arrive while
// earlier batches are running wait and then go together, as the rows of one
// statement the kind's run function builds (unnest of array parameters, one
// transaction). With no other call in flight a call runs at once, alone: a
// quiet service adds no latency; a busy one writes in batches as large as
// its concurrency.
//
// The run function runs the batch as one statement and returns one output
// per call, in order, or the statement's error. The statement is all or
// nothing, so the Batcher decides what a failure means for each call
// (isolate): a lost connection fails every call as of unknown outcome;
// any other error (a constraint one call broke, a deadlock between
// batches) re-runs each call alone, so that only the calls it concerns
// fail.
//
// A call's context bounds its wait: a caller whose context ends returns
// ctx.Err() at once; if its call was already sent it may still be applied,
// as a statement a caller abandons mid-flight may be. The batch's statement
// runs under a context that ends when every caller of the batch has given
// up (and carries the values of the first caller's context).
type Batcher[In, Out any] struct {
	name        string
	run         func(ctx context.Context, in []In) ([]Out, error)
	keys        func(In) []string
	maxSize     int
	maxInFlight int
	stallAfter  time.Duration

	mu      sync.Mutex
	queue   []*call[In, Out]
	leaders map[*leader]struct{}

	batches, calls atomic.Int64
}

// BatchConfig shapes a Batcher.
type BatchConfig[In any] struct {
	// MaxSize caps the calls of one batch (default 64).
	MaxSize int
	// MaxInFlight caps the batches running at once, each on its own
	// connection (default: a quarter of the pool, at least 1). A batch
	// beyond the first starts only when a full batch is waiting, or when
	// no batch has started for StallAfter while calls wait (lead).
	MaxInFlight int
	// StallAfter is how long a running batch may hold up the calls
	// waiting behind it before another batch starts beside it (default:
	// the pool's PoolConfig.BatchStallAfter): a batch
	// waiting for a row another transaction holds must not stall every
	// other call.
	StallAfter time.Duration
	// Keys, when set, names what a call writes that no other call of the
	// same batch may write too (a unique key): a call whose key is already
	// in the batch being formed waits for a later batch, so that a batch
	// never conflicts with itself.
	Keys func(In) []string
}

type call[In, Out any] struct {
	ctx  context.Context
	in   In
	out  Out
	err  error
	done chan struct{} // closed when out and err are set
}

// NewBatcher returns a Batcher that runs its batches with run, registered
// on db under name: name labels its stats (db.BatchStats) and metrics
// (repolock_db_batches_total{statement=name}). A pool has one Batcher per
// name: NewBatcher panics when db already has a Batcher of that name (a
// wiring bug; build each Batcher once, where its statement's owner is
// built). db sizes MaxInFlight's default from its pool and gives
// StallAfter's (PoolConfig.BatchStallAfter).
func NewBatcher[In, Out any](db *DB, name string, cfg BatchConfig[In], run func(ctx context.Context, in []In) ([]Out, error)) *Batcher[In, Out] {
	if cfg.MaxSize <= 0 {
		cfg.MaxSize = 64
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = max(1, db.cfg.MaxOpenConns/4)
	}
	if cfg.StallAfter <= 0 {
		cfg.StallAfter = db.cfg.BatchStallAfter
	}
	b := &Batcher[In, Out]{name: name, run: run, keys: cfg.Keys, maxSize: cfg.MaxSize, maxInFlight: cfg.MaxInFlight,
		stallAfter: cfg.StallAfter, leaders: make(map[*leader]struct{})}
	if _, dup := db.batchers.LoadOrStore(name, batchStatser(b)); dup {
		panic(fmt.Sprintf("database: a second Batcher named %q on one pool", name))
	}
	return b
}

// DefaultBatchStallAfter is BatchConfig.StallAfter's default
// (PoolConfig.BatchStallAfter's).
const DefaultBatchStallAfter = 50 * time.Millisecond

// Do runs in as one call of a batch and returns its result.
func (b *Batcher[In, Out]) Do(ctx context.Context, in In) (Out, error) {
	var zero Out
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	c := &call[In, Out]{ctx: ctx, in: in, done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, c)
	led := b.startLeader(time.Now())
	b.mu.Unlock()
	if led {
		select {
		case <-c.done:
			return c.out, c.err
		case <-ctx.Done():
			return zero, ctx.Err()
		}
	}
	// Behind a running batch: wait for a later one, and start one beside
	// it if none starts for stallAfter.
	t := time.NewTimer(b.stallAfter)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return c.out, c.err
		case <-ctx.Done():
			return zero, ctx.Err()
		case <-t.C:
			b.mu.Lock()
			b.startLeader(time.Now())
			b.mu.Unlock()
			t.Reset(b.stallAfter)
		}
	}
}

// leader is a goroutine running batches (lead); since is when its current
// batch started, zero between batches.
type leader struct{ since time.Time }

// startLeader starts a leader (b.mu held) when calls wait, a slot is free
// and either a full batch waits or no leader is healthy: none, or every
// one's batch has run for stallAfter. It reports whether it did.
func (b *Batcher[In, Out]) startLeader(now time.Time) bool {
	if len(b.queue) == 0 || len(b.leaders) >= b.maxInFlight {
		return false
	}
	if len(b.queue) < b.maxSize && b.healthyLeader(nil, now) {
		return false
	}
	l := &leader{}
	b.leaders[l] = struct{}{}
	go b.lead(l)
	return true
}

// healthyLeader reports whether a leader other than self is between
// batches or has run its batch for less than stallAfter (b.mu held).
func (b *Batcher[In, Out]) healthyLeader(self *leader, now time.Time) bool {
	for l := range b.leaders {
		if l != self && (l.since.IsZero() || now.Sub(l.since) < b.stallAfter) {
			return true
		}
	}
	return false
}

// BatchStats counts what a Batcher ran and what it is doing.
type BatchStats struct {
	// Batches and Calls count the batches run (or running) and the calls
	// they held.
	Batches, Calls int64
	// InFlight is the number of batches running now, Waiting the calls
	// queued for a later batch (including calls whose caller gave up and
	// that no batch has dropped yet).
	InFlight, Waiting int
}

// Stats returns how many batches ran and how many calls they held, and
// what runs and waits now.
func (b *Batcher[In, Out]) Stats() BatchStats {
	b.mu.Lock()
	inFlight, waiting := len(b.leaders), len(b.queue)
	b.mu.Unlock()
	return BatchStats{Batches: b.batches.Load(), Calls: b.calls.Load(), InFlight: inFlight, Waiting: waiting}
}

// lead runs batches as leader l until the queue is empty, or until
// another leader is healthy and less than a full batch waits.
//
// One batch in flight at a time is the rule: the calls that arrive while it
// runs make the next one, so batches grow with the load and the per-
// statement cost is paid once per batch. A second batch starts only when a
// full one (maxSize calls) is waiting, that is, when one statement at a
// time no longer keeps up, or when the running batch has stalled for
// stallAfter (waiting for a row lock, say); up to maxInFlight run then,
// each on its own connection, and the extra leaders stop once one healthy
// leader is enough. (make bench-http on 2 CPUs: one in flight gave batches
// of 15 and 10,400 acquires/s; a fixed 5 in flight, batches of 3.6 and
// 6,400/s.)
func (b *Batcher[In, Out]) lead(l *leader) {
	b.mu.Lock()
	for {
		now := time.Now()
		var batch []*call[In, Out]
		if len(b.queue) >= b.maxSize || !b.healthyLeader(l, now) {
			batch = b.take()
		}
		if len(batch) == 0 {
			delete(b.leaders, l)
			b.mu.Unlock()
			return
		}
		l.since = now
		b.mu.Unlock()
		b.exec(batch)
		b.mu.Lock()
		l.since = time.Time{}
	}
}

// take removes the next batch from the queue (b.mu held): up to maxSize
// calls in arrival order, dropping calls whose caller gave up and leaving
// in the queue those whose key the batch already holds.
func (b *Batcher[In, Out]) take() []*call[In, Out] {
	var batch []*call[In, Out]
	var seen map[string]bool
	rest := b.queue[:0]
	for _, c := range b.queue {
		switch {
		case c.ctx.Err() != nil:
			continue // Do has returned ctx.Err()
		case len(batch) == b.maxSize:
			rest = append(rest, c)
			continue
		}
		if b.keys != nil {
			ks := b.keys(c.in)
			clash := false
			for _, k := range ks {
				clash = clash || seen[k]
			}
			if clash {
				rest = append(rest, c)
				continue
			}
			if seen == nil {
				seen = make(map[string]bool)
			}
			for _, k := range ks {
				seen[k] = true
			}
		}
		batch = append(batch, c)
	}
	clear(b.queue[len(rest):])
	b.queue = rest
	return batch
}

// exec runs one batch and hands each call its result.
func (b *Batcher[In, Out]) exec(batch []*call[In, Out]) {
	b.batches.Add(1)
	b.calls.Add(int64(len(batch)))
	ctx, cancel := context.WithCancel(context.WithoutCancel(batch[0].ctx))
	defer cancel()
	var waiting atomic.Int64
	waiting.Store(int64(len(batch)))
	stops := make([]func() bool, len(batch))
	in := make([]In, len(batch))
	for i, c := range batch {
		in[i] = c.in
		stops[i] = context.AfterFunc(c.ctx, func() {
			if waiting.Add(-1) == 0 {
				cancel()
			}
		})
	}
	outs, errs := b.isolate(ctx, in)
	for i, c := range batch {
		stops[i]()
		c.out, c.err = outs[i], errs[i]
		close(c.done)
	}
}

// isolate runs in as one statement and returns each call's outcome. When
// the statement fails: a lost connection (IsConnectionError), a batch whose
// callers all gave up, or a batch of one fail every call with the error,
// marked UnknownOutcome when the connection was lost (the statement may
// have committed); any other error re-runs each call alone, so that a
// constraint one call breaks fails that call only.
func (b *Batcher[In, Out]) isolate(ctx context.Context, in []In) ([]Out, []error) {
	errs := make([]error, len(in))
	outs, err := b.runSafely(ctx, in)
	if err == nil {
		return outs, errs
	}
	outs = make([]Out, len(in))
	if len(in) == 1 || IsConnectionError(err) || ctx.Err() != nil {
		for i := range errs {
			errs[i] = UnknownOutcome(err)
		}
		return outs, errs
	}
	for i := range in {
		one, err := b.runSafely(ctx, in[i:i+1])
		if err != nil {
			errs[i] = UnknownOutcome(err)
			continue
		}
		outs[i] = one[0]
	}
	return outs, errs
}

// runSafely calls run, turning a panic or a result of the wrong length into
// an error rather than callers that wait forever.
func (b *Batcher[In, Out]) runSafely(ctx context.Context, in []In) (outs []Out, err error) {
	defer func() {
		if r := recover(); r != nil {
			outs, err = nil, fmt.Errorf("database: batch: panic: %v", r)
		}
	}()
	outs, err = b.run(ctx, in)
	if err == nil && len(outs) != len(in) {
		return nil, fmt.Errorf("database: batch: %d results for %d calls", len(outs), len(in))
	}
	return outs, err
}

// batchStatser is what the pool keeps of each of its Batchers.
type batchStatser interface{ Stats() BatchStats }

// BatchStats returns the counts of each of the pool's Batchers, by name.
func (db *DB) BatchStats() map[string]BatchStats {
	out := make(map[string]BatchStats)
	db.batchers.Range(func(name, b any) bool {
		out[name.(string)] = b.(batchStatser).Stats()
		return true
	})
	return out
}
