package client

import (
	"context"
	"errors"
	"iter"
	"net/http"
	"sync"
	"time"
)

// FencingTokenHeader carries a lease's fencing token on a guarded write
// (branch updates, commits, tags, sync host cursors): the server refuses
// it with 409 fenced once a newer token was issued for the write's
// guarding key (docs/leases.md).
const FencingTokenHeader = "Repolock-Fencing-Token"

// LeaseState is a lease as the server answers it.
type LeaseState struct {
	LeaseID      string `json:"lease_id"`
	Key          string `json:"key"`
	FencingToken int64  `json:"fencing_token"`
	Holder       string `json:"holder"`
	// TTL is a Go duration ("15s").
	TTL string `json:"ttl"`
	// AcquiredAt and ExpiresAt are by the database's clock: do not
	// compare them with this machine's.
	AcquiredAt time.Time `json:"acquired_at"`
	ExpiresAt  time.Time `json:"expires_at"`
}

// AcquireLeaseRequest is the body of AcquireLease: Wait 0 answers
// lease_held at once for a held key.
type AcquireLeaseRequest struct {
	Key    string
	TTL    time.Duration
	Wait   time.Duration
	Holder string
}

type acquireLeaseBody struct {
	Key    string `json:"key"`
	TTL    string `json:"ttl"`
	Wait   string `json:"wait,omitempty"`
	Holder string `json:"holder,omitempty"`
}

func (r AcquireLeaseRequest) body() acquireLeaseBody {
	b := acquireLeaseBody{Key: r.Key, TTL: r.TTL.String(), Holder: r.Holder}
	if r.Wait > 0 {
		b.Wait = r.Wait.String()
	}
	return b
}

// LeaseListOptions selects leases by key prefix, a page at a time.
type LeaseListOptions struct {
	KeyPrefix string
	ListOptions
}

// AcquireLease acquires a lease once (POST /v1/leases), with no
// keepalive: Lease is the managed form.
func (c *Client) AcquireLease(ctx context.Context, req AcquireLeaseRequest) (LeaseState, error) {
	return send[LeaseState](ctx, c, http.MethodPost, "/v1/leases", req.body())
}

// KeepaliveLease extends a valid lease by its TTL; 404 not_found when it
// was lost.
func (c *Client) KeepaliveLease(ctx context.Context, id string) (LeaseState, error) {
	return send[LeaseState](ctx, c, http.MethodPost, p("/v1/leases/%s/keepalive", id), nil)
}

// ReleaseLease releases a lease.
func (c *Client) ReleaseLease(ctx context.Context, id string) error {
	return c.del(ctx, p("/v1/leases/%s", id))
}

// ListLeasesPage returns one page of the tenant's valid leases.
func (c *Client) ListLeasesPage(ctx context.Context, opts LeaseListOptions) (Page[LeaseState], error) {
	q := opts.query()
	if opts.KeyPrefix != "" {
		q.Set("key_prefix", opts.KeyPrefix)
	}
	return get[Page[LeaseState]](ctx, c, "/v1/leases", q)
}

// ListLeases iterates over the tenant's valid leases.
func (c *Client) ListLeases(ctx context.Context, opts LeaseListOptions) iter.Seq2[LeaseState, error] {
	return all(ctx, opts.ListOptions, func(ctx context.Context, lo ListOptions) (Page[LeaseState], error) {
		o := opts
		o.ListOptions = lo
		return c.ListLeasesPage(ctx, o)
	})
}

// WithFencingToken returns a copy of c that sends token in the
// Repolock-Fencing-Token header of every request: the guarded writes
// (branch updates, commits, tags, sync host cursors) are then refused
// with 409 fenced once a newer token was issued for their guarding key.
// Other requests ignore it.
func (c *Client) WithFencingToken(token int64) *Client {
	cp := *c
	cp.fencingToken = token
	return &cp
}

// ErrLeaseLost is Lease.Err after the lease was lost: a keepalive found it
// expired or taken over, or no keepalive succeeded for a whole TTL.
var ErrLeaseLost = errors.New("repolock: lease lost")

// Lease is a held lease that keeps itself alive: a keepalive every TTL/3
// in the background, until Release, the context given to Lease ends, or
// the lease is lost. Done is closed then. The lease counts as lost on this
// side once a TTL has passed since the start of the last keepalive that
// succeeded (measured on this machine's monotonic clock, which only the
// server's own expiry can follow, never precede), even when the server
// cannot be reached.
type Lease struct {
	c     *Client
	state LeaseState
	ttl   time.Duration

	done     chan struct{}
	stop     chan struct{}
	stopOnce sync.Once
	finished chan struct{}

	mu  sync.Mutex
	err error
}

// Lease acquires req.Key (waiting up to req.Wait) and keeps it alive until
// Release or ctx ends.
func (c *Client) Lease(ctx context.Context, req AcquireLeaseRequest) (*Lease, error) {
	start := time.Now()
	st, err := c.AcquireLease(ctx, req)
	if err != nil {
		return nil, err
	}
	l := &Lease{c: c, state: st, ttl: req.TTL, done: make(chan struct{}), stop: make(chan struct{}), finished: make(chan struct{})}
	go l.keepalive(ctx, start)
	return l, nil
}

// State is the lease as acquired.
func (l *Lease) State() LeaseState { return l.state }

// Token is the lease's fencing token.
func (l *Lease) Token() int64 { return l.state.FencingToken }

// Client is the client that sends the lease's fencing token with every
// request (WithFencingToken).
func (l *Lease) Client() *Client { return l.c.WithFencingToken(l.state.FencingToken) }

// Done is closed when the lease is lost, released, or its context ended.
func (l *Lease) Done() <-chan struct{} { return l.done }

// Err is nil while the lease is held; ErrLeaseLost (possibly joined with
// the keepalive's last error) once it was lost; the context's error when
// it ended; ErrLeaseReleased after Release.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// ErrLeaseReleased is Lease.Err after Release.
var ErrLeaseReleased = errors.New("repolock: lease released")

func (l *Lease) end(err error) {
	l.mu.Lock()
	if l.err == nil {
		l.err = err
		close(l.done)
	}
	l.mu.Unlock()
}

func (l *Lease) keepalive(ctx context.Context, lastOK time.Time) {
	defer close(l.finished)
	interval := max(l.ttl/3, time.Millisecond)
	var lastErr error
	for {
		deadline := lastOK.Add(l.ttl)
		wait := min(interval, time.Until(deadline))
		if wait <= 0 {
			l.end(errors.Join(ErrLeaseLost, lastErr))
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-l.stop:
			t.Stop()
			return
		case <-ctx.Done():
			t.Stop()
			l.end(ctx.Err())
			return
		case <-t.C:
		}
		if time.Now().After(lastOK.Add(l.ttl)) {
			l.end(errors.Join(ErrLeaseLost, lastErr))
			return
		}
		sent := time.Now()
		kctx, cancel := context.WithDeadline(ctx, lastOK.Add(l.ttl))
		_, err := l.c.KeepaliveLease(kctx, l.state.LeaseID)
		cancel()
		switch {
		case err == nil:
			lastOK, lastErr = sent, nil
		case IsNotFound(err):
			l.end(errors.Join(ErrLeaseLost, err))
			return
		default:
			lastErr = err // retried at the next tick while the TTL lasts
		}
	}
}

// Release stops the keepalives and releases the lease (also after the
// context given to Lease ended). A lease already lost is not released
// (Err is returned).
func (l *Lease) Release(ctx context.Context) error {
	l.stopOnce.Do(func() { close(l.stop) })
	<-l.finished
	if err := l.Err(); errors.Is(err, ErrLeaseLost) {
		return err
	}
	l.end(ErrLeaseReleased)
	return l.c.ReleaseLease(ctx, l.state.LeaseID)
}
