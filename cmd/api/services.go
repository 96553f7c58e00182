package main

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/repolock/repolock/internal/apps"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/leases"
	"github.com/repolock/repolock/internal/locks"
	"github.com/repolock/repolock/internal/rekey"
	"github.com/repolock/repolock/internal/reports"
	"github.com/repolock/repolock/internal/tenants"
)

// services are the domain services of one process, each built once from
// explicit dependencies and handed to whatever uses it (the HTTP API, the
// console, the GC, the commands). The keying rules are one of those
// dependencies: locks keys and checks under aliases, and every other
// service that keys a URL takes the rules from locks.
type services struct {
	aliases *rekey.Source
	tenants *tenants.Service
	locks   *locks.Service
	apps    *apps.Service
	rekey   *rekey.Service
	reports *reports.Service
	leases  *leases.Service
}

// newServices builds the services on db. aliases is the rules source
// (serve: loaded at startup and refreshed; a command: loaded once, by
// loadServices); tokens is serve's token cache (nil for commands);
// reportsDB is the read replica reports read from, nil for db; reg is the
// registry their metrics go on (a command's own, unserved); leaseNotify is
// serve's LISTEN connection that wakes waiting lease acquisitions (nil for
// commands).
func newServices(db *database.DB, aliases *rekey.Source, tokens *tenants.Cache, reportsDB *database.DB, reg prometheus.Registerer, leaseNotify *leases.Notifier) (*services, error) {
	if reportsDB == nil {
		reportsDB = db
	}
	rm, err := rekey.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	lm, err := locks.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	l := locks.New(db, aliases, lm)
	return &services{
		aliases: aliases,
		tenants: tenants.New(db, tokens),
		locks:   l,
		apps:    apps.New(db, l),
		rekey:   rekey.New(db, l, rm),
		reports: reports.New(reportsDB),
		leases:  leases.New(db, l, leaseNotify),
	}, nil
}

// loadServices is newServices for a command: the rules are the stored
// aliases as they are now (an error when they cannot be read: a command
// must not key under other rules than the server does).
func loadServices(ctx context.Context, db *database.DB) (*services, error) {
	// A command loads once and never refreshes: the source has nothing to
	// log.
	aliases, err := rekey.NewSource(ctx, db, slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, err
	}
	return newServices(db, aliases, nil, nil, prometheus.NewRegistry(), nil)
}
