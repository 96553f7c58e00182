package reports_test

import (
	"context"
	"slices"
	"testing"

	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/locks"
)

// TestDenialReason: report_denials says why each claim was refused: a
// claim of a lock another tenant holds is "claimed" (also a row written
// before reasons were recorded), a claim under another tenant's
// reservation "reserved" with the reservation's prefix, the reserving
// tenant as the owner. Real claims through locks.Service, then the view.
func TestDenialReason(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	ls := svc(db).locks
	alice := dbtest.NewTenant(t, db, "alice")
	bob := dbtest.NewTenant(t, db, "bob")
	if _, err := ls.Acquire(ctx, alice.ID, "github.com/alice/repo"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ls.Reserve(ctx, locks.ReserveRequest{Prefix: "github.com/acme", Tenant: "alice"}); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"github.com/alice/repo", "github.com/acme/x"} {
		if got, err := ls.Acquire(ctx, bob.ID, key); err == nil && got.Acquired {
			t.Fatalf("bob acquired %s", key)
		}
	}
	// A denial recorded before reasons were (reason NULL).
	mustExec(t, db, `INSERT INTO repository_lock_events (event, git_repository_url, cluster_user_id, cluster_user_name, owner_user_id, owner_user_name)
		VALUES ('denied', 'github.com/old/repo', $1, 'bob', $2, 'alice')`, bob.ID, alice.ID)
	var rows []string
	if err := db.SelectContext(ctx, &rows, `SELECT git_repository_url || ' ' || requested_by || ' ' || owner_name || ' ' || reason
		|| coalesce(' ' || reserved_prefix, '') FROM report_denials`); err != nil {
		t.Fatal(err)
	}
	slices.Sort(rows)
	want := []string{
		"github.com/acme/x bob alice reserved github.com/acme",
		"github.com/alice/repo bob alice claimed",
		"github.com/old/repo bob alice claimed",
	}
	if !slices.Equal(rows, want) {
		t.Errorf("report_denials:\n got %q\nwant %q", rows, want)
	}
}
