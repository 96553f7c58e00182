package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/repolock/repolock/internal/console"
	"github.com/repolock/repolock/internal/httpapi"
	"github.com/repolock/repolock/internal/rekey"
	"github.com/repolock/repolock/internal/repostate"
	"github.com/repolock/repolock/internal/syncstate"
)

func runServe(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "serve", "", "Runs the HTTP API until SIGINT or SIGTERM, then shuts down gracefully.")
	var (
		common          commonFlags
		listen          = fs.String("listen", fs.envOr("LISTEN_ADDR", "127.0.0.1:8080"), "address to listen on; port 0 picks a free one [LISTEN_ADDR]")
		adminToken      = fs.String("admin-token", "", "token for /v1/admin routes; random and logged once when empty (development only) [ADMIN_TOKEN]")
		migrateOnStart  = fs.Bool("migrate-on-start", fs.envBool("MIGRATE_ON_START", true), "apply pending migrations before serving [MIGRATE_ON_START]")
		requestTimeout  = fs.Duration("request-timeout", fs.envDuration("REQUEST_TIMEOUT", 30*time.Second), "per-request timeout [REQUEST_TIMEOUT]")
		shutdownTimeout = fs.Duration("shutdown-timeout", fs.envDuration("SHUTDOWN_TIMEOUT", 20*time.Second), "how long requests in flight may take to finish at shutdown [SHUTDOWN_TIMEOUT]")
		rateLimit       = fs.Float64("rate-limit", fs.envFloat("RATE_LIMIT", httpapi.DefaultRateLimit), "requests per second each tenant token may sustain (token bucket); 0 disables the limit [RATE_LIMIT]")
		rateBurst       = fs.Int("rate-burst", fs.envInt("RATE_BURST", httpapi.DefaultRateBurst), "requests a tenant may send at once above the rate [RATE_BURST]")
		aliasRefresh    = fs.Duration("alias-refresh", fs.envDuration("ALIAS_REFRESH", 30*time.Second), "how often the configured normalizer aliases are reloaded from the database [ALIAS_REFRESH]")
		debugListen     = fs.String("debug-listen", fs.envOr("DEBUG_LISTEN_ADDR", ""), "address of a separate listener for Go's profiler (/debug/pprof/); empty (the default) is off; bind it to loopback [DEBUG_LISTEN_ADDR]")
	)
	common.register(fs)
	var gcLoop gcLoopFlags
	gcLoop.register(fs)
	var pool poolFlags
	pool.register(fs)
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if err := noArgs(fs, pos); err != nil {
		return err
	}
	logger, err := common.logger(e)
	if err != nil {
		return err
	}
	setServeGCPace(e.getenv, logger)
	dbURL, err := common.url()
	if err != nil {
		return err
	}
	poolCfg, err := pool.config()
	if err != nil {
		return err
	}
	// The pool does not connect here: serve listens at once, even while
	// the database is unreachable, and gets ready when it answers.
	db, err := common.db.pool(dbURL, poolCfg)
	if err != nil {
		return err
	}
	defer db.Close()

	if *adminToken == "" {
		*adminToken = e.getenv("ADMIN_TOKEN")
	}
	if *adminToken == "" {
		*adminToken = randomToken()
		logger.Warn("ADMIN_TOKEN is not set: generated a random admin token for this process only (development only; set ADMIN_TOKEN in production)",
			"admin_token", *adminToken)
	}
	// Everything the server serves is built here, once, and handed over:
	// the metrics registry, the one GC Collector (the scheduled loop below
	// and POST /v1/admin/gc share it), the token cache and the stateful
	// services.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ret, err := gcLoop.run.retention()
	if err != nil {
		return err
	}
	reportsDB, err := common.openReportsReplica()
	if err != nil {
		return err
	}
	if reportsDB != nil {
		defer reportsDB.Close()
	}
	if *aliasRefresh <= 0 {
		return &exitError{code: 2, err: fmt.Errorf("--alias-refresh must be positive")}
	}
	// Loaded by startup, after the migrations, before serve reports ready.
	aliases := rekey.Unloaded(db, logger)
	aliasCtx, stopAliases := context.WithCancel(ctx)
	defer stopAliases()
	go aliases.Run(aliasCtx, *aliasRefresh)
	// The token listener holds a session (LISTEN): behind a transaction-
	// pooling PgBouncer it needs the direct connection, MIGRATE_DATABASE_URL.
	listenURL := dbURL
	if u := common.db.migrationURL(); u != "" {
		listenURL = u
	}
	tokens := pool.cache(listenURL, logger)
	defer tokens.Close()
	svc := newServices(db, aliases, tokens, reportsDB)
	collector, err := newCollector(db, svc, logger, reg, ret)
	if err != nil {
		return err
	}
	ready := &readiness{}
	ready.set(errors.New("the database has not answered yet"))
	sync := syncstate.New(db, syncstate.Options{Logger: logger})
	srv, err := httpapi.New(httpapi.Config{
		DB:             db,
		Logger:         logger,
		AdminToken:     *adminToken,
		RequestTimeout: *requestTimeout,
		RateLimit:      rateLimitConfig(*rateLimit),
		RateBurst:      *rateBurst,
		Registry:       reg,
		Repositories:   repostate.NewPostgres(db, repostate.Config{Logger: logger}),
		Sync:           sync,
		GC:             collector,
		Tenants:        svc.tenants,
		Locks:          svc.locks,
		Apps:           svc.apps,
		Rekey:          svc.rekey,
		Aliases:        svc.aliases,
		Reports:        svc.reports,
		Ready:          ready.get,
	})
	if err != nil {
		return err
	}
	// The operator console under /ui/ (docs/console.md).
	ui, err := console.New(console.Config{DB: db, Logger: logger, AdminToken: *adminToken, Collector: collector, Sync: sync, ReportsDB: reportsDB,
		Tenants: svc.tenants, Locks: svc.locks, Apps: svc.apps})
	if err != nil {
		return err
	}
	ui.Mount(srv.Echo)
	stopGC, err := gcLoop.start(ctx, collector, logger)
	if err != nil {
		return err
	}
	defer stopGC()
	stopDebug, err := serveDebug(*debugListen, logger)
	if err != nil {
		return fmt.Errorf("debug listener: %w", err)
	}
	defer stopDebug()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	logger.Info("listening", "addr", ln.Addr().String())
	// Startup runs beside the server: /healthz answers at once, /readyz
	// and the API answer 503 until the database answered and the
	// migrations ran. A fatal startup error stops the server.
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		startErr error
		started  = make(chan struct{})
	)
	go func() {
		defer close(started)
		var migrate func(context.Context) error
		if *migrateOnStart {
			migrate = func(ctx context.Context) error { return common.migrateUp(ctx, db, logger) }
		}
		if err := startup(sctx, db, logger, migrate, aliases.Refresh, tokens, ready); err != nil && sctx.Err() == nil {
			startErr = err
			cancel(err)
		}
	}()
	err = srv.Serve(sctx, ln, *shutdownTimeout)
	cancel(nil)
	<-started
	if startErr != nil {
		return startErr
	}
	if err != nil {
		return err
	}
	logger.Info("stopped")
	return nil
}

// rateLimitConfig maps --rate-limit (0 = off) onto httpapi.Config.RateLimit
// (negative = off).
func rateLimitConfig(perSecond float64) float64 {
	if perSecond <= 0 {
		return -1
	}
	return perSecond
}

func randomToken() string {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return "rla_" + hex.EncodeToString(b)
}
