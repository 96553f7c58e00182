package tenants_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/pglisten"
	"github.com/repolock/repolock/internal/tenants"
)

// awaitRefused waits until the cache refuses token: the notification of
// its revocation has been handled (a cached entry is served until then).
// It checks every millisecond and is bounded only by the test's deadline;
// how long it takes is BenchmarkCacheRevocation's figure.
func awaitRefused(t *testing.T, c *tenants.Cache, db *database.DB, token string) {
	t.Helper()
	ctx := t.Context()
	for {
		_, err := c.Authenticate(ctx, db, token)
		if repolock.IsCode(err, repolock.EUnauthenticated) {
			return
		}
		if err != nil {
			t.Fatalf("Authenticate: %v", err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the token is still accepted after its revocation: %v", ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

// listeningCache returns a cache built from cfg, subscribed to a LISTEN
// session on url, once the session is up, and the session.
func listeningCache(t testing.TB, url string, cfg tenants.CacheConfig) (*tenants.Cache, *pglisten.Listener) {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Logger = logger
	c := tenants.NewCache(cfg)
	l := pglisten.New(pglisten.Config{URL: url, Logger: logger})
	l.Subscribe(tenants.NotifyChannel, pglisten.Subscriber{Notify: c.Invalidate, State: c.SetListening})
	l.Start()
	t.Cleanup(l.Close)
	<-l.Connected()
	if !c.Listening() {
		t.Fatal("the session is up and the cache does not listen")
	}
	return c, l
}

// TestCacheServesWithoutDatabase: a cached token authenticates while the
// database is unreachable (no round trip); an uncached one is unavailable.
func TestCacheServesWithoutDatabase(t *testing.T) {
	t.Parallel()
	_, direct := dbtest.NewWithURL(t)
	p, url := dbtest.NewProxy(t, direct)
	db, err := database.Open(t.Context(), url, database.PoolConfig{MaxOpenConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	u, token, err := newTenants(db).Create(ctx, "cached", "")
	if err != nil {
		t.Fatal(err)
	}
	_, other, err := newTenants(db).Create(ctx, "uncached", "")
	if err != nil {
		t.Fatal(err)
	}
	c := tenants.NewCache(tenants.CacheConfig{})
	if got, err := c.Authenticate(ctx, db, token); err != nil || got.ID != u.ID {
		t.Fatalf("first Authenticate: %+v, %v", got, err)
	}
	p.Refuse()
	if got, err := c.Authenticate(ctx, db, token); err != nil || got.ID != u.ID || got.Name != "cached" {
		t.Fatalf("cached Authenticate with the database gone: %+v, %v", got, err)
	}
	if _, err := c.Authenticate(ctx, db, other); !repolock.IsCode(err, repolock.EUnavailable) {
		t.Fatalf("uncached Authenticate with the database gone: %v, want unavailable", err)
	}
	if _, err := c.Authenticate(ctx, db, "rlt_nope"); !repolock.IsCode(err, repolock.EUnavailable) {
		t.Fatalf("unknown token with the database gone: %v, want unavailable (unknown tokens are never cached)", err)
	}
}

// TestCacheTTL: without a listener an entry is trusted for TTL, then the
// database is asked again.
func TestCacheTTL(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	_, token, err := newTenants(db).Create(ctx, "ttl", "")
	if err != nil {
		t.Fatal(err)
	}
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	c := tenants.NewCache(tenants.CacheConfig{TTL: 30 * time.Second, Now: func() time.Time { return time.Unix(0, now.Load()) }})
	if _, err := c.Authenticate(ctx, db, token); err != nil {
		t.Fatal(err)
	}
	if _, err := newTenants(db).RevokeTokens(ctx, "ttl"); err != nil {
		t.Fatal(err)
	}
	now.Add(int64(29 * time.Second))
	if _, err := c.Authenticate(ctx, db, token); err != nil {
		t.Fatalf("within the TTL, without notifications, the entry still serves: %v", err)
	}
	now.Add(int64(time.Second))
	if _, err := c.Authenticate(ctx, db, token); !repolock.IsCode(err, repolock.EUnauthenticated) {
		t.Fatalf("after the TTL: %v, want unauthenticated", err)
	}
}

// TestCacheInvalidatedByNotifications: revoking a token or deleting its
// tenant, from another pool (another process), reaches the cache, which
// then refuses the token; a rolled-back revocation reaches nobody.
func TestCacheInvalidatedByNotifications(t *testing.T) {
	t.Parallel()
	db, url := dbtest.NewWithURL(t)
	ctx := context.Background()
	other, err := database.Open(ctx, url, database.PoolConfig{MaxOpenConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	c, _ := listeningCache(t, url, tenants.CacheConfig{TTL: time.Hour})

	_, revoked, err := newTenants(db).Create(ctx, "revoked", "")
	if err != nil {
		t.Fatal(err)
	}
	_, deleted, err := newTenants(db).Create(ctx, "deleted", "")
	if err != nil {
		t.Fatal(err)
	}
	_, kept, err := newTenants(db).Create(ctx, "kept", "")
	if err != nil {
		t.Fatal(err)
	}
	_, barrier, err := newTenants(db).Create(ctx, "barrier", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{revoked, deleted, kept, barrier} {
		if _, err := c.Authenticate(ctx, db, tok); err != nil {
			t.Fatal(err)
		}
	}
	if n := c.Len(); n != 4 {
		t.Fatalf("cached %d tokens, want 4", n)
	}
	if _, err := newTenants(other).RevokeTokens(ctx, "revoked"); err != nil {
		t.Fatal(err)
	}
	awaitRefused(t, c, db, revoked)
	if _, err := other.ExecContext(ctx, `DELETE FROM cluster_users WHERE name = 'deleted'`); err != nil {
		t.Fatal(err)
	}
	awaitRefused(t, c, db, deleted)
	if n := c.Len(); n != 2 {
		t.Fatalf("after two invalidations: %d cached tokens, want kept's and barrier's", n)
	}

	// A rolled-back revocation notifies nobody. Then a committed one of
	// another tenant is the barrier: notifications are delivered in commit
	// order, so once the barrier's has been handled, a notification of the
	// rolled-back one would have been too, and kept's entry would be gone.
	tx, err := other.BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The service runs on the pool only: the revocation's statement, in
	// the transaction.
	if _, err := tx.ExecContext(ctx, `UPDATE api_tokens SET revoked_at = now()
		WHERE cluster_user_id = (SELECT id FROM cluster_users WHERE name = 'kept') AND revoked_at IS NULL`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if _, err := newTenants(other).RevokeTokens(ctx, "barrier"); err != nil {
		t.Fatal(err)
	}
	awaitRefused(t, c, db, barrier)
	// Checked before authenticating kept again, which would re-cache it.
	if n := c.Len(); n != 1 {
		t.Fatalf("after the rolled-back revocation of kept and the barrier: %d cached tokens, want kept's still cached", n)
	}
	if _, err := c.Authenticate(ctx, db, kept); err != nil {
		t.Fatalf("after a rolled-back revocation: %v", err)
	}
}

// TestCacheListenerReconnectFlushes: when the listener's connection is
// lost, notifications may be lost too: the cache is flushed.
func TestCacheListenerReconnectFlushes(t *testing.T) {
	t.Parallel()
	db, url := dbtest.NewWithURL(t)
	p, purl := dbtest.NewProxy(t, url)
	c, l := listeningCache(t, purl, tenants.CacheConfig{TTL: time.Hour})
	ctx := context.Background()
	_, token, err := newTenants(db).Create(ctx, "flushed", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Authenticate(ctx, db, token); err != nil || c.Len() != 1 {
		t.Fatalf("warm: %v, len %d", err, c.Len())
	}
	p.Refuse() // the listener's connection is reset
	for c.Len() != 0 {
		select {
		case <-t.Context().Done():
			t.Fatal("the cache was not flushed after the listener lost its connection")
		case <-time.After(time.Millisecond):
		}
	}
	// While it is away the cache still serves (TTL backstop) and the
	// listener reconnects once the database is back.
	if _, err := c.Authenticate(ctx, db, token); err != nil || c.Len() != 1 {
		t.Fatalf("while the listener is away: %v, len %d", err, c.Len())
	}
	if c.Listening() || l.Up() {
		t.Fatal("the session is refused and the cache still listens")
	}
	// Back: the cache listens again, flushed (notifications may have been
	// lost meanwhile).
	p.Restore()
	for !c.Listening() {
		select {
		case <-t.Context().Done():
			t.Fatal("the cache does not listen again after the database came back")
		case <-time.After(time.Millisecond):
		}
	}
	if n := c.Len(); n != 0 {
		t.Fatalf("reconnected: %d cached tokens, want the cache flushed", n)
	}
}

// silentRevoke revokes name's tokens without the trigger's notification
// (session_replication_role = replica): a notification that was lost.
func silentRevoke(t *testing.T, db *database.DB, name string) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `SET LOCAL session_replication_role = replica`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE api_tokens SET revoked_at = now()
		WHERE cluster_user_id = (SELECT id FROM cluster_users WHERE name = $1) AND revoked_at IS NULL`, name); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// TestCacheListenTTL: while the LISTEN session is up an entry lives for
// ListenTTL, longer than TTL (revocations arrive by notification); once
// the session is lost, the entry is checked against the database again at
// once (within TTL), and entries cached meanwhile live for TTL.
func TestCacheListenTTL(t *testing.T) {
	t.Parallel()
	db, url := dbtest.NewWithURL(t)
	p, purl := dbtest.NewProxy(t, url)
	ctx := context.Background()
	_, token, err := newTenants(db).Create(ctx, "long", "")
	if err != nil {
		t.Fatal(err)
	}
	_, other, err := newTenants(db).Create(ctx, "short", "")
	if err != nil {
		t.Fatal(err)
	}
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	c, _ := listeningCache(t, purl, tenants.CacheConfig{TTL: 30 * time.Second, ListenTTL: 10 * time.Minute,
		Now: func() time.Time { return time.Unix(0, now.Load()) }})
	if _, err := c.Authenticate(ctx, db, token); err != nil {
		t.Fatal(err)
	}
	// A revocation whose notification is lost: only the TTL sees it.
	silentRevoke(t, db, "long")
	// (a) Listening: older than TTL, younger than ListenTTL, it is served
	// from the cache (the database refuses it).
	now.Add(int64(5 * time.Minute))
	if _, err := c.Authenticate(ctx, db, token); err != nil {
		t.Fatalf("listening, an entry of 5m (TTL 30s, ListenTTL 10m): %v, want it served from the cache", err)
	}
	// (b) The session is lost: the same entry is checked again at once,
	// no later than TTL.
	p.Refuse()
	for c.Listening() {
		select {
		case <-t.Context().Done():
			t.Fatal("the session was refused and the cache still listens")
		case <-time.After(time.Millisecond):
		}
	}
	if _, err := c.Authenticate(ctx, db, token); !repolock.IsCode(err, repolock.EUnauthenticated) {
		t.Fatalf("not listening, the revoked entry of 5m: %v, want unauthenticated", err)
	}
	// Entries cached while it is down live for TTL only.
	if _, err := c.Authenticate(ctx, db, other); err != nil {
		t.Fatal(err)
	}
	silentRevoke(t, db, "short")
	now.Add(int64(29 * time.Second))
	if _, err := c.Authenticate(ctx, db, other); err != nil {
		t.Fatalf("not listening, within TTL: %v, want it served from the cache", err)
	}
	now.Add(int64(time.Second))
	if _, err := c.Authenticate(ctx, db, other); !repolock.IsCode(err, repolock.EUnauthenticated) {
		t.Fatalf("not listening, after TTL: %v, want unauthenticated", err)
	}
}

// TestCacheListenTTLState: while the cache listens, an entry lives for
// ListenTTL and no longer (the bound on a notification lost without the
// session noticing).
func TestCacheListenTTLState(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	_, token, err := newTenants(db).Create(ctx, "state", "")
	if err != nil {
		t.Fatal(err)
	}
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	c := tenants.NewCache(tenants.CacheConfig{TTL: 30 * time.Second, ListenTTL: 10 * time.Minute,
		Now: func() time.Time { return time.Unix(0, now.Load()) }})
	c.SetListening(true)
	if _, err := c.Authenticate(ctx, db, token); err != nil {
		t.Fatal(err)
	}
	silentRevoke(t, db, "state")
	now.Add(int64(9 * time.Minute))
	if _, err := c.Authenticate(ctx, db, token); err != nil {
		t.Fatalf("listening, within ListenTTL: %v", err)
	}
	now.Add(int64(time.Minute))
	if _, err := c.Authenticate(ctx, db, token); !repolock.IsCode(err, repolock.EUnauthenticated) {
		t.Fatalf("listening, after ListenTTL: %v, want unauthenticated", err)
	}
}

// TestCacheConcurrent: authentications racing invalidations and a small
// size bound (run under -race).
func TestCacheConcurrent(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	var tokens []string
	var ids []string
	for i := range 8 {
		u, tok, err := newTenants(db).Create(ctx, "c"+string(rune('a'+i)), "")
		if err != nil {
			t.Fatal(err)
		}
		tokens, ids = append(tokens, tok), append(ids, u.ID)
	}
	c := tenants.NewCache(tenants.CacheConfig{Size: 4})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				k := (g + i) % len(tokens)
				u, err := c.Authenticate(ctx, db, tokens[k])
				if err != nil || u.ID != ids[k] {
					t.Errorf("Authenticate: %+v, %v", u, err)
					return
				}
				if i%7 == 0 {
					c.Invalidate(ids[k])
				}
			}
		}()
	}
	wg.Wait()
	if n := c.Len(); n > 4 {
		t.Fatalf("cache holds %d entries, bound 4", n)
	}
}
