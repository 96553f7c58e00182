package repostate_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/repostate"
	"github.com/repolock/repolock/internal/repostate/kv"
	"github.com/repolock/repolock/internal/repostate/kv/kvtest"
	"github.com/repolock/repolock/internal/tenants"
)

// clock is a settable clock for tests.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// env is one test's world: a fresh database, the raw store, a fault
// wrapper around it, a Service and a Cleaner on the wrapper, and a clock.
type env struct {
	t       *testing.T
	ctx     context.Context
	db      *database.DB
	raw     kv.Store
	faults  *kvtest.FaultStore
	svc     *repostate.Service
	clock   *clock
	cleaner *repostate.Cleaner
	// tenants is the tenants service on db (no token cache).
	tenants *tenants.Service
}

const initialTimeout = 2 * time.Minute

// quiet drops the services' logs; tests assert on results, not log lines.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newEnv(t *testing.T) *env {
	return newEnvWithDB(t, dbtest.New(t))
}

func newEnvWithDB(t *testing.T, db *database.DB) *env {
	t.Helper()
	e := &env{t: t, ctx: context.Background(), db: db, clock: newClock(), tenants: tenants.New(db, nil)}
	e.raw = kv.NewPostgres(db)
	e.faults = kvtest.NewFaultStore(e.raw)
	e.svc = e.service(e.faults, repostate.RetryPolicy{})
	e.cleaner = repostate.NewStoreCleaner(e.faults, repostate.CleanerConfig{InitialTimeout: initialTimeout, Now: e.clock.Now, BatchSize: 7, Logger: quiet})
	return e
}

// service returns another Service on store sharing the env's clock.
func (e *env) service(store kv.Store, retry repostate.RetryPolicy) *repostate.Service {
	return repostate.New(store, repostate.Config{InitialTimeout: initialTimeout, Now: e.clock.Now, CommitRetry: retry, DeleteBatch: 5, Logger: quiet})
}

func newTenant() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	h := hex.EncodeToString(b)
	// Shaped like the uuids internal/users hands out.
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func wantCode(t *testing.T, what string, err error, code repolock.Code) {
	t.Helper()
	if code == "" {
		if err != nil {
			t.Fatalf("%s: unexpected error %v", what, err)
		}
		return
	}
	if !repolock.IsCode(err, code) {
		t.Fatalf("%s: error = %v (code %q), want code %q", what, err, repolock.ErrorCode(err), code)
	}
}

func (e *env) create(tenant, name string) repostate.Repository {
	e.t.Helper()
	r, err := e.svc.Create(e.ctx, tenant, repostate.CreateParams{Name: name, StorageNamespace: "s3://bucket/" + name})
	if err != nil {
		e.t.Fatalf("Create(%s): %v", name, err)
	}
	return r
}

func (e *env) commit(tenant, repo, branch, msg string) repostate.Commit {
	e.t.Helper()
	c, err := e.svc.Commit(e.ctx, tenant, repo, branch, repostate.CommitParams{Committer: "tester", Message: msg})
	if err != nil {
		e.t.Fatalf("Commit(%s): %v", msg, err)
	}
	return c
}

func (e *env) runCleaner() repostate.CleanerResult {
	e.t.Helper()
	res, err := e.cleaner.Run(e.ctx)
	if err != nil {
		e.t.Fatalf("Cleaner.Run: %v", err)
	}
	return res
}

// count runs a count(*) query.
func (e *env) count(query string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.db.GetContext(e.ctx, &n, query, args...); err != nil {
		e.t.Fatalf("count: %v", err)
	}
	return n
}

// instanceRows counts the rows of an instance's partition and of every
// staging partition named after it (the documented key schema:
// <tenant>/<name>-<uid> and staging/<tenant>/<name>-<uid>/...).
func (e *env) instanceRows(tenant, name, uid string) int {
	e.t.Helper()
	pk := tenant + "/" + name + "-" + uid
	return e.count(`SELECT count(*) FROM kv WHERE partition_key = convert_to($1, 'UTF8') OR partition_key LIKE convert_to($2, 'UTF8')`,
		pk, "staging/"+pk+"/%")
}

// deletedEntries counts the deleted-list entries of one instance.
func (e *env) deletedEntries(tenant, name, uid string) int {
	e.t.Helper()
	return e.count(`SELECT count(*) FROM kv WHERE partition_key = convert_to('graveler_deleted', 'UTF8') AND key LIKE convert_to($1, 'UTF8')`,
		tenant+"/"+name+"/"+uid+"%")
}

// allInstanceRows counts rows of every instance (and staging partition)
// of a repository name, whatever the uid.
func (e *env) allInstanceRows(tenant, name string) int {
	e.t.Helper()
	return e.count(`SELECT count(*) FROM kv WHERE partition_key LIKE convert_to($1, 'UTF8') OR partition_key LIKE convert_to($2, 'UTF8')`,
		tenant+"/"+name+"-%", "staging/"+tenant+"/"+name+"-%")
}

func (e *env) rawRecord(tenant, name string) (repostate.Repository, bool) {
	e.t.Helper()
	b, _, err := e.raw.Get(e.ctx, []byte("graveler/"+tenant), []byte("repos/"+name))
	if errors.Is(err, kv.ErrNotFound) {
		return repostate.Repository{}, false
	}
	if err != nil {
		e.t.Fatal(err)
	}
	var r repostate.Repository
	if err := json.Unmarshal(b, &r); err != nil {
		e.t.Fatal(err)
	}
	return r, true
}
