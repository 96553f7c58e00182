package locks_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/locks"
)

// owner returns the owner's id of the lock on key and how many lock rows
// the key has (0 or 1 by the unique index; the query is what an observer
// of the invariant reads).
func ownerOf(t testing.TB, q database.Querier, key string) (string, int) {
	t.Helper()
	var rows []string
	if err := q.SelectContext(context.Background(), &rows,
		`SELECT cluster_user_id FROM RepositoryLockOwner WHERE git_repository_url = $1`, key); err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		return "", 0
	}
	return rows[0], len(rows)
}

// foreignRefs counts references on locks whose owner is not the
// referencing row's tenant: any is two owners of one repository.
func foreignRefs(t testing.TB, q database.Querier) int {
	t.Helper()
	var n int
	if err := q.GetContext(context.Background(), &n, `
		SELECT (SELECT count(*) FROM RepositoryLockApplication r
			JOIN applications a ON a.id = r.application_id JOIN RepositoryLockOwner o ON o.id = r.lock_id
			WHERE a.cluster_user_id <> o.cluster_user_id)
		+ (SELECT count(*) FROM RepositoryLockRepositoryCredential r
			JOIN repository_credentials c ON c.id = r.repository_credential_id JOIN RepositoryLockOwner o ON o.id = r.lock_id
			WHERE c.cluster_user_id <> o.cluster_user_id)`); err != nil {
		t.Fatal(err)
	}
	return n
}

func lastEvent(t testing.TB, q database.Querier, lockID string) (ev, from, to, actor, details string) {
	t.Helper()
	var row struct {
		Event   string  `db:"event"`
		From    *string `db:"cluster_user_name"`
		To      *string `db:"owner_user_name"`
		Actor   *string `db:"actor"`
		Details *string `db:"details"`
	}
	if err := q.GetContext(context.Background(), &row, `
		SELECT event, cluster_user_name, owner_user_name, actor, details::text AS details
		FROM repository_lock_events WHERE lock_id = $1 ORDER BY id DESC LIMIT 1`, lockID); err != nil {
		t.Fatal(err)
	}
	s := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	return row.Event, s(row.From), s(row.To), s(row.Actor), s(row.Details)
}

func TestDenials(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	ls := newLocks(db)
	alice := dbtest.NewTenant(t, db, "alice")
	bob := dbtest.NewTenant(t, db, "bob")
	carol := dbtest.NewTenant(t, db, "carol")
	key := "github.com/denials/repo"
	acq, err := ls.Acquire(ctx, alice.ID, key)
	if err != nil || !acq.Acquired {
		t.Fatalf("acquire: %+v %v", acq, err)
	}
	if ds, err := denials(ls, alice.ID, acq.LockID); err != nil || len(ds) != 0 {
		t.Fatalf("denials before any: %+v %v", ds, err)
	}
	for _, u := range []string{bob.ID, bob.ID, carol.ID, bob.ID} {
		if got, err := ls.Acquire(ctx, u, key); err != nil || got.Acquired || got.Owner != "alice" {
			t.Fatalf("acquire by another tenant: %+v %v", got, err)
		}
	}
	ds, err := denials(ls, alice.ID, acq.LockID)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, d := range ds {
		got[d.Tenant] = d.Count
		if d.First.IsZero() || d.Last.Before(d.First) {
			t.Errorf("denial %+v: first/last out of order", d)
		}
	}
	if len(ds) != 2 || got["bob"] != 3 || got["carol"] != 1 {
		t.Errorf("denials = %+v, want bob 3 and carol 1", ds)
	}
	// Only the owner reads them.
	if _, err := denials(ls, bob.ID, acq.LockID); !repolock.IsCode(err, repolock.ENotFound) {
		t.Errorf("another tenant's denials: %v, want not_found", err)
	}
	if _, err := denials(ls, alice.ID, "not-a-uuid"); !repolock.IsCode(err, repolock.ENotFound) {
		t.Errorf("malformed id: %v, want not_found", err)
	}
	// After a transfer the new owner sees the denials against it only.
	if _, err := ls.Transfer(ctx, locks.TransferRequest{LockID: acq.LockID, To: "carol", Actor: "admin:test"}); err != nil {
		t.Fatal(err)
	}
	if ds, err := denials(ls, carol.ID, acq.LockID); err != nil || len(ds) != 0 {
		t.Errorf("new owner's denials: %+v %v, want none (they were alice's)", ds, err)
	}
}

func TestTransfer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	ls := newLocks(db)
	alice := dbtest.NewTenant(t, db, "alice")
	bob := dbtest.NewTenant(t, db, "bob")
	key := "github.com/transfer/repo"
	lockID := dbtest.NewLock(t, db, alice.ID, key, 0)
	dbtest.NewApplication(t, db, alice.ID, "app-1", lockID)
	dbtest.NewCredential(t, db, alice.ID, "cred-1", lockID)

	bad := []struct {
		name string
		req  locks.TransferRequest
		want repolock.Code
	}{
		{"unknown user", locks.TransferRequest{LockID: lockID, To: "nobody", Actor: "a"}, repolock.ENotFound},
		{"no user", locks.TransferRequest{LockID: lockID, Actor: "a"}, repolock.EInvalid},
		{"to the owner", locks.TransferRequest{LockID: lockID, To: "alice", Actor: "a"}, repolock.EInvalid},
		{"bad policy", locks.TransferRequest{LockID: lockID, To: "bob", References: "keep", Actor: "a"}, repolock.EInvalid},
		{"unknown lock", locks.TransferRequest{LockID: "00000000-0000-0000-0000-000000000001", To: "bob", Actor: "a"}, repolock.ENotFound},
		{"malformed lock", locks.TransferRequest{LockID: "x", To: "bob", Actor: "a"}, repolock.ENotFound},
		{"in use (default refuse)", locks.TransferRequest{LockID: lockID, To: "bob", Actor: "a"}, repolock.ELockInUse},
		{"in use (refuse)", locks.TransferRequest{LockID: lockID, To: "bob", References: "refuse", Actor: "a"}, repolock.ELockInUse},
	}
	for _, tc := range bad {
		_, err := ls.Transfer(ctx, tc.req)
		if !repolock.IsCode(err, tc.want) {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.want)
		}
		if o, n := ownerOf(t, db, key); n != 1 || o != alice.ID {
			t.Fatalf("%s: owner %s (%d rows), want alice's lock untouched", tc.name, o, n)
		}
	}
	_, err := ls.Transfer(ctx, locks.TransferRequest{LockID: lockID, To: "bob", Actor: "a"})
	refs, _ := repolock.ErrorDetails(err)["references"].([]locks.Reference)
	if len(refs) != 2 || refs[0].Name != "app-1" || refs[1].Name != "cred-1" || repolock.ErrorDetails(err)["reference_count"] != 2 {
		t.Errorf("lock_in_use details: %+v", repolock.ErrorDetails(err))
	}

	tr, err := ls.Transfer(ctx, locks.TransferRequest{LockID: lockID, To: "bob", References: "delete", Actor: "admin:abc"})
	if err != nil {
		t.Fatal(err)
	}
	if tr.From != "alice" || tr.To != "bob" || len(tr.DeletedReferences) != 2 {
		t.Errorf("transfer = %+v", tr)
	}
	if o, n := ownerOf(t, db, key); n != 1 || o != bob.ID {
		t.Errorf("owner after transfer: %s (%d rows), want bob", o, n)
	}
	var left int
	if err := db.GetContext(ctx, &left, `SELECT (SELECT count(*) FROM applications) + (SELECT count(*) FROM repository_credentials)`); err != nil || left != 0 {
		t.Errorf("references left: %d %v", left, err)
	}
	ev, from, to, actor, details := lastEvent(t, db, lockID)
	if ev != "transferred" || from != "alice" || to != "bob" || actor != "admin:abc" ||
		!contains(details, `"app-1"`) || !contains(details, `"cred-1"`) {
		t.Errorf("event = %s %s %s %s %s", ev, from, to, actor, details)
	}
	// The report view shows it.
	var rep []struct {
		Event string  `db:"event"`
		From  string  `db:"from_name"`
		To    string  `db:"to_name"`
		Actor *string `db:"actor"`
	}
	if err := db.SelectContext(ctx, &rep, `SELECT event, from_name, to_name, actor FROM report_transfers WHERE lock_id = $1`, lockID); err != nil ||
		len(rep) != 1 || rep[0].Event != "transferred" || rep[0].From != "alice" || rep[0].To != "bob" || rep[0].Actor == nil || *rep[0].Actor != "admin:abc" {
		t.Errorf("report_transfers = %+v %v", rep, err)
	}
	// The new owner holds it like any lock: its acquire joins it, alice is denied.
	if got, err := ls.Acquire(ctx, bob.ID, key); err != nil || got.LockID != lockID {
		t.Errorf("bob's acquire: %+v %v", got, err)
	}
	if got, err := ls.Acquire(ctx, alice.ID, key); err != nil || got.Acquired || got.Owner != "bob" {
		t.Errorf("alice's acquire: %+v %v", got, err)
	}
}

func contains(s, sub string) bool {
	return len(sub) == 0 || (len(s) >= len(sub) && indexOf(s, sub) >= 0)
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

// TestTransferRacesOwnersApplication: an admin transfer (both policies), or
// a handover acceptance, racing the old owner's new Application on the same repository, many
// rounds. Never two owners (no reference of one tenant on another's lock),
// never an unowned gap (an observer polling the key always finds one lock),
// and each round ends in one of the two serial outcomes.
func TestTransferRacesOwnersApplication(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	ls := newLocks(db)
	alice := dbtest.NewTenant(t, db, "alice")
	bob := dbtest.NewTenant(t, db, "bob")
	const rounds = 60
	outcomes := map[string]int{}
	defer func() { t.Logf("outcomes over %d rounds: %v", rounds, outcomes) }()
	for round := 0; round < rounds; round++ {
		// Round by round: an admin transfer deleting references, one
		// refusing them, and a handover acceptance (which refuses them).
		policy := []string{locks.ReferencesDelete, locks.ReferencesRefuse, "accept"}[round%3]
		key := fmt.Sprintf("github.com/transfer-race/repo-%d", round)
		lockID := dbtest.NewLock(t, db, alice.ID, key, 0)
		var offer locks.Handover
		if policy == "accept" {
			var err error
			if offer, err = ls.OfferHandover(ctx, locks.OfferRequest{TenantID: alice.ID, LockID: lockID, To: "bob"}); err != nil {
				t.Fatal(err)
			}
		}

		var stop atomic.Bool
		gaps := make(chan string, 1)
		var observer sync.WaitGroup
		observer.Add(1)
		go func() {
			defer observer.Done()
			for !stop.Load() {
				var n int
				if err := db.GetContext(ctx, &n, `SELECT count(*) FROM RepositoryLockOwner WHERE git_repository_url = $1`, key); err != nil {
					gaps <- err.Error()
					return
				}
				if n != 1 {
					gaps <- fmt.Sprintf("round %d: %d locks on the key", round, n)
					return
				}
			}
		}()

		var wg sync.WaitGroup
		var trErr, appErr error
		var appAcq locks.Acquisition
		wg.Add(2)
		start := make(chan struct{})
		go func() {
			defer wg.Done()
			<-start
			if policy == "accept" {
				_, trErr = ls.AcceptHandover(ctx, bob.ID, "bob", offer.ID)
				return
			}
			_, trErr = ls.Transfer(ctx, locks.TransferRequest{LockID: lockID, To: "bob", References: policy, Actor: "admin:test"})
		}()
		go func() {
			defer wg.Done()
			<-start
			appErr = db.WithTx(ctx, func(tx database.Tx) error {
				var err error
				appAcq, err = ls.AcquireTx(ctx, tx, alice.ID, claim(t, ls, key))
				if err != nil || !appAcq.Acquired {
					return err
				}
				_, err = tx.ExecContext(ctx, `
					WITH app AS (
						INSERT INTO applications (cluster_user_id, name, repo_url, normalized_url)
						VALUES ($1, $2, $3, $3) RETURNING id
					)
					INSERT INTO RepositoryLockApplication (application_id, lock_id) SELECT id, $4 FROM app`,
					alice.ID, fmt.Sprintf("app-%d", round), key, appAcq.LockID)
				return err
			})
		}()
		close(start)
		wg.Wait()
		stop.Store(true)
		observer.Wait()
		select {
		case g := <-gaps:
			t.Fatal(g)
		default:
		}
		if appErr != nil {
			t.Fatalf("round %d: application: %v", round, appErr)
		}
		owner, n := ownerOf(t, db, key)
		if n != 1 {
			t.Fatalf("round %d: %d locks", round, n)
		}
		if f := foreignRefs(t, db); f != 0 {
			t.Fatalf("round %d: %d references on another tenant's lock", round, f)
		}
		outcomes[fmt.Sprintf("%s transfer err=%v app acquired=%v", policy, repolock.ErrorCode(trErr), appAcq.Acquired)]++
		switch {
		case trErr == nil:
			// Transferred: alice's application either came first (and
			// the delete policy removed it) or was denied.
			if owner != bob.ID {
				t.Fatalf("round %d: transfer succeeded but owner is %s", round, owner)
			}
			if appAcq.Acquired && policy != locks.ReferencesDelete {
				t.Fatalf("round %d: %s succeeded over alice's application", round, policy)
			}
		case repolock.IsCode(trErr, repolock.ELockInUse) && policy != locks.ReferencesDelete:
			// Alice's application committed first.
			if owner != alice.ID || !appAcq.Acquired {
				t.Fatalf("round %d: refused but owner %s, app %+v", round, owner, appAcq)
			}
		default:
			t.Fatalf("round %d: transfer: %v", round, trErr)
		}
	}
}

func TestHandover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	ls := newLocks(db)
	alice := dbtest.NewTenant(t, db, "alice")
	bob := dbtest.NewTenant(t, db, "bob")
	carol := dbtest.NewTenant(t, db, "carol")
	key := "github.com/handover/repo"
	lockID := dbtest.NewLock(t, db, alice.ID, key, time.Hour)
	appID := dbtest.NewApplication(t, db, alice.ID, "app-1", lockID)

	offer := func(tenantID, to string, in time.Duration) (locks.Handover, error) {
		return ls.OfferHandover(ctx, locks.OfferRequest{TenantID: tenantID, LockID: lockID, To: to, ExpiresIn: in})
	}
	for _, tc := range []struct {
		name     string
		tenantID string
		to       string
		in       time.Duration
		want     repolock.Code
	}{
		{"not the owner", bob.ID, "carol", 0, repolock.ENotFound},
		{"to itself", alice.ID, "alice", 0, repolock.EInvalid},
		{"unknown recipient", alice.ID, "nobody", 0, repolock.ENotFound},
		{"expiry too long", alice.ID, "bob", 31 * 24 * time.Hour, repolock.EInvalid},
		{"negative expiry", alice.ID, "bob", -time.Hour, repolock.EInvalid},
	} {
		if _, err := offer(tc.tenantID, tc.to, tc.in); !repolock.IsCode(err, tc.want) {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.want)
		}
	}
	h, err := offer(alice.ID, "bob", 0)
	if err != nil {
		t.Fatal(err)
	}
	if h.From != "alice" || h.ToName != "bob" || h.NormalizedURL != "github.com/handover/repo" {
		t.Errorf("offer = %+v", h)
	}
	if _, err := offer(alice.ID, "carol", 0); !repolock.IsCode(err, repolock.EHandoverPending) {
		t.Errorf("second offer: %v, want handover_pending", err)
	}
	recv, sent := handovers(t, ls, bob.ID, locks.HandoversReceived), handovers(t, ls, bob.ID, locks.HandoversOffered)
	if len(recv) != 1 || recv[0].ID != h.ID || len(sent) != 0 {
		t.Errorf("bob's handovers: %+v %+v", recv, sent)
	}
	if recv, sent := handovers(t, ls, alice.ID, locks.HandoversReceived), handovers(t, ls, alice.ID, locks.HandoversOffered); len(recv) != 0 || len(sent) != 1 {
		t.Errorf("alice's handovers: %+v %+v", recv, sent)
	}
	// Only the recipient accepts or declines; only the owner withdraws.
	if _, err := ls.AcceptHandover(ctx, carol.ID, "carol", h.ID); !repolock.IsCode(err, repolock.ENotFound) {
		t.Errorf("carol accepts: %v", err)
	}
	if err := ls.WithdrawHandover(ctx, bob.ID, "bob", h.ID); !repolock.IsCode(err, repolock.ENotFound) {
		t.Errorf("bob withdraws: %v", err)
	}
	// Alice still uses it: 409 listing her application.
	_, err = ls.AcceptHandover(ctx, bob.ID, "bob", h.ID)
	if !repolock.IsCode(err, repolock.ELockInUse) {
		t.Fatalf("accept while in use: %v", err)
	}
	// Pinned: deleting the last reference and releasing does not free it,
	// nor does the GC's delete.
	if _, err := db.ExecContext(ctx, `DELETE FROM applications WHERE id = $1`, appID); err != nil {
		t.Fatal(err)
	}
	if released, err := release(ctx, db, ls, lockID); err != nil || released {
		t.Errorf("release of a pinned lock: %v %v, want false", released, err)
	}
	if n, err := ls.DeleteUnreferenced(ctx, db, []string{lockID}); err != nil || n != 0 {
		t.Errorf("GC delete of a pinned lock: %d %v, want 0", n, err)
	}
	if got, err := ls.Acquire(ctx, carol.ID, key); err != nil || got.Acquired {
		t.Errorf("a third tenant slipped in: %+v %v", got, err)
	}
	tr, err := ls.AcceptHandover(ctx, bob.ID, "bob", h.ID)
	if err != nil {
		t.Fatal(err)
	}
	if tr.From != "alice" || tr.To != "bob" {
		t.Errorf("accept = %+v", tr)
	}
	if o, n := ownerOf(t, db, key); n != 1 || o != bob.ID {
		t.Errorf("owner after accept: %s %d", o, n)
	}
	if ev, from, to, actor, _ := lastEvent(t, db, lockID); ev != "handover_accepted" || from != "alice" || to != "bob" || actor != "bob" {
		t.Errorf("event: %s %s %s %s", ev, from, to, actor)
	}
	if _, err := ls.AcceptHandover(ctx, bob.ID, "bob", h.ID); !repolock.IsCode(err, repolock.ENotFound) {
		t.Errorf("second accept: %v", err)
	}
	// Not pinned any more: released like any unreferenced lock.
	if released, err := release(ctx, db, ls, lockID); err != nil || !released {
		t.Errorf("release after accept: %v %v", released, err)
	}
}

func TestHandoverEnds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	ls := newLocks(db)
	alice := dbtest.NewTenant(t, db, "alice")
	bob := dbtest.NewTenant(t, db, "bob")
	for _, end := range []string{"decline", "withdraw", "expire", "transfer"} {
		t.Run(end, func(t *testing.T) {
			key := "github.com/handover-ends/" + end
			lockID := dbtest.NewLock(t, db, alice.ID, key, time.Hour)
			h, err := ls.OfferHandover(ctx, locks.OfferRequest{TenantID: alice.ID, LockID: lockID, To: "bob", ExpiresIn: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			if released, _ := release(ctx, db, ls, lockID); released {
				t.Fatal("a pinned lock was released")
			}
			want := map[string]string{"decline": "handover_declined", "withdraw": "handover_withdrawn", "expire": "handover_expired", "transfer": "transferred"}[end]
			switch end {
			case "decline":
				err = ls.DeclineHandover(ctx, bob.ID, "bob", h.ID)
			case "withdraw":
				err = ls.WithdrawHandover(ctx, alice.ID, "alice", h.ID)
			case "expire":
				_, err = db.ExecContext(ctx, `UPDATE lock_handovers SET expires_at = now() - interval '1 second', created_at = now() - interval '1 hour' WHERE id = $1`, h.ID)
				if err == nil {
					// Expired is absent even before the GC deletes it.
					if recv := handovers(t, ls, bob.ID, locks.HandoversReceived); len(recv) != 0 {
						t.Errorf("expired offer listed: %+v", recv)
					}
					if _, aerr := ls.AcceptHandover(ctx, bob.ID, "bob", h.ID); !repolock.IsCode(aerr, repolock.ENotFound) {
						t.Errorf("accept of an expired offer: %v", aerr)
					}
					err = ls.DeleteExpiredHandovers(ctx, 100)
				}
			case "transfer":
				_, err = ls.Transfer(ctx, locks.TransferRequest{LockID: lockID, To: "bob", Actor: "admin:x"})
			}
			if err != nil {
				t.Fatal(err)
			}
			if ev, _, _, _, _ := lastEvent(t, db, lockID); ev != want {
				t.Errorf("last event %s, want %s", ev, want)
			}
			var open int
			if err := db.GetContext(ctx, &open, `SELECT count(*) FROM lock_handovers WHERE lock_id = $1`, lockID); err != nil || open != 0 {
				t.Errorf("offers left: %d %v", open, err)
			}
			if released, err := release(ctx, db, ls, lockID); err != nil || !released {
				t.Errorf("release after the offer ended: %v %v", released, err)
			}
		})
	}
}
