package client_test

import (
	"errors"
	"net/http"
	"testing"

	"github.com/repolock/repolock/client"
)

// TestReservations: the reservation calls and errors, against the real
// server, contract-validated.
func TestReservations(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	acme, eve := e.tenant("acme"), e.tenant("eve")
	old := must(eve.AcquireLock(ctx, "https://github.com/acme/old"))(t)

	req := client.CreateReservationRequest{Prefix: "https://GitHub.com/Acme", Tenant: "acme"}
	plan := must(e.admin.PlanCreateReservation(ctx, req))(t)
	if plan.Prefix != "github.com/acme" || len(plan.Locks) != 1 || plan.Locks[0].LockID != old.LockID || plan.Locks[0].Tenant != "eve" {
		t.Fatalf("PlanCreateReservation = %+v", plan)
	}
	_, err := e.admin.CreateReservation(ctx, req)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.StatusCode != http.StatusConflict || !client.IsReservationConflict(err) {
		t.Fatalf("CreateReservation over eve's lock: %v", err)
	}
	if locks, total, ok := ce.ReservationConflicts(); !ok || total != 1 || len(locks) != 1 || locks[0].NormalizedURL != "github.com/acme/old" {
		t.Fatalf("ReservationConflicts = %+v %d %v", locks, total, ok)
	}
	req.Existing = "keep"
	created := must(e.admin.CreateReservation(ctx, req))(t)
	if created.Reservation.Prefix != "github.com/acme" || created.Reservation.Tenant != "acme" || len(created.Grandfathered) != 1 {
		t.Fatalf("CreateReservation = %+v", created)
	}

	_, err = eve.AcquireLock(ctx, "https://github.com/acme/new")
	if tenant, prefix, ok := client.Reserved(err); !ok || !client.IsReserved(err) || tenant != "acme" || prefix != "github.com/acme" {
		t.Fatalf("eve's claim under acme's reservation: %v", err)
	}
	must(acme.AcquireLock(ctx, "https://github.com/acme/new"))(t)

	var got []string
	for r, err := range e.admin.ListReservations(ctx, client.ListOptions{PageSize: 1}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, r.Prefix+"="+r.Tenant)
	}
	if len(got) != 1 || got[0] != "github.com/acme=acme" {
		t.Fatalf("ListReservations = %v", got)
	}
	if err := e.admin.DeleteReservation(ctx, created.Reservation.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.admin.DeleteReservation(ctx, created.Reservation.ID); !client.IsNotFound(err) {
		t.Fatalf("DeleteReservation again: %v", err)
	}
}
