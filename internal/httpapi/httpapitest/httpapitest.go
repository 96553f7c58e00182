// Package httpapitest wires the HTTP server's services for tests the way
// `api serve` wires them (cmd/api), so that every test package that needs a
// real server builds it in one place.
package httpapitest

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/repolock/repolock/internal/apps"
	"github.com/repolock/repolock/internal/authguard"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/gc"
	"github.com/repolock/repolock/internal/httpapi"
	"github.com/repolock/repolock/internal/leases"
	"github.com/repolock/repolock/internal/locks"
	"github.com/repolock/repolock/internal/rekey"
	"github.com/repolock/repolock/internal/reports"
	"github.com/repolock/repolock/internal/repostate"
	"github.com/repolock/repolock/internal/syncstate"
	"github.com/repolock/repolock/internal/tenants"
	"github.com/repolock/repolock/internal/watch"
)

// Config returns a complete httpapi.Config on db: a registry of its own, the
// GC collector with its metrics and the repository Cleaner, the repostate
// and syncstate services. A nil logger discards.
//
// The tenants' share of the pool (Config.Share) and the charging of batch
// rows (Config.RateRowsPerRequest) are off, unlike serve's defaults: the
// suites send bursts and batches from one tenant; the tests of those two
// set them (internal/httpapi/fairshare_test.go), and the binary's tests
// (tests/) run with serve's defaults.
func Config(tb testing.TB, db *database.DB, logger *slog.Logger, adminToken string) httpapi.Config {
	tb.Helper()
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	reg := prometheus.NewRegistry()
	metrics, err := gc.NewMetrics(reg)
	if err != nil {
		tb.Fatal(err)
	}
	aliases, err := rekey.NewSource(context.Background(), db, logger)
	if err != nil {
		tb.Fatal(err)
	}
	rm, err := rekey.NewMetrics(reg)
	if err != nil {
		tb.Fatal(err)
	}
	ts := tenants.New(db, nil)
	lm, err := locks.NewMetrics(reg)
	if err != nil {
		tb.Fatal(err)
	}
	ls := locks.New(db, aliases, lm)
	cleaner := repostate.NewCleaner(db, repostate.CleanerConfig{Logger: logger, TenantExists: ts.Exists})
	// The watch polls (a test server has no LISTEN connection URL), often.
	w := watch.New(db, watch.Config{Retention: gc.DefaultEventRetention, PollInterval: 20 * time.Millisecond, Logger: logger})
	ctx, cancel := context.WithCancel(context.Background())
	w.Start(ctx)
	tb.Cleanup(func() { cancel(); w.Close() })
	return httpapi.Config{
		DB:           db,
		Logger:       logger,
		AdminToken:   adminToken,
		AuthGuard:    authguard.New(authguard.Defaults()),
		RateLimit:    httpapi.DefaultRateLimit, // serve's default
		Registry:     reg,
		GC:           gc.New(db, ls, gc.Config{Logger: logger, Metrics: metrics, Cleaner: cleaner}),
		Repositories: repostate.NewPostgres(db, repostate.Config{Logger: logger}),
		Sync:         syncstate.New(db, syncstate.Options{Logger: logger}),
		Tenants:      ts,
		Locks:        ls,
		Apps:         apps.New(db, ls),
		// No notifier: a waiting acquisition wakes at the holder's expiry
		// (the tests of the wake-up by release are internal/leases' and
		// tests/', on the real binary).
		Leases:  leases.New(db, ls, nil),
		Rekey:   rekey.New(db, ls, rm),
		Aliases: aliases,
		Reports: reports.New(db),
		Watch:   w,
	}
}

// New builds the server on db with Config.
func New(tb testing.TB, db *database.DB, adminToken string) *httpapi.Server {
	tb.Helper()
	srv, err := httpapi.New(Config(tb, db, nil, adminToken))
	if err != nil {
		tb.Fatal(err)
	}
	return srv
}
