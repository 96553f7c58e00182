package rekey_test

import (
	"testing"

	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/rekey"
)

// TestRekeyUnderReservation: a re-key that would move a lock under another
// tenant's reservation (in place, or to a new lock of a split) is a
// recorded conflict with its own reason, and the run goes on with the
// other locks; the owner's own reservation does not stop it. Once the
// reservation is gone, the next run moves the lock and closes the row.
func TestRekeyUnderReservation(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := t.Context()
	rs := svc(db).rekey
	ten := func(name string) string { return dbtest.NewTenant(t, db, name).ID }
	alice, bob, erin := ten("alice"), ten("bob"), ten("erin")
	// bob reserves p.example/o and s.example/o (the new keys below are
	// under them); alice reserves q.example.
	for prefix, tenant := range map[string]string{"p.example/o": bob, "s.example/o": bob, "q.example": alice} {
		if _, err := db.ExecContext(ctx, `INSERT INTO reservations (prefix, cluster_user_id) VALUES ($1, $2)`, prefix, tenant); err != nil {
			t.Fatal(err)
		}
	}
	// In place, under bob's reservation: a conflict.
	insertOld(t, db, alice, "p.example/o/test", 2, oldRef{"application", "a1", "git@p.example:o/te%73t"})
	// In place, under alice's own reservation: moves.
	insertOld(t, db, alice, "q.example/o/test", 2, oldRef{"application", "a2", "git@q.example:o/te%73t"})
	// bob's own lock under his reservation: moves.
	insertOld(t, db, bob, "p.example/b/test", 2, oldRef{"application", "b1", "git@p.example:b/te%73t"})
	insertOld(t, db, bob, "p.example/o/bob", 2, oldRef{"application", "b2", "git@p.example:o/b%6fb"})
	// A split under bob's reservation: the moving reference is a
	// conflict (no lock is created for erin there), the lock stays.
	insertOld(t, db, erin, "s.example/o/test", 2,
		oldRef{"application", "e1", "git@s.example:o/te%73t"},
		oldRef{"credential", "e2", "https://s.example/o/te%73t"})

	dry, err := rs.Run(ctx, keying(t, db), rekey.Options{DryRun: true, BatchSize: 2})
	if err != nil {
		t.Fatalf("dry run: %v", err)
	}
	rep, err := rs.Run(ctx, keying(t, db), rekey.Options{BatchSize: 2})
	if err != nil {
		t.Fatalf("run stopped: %v", err)
	}
	want := runCounts{stale: 5, rekeyed: 3, moved: 3, conflicts: 2}
	for name, r := range map[string]rekey.Report{"dry run": dry, "run": rep} {
		if got := countsOf(r); got != want {
			t.Errorf("%s counts = %+v, want %+v", name, got, want)
		}
		for _, p := range r.Conflicts {
			if p.Reason != rekey.ReasonReserved || p.OtherTenant != "bob" || p.OtherLockID != "" {
				t.Errorf("%s conflict %+v: want reason %q, other_user bob, no other lock", name, p, rekey.ReasonReserved)
			}
		}
	}
	after := snapshot(t, db)
	diff(t, "locks", after.Locks, []string{
		"alice p.example/o/test v2",
		"alice q.example/o/te%2573t v3",
		"bob p.example/b/te%2573t v3",
		"bob p.example/o/b%256fb v3",
		"erin s.example/o/test v2",
	})
	var rows []string
	if err := db.SelectContext(ctx, &rows, `SELECT kind || ' ' || tenant_name || ' ' || repo_url || ' -> ' || new_key
		|| ' vs ' || other_tenant_name || ' ' || other_key || coalesce(' lock ' || other_lock_id, '') || ': ' || reason
		FROM report_rekey_conflicts ORDER BY 1`); err != nil {
		t.Fatal(err)
	}
	diff(t, "open conflicts", rows, []string{
		"conflict alice git@p.example:o/te%73t -> p.example/o/te%2573t vs bob p.example/o: " + rekey.ReasonReserved,
		"conflict erin git@s.example:o/te%73t -> s.example/o/te%2573t vs bob s.example/o: " + rekey.ReasonReserved,
	})

	// The operator removes bob's reservation of p.example/o: the next run
	// moves alice's lock and closes its row; erin's stays open.
	if _, err := db.ExecContext(ctx, `DELETE FROM reservations WHERE prefix = 'p.example/o'`); err != nil {
		t.Fatal(err)
	}
	again, err := rs.Run(ctx, keying(t, db), rekey.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := countsOf(again); got != (runCounts{stale: 2, rekeyed: 1, moved: 1, conflicts: 1}) {
		t.Errorf("second run counts = %+v", got)
	}
	var open []string
	if err := db.SelectContext(ctx, &open, `SELECT tenant_name FROM report_rekey_conflicts ORDER BY 1`); err != nil {
		t.Fatal(err)
	}
	diff(t, "open conflicts after the second run", open, []string{"erin"})
}
