package client

import (
	"context"
	"iter"
	"net/http"
	"time"
)

// Denial is the denials of one tenant on one of the caller's locks.
type Denial struct {
	Tenant  string    `json:"tenant"`
	Count   int64     `json:"count"`
	FirstAt time.Time `json:"first_at"`
	LastAt  time.Time `json:"last_at"`
}

// LockReference is an Application or Repository Credential on a lock
// (kind "application" or "credential").
type LockReference struct {
	Kind string `json:"kind"`
	ID   string `json:"id"`
	Name string `json:"name"`
}

// Transfer is what a transfer (TransferLock) or an accepted handover
// (AcceptHandover) did.
type Transfer struct {
	LockID            string          `json:"lock_id"`
	NormalizedURL     string          `json:"normalized_url"`
	From              string          `json:"from"`
	To                string          `json:"to"`
	DeletedReferences []LockReference `json:"deleted_references"`
	CancelledHandover string          `json:"cancelled_handover,omitempty"`
}

// Handover is an open handover offer.
type Handover struct {
	ID            string    `json:"id"`
	LockID        string    `json:"lock_id"`
	NormalizedURL string    `json:"normalized_url"`
	From          string    `json:"from"`
	To            string    `json:"to"`
	ExpiresAt     time.Time `json:"expires_at"`
	CreatedAt     time.Time `json:"created_at"`
}

// Directions of HandoverListOptions.
const (
	HandoversReceived = "received" // offers made to the caller
	HandoversOffered  = "offered"  // offers the caller made
)

// HandoverListOptions pages the caller's open offers; Direction
// HandoversReceived or HandoversOffered lists one side only ("": both).
type HandoverListOptions struct {
	ListOptions
	Direction string
}

// Reference policies of TransferLock.
const (
	ReferencesRefuse = "refuse" // 409 lock_in_use while the old owner has references (the default)
	ReferencesDelete = "delete" // delete them in the transfer's transaction
)

// ListLockDenialsPage returns one page of the denials recorded against
// one of the caller's locks, per denied tenant, by the tenants' names.
func (c *Client) ListLockDenialsPage(ctx context.Context, lockID string, opts ListOptions) (Page[Denial], error) {
	return get[Page[Denial]](ctx, c, p("/v1/locks/%s/denials", lockID), opts.query())
}

// ListLockDenials iterates over the denials recorded against one of the
// caller's locks, per denied tenant, by the tenants' names.
func (c *Client) ListLockDenials(ctx context.Context, lockID string, opts ListOptions) iter.Seq2[Denial, error] {
	return all(ctx, opts, func(ctx context.Context, o ListOptions) (Page[Denial], error) {
		return c.ListLockDenialsPage(ctx, lockID, o)
	})
}

// AdminListLockDenialsPage returns one page of every denial recorded
// against a lock, whoever owned it (admin token).
func (c *Client) AdminListLockDenialsPage(ctx context.Context, lockID string, opts ListOptions) (Page[Denial], error) {
	return get[Page[Denial]](ctx, c, p("/v1/admin/locks/%s/denials", lockID), opts.query())
}

// AdminListLockDenials iterates over every denial recorded against a
// lock, per denied tenant (admin token).
func (c *Client) AdminListLockDenials(ctx context.Context, lockID string, opts ListOptions) iter.Seq2[Denial, error] {
	return all(ctx, opts, func(ctx context.Context, o ListOptions) (Page[Denial], error) {
		return c.AdminListLockDenialsPage(ctx, lockID, o)
	})
}

// TransferLock moves a lock to the tenant named to (admin token).
// references is ReferencesRefuse ("" too) or ReferencesDelete. A refused
// transfer is a 409 lock_in_use error whose References lists what is in
// the way.
func (c *Client) TransferLock(ctx context.Context, lockID, to, references string) (Transfer, error) {
	body := map[string]string{"to": to}
	if references != "" {
		body["references"] = references
	}
	return send[Transfer](ctx, c, http.MethodPost, p("/v1/admin/locks/%s/transfer", lockID), body)
}

// OfferHandover offers one of the caller's locks to the tenant named to,
// open for expiresIn (0: the server's default, 72h).
func (c *Client) OfferHandover(ctx context.Context, lockID, to string, expiresIn time.Duration) (Handover, error) {
	body := map[string]string{"to": to}
	if expiresIn > 0 {
		body["expires_in"] = expiresIn.String()
	}
	return send[Handover](ctx, c, http.MethodPost, p("/v1/locks/%s/handover", lockID), body)
}

// ListHandoversPage returns one page of the caller's open offers, oldest
// first.
func (c *Client) ListHandoversPage(ctx context.Context, opts HandoverListOptions) (Page[Handover], error) {
	q := opts.query()
	if opts.Direction != "" {
		q.Set("direction", opts.Direction)
	}
	return get[Page[Handover]](ctx, c, "/v1/handovers", q)
}

// ListHandovers iterates over the caller's open offers (received, made,
// or both), oldest first.
func (c *Client) ListHandovers(ctx context.Context, opts HandoverListOptions) iter.Seq2[Handover, error] {
	return all(ctx, opts.ListOptions, func(ctx context.Context, lo ListOptions) (Page[Handover], error) {
		o := opts
		o.ListOptions = lo
		return c.ListHandoversPage(ctx, o)
	})
}

// AdminListHandoversPage returns one page of every tenant's open offers,
// oldest first (admin token).
func (c *Client) AdminListHandoversPage(ctx context.Context, opts ListOptions) (Page[Handover], error) {
	return get[Page[Handover]](ctx, c, "/v1/admin/handovers", opts.query())
}

// AdminListHandovers iterates over every tenant's open offers (admin
// token).
func (c *Client) AdminListHandovers(ctx context.Context, opts ListOptions) iter.Seq2[Handover, error] {
	return all(ctx, opts, c.AdminListHandoversPage)
}

// CancelHandover withdraws an open offer for its owner (admin token);
// recorded as handover_withdrawn by the admin.
func (c *Client) CancelHandover(ctx context.Context, id string) error {
	return c.del(ctx, p("/v1/admin/handovers/%s", id))
}

// AcceptHandover takes the lock of an offer made to the caller.
func (c *Client) AcceptHandover(ctx context.Context, id string) (Transfer, error) {
	return send[Transfer](ctx, c, http.MethodPost, p("/v1/handovers/%s/accept", id), nil)
}

// DeclineHandover refuses an offer made to the caller.
func (c *Client) DeclineHandover(ctx context.Context, id string) error {
	return c.do(ctx, call{method: http.MethodPost, path: p("/v1/handovers/%s/decline", id)})
}

// WithdrawHandover withdraws an offer the caller made.
func (c *Client) WithdrawHandover(ctx context.Context, id string) error {
	return c.del(ctx, p("/v1/handovers/%s", id))
}
