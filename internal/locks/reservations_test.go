package locks_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/locks"
	"github.com/repolock/repolock/internal/normalize"
)

func TestNormalizePrefix(t *testing.T) {
	t.Parallel()
	n := normalize.Default()
	for _, tc := range []struct{ in, want string }{
		{"github.com", "github.com"},
		{"GitHub.com", "github.com"},
		{"https://GitHub.com/", "github.com"},
		{"github.com/acme", "github.com/acme"},
		{"https://github.com/Acme/", "github.com/acme"},
		{"git@github.com:acme", "github.com/acme"},
		{"github.com/acme/x.git", "github.com/acme/x"},
		{"gitlab.com/a/b/c", "gitlab.com/a/b/c"},
		// Ports: key syntax, or a URL with a scheme. Without one,
		// host:2222 is scp syntax (a path), as git reads it.
		{"gitlab.example.com+2222", "gitlab.example.com+2222"},
		{"https://gitlab.example.com:8443", "gitlab.example.com+8443"},
		{"ssh://git@gitlab.example.com:2222/g", "gitlab.example.com+2222/g"},
		{"gitlab.example.com:2222", "gitlab.example.com/2222"},
	} {
		got, err := locks.NormalizePrefix(n, tc.in)
		if err != nil || string(got) != tc.want {
			t.Errorf("NormalizePrefix(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "  ", "/", "https://", "not a url at all ???"} {
		if got, err := locks.NormalizePrefix(n, in); repolock.ErrorCode(err) != repolock.EInvalid {
			t.Errorf("NormalizePrefix(%q) = %q, %v; want invalid_argument", in, got, err)
		}
	}
}

func reserve(t *testing.T, ls *locks.Service, prefix, tenant string) locks.Reservation {
	t.Helper()
	r, _, err := ls.Reserve(context.Background(), locks.ReserveRequest{Prefix: prefix, Tenant: tenant})
	if err != nil {
		t.Fatalf("reserve %s for %s: %v", prefix, tenant, err)
	}
	return r
}

type denialRow struct {
	URL    string         `db:"git_repository_url"`
	Tenant string         `db:"cluster_user_name"`
	Owner  string         `db:"owner_user_name"`
	Reason sql.NullString `db:"reason"`
	Prefix sql.NullString `db:"reserved_prefix"`
	LockID sql.NullString `db:"lock_id"`
	Count  int            `db:"count"`
}

func TestReservationsRefuseClaims(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	ls := newLocks(db)
	acme := dbtest.NewTenant(t, db, "acme")
	ops := dbtest.NewTenant(t, db, "ops")
	eve := dbtest.NewTenant(t, db, "eve")

	r := reserve(t, ls, "https://GitHub.com/Acme/", "acme")
	if r.Prefix != "github.com/acme" || r.TenantName != "acme" || r.TenantID != acme.ID || r.ID == "" {
		t.Fatalf("reservation = %+v", r)
	}
	reserve(t, ls, "github.com/acme/shared", "ops")
	reserve(t, ls, "gitlab.example.com", "ops")
	reserve(t, ls, "github.com/solo/exact", "eve")

	for _, tc := range []struct {
		tenant, url string
		// wantOwner "" is acquired; else the reserving tenant and prefix.
		wantOwner, wantPrefix string
	}{
		{acme.ID, "https://github.com/acme/x", "", ""},
		{eve.ID, "https://github.com/acme/y", "acme", "github.com/acme"},
		{eve.ID, "git@github.com:ACME/z.git", "acme", "github.com/acme"},
		// Whole segments only.
		{eve.ID, "https://github.com/acmecorp/x", "", ""},
		// Longest prefix wins: ops' nested reservation, in both directions.
		{acme.ID, "https://github.com/acme/shared/tools", "ops", "github.com/acme/shared"},
		{ops.ID, "https://github.com/acme/shared/lib", "", ""},
		{ops.ID, "https://github.com/acme/other", "acme", "github.com/acme"},
		// A bare host covers the host.
		{acme.ID, "https://gitlab.example.com/g/p", "ops", "gitlab.example.com"},
		{ops.ID, "https://gitlab.example.com/g/q", "", ""},
		// An exact repository key.
		{acme.ID, "https://github.com/solo/exact", "eve", "github.com/solo/exact"},
		{acme.ID, "https://github.com/solo/exactly", "", ""},
	} {
		acq, err := ls.Acquire(ctx, tc.tenant, tc.url)
		if err != nil {
			t.Fatalf("acquire %s: %v", tc.url, err)
		}
		if tc.wantOwner == "" {
			if !acq.Acquired || acq.DeniedError() != nil {
				t.Errorf("acquire %s: %+v, want acquired", tc.url, acq)
			}
			continue
		}
		if acq.Acquired || acq.Owner != tc.wantOwner || acq.ReservedPrefix != tc.wantPrefix || lockCount(t, db, string(acq.Key)) != 0 {
			t.Errorf("acquire %s: %+v, want refused by %s's %s", tc.url, acq, tc.wantOwner, tc.wantPrefix)
			continue
		}
		var re *repolock.Error
		if err := acq.DeniedError(); !errors.As(err, &re) || re.Code != repolock.ERepositoryReserved ||
			re.Details["tenant"] != tc.wantOwner || re.Details["prefix"] != tc.wantPrefix {
			t.Errorf("acquire %s: error %v %+v", tc.url, err, re)
		}
	}

	// The denial is recorded with its own reason, coalesced per window.
	for range 2 {
		if acq, err := ls.Acquire(ctx, eve.ID, "https://github.com/acme/y"); err != nil || acq.Acquired {
			t.Fatalf("acquire again: %+v %v", acq, err)
		}
	}
	var d denialRow
	if err := db.GetContext(ctx, &d, `SELECT git_repository_url, cluster_user_name, owner_user_name, reason, reserved_prefix, lock_id, count
		FROM repository_lock_events WHERE event = 'denied' AND git_repository_url = 'github.com/acme/y'`); err != nil {
		t.Fatal(err)
	}
	if d.Tenant != "eve" || d.Owner != "acme" || d.Reason.String != "reserved" || d.Prefix.String != "github.com/acme" || d.LockID.Valid || d.Count != 3 {
		t.Fatalf("denial row = %+v", d)
	}
	// A denial by a lock says "claimed".
	if acq, err := ls.Acquire(ctx, eve.ID, "https://github.com/acme/x"); err != nil || acq.Acquired || acq.Owner != "acme" || acq.ReservedPrefix != "" {
		t.Fatalf("claimed by acme: %+v %v", acq, err)
	} else if re := (*repolock.Error)(nil); !errors.As(acq.DeniedError(), &re) || re.Code != repolock.ERepositoryClaimed {
		t.Fatalf("claimed error: %v", acq.DeniedError())
	}
	if err := db.GetContext(ctx, &d, `SELECT git_repository_url, cluster_user_name, owner_user_name, reason, reserved_prefix, lock_id, count
		FROM repository_lock_events WHERE event = 'denied' AND git_repository_url = 'github.com/acme/x'`); err != nil {
		t.Fatal(err)
	}
	if d.Reason.String != "claimed" || d.Prefix.Valid || !d.LockID.Valid {
		t.Fatalf("claimed denial row = %+v", d)
	}

	// AcquireTx (the Applications' path) refuses too.
	err := db.WithTx(ctx, func(tx database.Tx) error {
		acq, err := ls.AcquireTx(ctx, tx, eve.ID, claim(t, ls, "https://github.com/acme/tx"))
		if err != nil {
			return err
		}
		if acq.Acquired || acq.ReservedPrefix != "github.com/acme" {
			return fmt.Errorf("AcquireTx under acme's reservation: %+v", acq)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// The batched insert (group commit) refuses per row, within one statement.
	ids, err := locks.InsertLocks(ctx, db, eve.ID, locks.RuleSet(normalize.Default()), []string{"github.com/acme/b1", "github.com/eve/b2", "github.com/acme/shared/b3"})
	if err != nil || ids[0] != "" || ids[1] == "" || ids[2] != "" {
		t.Fatalf("batch insert: %q %v", ids, err)
	}
}

func TestReserveConflicts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	ls := newLocks(db)
	acme := dbtest.NewTenant(t, db, "acme")
	eve := dbtest.NewTenant(t, db, "eve")
	dbtest.NewTenant(t, db, "ops")

	for _, u := range []string{"https://github.com/acme/a", "https://github.com/acme/b", "https://github.com/acme_/c", "https://github.com/acmecorp/d"} {
		if acq, err := ls.Acquire(ctx, eve.ID, u); err != nil || !acq.Acquired {
			t.Fatalf("acquire %s: %+v %v", u, acq, err)
		}
	}
	if acq, err := ls.Acquire(ctx, acme.ID, "https://github.com/acme/own"); err != nil || !acq.Acquired {
		t.Fatal(acq, err)
	}
	want := []string{"github.com/acme/a", "github.com/acme/b"}
	keys := func(cs []locks.CoveredLock) []string {
		out := []string{}
		for _, c := range cs {
			if c.TenantName != "eve" || c.LockID == "" {
				t.Errorf("covered lock %+v", c)
			}
			out = append(out, string(c.NormalizedURL))
		}
		return out
	}

	// Dry run: the list, nothing written.
	_, covered, err := ls.Reserve(ctx, locks.ReserveRequest{Prefix: "github.com/acme", Tenant: "acme", DryRun: true})
	if err != nil || !equal(keys(covered), want) {
		t.Fatalf("dry run: %v %v", keys(covered), err)
	}
	// Refused: reservation_conflict listing the locks.
	_, _, err = ls.Reserve(ctx, locks.ReserveRequest{Prefix: "github.com/acme", Tenant: "acme"})
	var re *repolock.Error
	if !errors.As(err, &re) || re.Code != repolock.EReservationConflict || re.Details["total"] != 2 {
		t.Fatalf("conflict: %v", err)
	}
	if got := keys(re.Details["locks"].([]locks.CoveredLock)); !equal(got, want) {
		t.Fatalf("conflict lists %v", got)
	}
	if rs, _, err := ls.ListReservations(ctx, 10, ""); err != nil || len(rs) != 0 {
		t.Fatalf("after the refusal: %v %v", rs, err)
	}
	// A nested reservation of eve's own decides its locks: not a conflict.
	reserve(t, ls, "github.com/acme/a", "eve")
	if _, covered, err = ls.Reserve(ctx, locks.ReserveRequest{Prefix: "github.com/acme", Tenant: "acme", DryRun: true}); err != nil || !equal(keys(covered), want[1:]) {
		t.Fatalf("dry run with a nested reservation: %v %v", keys(covered), err)
	}
	// Keep: reserved, and the grandfathered locks stay eve's.
	r, covered, err := ls.Reserve(ctx, locks.ReserveRequest{Prefix: "github.com/acme", Tenant: "acme", Keep: true})
	if err != nil || r.ID == "" || !equal(keys(covered), want[1:]) {
		t.Fatalf("keep: %+v %v %v", r, keys(covered), err)
	}
	if acq, err := ls.Acquire(ctx, eve.ID, "https://github.com/acme/b"); err != nil || !acq.Acquired {
		t.Fatalf("eve's grandfathered lock: %+v %v", acq, err)
	}
	if acq, err := ls.Acquire(ctx, acme.ID, "https://github.com/acme/b"); err != nil || acq.Acquired || acq.Owner != "eve" || acq.ReservedPrefix != "" {
		t.Fatalf("acme on eve's grandfathered lock: %+v %v", acq, err)
	}
	// Errors: the same prefix again, an unknown tenant, a bad prefix.
	for _, tc := range []struct {
		req  locks.ReserveRequest
		code repolock.Code
	}{
		{locks.ReserveRequest{Prefix: "https://github.com/ACME", Tenant: "ops", Keep: true}, repolock.EAlreadyExists},
		{locks.ReserveRequest{Prefix: "github.com/nobody", Tenant: "nobody"}, repolock.ENotFound},
		{locks.ReserveRequest{Prefix: "", Tenant: "acme"}, repolock.EInvalid},
		{locks.ReserveRequest{Prefix: "github.com/x", Tenant: ""}, repolock.EInvalid},
	} {
		if _, _, err := ls.Reserve(ctx, tc.req); repolock.ErrorCode(err) != tc.code {
			t.Errorf("Reserve(%+v) = %v, want %s", tc.req, err, tc.code)
		}
	}

	// List pages and Unreserve.
	reserve(t, ls, "gitlab.com", "ops")
	var all []string
	token := ""
	for {
		rs, next, err := ls.ListReservations(ctx, 2, token)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			all = append(all, string(r.Prefix)+"="+r.TenantName)
		}
		if token = next; token == "" {
			break
		}
	}
	if w := []string{"github.com/acme/a=eve", "github.com/acme=acme", "gitlab.com=ops"}; !equal(all, w) {
		t.Fatalf("list = %v, want %v", all, w)
	}
	if _, _, err := ls.ListReservations(ctx, 2, "garbage"); repolock.ErrorCode(err) != repolock.EInvalid {
		t.Fatalf("bad token: %v", err)
	}
	if err := ls.Unreserve(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{r.ID, "not-a-uuid"} {
		if err := ls.Unreserve(ctx, id); repolock.ErrorCode(err) != repolock.ENotFound {
			t.Fatalf("unreserve %s again: %v", id, err)
		}
	}
	if acq, err := ls.Acquire(ctx, eve.ID, "https://github.com/acme/new"); err != nil || !acq.Acquired {
		t.Fatalf("after unreserve: %+v %v", acq, err)
	}
}

// TestReservationRacesClaims: claims of two tenants race under a prefix
// while the reservation of it is added. No claim by the other tenant may
// succeed after the reservation committed: every lock of the other tenant
// under the prefix is either listed by the reservation (it was refused) or
// was never there when it committed (the lock existed before: Keep), and
// each of those locks was created by a claim that returned before the
// reservation returned. And never two owners of a key.
func TestReservationRacesClaims(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	ls := newLocks(db)
	acme := dbtest.NewTenant(t, db, "acme")
	eve := dbtest.NewTenant(t, db, "eve")

	const keys = 40
	start := make(chan struct{})
	var (
		wg           sync.WaitGroup
		mu           sync.Mutex
		reservedDone bool
		lateEve      []string // eve's claims that succeeded and started after the reservation returned
	)
	for _, tn := range []struct{ id, name string }{{acme.ID, "acme"}, {eve.ID, "eve"}} {
		for w := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for i := range keys {
					u := fmt.Sprintf("https://github.com/acme/r%d", (i*7+w*13)%keys)
					mu.Lock()
					startedAfter := reservedDone
					mu.Unlock()
					acq, err := ls.Acquire(ctx, tn.id, u)
					if err != nil {
						t.Errorf("acquire %s by %s: %v", u, tn.name, err)
						return
					}
					if acq.Acquired && tn.name == "eve" && startedAfter {
						mu.Lock()
						lateEve = append(lateEve, u)
						mu.Unlock()
					}
				}
			}()
		}
	}
	close(start)
	// Reserve in the middle of the race: once some locks exist.
	for lockCountUnder(t, db, "github.com/acme/%") < keys/4 {
		runtime.Gosched()
	}
	r, covered, err := ls.Reserve(ctx, locks.ReserveRequest{Prefix: "github.com/acme", Tenant: "acme", Keep: true})
	mu.Lock()
	reservedDone = true
	mu.Unlock()
	if err != nil || r.ID == "" {
		t.Fatalf("reserve: %v", err)
	}
	wg.Wait()

	// A claim by eve that started after the reservation returned can only
	// succeed on a lock eve held before it (grandfathered: listed).
	listed := map[string]bool{}
	for _, c := range covered {
		listed[string(c.NormalizedURL)] = true
	}
	for _, u := range lateEve {
		k, _ := normalize.Default().RepoURL(u)
		if !listed[string(k)] {
			t.Errorf("eve acquired %s after the reservation committed, and the lock was not grandfathered", k)
		}
	}
	// Invariants: one owner per key; every lock of eve under the prefix
	// is one the reservation listed (it existed when it committed).
	var rows []struct {
		Key   string `db:"git_repository_url"`
		Owner string `db:"name"`
		N     int    `db:"n"`
	}
	if err := db.SelectContext(ctx, &rows, `SELECT o.git_repository_url, u.name, count(*) OVER (PARTITION BY o.git_repository_url) AS n
		FROM RepositoryLockOwner o JOIN cluster_users u ON u.id = o.cluster_user_id`); err != nil {
		t.Fatal(err)
	}
	eves := 0
	for _, row := range rows {
		if row.N != 1 {
			t.Errorf("%s has %d owners", row.Key, row.N)
		}
		if row.Owner == "eve" {
			eves++
			if !listed[row.Key] {
				t.Errorf("eve holds %s, created after the reservation committed", row.Key)
			}
		}
	}
	if len(covered) != eves {
		t.Errorf("the reservation listed %d of eve's locks, eve holds %d", len(covered), eves)
	}
	// Every free key is now acme's alone.
	for i := range keys {
		u := fmt.Sprintf("https://github.com/acme/r%d", i)
		k, _ := normalize.Default().RepoURL(u)
		acq, err := ls.Acquire(ctx, eve.ID, u)
		if err != nil || (acq.Acquired && !listed[string(k)]) {
			t.Errorf("eve after the race on %s: %+v %v", u, acq, err)
		}
	}
}

func lockCountUnder(t *testing.T, q database.Querier, like string) int {
	t.Helper()
	var n int
	if err := q.GetContext(context.Background(), &n, `SELECT count(*) FROM RepositoryLockOwner WHERE git_repository_url LIKE $1`, like); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestReserveWaitsForClaimInFlight: a lock created by a transaction not yet
// committed when the reservation is added is seen by it (Reserve waits for
// the claim's commit and lists the lock).
func TestReserveWaitsForClaimInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	ls := newLocks(db)
	dbtest.NewTenant(t, db, "acme")
	eve := dbtest.NewTenant(t, db, "eve")

	tx, _ := dbtest.BeginWithPID(t, db)
	if acq, err := ls.AcquireTx(ctx, tx, eve.ID, claim(t, ls, "https://github.com/acme/inflight")); err != nil || !acq.Acquired {
		t.Fatalf("claim in flight: %+v %v", acq, err)
	}
	type result struct {
		covered []locks.CoveredLock
		err     error
	}
	done := make(chan result, 1)
	var finished sync.Mutex
	returned := false
	go func() {
		_, c, err := ls.Reserve(ctx, locks.ReserveRequest{Prefix: "github.com/acme", Tenant: "acme"})
		finished.Lock()
		returned = true
		finished.Unlock()
		done <- result{c, err}
	}()
	dbtest.WaitUntilBlockedAny(t, db, -1)
	finished.Lock()
	if returned {
		t.Fatal("Reserve returned while a claim under its prefix was in flight")
	}
	finished.Unlock()
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	res := <-done
	var re *repolock.Error
	if !errors.As(res.err, &re) || re.Code != repolock.EReservationConflict {
		t.Fatalf("Reserve after the claim committed: %v", res.err)
	}
	if ls := re.Details["locks"].([]locks.CoveredLock); len(ls) != 1 || ls[0].NormalizedURL != "github.com/acme/inflight" {
		t.Fatalf("conflict lists %+v", ls)
	}
}

// TestClaimWaitsForReservationInFlight: a claim that starts while a
// reservation is being added (its transaction holds the table lock Reserve
// takes, and has inserted the reservation) waits for it and is then
// refused: its statement reads the reservations after the wait, with a
// new snapshot. Both the pool's batched acquire and AcquireTx.
func TestClaimWaitsForReservationInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	ls := newLocks(db)
	acme := dbtest.NewTenant(t, db, "acme")
	eve := dbtest.NewTenant(t, db, "eve")
	// Warm the prepared statements and the batcher's plan first.
	if acq, err := ls.Acquire(ctx, eve.ID, "https://github.com/warm/up"); err != nil || !acq.Acquired {
		t.Fatal(acq, err)
	}

	tx, pid := dbtest.BeginWithPID(t, db)
	// What Reserve does, held open.
	if _, err := tx.ExecContext(ctx, `LOCK TABLE RepositoryLockOwner IN SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO reservations (prefix, cluster_user_id) VALUES ('github.com/acme', $1)`, acme.ID); err != nil {
		t.Fatal(err)
	}
	type result struct {
		acq locks.Acquisition
		err error
	}
	pool := make(chan result, 1)
	inTx := make(chan result, 1)
	go func() {
		acq, err := ls.Acquire(ctx, eve.ID, "https://github.com/acme/pool")
		pool <- result{acq, err}
	}()
	go func() {
		var r result
		r.err = db.WithTx(ctx, func(tx database.Tx) error {
			var err error
			r.acq, err = ls.AcquireTx(ctx, tx, eve.ID, claim(t, ls, "https://github.com/acme/tx"))
			return err
		})
		inTx <- r
	}()
	poll := func() int {
		var n int
		if err := db.GetContext(ctx, &n, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> $1 AND wait_event_type = 'Lock'`, pid); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for poll() < 2 {
		runtime.Gosched()
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]chan result{"pool": pool, "tx": inTx} {
		r := <-ch
		if r.err != nil || r.acq.Acquired || r.acq.Owner != "acme" || r.acq.ReservedPrefix != "github.com/acme" {
			t.Errorf("%s claim after the reservation committed: %+v %v", name, r.acq, r.err)
		}
	}
}

// TestAcquireForRekeyUnderReservation: re-keying does not create a lock
// under another tenant's reservation; it is told why at once (not after
// 16 rounds of a lock "changing hands").
func TestAcquireForRekeyUnderReservation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	ls := newLocks(db)
	dbtest.NewTenant(t, db, "acme")
	eve := dbtest.NewTenant(t, db, "eve")
	reserve(t, ls, "github.com/acme", "acme")
	tg, err := ls.AcquireForRekey(ctx, db, ls.Keying(), eve.ID, "github.com/acme/moved")
	var re *repolock.Error
	if !errors.As(err, &re) || re.Code != repolock.ERepositoryReserved || re.Details["tenant"] != "acme" || tg != (locks.Target{}) {
		t.Fatalf("AcquireForRekey under acme's reservation: %+v %v", tg, err)
	}
	if tg, err := ls.AcquireForRekey(ctx, db, ls.Keying(), eve.ID, "github.com/eve/moved"); err != nil || !tg.Created {
		t.Fatalf("AcquireForRekey elsewhere: %+v %v", tg, err)
	}
}
