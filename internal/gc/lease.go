package gc

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/repolock/repolock/internal/database"
)

// acquireLeaseSQL takes the lease when nobody holds it or its holder let it
// expire. Two concurrent takers serialize on the primary key: the second one
// finds an unexpired row, its WHERE is false and it gets no row back. The
// clock is the database's, shared by every replica.
const acquireLeaseSQL = `
INSERT INTO gc_leases AS l (name, holder, acquired_at, expires_at)
VALUES ($1, $2, now(), now() + make_interval(secs => $3))
ON CONFLICT (name) DO UPDATE
SET holder = EXCLUDED.holder, acquired_at = EXCLUDED.acquired_at, expires_at = EXCLUDED.expires_at
WHERE l.expires_at < now()
RETURNING l.holder`

const renewLeaseSQL = `
UPDATE gc_leases SET expires_at = now() + make_interval(secs => $3)
WHERE name = $1 AND holder = $2`

const releaseLeaseSQL = `DELETE FROM gc_leases WHERE name = $1 AND holder = $2`

// lease is a held lease.
type lease struct {
	db     *database.DB
	name   string
	holder string
	ttl    time.Duration
}

// acquireLease tries once to take the named lease for ttl; ok is false when
// someone else holds it.
func acquireLease(ctx context.Context, db *database.DB, name, holder string, ttl time.Duration) (*lease, bool, error) {
	var got []string
	if err := db.SelectContext(ctx, &got, acquireLeaseSQL, name, holder, ttl.Seconds()); err != nil {
		return nil, false, err
	}
	if len(got) == 0 {
		return nil, false, nil
	}
	return &lease{db: db, name: name, holder: holder, ttl: ttl}, true, nil
}

// renew extends the lease; held is false when it was taken over (or
// released).
func (l *lease) renew(ctx context.Context) (held bool, err error) {
	res, err := l.db.ExecContext(ctx, renewLeaseSQL, l.name, l.holder, l.ttl.Seconds())
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// keepRenewed renews the lease every ttl/3 until stop is called or ctx is
// done, and calls lost once if the lease is found taken over. A failed
// renewal is logged and retried at the next tick: the lease only lapses if
// renewals keep failing for a whole ttl.
func (l *lease) keepRenewed(ctx context.Context, logger *slog.Logger, lost, renewed func()) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(max(l.ttl/3, time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			held, err := l.renew(ctx)
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				logger.Warn("gc: renew the lease", "error", err.Error())
			case !held:
				logger.Error("gc: the lease was taken over; stopping the run", "lease", l.name, "holder", l.holder)
				lost()
				return
			default:
				renewed()
			}
		}
	}()
	return func() { cancel(); wg.Wait() }
}

// release deletes the lease if this holder still has it. It runs after the
// run's context may have ended, so it uses its own.
func (l *lease) release(logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := l.db.ExecContext(ctx, releaseLeaseSQL, l.name, l.holder); err != nil {
		logger.Warn("gc: release the lease (it expires on its own)", "error", err.Error())
	}
}
