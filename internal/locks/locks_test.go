package locks_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/locks"
	"github.com/repolock/repolock/internal/normalize"
	"github.com/repolock/repolock/internal/pagetoken"
	"github.com/repolock/repolock/internal/tenants"
)

type event struct {
	Event      string         `db:"event"`
	LockID     sql.NullString `db:"lock_id"`
	URL        string         `db:"git_repository_url"`
	TenantName sql.NullString `db:"cluster_user_name"`
	OwnerName  sql.NullString `db:"owner_user_name"`
}

func (e event) String() string {
	return fmt.Sprintf("%s %s by %s owner %s", e.Event, e.URL, e.TenantName.String, e.OwnerName.String)
}

func events(t *testing.T, q database.Querier, key string) []string {
	t.Helper()
	var evs []event
	if err := q.SelectContext(context.Background(), &evs, `
		SELECT event, lock_id, git_repository_url, cluster_user_name, owner_user_name
		FROM repository_lock_events WHERE git_repository_url = $1 ORDER BY id`, key); err != nil {
		t.Fatal(err)
	}
	out := []string{}
	for _, e := range evs {
		out = append(out, e.String())
	}
	return out
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// addApplicationRef creates an application of the tenant on key referencing
// lockID, as internal/apps does, in q.
func addApplicationRef(t *testing.T, q database.Querier, tenantID, name, key, lockID string) string {
	t.Helper()
	var id string
	err := q.GetContext(context.Background(), &id, `
		WITH app AS (
			INSERT INTO applications (cluster_user_id, name, repo_url, normalized_url)
			VALUES ($1, $2, $3, $3) RETURNING id
		), ref AS (
			INSERT INTO RepositoryLockApplication (application_id, lock_id) SELECT id, $4 FROM app
		)
		SELECT id FROM app`, tenantID, name, key, lockID)
	if err != nil {
		t.Fatalf("add application ref: %v", err)
	}
	return id
}

func lockCount(t *testing.T, q database.Querier, key string) int {
	t.Helper()
	var n int
	if err := q.GetContext(context.Background(), &n, `SELECT count(*) FROM RepositoryLockOwner WHERE git_repository_url = $1`, key); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestAcquire(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	ls := newLocks(db)
	alice := dbtest.NewTenant(t, db, "alice")
	bob := dbtest.NewTenant(t, db, "bob")
	const key = "github.com/acme/app"

	acq, err := ls.Acquire(ctx, alice.ID, key)
	id1, acquired, owner := acq.LockID, acq.Acquired, acq.Owner
	if err != nil || !acquired || owner != "" || id1 == "" || acq.Key != key {
		t.Fatalf("first acquire: %q %v %q %v (key %q)", id1, acquired, owner, err, acq.Key)
	}
	// The same tenant again: the existing lock (the design's pseudocode
	// would refuse this).
	acq, err = ls.Acquire(ctx, alice.ID, key)
	id2, acquired, owner := acq.LockID, acq.Acquired, acq.Owner
	if err != nil || !acquired || owner != "" || id2 != id1 {
		t.Fatalf("re-acquire: %q %v %q %v, want %q true", id2, acquired, owner, err, id1)
	}
	// Another tenant: denied, naming the owner.
	acq, err = ls.Acquire(ctx, bob.ID, key)
	id3, acquired, owner := acq.LockID, acq.Acquired, acq.Owner
	if err != nil || acquired || owner != "alice" || id3 != "" {
		t.Fatalf("other tenant: %q %v %q %v, want \"\" false alice nil", id3, acquired, owner, err)
	}
	var version int
	if err := db.GetContext(ctx, &version, `SELECT normalizer_version FROM RepositoryLockOwner WHERE id = $1`, id1); err != nil || version != normalize.Version {
		t.Fatalf("normalizer_version = %d, %v; want %d", version, err, normalize.Version)
	}
	// Nothing references the new lock yet: it is a GC candidate.
	var candidate bool
	if err := db.GetContext(ctx, &candidate, `SELECT gc_candidate FROM RepositoryLockOwner WHERE id = $1`, id1); err != nil || !candidate {
		t.Fatalf("gc_candidate = %v, %v; want true", candidate, err)
	}
	want := []string{
		"acquired github.com/acme/app by alice owner alice",
		"denied github.com/acme/app by bob owner alice",
	}
	if got := events(t, db, key); !equal(got, want) {
		t.Fatalf("events:\n got %q\nwant %q", got, want)
	}
}

func TestAcquireRejects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	ls := newLocks(db)
	alice := dbtest.NewTenant(t, db, "alice")
	// Acquire takes a repository URL and keys it itself: a URL the rules
	// reject is invalid_argument, and so are a missing or malformed user.
	for _, tc := range []struct {
		name, user, url string
		code            repolock.Code
	}{
		{"empty user", "", "github.com/a/b", repolock.EInvalid},
		{"user not an id", "alice", "github.com/a/b", repolock.EInvalid},
		{"unknown user", "00000000-0000-0000-0000-000000000001", "github.com/a/b", repolock.ENotFound},
		{"empty URL", alice.ID, "", repolock.EInvalid},
		{"invalid URL", alice.ID, "not a url", repolock.EInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			acq, err := ls.Acquire(ctx, tc.user, tc.url)
			id, acquired, owner := acq.LockID, acq.Acquired, acq.Owner
			if repolock.ErrorCode(err) != tc.code || id != "" || acquired || owner != "" {
				t.Fatalf("got %q %v %q %v, want code %s", id, acquired, owner, err, tc.code)
			}
		})
	}
	// The acquire of an already normalized key (re-keying's, through
	// Keying.KeyClaim) refuses a key that is not canonical under the
	// rules: invalid_argument, and nothing written.
	for _, tc := range []struct{ name, key string }{
		{"empty key", ""},
		{"key not normalized (scheme)", "https://github.com/a/b"},
		{"key not normalized (case)", "github.com/A/b"},
		{"key not normalized (.git)", "github.com/a/b.git"},
		{"invalid URL", "not a url"},
	} {
		t.Run("key/"+tc.name, func(t *testing.T) {
			if c, err := ls.Keying().KeyClaim(normalize.Key(tc.key)); repolock.ErrorCode(err) != repolock.EInvalid {
				t.Fatalf("KeyClaim: %+v %v, want invalid_argument", c, err)
			}
			tg, err := ls.AcquireForRekey(ctx, db, ls.Keying(), alice.ID, normalize.Key(tc.key))
			if repolock.ErrorCode(err) != repolock.EInvalid || tg != (locks.Target{}) {
				t.Fatalf("AcquireForRekey: %+v %v, want invalid_argument", tg, err)
			}
		})
	}
	var n int
	if err := db.GetContext(ctx, &n, `SELECT (SELECT count(*) FROM RepositoryLockOwner) + (SELECT count(*) FROM repository_lock_events)`); err != nil || n != 0 {
		t.Fatalf("rows written by rejected calls: %d, %v", n, err)
	}
}

// Many tenants race for the same fresh URLs: each URL ends with exactly one
// owner, every call by the owner returned its lock, every other call was
// denied naming the owner.
func TestAcquireRace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// 16 concurrent transactions are plenty of contention on this machine;
	// more would eat into Postgres' max_connections, which every test
	// process shares.
	db := dbtest.New(t, dbtest.Pool(database.PoolConfig{MaxOpenConns: 16}))
	ls := newLocks(db)
	const nTenants, perTenant, urls = 8, 4, 50
	us := make([]tenants.Tenant, nTenants)
	for i := range us {
		us[i] = dbtest.NewTenant(t, db, fmt.Sprintf("t%d", i))
	}
	type result struct {
		user, key, lockID, owner string
		acquired                 bool
	}
	results := make(chan result, nTenants*perTenant*urls)
	var wg sync.WaitGroup
	errc := make(chan error, nTenants*perTenant)
	for i := 0; i < nTenants; i++ {
		for g := 0; g < perTenant; g++ {
			wg.Add(1)
			go func(u tenants.Tenant, g int) {
				defer wg.Done()
				for j := 0; j < urls; j++ {
					k := fmt.Sprintf("git.example.com/race/r%d", (j+g*7)%urls)
					acq, err := ls.Acquire(ctx, u.ID, k)
					id, ok, owner := acq.LockID, acq.Acquired, acq.Owner
					if err != nil {
						errc <- err
						return
					}
					results <- result{u.Name, k, id, owner, ok}
				}
			}(us[i], g)
		}
	}
	wg.Wait()
	close(results)
	close(errc)
	for err := range errc {
		t.Fatalf("acquire failed: %v", err)
	}
	type ownerRow struct {
		Key  string `db:"git_repository_url"`
		ID   string `db:"id"`
		Name string `db:"name"`
	}
	var rows []ownerRow
	if err := db.SelectContext(ctx, &rows, `SELECT o.git_repository_url, o.id, u.name FROM RepositoryLockOwner o JOIN cluster_users u ON u.id = o.cluster_user_id`); err != nil {
		t.Fatal(err)
	}
	if len(rows) != urls {
		t.Fatalf("%d locks, want %d", len(rows), urls)
	}
	owners := map[string]ownerRow{}
	for _, r := range rows {
		owners[r.Key] = r
	}
	n := 0
	for r := range results {
		n++
		o := owners[r.key]
		if r.user == o.Name {
			if !r.acquired || r.lockID != o.ID {
				t.Errorf("%s on %s: got %v %q, want its lock %q", r.user, r.key, r.acquired, r.lockID, o.ID)
			}
		} else if r.acquired || r.owner != o.Name {
			t.Errorf("%s on %s: got acquired=%v owner=%q, want denied by %s", r.user, r.key, r.acquired, r.owner, o.Name)
		}
	}
	if n != nTenants*perTenant*urls {
		t.Fatalf("%d results", n)
	}
	var acquiredEvents int
	if err := db.GetContext(ctx, &acquiredEvents, `SELECT count(*) FROM repository_lock_events WHERE event = 'acquired'`); err != nil || acquiredEvents != urls {
		t.Fatalf("acquired events = %d, %v; want %d", acquiredEvents, err, urls)
	}
}

func TestRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	ls := newLocks(db)
	alice := dbtest.NewTenant(t, db, "alice")

	t.Run("unreferenced", func(t *testing.T) {
		const key = "github.com/rel/free"
		acq, err := ls.Acquire(ctx, alice.ID, key)
		id := acq.LockID
		if err != nil {
			t.Fatal(err)
		}
		released, err := release(ctx, db, ls, id)
		if err != nil || !released {
			t.Fatalf("release: %v %v", released, err)
		}
		if n := lockCount(t, db, key); n != 0 {
			t.Fatalf("%d locks left", n)
		}
		// Releasing again is not an error.
		released, err = release(ctx, db, ls, id)
		if err != nil || released {
			t.Fatalf("second release: %v %v", released, err)
		}
		want := []string{"acquired " + key + " by alice owner alice", "released " + key + " by alice owner alice"}
		if got := events(t, db, key); !equal(got, want) {
			t.Fatalf("events %q, want %q", got, want)
		}
	})
	t.Run("referenced by an application", func(t *testing.T) {
		const key = "github.com/rel/app"
		acq, err := ls.Acquire(ctx, alice.ID, key)
		id := acq.LockID
		if err != nil {
			t.Fatal(err)
		}
		appID := addApplicationRef(t, db, alice.ID, "app", key, id)
		released, err := release(ctx, db, ls, id)
		if err != nil || released || lockCount(t, db, key) != 1 {
			t.Fatalf("release of a referenced lock: %v %v", released, err)
		}
		if _, err := db.ExecContext(ctx, `DELETE FROM applications WHERE id = $1`, appID); err != nil {
			t.Fatal(err)
		}
		released, err = release(ctx, db, ls, id)
		if err != nil || !released || lockCount(t, db, key) != 0 {
			t.Fatalf("release after the last reference: %v %v", released, err)
		}
	})
	t.Run("referenced by a credential", func(t *testing.T) {
		const key = "github.com/rel/cred"
		acq, err := ls.Acquire(ctx, alice.ID, key)
		id := acq.LockID
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, `
			WITH c AS (INSERT INTO repository_credentials (cluster_user_id, name, repo_url, normalized_url)
			           VALUES ($1, 'cred', $2, $2) RETURNING id)
			INSERT INTO RepositoryLockRepositoryCredential (repository_credential_id, lock_id) SELECT id, $3 FROM c`,
			alice.ID, key, id); err != nil {
			t.Fatal(err)
		}
		released, err := release(ctx, db, ls, id)
		if err != nil || released || lockCount(t, db, key) != 1 {
			t.Fatalf("release of a referenced lock: %v %v", released, err)
		}
	})
	t.Run("invalid id", func(t *testing.T) {
		released, err := release(ctx, db, ls, "nope")
		if repolock.ErrorCode(err) != repolock.EInvalid || released {
			t.Fatalf("got %v %v", released, err)
		}
	})
	t.Run("the foreign key refuses to delete a referenced lock", func(t *testing.T) {
		const key = "github.com/rel/fk"
		acq, err := ls.Acquire(ctx, alice.ID, key)
		id := acq.LockID
		if err != nil {
			t.Fatal(err)
		}
		addApplicationRef(t, db, alice.ID, "fk-app", key, id)
		_, err = db.ExecContext(ctx, `DELETE FROM RepositoryLockOwner WHERE id = $1`, id)
		if database.PQCode(err) != database.CodeForeignKeyViolation {
			t.Fatalf("deleting a referenced lock: %v, want a foreign key violation", err)
		}
	})
}

// acquireResult is what one AcquireTx call returned.
type acquireResult struct {
	id, owner string
	ok        bool
	err       error
}

// acquireBlocked starts ls.AcquireTx of c in tx (whose backend
// is pid) on another goroutine and returns once that call is blocked on a
// row lock; its result arrives on the returned channel.
func acquireBlocked(t *testing.T, db *database.DB, ls *locks.Service, tx database.Tx, pid int, tenantID string, c locks.Claim) <-chan acquireResult {
	t.Helper()
	done := make(chan acquireResult, 1)
	go func() {
		acq, err := ls.AcquireTx(context.Background(), tx, tenantID, c)
		id, ok, owner := acq.LockID, acq.Acquired, acq.Owner
		done <- acquireResult{id: id, owner: owner, ok: ok, err: err}
	}()
	dbtest.WaitUntilBlocked(t, db, pid, func() bool { return len(done) > 0 })
	return done
}

// The orderings of Release against an acquire, forced one by one with two
// transactions: which transaction reaches the lock row first, who acquires,
// and how the releasing transaction ends.
func TestReleaseVersusAcquire(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	ls := newLocks(db)
	tenantIDs := map[string]string{
		"alice": dbtest.NewTenant(t, db, "alice").ID,
		"bob":   dbtest.NewTenant(t, db, "bob").ID,
	}
	tests := []struct {
		name string
		// first is the transaction that takes the lock row first: "acquire"
		// (the acquirer holds FOR KEY SHARE, the release waits) or
		// "release" (the release deleted the row, the acquirer waits).
		first    string
		acquirer string
		// rollback ends the releasing transaction with a rollback.
		rollback bool
		// wantFresh: the acquirer ends with a new lock, not the old one.
		wantFresh bool
		// wantEvents, when set, are the key's events in order.
		wantEvents []string
	}{
		{name: "acquire first keeps the lock", first: "acquire", acquirer: "alice"},
		{name: "release first makes the acquirer create a fresh lock", first: "release", acquirer: "alice", wantFresh: true},
		{name: "a rolled back release leaves the lock to the acquirer", first: "release", acquirer: "alice", rollback: true},
		{name: "another tenant wins only after the release commits", first: "release", acquirer: "bob", wantFresh: true,
			wantEvents: []string{"acquired %s by alice owner alice", "released %s by alice owner alice", "acquired %s by bob owner bob"}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			key := fmt.Sprintf("github.com/race/ordering-%d", i)
			acquirerID := tenantIDs[tc.acquirer]
			old, err := ls.Acquire(ctx, tenantIDs["alice"], key)
			if err != nil || !old.Acquired {
				t.Fatalf("first acquire: %+v %v", old, err)
			}
			endRelease := func(rel database.Tx) {
				t.Helper()
				end := rel.Commit
				if tc.rollback {
					end = rel.Rollback
				}
				if err := end(); err != nil {
					t.Fatal(err)
				}
			}
			var (
				acq    database.Tx
				lockID string
			)
			switch tc.first {
			case "acquire":
				acq, _ = dbtest.BeginWithPID(t, db)
				got, err := ls.AcquireTx(ctx, acq, acquirerID, claim(t, ls, key))
				if err != nil || !got.Acquired {
					t.Fatalf("acquire: %+v %v", got, err)
				}
				lockID = got.LockID
				rel, relPID := dbtest.BeginWithPID(t, db)
				type res struct {
					released bool
					err      error
				}
				done := make(chan res, 1)
				go func() {
					r, err := ls.Release(ctx, rel, old.LockID)
					done <- res{r, err}
				}()
				dbtest.WaitUntilBlocked(t, db, relPID, func() bool { return len(done) > 0 })
				addApplicationRef(t, acq, acquirerID, fmt.Sprintf("app-%d", i), key, lockID)
				if err := acq.Commit(); err != nil {
					t.Fatal(err)
				}
				if r := <-done; r.err != nil || r.released {
					t.Fatalf("release: %v %v, want false nil (the new reference keeps the lock)", r.released, r.err)
				}
				endRelease(rel)
			case "release":
				rel, _ := dbtest.BeginWithPID(t, db)
				if released, err := ls.Release(ctx, rel, old.LockID); err != nil || !released {
					t.Fatalf("release: %v %v", released, err)
				}
				var acqPID int
				acq, acqPID = dbtest.BeginWithPID(t, db)
				done := acquireBlocked(t, db, ls, acq, acqPID, acquirerID, claim(t, ls, key))
				endRelease(rel)
				r := <-done
				if r.err != nil || !r.ok || r.id == "" {
					t.Fatalf("acquire after the release ended: %+v", r)
				}
				lockID = r.id
				addApplicationRef(t, acq, acquirerID, fmt.Sprintf("app-%d", i), key, lockID)
				if err := acq.Commit(); err != nil {
					t.Fatal(err)
				}
			}
			if fresh := lockID != old.LockID; fresh != tc.wantFresh {
				t.Fatalf("acquirer got %s (old %s): fresh = %v, want %v", lockID, old.LockID, fresh, tc.wantFresh)
			}
			var refLock, owner string
			if err := db.QueryRowContext(ctx, `
				SELECT r.lock_id, u.name FROM RepositoryLockApplication r
				JOIN RepositoryLockOwner o ON o.id = r.lock_id JOIN cluster_users u ON u.id = o.cluster_user_id
				WHERE o.git_repository_url = $1`, key).Scan(&refLock, &owner); err != nil || refLock != lockID || owner != tc.acquirer {
				t.Fatalf("reference points at %q of %q (%v), want %q of %q", refLock, owner, err, lockID, tc.acquirer)
			}
			if n := lockCount(t, db, key); n != 1 {
				t.Fatalf("%d locks on %s, want 1", n, key)
			}
			if tc.wantEvents != nil {
				want := make([]string, len(tc.wantEvents))
				for i, e := range tc.wantEvents {
					want[i] = fmt.Sprintf(e, key)
				}
				if got := events(t, db, key); !equal(got, want) {
					t.Fatalf("events %q, want %q", got, want)
				}
			}
		})
	}
}

func TestGetAndList(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	ls := newLocks(db)
	alice := dbtest.NewTenant(t, db, "alice")
	bob := dbtest.NewTenant(t, db, "bob")

	var ids []string
	for i := 0; i < 7; i++ {
		acq, err := ls.Acquire(ctx, alice.ID, fmt.Sprintf("github.com/list/r%d", i))
		id := acq.LockID
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	acq, err := ls.Acquire(ctx, bob.ID, "github.com/list/bob")
	bobLock := acq.LockID
	if err != nil {
		t.Fatal(err)
	}
	addApplicationRef(t, db, alice.ID, "app0", "github.com/list/r0", ids[0])
	addApplicationRef(t, db, alice.ID, "app0b", "github.com/list/r0", ids[0])

	l, err := ls.Get(ctx, alice.ID, ids[0])
	if err != nil || l.ID != ids[0] || l.NormalizedURL != "github.com/list/r0" || l.Applications != 2 || l.RepositoryCredentials != 0 || l.OwnerID != alice.ID {
		t.Fatalf("get: %+v %v", l, err)
	}
	for _, id := range []string{bobLock, "not-a-uuid", "00000000-0000-0000-0000-000000000000"} {
		if _, err := ls.Get(ctx, alice.ID, id); repolock.ErrorCode(err) != repolock.ENotFound {
			t.Fatalf("get %s as alice: %v, want not_found", id, err)
		}
	}

	for _, size := range []int{1, 3, 7, 50} {
		var got []string
		token := ""
		pages := 0
		for {
			page, next, err := ls.List(ctx, alice.ID, size, token)
			if err != nil {
				t.Fatalf("size %d: %v", size, err)
			}
			pages++
			for _, l := range page {
				got = append(got, l.ID)
			}
			if next == "" {
				break
			}
			token = next
		}
		if !equal(got, ids) {
			t.Fatalf("size %d: listed %v, want %v", size, got, ids)
		}
		if want := (len(ids) + size - 1) / size; pages != want {
			t.Fatalf("size %d: %d pages", size, pages)
		}
	}
	bobs, _, err := ls.List(ctx, bob.ID, 50, "")
	if err != nil || len(bobs) != 1 || bobs[0].ID != bobLock {
		t.Fatalf("bob's list: %+v %v", bobs, err)
	}

	_, appToken, err := ls.List(ctx, alice.ID, 1, "")
	if err != nil {
		t.Fatal(err)
	}
	otherKind := pagetoken.Encode(pagetoken.KindApplications, alice.ID, pagetoken.TimeID{CreatedAt: time.Now(), ID: ids[0]})
	// Bob's token, used by alice.
	_, bobToken, err := ls.List(ctx, bob.ID, 1, "")
	if err != nil {
		t.Fatal(err)
	}
	if bobToken != "" {
		t.Fatalf("bob has one lock, but a next page: %q", bobToken)
	}
	otherTenant := pagetoken.Encode(pagetoken.KindLocks, bob.ID, pagetoken.TimeID{CreatedAt: time.Now(), ID: ids[0]})
	for _, tok := range []string{"x", "!!!", "e30", "W1tbW1tb", appToken[:len(appToken)-2], otherKind, otherTenant} {
		_, _, err := ls.List(ctx, alice.ID, 10, tok)
		if repolock.ErrorCode(err) != repolock.EInvalid {
			t.Errorf("token %q: %v, want invalid_argument", tok, err)
		}
	}
}

func TestOwnerOf(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	ls := newLocks(db)
	alice := dbtest.NewTenant(t, db, "alice")
	acq, err := ls.Acquire(ctx, alice.ID, "github.com/o/r")
	id := acq.LockID
	if err != nil {
		t.Fatal(err)
	}
	o, err := ls.OwnerOf(ctx, "github.com/o/r")
	if err != nil || o.LockID != id || o.TenantName != "alice" || o.TenantID != alice.ID || o.NormalizedURL != "github.com/o/r" {
		t.Fatalf("owner: %+v %v", o, err)
	}
	if _, err := ls.OwnerOf(ctx, "github.com/o/free"); repolock.ErrorCode(err) != repolock.ENotFound {
		t.Fatalf("free URL: %v", err)
	}
	if _, err := ls.OwnerOf(ctx, "https://github.com/o/r"); !errors.Is(err, &repolock.Error{Code: repolock.EInvalid}) {
		t.Fatalf("non-normalized key: %v", err)
	}
}

// TestKeysCheckedUnderServiceRules: a service keys and checks keys under
// the rules it was built with, the deployment's aliases included, not
// under the built-in rules. With the alias gitlab.example.com+2222 ->
// gitlab.example.com, the SSH URL on port 2222 is keyed
// gitlab.example.com/o/r and acquired and found under that key, with the
// rule set of those rules; the key the built-in rules give the same URL,
// gitlab.example.com+2222/o/r, is refused as a key (invalid_argument) and
// writes nothing; given to Acquire as a URL, it is keyed under the
// service's rules too (the aliased key: the same lock).
func TestKeysCheckedUnderServiceRules(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	from, err := normalize.ParseEndpoint("gitlab.example.com+2222")
	if err != nil {
		t.Fatal(err)
	}
	to, err := normalize.ParseEndpoint("gitlab.example.com")
	if err != nil {
		t.Fatal(err)
	}
	rules, err := normalize.New(normalize.Rules{Aliases: []normalize.Alias{{From: from, To: to}}})
	if err != nil {
		t.Fatal(err)
	}
	ls := locks.New(db, locks.Fixed(rules), nil)
	alice := dbtest.NewTenant(t, db, "alice")
	const (
		url     = "ssh://git@gitlab.example.com:2222/o/r"
		aliased = normalize.Key("gitlab.example.com/o/r")
		builtin = normalize.Key("gitlab.example.com+2222/o/r")
	)
	// The un-aliased key is what the built-in rules give the URL, and
	// canonical under them: refusing it below is the alias's doing.
	if k, err := normalize.RepoURL(url); err != nil || k != builtin {
		t.Fatalf("built-in key of %s = %q %v, want %q", url, k, err, builtin)
	}
	if err := locks.ValidateKeyWith(normalize.Default(), builtin); err != nil {
		t.Fatalf("%s under the built-in rules: %v", builtin, err)
	}

	key, err := ls.Rules().RepoURL(url)
	if err != nil || key != aliased {
		t.Fatalf("key of %s under the service's rules = %q %v, want %q", url, key, err, aliased)
	}
	acq, err := ls.Acquire(ctx, alice.ID, url)
	if err != nil || !acq.Acquired || acq.LockID == "" || acq.Owner != "" || acq.Key != aliased {
		t.Fatalf("acquire %s: %+v %v", url, acq, err)
	}
	// The lock records the service's rule set: its rules version (no alias
	// fingerprint is written any more: aliases make no lock stale).
	var stored struct {
		Version string `db:"version"`
		Rules   string `db:"normalizer_rules"`
	}
	if err := db.GetContext(ctx, &stored, `SELECT normalizer_version::text AS version, normalizer_rules FROM RepositoryLockOwner WHERE id = $1`, acq.LockID); err != nil ||
		rules.Fingerprint() == "" || stored.Version != locks.RuleSet(rules) || stored.Rules != "" {
		t.Fatalf("rule set %+v %v, want version %q and no fingerprint (the service's rules)", stored, err, locks.RuleSet(rules))
	}
	o, err := ls.OwnerOf(ctx, key)
	if err != nil || o.LockID != acq.LockID || o.TenantID != alice.ID || o.TenantName != "alice" || o.NormalizedURL != aliased {
		t.Fatalf("owner of %s: %+v %v", key, o, err)
	}

	// The un-aliased key: refused as a key (a claim of it, and re-keying's
	// acquire of it), and by the lookup.
	if c, err := ls.Keying().KeyClaim(builtin); repolock.ErrorCode(err) != repolock.EInvalid {
		t.Fatalf("KeyClaim %s: %+v %v, want invalid_argument", builtin, c, err)
	}
	if tg, err := ls.AcquireForRekey(ctx, db, ls.Keying(), alice.ID, builtin); repolock.ErrorCode(err) != repolock.EInvalid || tg != (locks.Target{}) {
		t.Fatalf("AcquireForRekey %s: %+v %v, want invalid_argument", builtin, tg, err)
	}
	// As a URL, it is keyed under the service's rules: the aliased key,
	// alice's lock.
	if again, err := ls.Acquire(ctx, alice.ID, string(builtin)); err != nil || !again.Acquired || again.LockID != acq.LockID || again.Key != aliased {
		t.Fatalf("acquire of the URL %s: %+v %v, want alice's lock %s on %s", builtin, again, err, acq.LockID, aliased)
	}
	if _, err := ls.OwnerOf(ctx, builtin); repolock.ErrorCode(err) != repolock.EInvalid {
		t.Fatalf("owner of %s: %v, want invalid_argument", builtin, err)
	}
	var n int
	if err := db.GetContext(ctx, &n, `SELECT (SELECT count(*) FROM RepositoryLockOwner) + (SELECT count(*) FROM repository_lock_events)`); err != nil || n != 2 {
		t.Fatalf("%d lock and event rows (%v), want 2: the lock on %s and its acquired event", n, err, aliased)
	}
}

func TestClaimedError(t *testing.T) {
	t.Parallel()
	err := locks.ClaimedError("bob")
	if repolock.ErrorCode(err) != repolock.ERepositoryClaimed ||
		repolock.ErrorMessage(err) != "a repository URL is already claimed by another user: bob" ||
		repolock.ErrorDetails(err)["owner"] != "bob" {
		t.Fatalf("%v %v", err, repolock.ErrorDetails(err))
	}
}

// DeleteUnreferenced deletes only the unreferenced locks it is given and
// records a collected event for each; ReleaseAllForTenant releases every
// lock of a tenant with a released event each.
func TestDeleteUnreferencedAndReleaseAll(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	ls := newLocks(db)
	alice := dbtest.NewTenant(t, db, "alice")
	bob := dbtest.NewTenant(t, db, "bob")
	orphan := dbtest.NewLock(t, db, alice.ID, "github.com/del/orphan", time.Hour)
	appRef := dbtest.NewLock(t, db, alice.ID, "github.com/del/app", time.Hour)
	dbtest.NewApplication(t, db, alice.ID, "app", appRef)
	credRef := dbtest.NewLock(t, db, alice.ID, "github.com/del/cred", time.Hour)
	dbtest.NewCredential(t, db, alice.ID, "cred", credRef)
	dbtest.NewLock(t, db, alice.ID, "github.com/del/not-given", time.Hour)
	bobs := dbtest.NewLock(t, db, bob.ID, "github.com/del/bob", time.Hour)

	n, err := ls.DeleteUnreferenced(ctx, db, []string{credRef, appRef, orphan})
	if err != nil || n != 1 {
		t.Fatalf("DeleteUnreferenced = %d, %v; want 1", n, err)
	}
	for key, want := range map[string]int{"github.com/del/orphan": 0, "github.com/del/app": 1, "github.com/del/cred": 1, "github.com/del/not-given": 1} {
		if got := lockCount(t, db, key); got != want {
			t.Errorf("%s: %d locks, want %d", key, got, want)
		}
	}
	if got, want := events(t, db, "github.com/del/orphan"), []string{"collected github.com/del/orphan by  owner alice"}; !equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
	if n, err := ls.DeleteUnreferenced(ctx, db, nil); err != nil || n != 0 {
		t.Fatalf("DeleteUnreferenced(nil) = %d, %v", n, err)
	}

	// Release all of alice's locks once her references are gone.
	mustExecLocks(t, db, `DELETE FROM applications WHERE cluster_user_id = $1`, alice.ID)
	mustExecLocks(t, db, `DELETE FROM repository_credentials WHERE cluster_user_id = $1`, alice.ID)
	n, err = ls.ReleaseAllForTenant(ctx, db, alice.ID, "alice")
	if err != nil || n != 3 {
		t.Fatalf("ReleaseAllForTenant = %d, %v; want 3", n, err)
	}
	if got, want := events(t, db, "github.com/del/not-given"), []string{"released github.com/del/not-given by alice owner alice"}; !equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
	if lockCount(t, db, "github.com/del/bob") != 1 {
		t.Fatalf("bob's lock %s was released with alice's", bobs)
	}
}

func mustExecLocks(t *testing.T, q database.Querier, query string, args ...any) {
	t.Helper()
	if _, err := q.ExecContext(context.Background(), query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}
