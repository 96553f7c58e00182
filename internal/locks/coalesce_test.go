package locks_test

import (
	"context"
	"sync"
	"testing"

	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
)

// TestDenialsCoalesceUnderConcurrency: repeated denials of one tenant for
// one URL within a window are one row with a count, even when they race
// (goroutines on their own connections); another tenant has its own row;
// an earlier window keeps its own row.
func TestDenialsCoalesceUnderConcurrency(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	ls := newLocks(db)
	alice := dbtest.NewTenant(t, db, "alice")
	bob := dbtest.NewTenant(t, db, "bob")
	carol := dbtest.NewTenant(t, db, "carol")
	const key = "github.com/acme/contended"
	if acq, err := ls.Acquire(ctx, alice.ID, key); err != nil || !acq.Acquired {
		t.Fatalf("alice acquires: %+v %v", acq, err)
	}
	// A denial of bob in an earlier window (as recorded an hour ago).
	if _, err := db.ExecContext(ctx, `
		INSERT INTO repository_lock_events (event, git_repository_url, cluster_user_id, cluster_user_name, owner_user_id, owner_user_name, created_at, denial_window)
		VALUES ('denied', $1, $2, 'bob', $3, 'alice', now() - interval '2 hours',
		        date_bin(interval '1 hour', now() - interval '2 hours', timestamptz '1970-01-01 00:00:00+00'))`,
		key, bob.ID, alice.ID); err != nil {
		t.Fatal(err)
	}

	const workers, each = 16, 10
	c := claim(t, ls, key)
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 2*workers*each)
	for w := 0; w < workers; w++ {
		for _, tenant := range []string{bob.ID, carol.ID} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for i := 0; i < each; i++ {
					// Each denial in its own transaction, as internal/apps
					// records them.
					err := db.WithTx(ctx, func(tx database.Tx) error {
						acq, err := ls.AcquireTx(ctx, tx, tenant, c)
						if err == nil && (acq.Acquired || acq.Owner != "alice") {
							t.Errorf("got %+v, want denied by alice", acq)
						}
						return err
					})
					if err != nil {
						errs <- err
					}
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("denial: %v", err)
	}
	type row struct {
		Name  string `db:"cluster_user_name"`
		Count int    `db:"count"`
		Old   bool   `db:"old"`
	}
	var rows []row
	if err := db.SelectContext(ctx, &rows, `
		SELECT cluster_user_name, count, created_at < now() - interval '1 hour' AS old
		FROM repository_lock_events WHERE event = 'denied' AND git_repository_url = $1
		ORDER BY cluster_user_name, created_at`, key); err != nil {
		t.Fatal(err)
	}
	want := []row{{"bob", 1, true}, {"bob", workers * each, false}, {"carol", workers * each, false}}
	if len(rows) != len(want) {
		t.Fatalf("denied rows = %+v, want %+v", rows, want)
	}
	for i := range want {
		if rows[i] != want[i] {
			t.Fatalf("denied rows = %+v, want %+v", rows, want)
		}
	}
	// The report shows the count.
	var denials int
	if err := db.GetContext(ctx, &denials, `SELECT denials FROM report_denials WHERE requested_by = 'carol'`); err != nil || denials != workers*each {
		t.Fatalf("report_denials.denials for carol = %d %v, want %d", denials, err, workers*each)
	}
}

// TestEventsStayAnAuditTrail: the only UPDATE is one more denial on a
// denied row; the only DELETE is the GC's retention.
func TestEventsStayAnAuditTrail(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	ls := newLocks(db)
	alice := dbtest.NewTenant(t, db, "alice")
	bob := dbtest.NewTenant(t, db, "bob")
	const key = "github.com/acme/audit"
	if _, err := ls.Acquire(ctx, alice.ID, key); err != nil {
		t.Fatal(err)
	}
	if _, err := ls.Acquire(ctx, bob.ID, key); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`UPDATE repository_lock_events SET owner_user_name = 'mallory' WHERE event = 'denied'`,
		`UPDATE repository_lock_events SET count = count + 5 WHERE event = 'denied'`,
		`UPDATE repository_lock_events SET count = count + 1 WHERE event = 'acquired'`,
		`UPDATE repository_lock_events SET created_at = now() - interval '1 day'`,
		`DELETE FROM repository_lock_events`,
	} {
		_, err := db.ExecContext(ctx, q)
		if database.PQCode(err) != "42501" {
			t.Errorf("%s: %v, want insufficient_privilege (append-only)", q, err)
		}
	}
}
