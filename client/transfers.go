package client

import (
	"context"
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

// Handovers are the open offers a tenant received and made.
type Handovers struct {
	Received []Handover `json:"received"`
	Offered  []Handover `json:"offered"`
}

// Reference policies of TransferLock.
const (
	ReferencesRefuse = "refuse" // 409 lock_in_use while the old owner has references (the default)
	ReferencesDelete = "delete" // delete them in the transfer's transaction
)

// ListLockDenials returns the denials recorded against one of the
// caller's locks, per denied tenant.
func (c *Client) ListLockDenials(ctx context.Context, lockID string) ([]Denial, error) {
	v, err := get[struct {
		Items []Denial `json:"items"`
	}](ctx, c, p("/v1/locks/%s/denials", lockID), nil)
	return v.Items, err
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

// ListHandovers returns the open offers the caller received and made.
func (c *Client) ListHandovers(ctx context.Context) (Handovers, error) {
	return get[Handovers](ctx, c, "/v1/handovers", nil)
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
