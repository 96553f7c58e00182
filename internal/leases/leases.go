// Package leases grants short exclusive leases with fencing tokens: "which
// process may act on this repository, branch or sync host right now"
// (docs/leases.md). A lease is not an ownership lock (internal/locks): it
// is short, it expires unless kept alive, and every acquisition gets a new
// fencing token, a 64-bit integer that strictly increases per key across
// every acquisition by anyone. Writes to the state repolock stores
// (internal/repostate/kv, internal/syncstate) carry the token and are
// refused once a newer one was issued (Fence).
//
// Expiry is judged by the database's clock only (clock_timestamp() in the
// statements); no replica's or client's clock is compared with a stored
// time. An expired lease is free for the next acquirer at once: its row is
// replaced by the acquisition, or removed later by Cleanup.
//
// Lock order. Every statement of this package that waits for row locks
// takes them in one total order, so no two of them can deadlock: an
// acquisition batch works key after key in (tenant, key) order, locking
// the key's lease_tokens row and then, if it marks the holder's lease
// wanted or takes an expired lease over, the key's leases row; release and
// keepalive batches write their leases rows in (tenant, key) order too
// (migration 000034 sorts them before the write); Cleanup never waits
// (SKIP LOCKED). TestBatchesLockLeasesInKeyOrder forces the interleaving
// that deadlocked when releases and keepalives went in id order.
package leases

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/lib/pq"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/locks"
	"github.com/repolock/repolock/internal/pagetoken"
)

// Limits of a request.
const (
	MinTTL     = 100 * time.Millisecond
	MaxTTL     = 24 * time.Hour
	MaxWait    = 5 * time.Minute
	MaxKeyLen  = 512
	MaxHolder  = 256
	NotifyChan = "repolock_leases"
)

// KindLeases is the page-token kind of the lease list.
const KindLeases = "leases"

// Lease is one granted lease.
type Lease struct {
	ID           string    `db:"id" json:"lease_id"`
	Key          string    `db:"key" json:"key"`
	FencingToken int64     `db:"token" json:"fencing_token"`
	Holder       string    `db:"holder" json:"holder"`
	TTLMillis    int64     `db:"ttl_ms" json:"-"`
	AcquiredAt   time.Time `db:"acquired_at" json:"acquired_at"`
	ExpiresAt    time.Time `db:"expires_at" json:"expires_at"`
}

// TTL is the lease's time to live, which every keepalive renews.
func (l Lease) TTL() time.Duration { return time.Duration(l.TTLMillis) * time.Millisecond }

// AcquireRequest is an acquisition: Key (a repository URL, keyed like any
// claim, or a name), TTL, and how long to Wait for a held key (0: answer
// lease_held at once). Holder is a free description of the acquirer (a
// host name, a pid), shown in lists.
type AcquireRequest struct {
	Key    string
	TTL    time.Duration
	Wait   time.Duration
	Holder string
}

// Service is the leases of one deployment. cmd/api builds one with New.
// Its methods run on the pool.
type Service struct {
	db     *database.DB
	locks  *locks.Service
	notify *Notifier
	// Group commit (database.Batcher): concurrent acquisition attempts,
	// releases and keepalives each share one statement and one commit
	// per batch.
	acquires   *database.Batcher[acquireCall, attempt]
	releases   *database.Batcher[leaseCall, bool]
	keepalives *database.Batcher[leaseCall, keptAlive]
}

// New returns the service on db. db and locks (the keying of repository
// URLs and their ownership) are required. notify is the process's
// Notifier (subscribed to its LISTEN session) that wakes waiting
// acquisitions when a lease is released; nil:
// a waiting acquisition wakes only when the holder's lease expires (by
// the database's clock) or its wait ends.
func New(db *database.DB, ls *locks.Service, notify *Notifier) *Service {
	if db == nil || ls == nil {
		panic("leases.New: a pool and the locks service are required")
	}
	s := &Service{db: db, locks: ls, notify: notify}
	// Keys: two calls on one key (one lease id) never share a batch, so
	// a batch never waits for itself and each call's answer is its own;
	// the second goes in a later batch.
	s.acquires = database.NewBatcher(db, BatchAcquire, database.BatchConfig[acquireCall]{
		Keys: func(c acquireCall) []string { return []string{c.tenantID + "/" + c.key} },
	}, s.acquireBatch)
	s.releases = database.NewBatcher(db, BatchRelease, database.BatchConfig[leaseCall]{
		Keys: func(c leaseCall) []string { return []string{c.id} },
	}, s.releaseBatch)
	s.keepalives = database.NewBatcher(db, BatchKeepalive, database.BatchConfig[leaseCall]{
		Keys: func(c leaseCall) []string { return []string{c.id} },
	}, s.keepaliveBatch)
	return s
}

// The names of the service's Batchers (database.DB.BatchStats, the
// repolock_db_batches_total{statement} label).
const (
	BatchAcquire   = "leases.acquire"
	BatchRelease   = "leases.release"
	BatchKeepalive = "leases.keepalive"
)

// heldError is the acquisition's answer for a key whose lease is valid:
// remaining is the holder's time left, by the database's clock.
type heldError struct {
	remaining time.Duration
}

func (e *heldError) Error() string { return "lease held" }

// HeldError is the lease_held error of a key.
func HeldError(key string) error {
	return repolock.Errorf(repolock.ELeaseHeld, "the lease on %s is held", key)
}

// IsURLKey reports whether a lease key is a repository URL (keyed like a
// claim) rather than a plain name: it has a scheme ("https://...") or is
// scp-like ("git@host:owner/repo").
func IsURLKey(raw string) bool {
	if strings.Contains(raw, "://") {
		return true
	}
	at := strings.IndexByte(raw, '@')
	colon := strings.IndexByte(raw, ':')
	slash := strings.IndexByte(raw, '/')
	return at > 0 && colon > at && (slash < 0 || colon < slash)
}

// ValidateKey checks a plain key (not a URL): 1..MaxKeyLen bytes of
// single-line text, no leading or trailing space.
func ValidateKey(key string) error {
	if key == "" {
		return repolock.Errorf(repolock.EInvalid, "key is required")
	}
	if len(key) > MaxKeyLen {
		return repolock.Errorf(repolock.EInvalid, "key is longer than %d bytes", MaxKeyLen)
	}
	if strings.TrimSpace(key) != key {
		return repolock.Errorf(repolock.EInvalid, "key must not start or end with white space")
	}
	return repolock.ValidateText("key", key, repolock.SingleLine)
}

// Key returns the stored key of raw for tenantID: a repository URL is
// normalized under the locks service's rules and refused with
// repository_claimed when another tenant's ownership lock holds it; a name
// is validated and kept as it is.
func (s *Service) Key(ctx context.Context, tenantID, raw string) (_ string, err error) {
	defer repolock.WrapOp(&err, "leases.Key")
	if err := ValidateKey(raw); err != nil {
		return "", err
	}
	if !IsURLKey(raw) {
		return raw, nil
	}
	k, err := s.locks.Rules().RepoURL(raw)
	if err != nil {
		return "", repolock.Wrap(repolock.EInvalid, err, "key is not a repository URL repolock can key: %s", repolock.ErrorMessage(err))
	}
	owner, err := s.locks.OwnerOf(ctx, k)
	switch {
	case repolock.IsCode(err, repolock.ENotFound):
	case err != nil:
		return "", err
	case owner.TenantID != tenantID:
		return "", locks.ClaimedError(owner.TenantName)
	}
	return string(k), nil
}

func validateRequest(r AcquireRequest) error {
	if r.TTL < MinTTL || r.TTL > MaxTTL {
		return repolock.Errorf(repolock.EInvalid, "ttl must be between %s and %s", MinTTL, MaxTTL)
	}
	if r.TTL%time.Millisecond != 0 {
		return repolock.Errorf(repolock.EInvalid, "ttl must be a whole number of milliseconds")
	}
	if r.Wait < 0 || r.Wait > MaxWait {
		return repolock.Errorf(repolock.EInvalid, "wait must be between 0s and %s", MaxWait)
	}
	if len(r.Holder) > MaxHolder {
		return repolock.Errorf(repolock.EInvalid, "holder is longer than %d bytes", MaxHolder)
	}
	return repolock.ValidateText("holder", r.Holder, repolock.SingleLine)
}

const (
	leaseColumns = `id, key, token, holder, ttl_ms, acquired_at, expires_at`

	// acquireSQL is a batch of acquisition attempts: one call of
	// repolock_lease_acquire (migrations 000016, 000022) per row, in one
	// statement and one transaction, in the arrays' order. For each: the
	// lease, or, for a held key, r_id NULL and the time the holder's
	// lease has left by the database's clock. The function is VOLATILE,
	// so each of its statements takes a new snapshot, as when it runs
	// alone: a row sees every acquisition committed before it locked its
	// key's lease_tokens row.
	acquireSQL = `SELECT r.ord, a.r_id, a.r_key, a.r_token, a.r_holder, a.r_ttl_ms, a.r_acquired_at, a.r_expires_at, a.r_remaining
		FROM unnest($1::uuid[], $2::text[], $3::text[], $4::bigint[], $5::boolean[]) WITH ORDINALITY AS r(tenant, key, holder, ttl_ms, wait, ord)
		CROSS JOIN LATERAL repolock_lease_acquire(r.tenant, r.key, r.holder, r.ttl_ms, r.wait) a`

	// releaseSQL is a batch of releases in one statement
	// (repolock_lease_release, migration 000031): the ordinals of the
	// leases it deleted. Only a lease a waiter marked (wanted) notifies:
	// NOTIFY serializes the commits of the transactions that use it. The
	// function finds the leases by their ids whatever the table's
	// statistics: a prepared statement's generic plan, made while the
	// table was a few pages, read it whole for every batch.
	releaseSQL = `SELECT ord FROM repolock_lease_release($1::uuid[], $2::uuid[], $3) AS ord`

	// keepaliveSQL is a batch of keepalives in one statement
	// (repolock_lease_keepalive, migration 000031): each valid lease (by
	// the database's clock, re-checked after a wait for its row) renewed
	// for its TTL from now, with its ordinal.
	keepaliveSQL = `SELECT r_ord AS ord, r_id AS id, r_key AS key, r_token AS token, r_holder AS holder, r_ttl_ms AS ttl_ms,
			r_acquired_at AS acquired_at, r_expires_at AS expires_at
		FROM repolock_lease_keepalive($1::uuid[], $2::uuid[])`
)

// attempt is acquireSQL's row.
type attempt struct {
	Ord        int64           `db:"ord"`
	ID         sql.NullString  `db:"r_id"`
	Key        string          `db:"r_key"`
	Token      sql.NullInt64   `db:"r_token"`
	Holder     string          `db:"r_holder"`
	TTLMillis  sql.NullInt64   `db:"r_ttl_ms"`
	AcquiredAt sql.NullTime    `db:"r_acquired_at"`
	ExpiresAt  sql.NullTime    `db:"r_expires_at"`
	Remaining  sql.NullFloat64 `db:"r_remaining"`
}

// acquireCall is one acquisition attempt of a batch.
type acquireCall struct {
	tenantID, key, holder string
	ttlMillis             int64
	wait                  bool
}

// sortedOrder returns the indexes of n calls ordered by less: the order
// of the arrays a batch's statement is given. Whatever that order, every
// batch locks leases rows in (tenant, key) order (migration 000034: the
// release and keepalive functions sort the rows they lock), so no two
// batches of any kind can deadlock on them (docs/leases.md, "Lock order").
func sortedOrder(n int, less func(i, j int) bool) []int {
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return less(order[a], order[b]) })
	return order
}

// acquireBatch runs a batch of attempts (distinct keys: the Batcher's
// Keys) in the order of their (tenant, key), so that two batches lock
// their keys' lease_tokens rows in one order.
func (s *Service) acquireBatch(ctx context.Context, in []acquireCall) ([]attempt, error) {
	order := sortedOrder(len(in), func(i, j int) bool {
		if in[i].tenantID != in[j].tenantID {
			return in[i].tenantID < in[j].tenantID
		}
		return in[i].key < in[j].key
	})
	tenants, keys, holders := make(pq.StringArray, len(in)), make(pq.StringArray, len(in)), make(pq.StringArray, len(in))
	ttls, waits := make(pq.Int64Array, len(in)), make(pq.BoolArray, len(in))
	for j, i := range order {
		c := in[i]
		tenants[j], keys[j], holders[j], ttls[j], waits[j] = c.tenantID, c.key, c.holder, c.ttlMillis, c.wait
	}
	var rows []attempt
	if err := s.db.SelectPrepared(ctx, &rows, acquireSQL, tenants, keys, holders, ttls, waits); err != nil {
		return nil, err
	}
	if len(rows) != len(in) {
		return nil, fmt.Errorf("leases: a batch of %d acquisitions answered %d rows", len(in), len(rows))
	}
	out := make([]attempt, len(in))
	for _, r := range rows {
		out[order[r.Ord-1]] = r
	}
	return out, nil
}

// leaseCall is one release or keepalive of a batch: a lease id and its
// tenant.
type leaseCall struct{ id, tenantID string }

// leaseArrays returns the batch's ids and tenants ordered by id, and the
// order. (The statements lock the leases in key order, not in this one.)
func leaseArrays(in []leaseCall) (ids, tenants pq.StringArray, order []int) {
	order = sortedOrder(len(in), func(i, j int) bool { return in[i].id < in[j].id })
	ids, tenants = make(pq.StringArray, len(in)), make(pq.StringArray, len(in))
	for j, i := range order {
		ids[j], tenants[j] = in[i].id, in[i].tenantID
	}
	return ids, tenants, order
}

// releaseBatch runs a batch of releases (distinct ids: the Batcher's
// Keys): for each, whether its lease was deleted.
func (s *Service) releaseBatch(ctx context.Context, in []leaseCall) ([]bool, error) {
	ids, tenants, order := leaseArrays(in)
	var ords []int64
	if err := s.db.SelectPrepared(ctx, &ords, releaseSQL, ids, tenants, NotifyChan); err != nil {
		return nil, err
	}
	out := make([]bool, len(in))
	for _, o := range ords {
		out[order[o-1]] = true
	}
	return out, nil
}

// keptAlive is keepaliveSQL's row: a renewed lease and its ordinal.
type keptAlive struct {
	Ord int64 `db:"ord"`
	Lease
}

// keepaliveBatch runs a batch of keepalives (distinct ids: the Batcher's
// Keys): for each, the renewed lease, or Ord 0 when it was not found.
func (s *Service) keepaliveBatch(ctx context.Context, in []leaseCall) ([]keptAlive, error) {
	ids, tenants, order := leaseArrays(in)
	var rows []keptAlive
	if err := s.db.SelectPrepared(ctx, &rows, keepaliveSQL, ids, tenants); err != nil {
		return nil, err
	}
	out := make([]keptAlive, len(in))
	for _, r := range rows {
		out[order[r.Ord-1]] = r
	}
	return out, nil
}

// Acquire grants the lease on req.Key to tenantID, waiting up to req.Wait
// for a held key (woken by the release's notification, or at the holder's
// expiry by the database's clock). A key still held at the end answers
// lease_held.
func (s *Service) Acquire(ctx context.Context, tenantID string, req AcquireRequest) (_ Lease, err error) {
	defer repolock.WrapOp(&err, "leases.Acquire")
	if err := validateRequest(req); err != nil {
		return Lease{}, err
	}
	key, err := s.Key(ctx, tenantID, req.Key)
	if err != nil {
		return Lease{}, err
	}
	var deadline <-chan time.Time
	if req.Wait > 0 {
		t := time.NewTimer(req.Wait)
		defer t.Stop()
		deadline = t.C
	}
	for {
		var woken <-chan struct{}
		cancel := func() {}
		if req.Wait > 0 && s.notify != nil {
			// Subscribe before trying: a release committed after the
			// attempt's snapshot wakes this waiter.
			woken, cancel = s.notify.subscribe(tenantID, key)
		}
		l, err := s.try(ctx, tenantID, key, req)
		var held *heldError
		if !errors.As(err, &held) {
			cancel()
			return l, err
		}
		if req.Wait == 0 {
			cancel()
			return Lease{}, HeldError(key)
		}
		// Wake at the holder's expiry (a duration the database computed,
		// so no clock is compared) unless a release comes first. A
		// little slack past it: the next attempt must find it expired.
		expiry := time.NewTimer(held.remaining + time.Millisecond)
		select {
		case <-woken:
		case <-expiry.C:
		case <-deadline:
			expiry.Stop()
			cancel()
			// One last attempt: the lease may have ended at the deadline.
			l, err := s.try(ctx, tenantID, key, req)
			if errors.As(err, &held) {
				return Lease{}, HeldError(key)
			}
			return l, err
		case <-ctx.Done():
			expiry.Stop()
			cancel()
			return Lease{}, repolock.Wrap(repolock.ETimeout, ctx.Err(), "waiting for the lease on %s ended", key)
		}
		expiry.Stop()
		cancel()
	}
}

// try is one acquisition attempt: *heldError when the key is held.
func (s *Service) try(ctx context.Context, tenantID, key string, req AcquireRequest) (Lease, error) {
	a, err := s.acquires.Do(ctx, acquireCall{tenantID: tenantID, key: key, holder: req.Holder, ttlMillis: req.TTL.Milliseconds(), wait: req.Wait > 0})
	if err != nil {
		return Lease{}, database.MapError(err)
	}
	if !a.ID.Valid {
		return Lease{}, &heldError{remaining: time.Duration(a.Remaining.Float64 * float64(time.Second))}
	}
	return Lease{ID: a.ID.String, Key: a.Key, FencingToken: a.Token.Int64, Holder: a.Holder, TTLMillis: a.TTLMillis.Int64,
		AcquiredAt: a.AcquiredAt.Time, ExpiresAt: a.ExpiresAt.Time}, nil
}

func notFound(id string) error {
	return repolock.Errorf(repolock.ENotFound, "lease %s not found or expired", id)
}

// Keepalive renews the tenant's valid lease id for its TTL from now (by
// the database's clock). A lease that expired, was released, or was taken
// over is not found: its holder has lost it.
func (s *Service) Keepalive(ctx context.Context, tenantID, id string) (_ Lease, err error) {
	defer repolock.WrapOp(&err, "leases.Keepalive")
	if _, err := uuid.Parse(id); err != nil {
		return Lease{}, notFound(id)
	}
	k, err := s.keepalives.Do(ctx, leaseCall{id: id, tenantID: tenantID})
	if err != nil {
		return Lease{}, database.MapError(err)
	}
	if k.Ord == 0 {
		return Lease{}, notFound(id)
	}
	return k.Lease, nil
}

// Release ends the tenant's lease id and wakes the key's waiters (in every
// process, through NOTIFY at commit). Releasing a lease that already
// expired, but that no one took over, is not an error; a lease taken over
// or released before is not found.
func (s *Service) Release(ctx context.Context, tenantID, id string) (err error) {
	defer repolock.WrapOp(&err, "leases.Release")
	if _, err := uuid.Parse(id); err != nil {
		return notFound(id)
	}
	deleted, err := s.releases.Do(ctx, leaseCall{id: id, tenantID: tenantID})
	if err != nil {
		return database.MapError(err)
	}
	if !deleted {
		return notFound(id)
	}
	return nil
}

// The lists of List: $1 tenant, $2 the page's last key, $3 the prefix, $4
// the limit; listPrefixSQL also $5, PrefixEnd of the prefix. Both are
// index range scans of the (cluster_user_id, key) unique index, bounded
// below by $2 and $3 and, in listPrefixSQL, above by $5.
const (
	listPrefixSQL = `SELECT ` + leaseColumns + ` FROM leases
		WHERE cluster_user_id = $1 AND key > $2 AND key >= $3 AND key < $5
			AND starts_with(key, $3) AND expires_at > clock_timestamp()
		ORDER BY key LIMIT $4`
	listAllSQL = `SELECT ` + leaseColumns + ` FROM leases
		WHERE cluster_user_id = $1 AND key > $2 AND key >= $3
			AND starts_with(key, $3) AND expires_at > clock_timestamp()
		ORDER BY key LIMIT $4`
)

// PrefixEnd returns the least string greater than every string that starts
// with prefix, in byte order (COLLATE "C"), and true; false when there is
// none (an empty prefix, or one of only U+10FFFF). Keys starting with
// prefix are exactly those in [prefix, end). It increments the prefix's
// last code point (UTF-8 preserves code-point order in byte order; the
// surrogates, which are not text, are skipped), dropping trailing
// U+10FFFF. A prefix that is not valid UTF-8 has no end.
func PrefixEnd(prefix string) (string, bool) {
	if !utf8.ValidString(prefix) {
		return "", false
	}
	rs := []rune(prefix)
	for len(rs) > 0 {
		last := rs[len(rs)-1]
		rs = rs[:len(rs)-1]
		if last == utf8.MaxRune {
			continue
		}
		next := last + 1
		if next >= 0xD800 && next <= 0xDFFF {
			next = 0xE000
		}
		return string(append(rs, next)), true
	}
	return "", false
}

// List returns one page of the tenant's valid leases whose key starts with
// keyPrefix, ordered by key, and the next page's token.
func (s *Service) List(ctx context.Context, tenantID, keyPrefix string, pageSize int, pageToken string) (_ []Lease, _ string, err error) {
	defer repolock.WrapOp(&err, "leases.List")
	if pageSize < 1 {
		return nil, "", repolock.Errorf(repolock.EInvalid, "page_size must be at least 1")
	}
	if len(keyPrefix) > MaxKeyLen {
		return nil, "", repolock.Errorf(repolock.EInvalid, "key_prefix is longer than %d bytes", MaxKeyLen)
	}
	scope := pagetoken.Scope(tenantID, keyPrefix)
	cur, first, err := pagetoken.Decode[pagetoken.Name](KindLeases, scope, pageToken)
	if err != nil {
		return nil, "", err
	}
	after := ""
	if !first {
		after = cur.Name
	}
	var ls []Lease
	// Served by the (cluster_user_id, key) unique index: a range scan
	// from the prefix to its end (COLLATE "C": byte order; no end for an
	// empty prefix). The scan stops at the first key past the prefix instead of
	// reading the tenant's keys after it; starts_with only re-checks.
	if end, ok := PrefixEnd(keyPrefix); ok {
		err = s.db.SelectContext(ctx, &ls, listPrefixSQL, tenantID, after, keyPrefix, pageSize+1, end)
	} else {
		err = s.db.SelectContext(ctx, &ls, listAllSQL, tenantID, after, keyPrefix, pageSize+1)
	}
	if err != nil {
		return nil, "", database.MapError(err)
	}
	ls, next := pagetoken.Trim(ls, pageSize, func(last Lease) string {
		return pagetoken.Encode(KindLeases, scope, pagetoken.Name{Name: last.Key})
	})
	return ls, next, nil
}

// Cleanup deletes up to limit leases that expired (by the database's
// clock) and that no acquisition replaced, and returns how many. Their
// keys' fencing tokens stay (lease_tokens): a later acquisition still gets
// a greater one. An acquisition that takes a row under it changes the
// row's id, so Cleanup never deletes a lease granted after it picked.
//
// Cleanup never waits for a row lock: it skips a lease another
// transaction holds (an acquisition taking it over, a release), and a
// later run finds it if it is still expired. Locking expired leases in
// its scan's order and waiting, it could deadlock with an acquisition
// batch, which takes expired leases over in (tenant, key) order (the
// lock order of docs/leases.md).
func (s *Service) Cleanup(ctx context.Context, limit int) (_ int64, err error) {
	defer repolock.WrapOp(&err, "leases.Cleanup")
	if limit < 1 {
		return 0, repolock.Errorf(repolock.EInvalid, "cleanup limit must be at least 1")
	}
	res, err := s.db.ExecContext(ctx, `DELETE FROM leases WHERE id IN (
			SELECT id FROM leases WHERE expires_at <= clock_timestamp() LIMIT $1 FOR UPDATE SKIP LOCKED)
		AND expires_at <= clock_timestamp()`, limit)
	if err != nil {
		return 0, database.MapError(err)
	}
	return res.RowsAffected()
}

// RunCleanup calls Cleanup every interval until ctx ends, in batches of
// batch until a batch deletes fewer; errors are handed to onError (a
// logger) and retried at the next tick.
func (s *Service) RunCleanup(ctx context.Context, interval time.Duration, batch int, onError func(error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for {
			n, err := s.Cleanup(ctx, batch)
			if err != nil {
				if ctx.Err() == nil && onError != nil {
					onError(err)
				}
				break
			}
			if n < int64(batch) {
				break
			}
		}
	}
}
