package client

import (
	"context"
	"iter"
	"net/http"
	"net/url"
	"time"
)

// Reservation is a key prefix reserved for a tenant: claims of keys under
// it by other tenants are refused with 409 repository_reserved (the
// longest reserved prefix covering a key decides).
type Reservation struct {
	ID        string    `json:"id"`
	Prefix    string    `json:"prefix"`
	Tenant    string    `json:"tenant"`
	TenantID  string    `json:"tenant_id"`
	CreatedAt time.Time `json:"created_at"`
}

// CreateReservationRequest reserves Prefix (a host, host/org or repository
// URL, any spelling) for the tenant named Tenant. Existing is "refuse"
// (the default, "") or "keep": what to do with other tenants' live locks
// under the prefix.
type CreateReservationRequest struct {
	Prefix   string `json:"prefix"`
	Tenant   string `json:"tenant"`
	Existing string `json:"existing,omitempty"`
}

// CoveredLock is a live lock of another tenant under a reservation's
// prefix.
type CoveredLock struct {
	LockID        string `json:"lock_id"`
	NormalizedURL string `json:"normalized_url"`
	Tenant        string `json:"tenant"`
}

// CreatedReservation is the answer of CreateReservation: the reservation
// and the locks it grandfathered (Existing "keep").
type CreatedReservation struct {
	Reservation   Reservation   `json:"reservation"`
	Grandfathered []CoveredLock `json:"grandfathered"`
}

// ReservationPlan is the answer of PlanCreateReservation: the normalized
// prefix and the locks a reservation of it would conflict with.
type ReservationPlan struct {
	Prefix string        `json:"prefix"`
	Locks  []CoveredLock `json:"locks"`
}

// CreateReservation reserves a prefix for a tenant. Other tenants' live
// locks under it refuse it with reservation_conflict (IsReservationConflict,
// Error.ReservationConflicts) unless Existing is "keep". It is never
// retried.
func (c *Client) CreateReservation(ctx context.Context, req CreateReservationRequest) (CreatedReservation, error) {
	return send[CreatedReservation](ctx, c, http.MethodPost, "/v1/admin/reservations", req)
}

// PlanCreateReservation is CreateReservation as a dry run: the locks it
// would conflict with, nothing changed.
func (c *Client) PlanCreateReservation(ctx context.Context, req CreateReservationRequest) (ReservationPlan, error) {
	var plan ReservationPlan
	err := c.do(ctx, call{method: http.MethodPost, path: "/v1/admin/reservations", query: url.Values{"dry_run": {"true"}}, in: req, out: &plan})
	return plan, err
}

// ListReservationsPage returns one page of the reservations.
func (c *Client) ListReservationsPage(ctx context.Context, opts ListOptions) (Page[Reservation], error) {
	return get[Page[Reservation]](ctx, c, "/v1/admin/reservations", opts.query())
}

// ListReservations iterates over the reservations in creation order.
func (c *Client) ListReservations(ctx context.Context, opts ListOptions) iter.Seq2[Reservation, error] {
	return all(ctx, opts, c.ListReservationsPage)
}

// DeleteReservation removes a reservation (locks are not touched).
func (c *Client) DeleteReservation(ctx context.Context, id string) error {
	return c.del(ctx, p("/v1/admin/reservations/%s", id))
}
