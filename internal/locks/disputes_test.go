package locks_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/locks"
)

// denials reads every page of a lock's denials, two at a time.
func denials(ls *locks.Service, tenantID, lockID string) ([]locks.Denial, error) {
	var out []locks.Denial
	token := ""
	for {
		ds, next, err := ls.Denials(context.Background(), tenantID, lockID, 2, token)
		if err != nil {
			return nil, err
		}
		out = append(out, ds...)
		if next == "" {
			return out, nil
		}
		token = next
	}
}

// handovers reads every page of the tenant's open offers in direction,
// two at a time.
func handovers(t *testing.T, ls *locks.Service, tenantID, direction string) []locks.Handover {
	t.Helper()
	var out []locks.Handover
	token := ""
	for {
		hs, next, err := ls.ListHandovers(context.Background(), locks.HandoverFilter{TenantID: tenantID, Direction: direction}, 2, token)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, hs...)
		if next == "" {
			return out
		}
		token = next
	}
}

// TestHandoverPages: the open offers page by (created_at, id), each
// direction and both, and every tenant's for an operator; tokens are bound
// to their list; expired offers are absent.
func TestHandoverPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	ls := newLocks(db)
	alice := dbtest.NewTenant(t, db, "alice")
	bob := dbtest.NewTenant(t, db, "bob")
	var made []string
	// alice offers 5 locks to bob, bob offers 2 to alice.
	for i := range 7 {
		from, to := alice.ID, "bob"
		if i >= 5 {
			from, to = bob.ID, "alice"
		}
		acq, err := ls.Acquire(ctx, from, fmt.Sprintf("github.com/pages/r%d", i))
		if err != nil {
			t.Fatal(err)
		}
		h, err := ls.OfferHandover(ctx, locks.OfferRequest{TenantID: from, LockID: acq.LockID, To: to, ExpiresIn: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		made = append(made, h.ID)
	}
	ids := func(hs []locks.Handover) []string {
		out := []string{}
		for _, h := range hs {
			out = append(out, h.ID)
		}
		return out
	}
	for _, tt := range []struct {
		tenant, dir string
		want        []string
	}{
		{bob.ID, locks.HandoversReceived, made[:5]},
		{bob.ID, locks.HandoversOffered, made[5:]},
		{bob.ID, locks.HandoversAll, made},
		{alice.ID, locks.HandoversReceived, made[5:]},
		{"", locks.HandoversAll, made},
	} {
		if got := ids(handovers(t, ls, tt.tenant, tt.dir)); !slices.Equal(got, tt.want) {
			t.Errorf("tenant %q direction %q: %v, want %v", tt.tenant, tt.dir, got, tt.want)
		}
	}
	// A token belongs to its list: another tenant's or direction's is invalid.
	_, next, err := ls.ListHandovers(ctx, locks.HandoverFilter{TenantID: bob.ID, Direction: locks.HandoversReceived}, 2, "")
	if err != nil || next == "" {
		t.Fatalf("first page: %q %v", next, err)
	}
	for _, f := range []locks.HandoverFilter{{TenantID: alice.ID, Direction: locks.HandoversReceived}, {TenantID: bob.ID}, {}} {
		if _, _, err := ls.ListHandovers(ctx, f, 2, next); !repolock.IsCode(err, repolock.EInvalid) {
			t.Errorf("token of bob's received list on %+v: %v, want invalid_argument", f, err)
		}
	}
	for _, f := range []locks.HandoverFilter{{TenantID: bob.ID, Direction: "sideways"}, {Direction: locks.HandoversReceived}} {
		if _, _, err := ls.ListHandovers(ctx, f, 2, ""); !repolock.IsCode(err, repolock.EInvalid) {
			t.Errorf("filter %+v: %v, want invalid_argument", f, err)
		}
	}
	// Expired offers are absent from every page.
	if _, err := db.ExecContext(ctx, `UPDATE lock_handovers SET expires_at = now() - interval '1 second', created_at = now() - interval '1 hour' WHERE id = $1`, made[1]); err != nil {
		t.Fatal(err)
	}
	want := slices.Delete(slices.Clone(made[:5]), 1, 2)
	if got := ids(handovers(t, ls, bob.ID, locks.HandoversReceived)); !slices.Equal(got, want) {
		t.Errorf("after an expiry: %v, want %v", got, want)
	}
}

// TestDenialPages: a lock's denials page by the denied tenant's name,
// for the owner (its own time of ownership) and for an operator (all).
func TestDenialPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	ls := newLocks(db)
	owner := dbtest.NewTenant(t, db, "owner")
	key := "github.com/denial-pages/repo"
	acq, err := ls.Acquire(ctx, owner.ID, key)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	idOf := map[string]string{}
	for i := range 5 {
		u := dbtest.NewTenant(t, db, fmt.Sprintf("t%d", 4-i))
		names = append(names, u.Name)
		idOf[u.Name] = u.ID
		if got, err := ls.Acquire(ctx, u.ID, key); err != nil || got.Acquired {
			t.Fatalf("acquire by %s: %+v %v", u.Name, got, err)
		}
	}
	slices.Sort(names)
	tenantsOf := func(ds []locks.Denial) []string {
		out := []string{}
		for _, d := range ds {
			out = append(out, d.Tenant)
		}
		return out
	}
	for name, tenantID := range map[string]string{"owner": owner.ID, "operator": ""} {
		ds, err := denials(ls, tenantID, acq.LockID)
		if err != nil {
			t.Fatal(err)
		}
		if got := tenantsOf(ds); !slices.Equal(got, names) {
			t.Errorf("%s: %v, want %v", name, got, names)
		}
	}
	// Tokens are bound to the lock and the reader.
	_, next, err := ls.Denials(ctx, owner.ID, acq.LockID, 2, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ls.Denials(ctx, "", acq.LockID, 2, next); !repolock.IsCode(err, repolock.EInvalid) {
		t.Errorf("the owner's token on the operator's list: %v, want invalid_argument", err)
	}
	// After a transfer, the new owner sees none, the operator all.
	if _, err := ls.Transfer(ctx, locks.TransferRequest{LockID: acq.LockID, To: "t0", Actor: "admin:test"}); err != nil {
		t.Fatal(err)
	}
	if ds, err := denials(ls, idOf["t0"], acq.LockID); err != nil || len(ds) != 0 {
		t.Errorf("new owner: %+v %v", ds, err)
	}
	if ds, err := denials(ls, "", acq.LockID); err != nil || len(ds) != 5 {
		t.Errorf("operator after the transfer: %+v %v", ds, err)
	}
	if _, _, err := ls.Denials(ctx, "", "00000000-0000-0000-0000-000000000000", 2, ""); !repolock.IsCode(err, repolock.ENotFound) {
		t.Errorf("unknown lock: %v, want not_found", err)
	}
}

// TestCancelHandover: an operator withdraws an open offer, recorded as
// handover_withdrawn with the admin's actor; the lock is no longer pinned;
// a second cancel, or an expired offer, is not_found.
func TestCancelHandover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	ls := newLocks(db)
	alice := dbtest.NewTenant(t, db, "alice")
	dbtest.NewTenant(t, db, "bob")
	acq, err := ls.Acquire(ctx, alice.ID, "github.com/cancel/repo")
	if err != nil {
		t.Fatal(err)
	}
	h, err := ls.OfferHandover(ctx, locks.OfferRequest{TenantID: alice.ID, LockID: acq.LockID, To: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ls.CancelHandover(ctx, h.ID, ""); !repolock.IsCode(err, repolock.EInternal) {
		t.Errorf("cancel without an actor: %v", err)
	}
	got, err := ls.CancelHandover(ctx, h.ID, "admin:test")
	if err != nil || got.ID != h.ID || got.From != "alice" || got.ToName != "bob" {
		t.Fatalf("cancel: %+v %v", got, err)
	}
	var ev, actor, reason string
	if err := db.QueryRowContext(ctx, `SELECT event, actor, details->>'reason' FROM repository_lock_events
		WHERE lock_id = $1 ORDER BY id DESC LIMIT 1`, acq.LockID).Scan(&ev, &actor, &reason); err != nil {
		t.Fatal(err)
	}
	if ev != locks.EventHandoverWithdrawn || actor != "admin:test" || reason != "admin" {
		t.Errorf("event %s actor %s reason %s", ev, actor, reason)
	}
	if _, err := ls.CancelHandover(ctx, h.ID, "admin:test"); !repolock.IsCode(err, repolock.ENotFound) {
		t.Errorf("second cancel: %v, want not_found", err)
	}
	for _, id := range []string{"not-a-uuid", "00000000-0000-0000-0000-000000000000"} {
		if _, err := ls.CancelHandover(ctx, id, "admin:test"); !repolock.IsCode(err, repolock.ENotFound) {
			t.Errorf("cancel %s: %v, want not_found", id, err)
		}
	}
	h, err = ls.OfferHandover(ctx, locks.OfferRequest{TenantID: alice.ID, LockID: acq.LockID, To: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `UPDATE lock_handovers SET expires_at = now() - interval '1 second', created_at = now() - interval '1 hour' WHERE id = $1`, h.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := ls.CancelHandover(ctx, h.ID, "admin:test"); !repolock.IsCode(err, repolock.ENotFound) {
		t.Errorf("cancel of an expired offer: %v, want not_found", err)
	}
}
