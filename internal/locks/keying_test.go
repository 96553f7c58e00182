package locks_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/locks"
	"github.com/repolock/repolock/internal/normalize"
)

// testRules is a locks.Rules whose Keying the test sets and whose Reload
// counts its calls and, when load is set, replaces the Keying with what
// load returns (as rekey.Source does from the database).
type testRules struct {
	k       atomic.Pointer[locks.Keying]
	reloads atomic.Int32
	load    func(ctx context.Context) (*locks.Keying, error)
}

func newTestRules(k *locks.Keying, load func(ctx context.Context) (*locks.Keying, error)) *testRules {
	r := &testRules{load: load}
	r.k.Store(k)
	return r
}

func (r *testRules) Keying() *locks.Keying { return r.k.Load() }

func (r *testRules) Reload(ctx context.Context) error {
	r.reloads.Add(1)
	if r.load == nil {
		return nil
	}
	k, err := r.load(ctx)
	if err != nil {
		return err
	}
	r.k.Store(k)
	return nil
}

// loadGeneration returns a load function that keys under the built-in
// rules at the generation stored in db (normalizer_state), as
// rekey.LoadKeying would without aliases.
func loadGeneration(db *database.DB) func(ctx context.Context) (*locks.Keying, error) {
	return func(ctx context.Context) (*locks.Keying, error) {
		var g int64
		if err := db.GetContext(ctx, &g, `SELECT generation FROM normalizer_state`); err != nil {
			return nil, err
		}
		return &locks.Keying{Current: normalize.Default(), Generation: g}, nil
	}
}

func storedGeneration(t *testing.T, q database.Querier) int64 {
	t.Helper()
	var g int64
	if err := q.GetContext(context.Background(), &g, `SELECT generation FROM normalizer_state`); err != nil {
		t.Fatal(err)
	}
	return g
}

// bumpGeneration changes the stored rules' generation, as a rules change
// does (rekey: an alias added or removed, a newer version registered).
func bumpGeneration(t *testing.T, q database.Querier) int64 {
	t.Helper()
	var g int64
	if err := q.GetContext(context.Background(), &g, `UPDATE normalizer_state SET generation = generation + 1 RETURNING generation`); err != nil {
		t.Fatal(err)
	}
	return g
}

// lockAndEventRows counts every lock row and every event row.
func lockAndEventRows(t *testing.T, q database.Querier) int {
	t.Helper()
	var n int
	if err := q.GetContext(context.Background(), &n,
		`SELECT (SELECT count(*) FROM RepositoryLockOwner) + (SELECT count(*) FROM repository_lock_events)`); err != nil {
		t.Fatal(err)
	}
	return n
}

// isRulesChanged reports whether err is the guard's refusal: ErrRulesChanged,
// code unavailable.
func isRulesChanged(err error) bool {
	return errors.Is(err, locks.ErrRulesChanged) && repolock.ErrorCode(err) == repolock.EUnavailable
}

// TestStaleGenerationClaimRefused: a claim keyed under generation g while
// generation g+1 is stored creates no lock and no event and fails with
// ErrRulesChanged, on the pool (where Acquire reloads the rules and keys
// again, and gives up, unavailable, after MaxRekeyings reloads that do not
// bring the stored generation) and in a caller's transaction (AcquireTx,
// which leaves the rerun to the caller's Keyed function).
func TestStaleGenerationClaimRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	alice := dbtest.NewTenant(t, db, "alice")
	g := storedGeneration(t, db)
	if g == 0 {
		t.Fatal("the stored generation is 0, which the guard lets through")
	}
	rules := newTestRules(&locks.Keying{Current: normalize.Default(), Generation: g}, nil) // Reload changes nothing
	ls := locks.New(db, rules, nil)
	const url = "https://github.com/acme/stale.git"
	if g2 := bumpGeneration(t, db); g2 != g+1 {
		t.Fatalf("generation %d after the bump, want %d", g2, g+1)
	}

	t.Run("Acquire", func(t *testing.T) {
		rules.reloads.Store(0)
		acq, err := ls.Acquire(ctx, alice.ID, url)
		if !isRulesChanged(err) || acq != (locks.Acquisition{}) {
			t.Fatalf("Acquire: %+v %v, want ErrRulesChanged (unavailable)", acq, err)
		}
		if n := rules.reloads.Load(); n != locks.MaxRekeyings {
			t.Fatalf("%d reloads, want %d (Keyed gives up after them)", n, locks.MaxRekeyings)
		}
		if n := lockAndEventRows(t, db); n != 0 {
			t.Fatalf("%d lock and event rows, want none", n)
		}
	})

	t.Run("AcquireTx", func(t *testing.T) {
		rules.reloads.Store(0)
		c := claim(t, ls, url)
		tx, _ := dbtest.BeginWithPID(t, db)
		acq, err := ls.AcquireTx(ctx, tx, alice.ID, c)
		if !isRulesChanged(err) || acq != (locks.Acquisition{}) {
			t.Fatalf("AcquireTx: %+v %v, want ErrRulesChanged (unavailable)", acq, err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if n := rules.reloads.Load(); n != 0 {
			t.Fatalf("AcquireTx reloaded the rules %d times: that is its caller's Keyed's job", n)
		}
		if n := lockAndEventRows(t, db); n != 0 {
			t.Fatalf("%d lock and event rows, want none", n)
		}
	})

	t.Run("Keyed gives up too", func(t *testing.T) {
		rules.reloads.Store(0)
		runs := 0
		err := ls.Keyed(ctx, func(k *locks.Keying) error {
			runs++
			c, err := k.Claim(url)
			if err != nil {
				return err
			}
			return db.WithTx(ctx, func(tx database.Tx) error {
				_, err := ls.AcquireTx(ctx, tx, alice.ID, c)
				return err
			})
		})
		if !isRulesChanged(err) || runs != locks.MaxRekeyings || rules.reloads.Load() != locks.MaxRekeyings {
			t.Fatalf("Keyed: %v after %d runs and %d reloads, want ErrRulesChanged after %d of each",
				err, runs, rules.reloads.Load(), locks.MaxRekeyings)
		}
		if n := lockAndEventRows(t, db); n != 0 {
			t.Fatalf("%d lock and event rows, want none", n)
		}
	})
}

// TestKeyedRerunsUnderReloadedRules: when the claim fails the guard and
// the reload brings the stored generation, Keyed runs it again under the
// new rules, once, and it succeeds: on the pool (Acquire) and in a
// caller's transaction (AcquireTx in a Keyed function).
func TestKeyedRerunsUnderReloadedRules(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	alice := dbtest.NewTenant(t, db, "alice")
	g := storedGeneration(t, db)
	rules := newTestRules(&locks.Keying{Current: normalize.Default(), Generation: g}, loadGeneration(db))
	ls := locks.New(db, rules, nil)
	bumpGeneration(t, db)

	acq, err := ls.Acquire(ctx, alice.ID, "https://github.com/acme/rerun-pool.git")
	if err != nil || !acq.Acquired || acq.LockID == "" || acq.Key != "github.com/acme/rerun-pool" {
		t.Fatalf("Acquire: %+v %v", acq, err)
	}
	if n := rules.reloads.Load(); n != 1 {
		t.Fatalf("%d reloads, want 1", n)
	}
	if k := rules.Keying(); k.Generation != g+1 {
		t.Fatalf("keying generation %d after the reload, want %d", k.Generation, g+1)
	}
	if n := lockCount(t, db, "github.com/acme/rerun-pool"); n != 1 {
		t.Fatalf("%d locks, want 1", n)
	}

	// Again, for a claim in a transaction.
	bumpGeneration(t, db)
	var gens []int64
	var got locks.Acquisition
	err = ls.Keyed(ctx, func(k *locks.Keying) error {
		gens = append(gens, k.Generation)
		c, err := k.Claim("https://github.com/acme/rerun-tx.git")
		if err != nil {
			return err
		}
		return db.WithTx(ctx, func(tx database.Tx) error {
			got, err = ls.AcquireTx(ctx, tx, alice.ID, c)
			return err
		})
	})
	if err != nil || !got.Acquired || got.LockID == "" {
		t.Fatalf("Keyed AcquireTx: %+v %v", got, err)
	}
	if len(gens) != 2 || gens[0] != g+1 || gens[1] != g+2 || rules.reloads.Load() != 2 {
		t.Fatalf("runs under generations %v with %d reloads in all, want [%d %d] and 2", gens, rules.reloads.Load(), g+1, g+2)
	}
	if n := lockCount(t, db, "github.com/acme/rerun-tx"); n != 1 {
		t.Fatalf("%d locks, want 1", n)
	}
}

// TestRulesChangeHoldsOffClaims: a rules change takes SHARE ROW EXCLUSIVE
// on RepositoryLockOwner and bumps the generation in one transaction. A
// claim keyed under the old generation that arrives meanwhile waits for
// it, and once it commits fails the guard: it never creates a lock under
// the old rules. In a caller's transaction the claim returns
// ErrRulesChanged; on the pool, Acquire reloads and keys again under the
// new generation.
func TestRulesChangeHoldsOffClaims(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	alice := dbtest.NewTenant(t, db, "alice")

	// change starts a rules change and leaves it open: the claims lock is
	// held and the generation bumped, not committed.
	change := func(t *testing.T) (database.Tx, int) {
		t.Helper()
		tx, pid := dbtest.BeginWithPID(t, db)
		if _, err := tx.ExecContext(ctx, `LOCK TABLE RepositoryLockOwner IN SHARE ROW EXCLUSIVE MODE`); err != nil {
			t.Fatal(err)
		}
		bumpGeneration(t, tx)
		return tx, pid
	}

	// One service on the pool (it owns the pool's Batcher); each subtest
	// starts keyed under the stored generation.
	rules := newTestRules(&locks.Keying{Current: normalize.Default()}, loadGeneration(db))
	ls := locks.New(db, rules, nil)
	keyedNow := func(t *testing.T) int64 {
		t.Helper()
		g := storedGeneration(t, db)
		rules.k.Store(&locks.Keying{Current: normalize.Default(), Generation: g})
		rules.reloads.Store(0)
		return g
	}

	t.Run("AcquireTx", func(t *testing.T) {
		keyedNow(t)
		const key = "github.com/acme/held-off-tx"
		c := claim(t, ls, "https://"+key)
		rc, _ := change(t)
		claimTx, claimPID := dbtest.BeginWithPID(t, db)
		done := acquireBlocked(t, db, ls, claimTx, claimPID, alice.ID, c)
		if err := rc.Commit(); err != nil {
			t.Fatal(err)
		}
		r := <-done
		if !isRulesChanged(r.err) || r.ok || r.id != "" || r.owner != "" {
			t.Fatalf("the held-off claim: %+v, want ErrRulesChanged", r)
		}
		if err := claimTx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if n := lockCount(t, db, key); n != 0 {
			t.Fatalf("%d locks on %s, want none", n, key)
		}
		if got := events(t, db, key); len(got) != 0 {
			t.Fatalf("events %q, want none", got)
		}
	})

	t.Run("Acquire", func(t *testing.T) {
		g := keyedNow(t)
		const key = "github.com/acme/held-off-pool"
		rc, pid := change(t)
		type result struct {
			acq locks.Acquisition
			err error
		}
		done := make(chan result, 1)
		go func() {
			acq, err := ls.Acquire(ctx, alice.ID, "https://"+key)
			done <- result{acq, err}
		}()
		dbtest.WaitUntilBlockedAny(t, db, pid)
		if len(done) > 0 {
			t.Fatalf("the claim returned while the rules change held the table: %+v", <-done)
		}
		if n := rules.reloads.Load(); n != 0 {
			t.Fatalf("%d reloads before the change committed", n)
		}
		if err := rc.Commit(); err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.err != nil || !r.acq.Acquired || r.acq.LockID == "" {
			t.Fatalf("Acquire: %+v %v", r.acq, r.err)
		}
		// It failed the guard once (under generation g), and then
		// succeeded under the one the change stored.
		if n, k := rules.reloads.Load(), rules.Keying(); n != 1 || k.Generation != g+1 {
			t.Fatalf("%d reloads, generation %d; want 1 reload to generation %d", n, k.Generation, g+1)
		}
		if n := lockCount(t, db, key); n != 1 {
			t.Fatalf("%d locks on %s, want 1", n, key)
		}
	})
}

// TestShadowKeysDecideClaims: with shadow rules (an older rules version
// whose locks are still stored) under which a URL has another key, a
// lock on that shadow key is the URL's lock: another tenant's claim is
// denied naming its owner (the "denied" event on the claim's current key,
// pointing at the shadow lock), on the pool and in a transaction, and its
// owner's claim gets that lock back. No lock is created on the current
// key.
func TestShadowKeysDecideClaims(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	alice := dbtest.NewTenant(t, db, "alice")
	bob := dbtest.NewTenant(t, db, "bob")

	// The shadow rules alias SSH on port 2222 to the HTTPS host; the
	// current rules do not.
	from, err := normalize.ParseEndpoint("gitlab.example.com+2222")
	if err != nil {
		t.Fatal(err)
	}
	to, err := normalize.ParseEndpoint("gitlab.example.com")
	if err != nil {
		t.Fatal(err)
	}
	shadow, err := normalize.New(normalize.Rules{Aliases: []normalize.Alias{{From: from, To: to}}})
	if err != nil {
		t.Fatal(err)
	}
	const (
		url        = "ssh://git@gitlab.example.com:2222/o/r.git"
		currentKey = normalize.Key("gitlab.example.com+2222/o/r")
		shadowKey  = normalize.Key("gitlab.example.com/o/r")
	)
	k := &locks.Keying{Current: normalize.Default(), Shadows: []*normalize.Normalizer{shadow}, Generation: storedGeneration(t, db)}
	c, err := k.Claim(url)
	if err != nil || c.Key() != currentKey || len(c.Shadows()) != 1 || c.Shadows()[0] != shadowKey {
		t.Fatalf("claim of %s: key %q shadows %q (%v), want %q and [%q]", url, c.Key(), c.Shadows(), err, currentKey, shadowKey)
	}
	ls := locks.New(db, newTestRules(k, nil), nil)
	shadowLock := dbtest.NewLock(t, db, alice.ID, string(shadowKey), 0)

	// Bob, on the pool: denied by alice.
	acq, err := ls.Acquire(ctx, bob.ID, url)
	if err != nil || acq.Acquired || acq.LockID != "" || acq.Owner != "alice" || acq.Key != currentKey {
		t.Fatalf("bob's Acquire: %+v %v, want denied by alice", acq, err)
	}
	// Bob, in a transaction (committed, so the denial is recorded).
	err = db.WithTx(ctx, func(tx database.Tx) error {
		acq, err = ls.AcquireTx(ctx, tx, bob.ID, claim(t, ls, url))
		return err
	})
	if err != nil || acq.Acquired || acq.LockID != "" || acq.Owner != "alice" {
		t.Fatalf("bob's AcquireTx: %+v %v, want denied by alice", acq, err)
	}
	var denied []struct {
		LockID string `db:"lock_id"`
		Count  int    `db:"count"`
	}
	if err := db.SelectContext(ctx, &denied, `SELECT lock_id, count FROM repository_lock_events WHERE git_repository_url = $1 AND event = 'denied'`, currentKey); err != nil {
		t.Fatal(err)
	}
	if len(denied) != 1 || denied[0].LockID != shadowLock || denied[0].Count != 2 {
		t.Fatalf("denied events on %s: %+v, want one on alice's lock %s counting 2", currentKey, denied, shadowLock)
	}
	if got, want := events(t, db, string(currentKey)), []string{"denied " + string(currentKey) + " by bob owner alice"}; !equal(got, want) {
		t.Fatalf("events on %s: %q, want %q", currentKey, got, want)
	}

	// Alice, on the pool and then in a transaction: a lock of her own on
	// the current key (never her shadow lock: a claim joins only a lock on
	// its own key), the same one the second time.
	acq, err = ls.Acquire(ctx, alice.ID, url)
	if err != nil || !acq.Acquired || acq.LockID == "" || acq.LockID == shadowLock || acq.Owner != "" || acq.Key != currentKey {
		t.Fatalf("alice's Acquire: %+v %v, want a lock of hers on %s (not the shadow lock %s)", acq, err, currentKey, shadowLock)
	}
	newLock := acq.LockID
	err = db.WithTx(ctx, func(tx database.Tx) error {
		acq, err = ls.AcquireTx(ctx, tx, alice.ID, claim(t, ls, url))
		return err
	})
	if err != nil || !acq.Acquired || acq.LockID != newLock {
		t.Fatalf("alice's AcquireTx: %+v %v, want her lock %s on the current key", acq, err, newLock)
	}
	if n := lockCount(t, db, string(currentKey)); n != 1 {
		t.Fatalf("%d locks on the current key %s, want alice's one", n, currentKey)
	}
	// Bob is still denied: both keys are alice's.
	acq, err = ls.Acquire(ctx, bob.ID, url)
	if err != nil || acq.Acquired || acq.Owner != "alice" {
		t.Fatalf("bob's Acquire after alice's: %+v %v, want denied by alice", acq, err)
	}
	if got := events(t, db, string(shadowKey)); len(got) != 0 {
		t.Fatalf("events on the shadow key: %q, want none", got)
	}
}

// TestStaleVersionTrigger: once a rules version has served
// (normalizer_state.max_version), the trigger of migration 000014 refuses
// every lock row keyed under an older version, whoever inserts it
// (SQLSTATE RL002, which MapRulesError makes unavailable); rows of the
// version that served, or of any version while none newer has, pass.
func TestStaleVersionTrigger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	alice := dbtest.NewTenant(t, db, "alice")
	insert := func(key string, version int) error {
		_, err := db.ExecContext(ctx, `INSERT INTO RepositoryLockOwner (git_repository_url, normalizer_version, cluster_user_id) VALUES ($1, $2, $3)`,
			key, version, alice.ID)
		return err
	}
	setMax := func(v int) {
		t.Helper()
		if _, err := db.ExecContext(ctx, `UPDATE normalizer_state SET max_version = $1`, v); err != nil {
			t.Fatal(err)
		}
	}

	setMax(3)
	err := insert("github.com/acme/v2-refused", 2)
	if code := database.PQCode(err); code != "RL002" {
		t.Fatalf("a version 2 lock with max_version 3: %v (SQLSTATE %q), want RL002", err, code)
	}
	if mapped := locks.MapRulesError(err); repolock.ErrorCode(mapped) != repolock.EUnavailable || errors.Is(mapped, locks.ErrRulesChanged) {
		t.Fatalf("MapRulesError(RL002) = %v, want unavailable (not ErrRulesChanged)", mapped)
	}
	if n := lockCount(t, db, "github.com/acme/v2-refused"); n != 0 {
		t.Fatalf("%d locks, want none", n)
	}
	if err := insert("github.com/acme/v3", 3); err != nil {
		t.Fatalf("a version 3 lock with max_version 3: %v", err)
	}

	setMax(2)
	if err := insert("github.com/acme/v2-allowed", 2); err != nil {
		t.Fatalf("a version 2 lock with max_version 2: %v", err)
	}
	if n := lockCount(t, db, "github.com/acme/v2-allowed"); n != 1 {
		t.Fatalf("%d locks, want 1", n)
	}
}

// TestGuardSharedAcrossConcurrentClaims: many claims keyed under one
// stale generation, racing on the pool (so batched together), all fail
// the guard when Reload does not fix it, and none creates a lock.
func TestGuardSharedAcrossConcurrentClaims(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	alice := dbtest.NewTenant(t, db, "alice")
	rules := newTestRules(&locks.Keying{Current: normalize.Default(), Generation: storedGeneration(t, db)}, nil)
	ls := locks.New(db, rules, nil)
	bumpGeneration(t, db)
	var wg sync.WaitGroup
	errs := make([]error, 16)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = ls.Acquire(ctx, alice.ID, "github.com/acme/concurrent-"+string(rune('a'+i)))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if !isRulesChanged(err) {
			t.Errorf("claim %d: %v, want ErrRulesChanged", i, err)
		}
	}
	if n := lockAndEventRows(t, db); n != 0 {
		t.Fatalf("%d lock and event rows, want none", n)
	}
}

// TestRulesV2ToV3OneOwner is issue 24's upgrade case with the real rules:
// tenant A holds the v2 key h.example/o/test, keyed from the scp spelling
// git@h.example:/o/te%73t (v2 decoded the escape). Under v3 that spelling
// keys h.example/o/te%2573t, as does ssh://git@h.example/o/te%2573t, whose
// own v2 key is the same (free). A v3 claim of either spelling by tenant B
// is denied (owner A): the first through its own v2 key, the second
// through the predecessor of its v3 key. A's own v3 claim is its v2 lock.
func TestRulesV2ToV3OneOwner(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	alice := dbtest.NewTenant(t, db, "alice")
	bob := dbtest.NewTenant(t, db, "bob")
	v2, err := normalize.ForVersion(2, nil)
	if err != nil {
		t.Fatal(err)
	}
	const scp, ssh = "git@h.example:/o/te%73t", "ssh://git@h.example/o/te%2573t"
	k2, err := v2.RepoURL(scp)
	if err != nil || k2 != "h.example/o/test" {
		t.Fatalf("v2 key of %s: %q, %v", scp, k2, err)
	}
	if k, err := v2.RepoURL(ssh); err != nil || k == k2 {
		t.Fatalf("v2 key of %s: %q, %v (want another key than %s)", ssh, k, err, k2)
	}
	var lockID string
	if err := db.GetContext(ctx, &lockID, `INSERT INTO RepositoryLockOwner (git_repository_url, normalizer_version, cluster_user_id)
		VALUES ($1, 2, $2) RETURNING id`, k2, alice.ID); err != nil {
		t.Fatal(err)
	}
	ls := locks.New(db, newTestRules(&locks.Keying{Current: normalize.Default(), Shadows: []*normalize.Normalizer{v2}}, nil), nil)
	for _, u := range []string{scp, ssh} {
		acq, err := ls.Acquire(ctx, bob.ID, u)
		if err != nil || acq.Acquired || acq.Owner != "alice" || acq.Key != "h.example/o/te%2573t" {
			t.Errorf("bob's v3 claim of %s: %+v, %v; want denied, owner alice", u, acq, err)
		}
		acq, err = ls.Acquire(ctx, alice.ID, u)
		if err != nil || !acq.Acquired || acq.LockID == lockID || acq.Key != "h.example/o/te%2573t" {
			t.Errorf("alice's v3 claim of %s: %+v, %v; want a lock of hers on the v3 key (not her v2 lock %s)", u, acq, err, lockID)
		}
	}
	var owners []string
	if err := db.SelectContext(ctx, &owners, `SELECT DISTINCT cluster_user_id::text FROM RepositoryLockOwner`); err != nil || len(owners) != 1 || owners[0] != alice.ID {
		t.Fatalf("lock owners: %v, %v; want alice only", owners, err)
	}
}
