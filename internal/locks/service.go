package locks

import (
	"context"

	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/normalize"
)

// Service is the ownership locks of one deployment. cmd/api builds one
// with New and hands it to everything that acquires, releases or looks up
// locks (internal/apps, internal/rekey, internal/gc, the HTTP API, the
// console and the CLI).
//
// Its methods say in their signature where they run: a method without a
// transaction parameter runs on the pool (Acquire through the service's
// group-commit Batcher and prepared statements); a method that takes a
// database.Tx (AcquireTx, Release) runs inside the caller's transaction and
// does the same there; a method that takes a database.Querier runs
// unchanged on either.
type Service struct {
	db      *database.DB
	rules   Rules
	metrics *Metrics // nil: decisions are not counted
	// pool runs the acquire's statements on db: the insert through the
	// Batcher, the look-ups as prepared statements.
	pool onPool
}

// New returns the locks service on db, keying and checking keys under
// rules (the deployment's rules, with its configured aliases), counting
// its decisions on metrics. db and rules are required: a missing one is a
// wiring error and panics at start-up; metrics is optional (nil: nothing
// counted). It
// builds the pool's acquire Batcher ("locks.insertLocks"): one service per
// pool (a second panics).
func New(db *database.DB, rules Rules, metrics *Metrics) *Service {
	if db == nil || rules == nil {
		panic("locks.New: a pool and the keying rules are required")
	}
	s := &Service{db: db, rules: rules, metrics: metrics}
	s.pool = onPool{db: db, insert: database.NewBatcher(db, "locks.insertLocks", database.BatchConfig[newLock]{
		Keys: func(l newLock) []string { return []string{l.key} },
	}, func(ctx context.Context, in []newLock) ([]string, error) {
		return insertLocks(ctx, onPool{db: db}, in)
	})}
	return s
}

// Rules returns the rules the service keys under now (Keying().Current):
// for lookups, which key a URL to find its lock (OwnerOf, the console,
// GET /v1/normalize). Claims key under a Keying inside Keyed. Every
// component that keys a URL takes its rules from here, so none can key
// under other rules than the locks check keys under.
func (s *Service) Rules() *normalize.Normalizer { return s.rules.Keying().Current }

// Metrics returns the decision counters the service was built with (nil:
// none): the callers of AcquireTx, Release and DeleteUnreferenced count
// their committed decisions on them.
func (s *Service) Metrics() *Metrics { return s.metrics }

// Keying returns the rules claims are keyed and checked under now (Keyed
// runs a claim under them).
func (s *Service) Keying() *Keying { return s.rules.Keying() }

// runner is where an acquire's statements run: the pool (onPool) or a
// caller's transaction (inTx). The statements and their order are the
// same; only the transport differs.
type runner interface {
	// insertLock runs insertLocksSQL for one lock and returns its id, ""
	// when the key is taken.
	insertLock(ctx context.Context, l newLock) (string, error)
	get(ctx context.Context, dest any, query string, args ...any) error
	selectRows(ctx context.Context, dest any, query string, args ...any) error
}

// onPool runs on the pool: one-row and many-row queries as prepared
// statements (one round trip, cached plan), the insert through the
// service's Batcher, so that concurrent acquires share one statement and
// one commit.
type onPool struct {
	db     *database.DB
	insert *database.Batcher[newLock, string]
}

func (p onPool) insertLock(ctx context.Context, l newLock) (string, error) {
	return p.insert.Do(ctx, l)
}

func (p onPool) get(ctx context.Context, dest any, query string, args ...any) error {
	return p.db.GetPrepared(ctx, dest, query, args...)
}

func (p onPool) selectRows(ctx context.Context, dest any, query string, args ...any) error {
	return p.db.SelectPrepared(ctx, dest, query, args...)
}

// inTx runs in a caller's transaction, one statement at a time.
type inTx struct{ q database.Querier }

func (t inTx) insertLock(ctx context.Context, l newLock) (string, error) {
	ids, err := insertLocks(ctx, t, []newLock{l})
	if err != nil {
		return "", err
	}
	return ids[0], nil
}

func (t inTx) get(ctx context.Context, dest any, query string, args ...any) error {
	return t.q.GetContext(ctx, dest, query, args...)
}

func (t inTx) selectRows(ctx context.Context, dest any, query string, args ...any) error {
	return t.q.SelectContext(ctx, dest, query, args...)
}
