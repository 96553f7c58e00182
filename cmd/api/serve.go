package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/repolock/repolock/internal/authguard"
	"github.com/repolock/repolock/internal/console"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/fairshare"
	"github.com/repolock/repolock/internal/fleet"
	"github.com/repolock/repolock/internal/gc"
	"github.com/repolock/repolock/internal/httpapi"
	"github.com/repolock/repolock/internal/leases"
	"github.com/repolock/repolock/internal/pglisten"
	"github.com/repolock/repolock/internal/rekey"
	"github.com/repolock/repolock/internal/reports"
	"github.com/repolock/repolock/internal/repostate"
	"github.com/repolock/repolock/internal/syncstate"
	"github.com/repolock/repolock/internal/tenants"
	"github.com/repolock/repolock/internal/watch"
)

// repolock serve, in three steps that read top to bottom:
//
//   - readServeConfig: the flags and the environment, validated, into a
//     serveConfig (no side effects: nothing connects, listens or logs);
//   - buildServer: the pools, the metrics registry, the services (the
//     domain ones by newServices, services.go) and the HTTP server, built
//     once from the config;
//   - (*server).run: starts the background loops, listens, brings the
//     process to ready (startup) and serves until ctx ends.
func runServe(ctx context.Context, e *env, args []string) error {
	cfg, err := readServeConfig(e, args)
	if err != nil {
		return err
	}
	logger, flushLog := newBufferedLogger(e.stderr, cfg.Log, cfg.LogBuffer)
	defer flushLog() // last: after srv.close's and run's final lines
	followLimit := setServeGCPace(e.getenv, logger)
	srv, err := buildServer(cfg, logger)
	if err != nil {
		return err
	}
	defer srv.close()
	if followLimit != nil {
		limitCtx, stop := context.WithCancel(ctx)
		defer stop()
		go followLimit(limitCtx)
	}
	return srv.run(ctx)
}

// serveConfig is everything repolock serve runs with. A setting that can be off
// is off at the same value here as on its flag, and as in the
// configuration of the component it is handed to: 0 for a number or a
// duration, "" for an address, false for a switch; retention alone is off
// (kept forever) when negative, since 0 would read as "keep nothing"
// (docs/operations.md, "Turning settings off").
type serveConfig struct {
	Log logConfig
	// LogBuffer is how long log lines below WARN wait in memory before
	// they are written (logbuf.go); 0 is off: every line written at once.
	LogBuffer time.Duration

	// DatabaseURL is the pool's database. MigrateURL, when set, is a
	// direct (not pooled) connection for the migrations and the token
	// listener; ReportsURL, when set, a read replica for the report routes
	// and the console's statistics. PreparedStatements false: behind
	// PgBouncer in transaction pooling mode.
	DatabaseURL        string
	MigrateURL         string
	ReportsURL         string
	PreparedStatements bool
	Pool               database.PoolConfig
	// MigrateOnStart applies pending migrations before the server is ready.
	MigrateOnStart bool

	Listen string
	// DebugListen is the address of Go's profiler; "" is off.
	DebugListen string
	// AdminToken authorizes /v1/admin and the console: ADMIN_TOKEN, or the
	// content of AdminTokenFile. "" (neither set): buildServer generates
	// one into a new file and logs the file's path, never the token.
	AdminToken string
	// AdminTokenFile is where the token is read from (ADMIN_TOKEN_FILE);
	// when it does not exist yet (and ADMIN_TOKEN is not set), buildServer
	// generates a token into it, as `make run` does.
	AdminTokenFile string
	// AllowWeakAdminToken accepts an admin token shorter than
	// MinAdminTokenLen (development only).
	AllowWeakAdminToken bool
	// TLSCertFile and TLSKeyFile, both or neither, serve HTTPS.
	TLSCertFile, TLSKeyFile string
	// TrustForwardedProto treats "X-Forwarded-Proto: https" as TLS (the
	// console's Secure __Host- cookie, HSTS); TrustForwardedFor counts
	// failed authentications against the address the proxy appended to
	// X-Forwarded-For. Only behind a proxy that always sets them.
	TrustForwardedProto bool
	TrustForwardedFor   bool
	RequestTimeout      time.Duration
	ShutdownTimeout     time.Duration
	// RateLimit is each tenant's requests per second (httpapi.Config.RateLimit);
	// 0 is off. RateBurst is the bucket size (0: httpapi.DefaultRateBurst).
	RateLimit float64
	RateBurst int
	// RateRowsPerRequest charges batch routes one request per this many
	// rows (httpapi.Config.RateRowsPerRequest); 0: a batch is one request.
	RateRowsPerRequest int
	// FleetHeartbeat is the heartbeat of the fleet membership
	// (internal/fleet) that makes RateLimit and RateBurst the fleet's: each
	// replica enforces its share. 0 is off: the limits are per process.
	FleetHeartbeat time.Duration
	// PoolShare is the fraction of the pool's connections one tenant's
	// requests may hold at once (fairshare.ShareOf: at least one, and one
	// left for the others); 0 is off. PoolShareWait is how long a request
	// beyond it waits before 429; 0 refuses it at once.
	PoolShare     float64
	PoolShareWait time.Duration

	// TokenCache: Size 0 is off (every request authenticates against the
	// database); Listen false: revocations take up to TTL.
	TokenCache tokenCacheConfig
	// AliasRefresh is how often the normalizer aliases are reloaded; it
	// cannot be off (the aliases decide the lock keys).
	AliasRefresh time.Duration
	// MetricsRefresh is how often the figures exported from the database
	// (the newest successful GC run) are read again; it cannot be off.
	MetricsRefresh time.Duration
	// GC is the scheduled collections; Interval 0 is off.
	GC gcLoopConfig
	// ReportsFold is how often the ownership report's deltas are folded
	// into its totals (reports.Service.Fold); 0 is off (the GC still folds).
	ReportsFold time.Duration
	// Retention of lock events and GC runs, enforced by every collection
	// (scheduled, API, console); a negative duration keeps rows forever.
	Retention gc.Retention
	// Events configures the watch (GET /v1/events, internal/watch).
	Events eventsConfig
}

// eventsConfig is the watch's settings: the heartbeat of idle streams,
// how often a replica polls while its LISTEN connection is down, and each
// tenant's cap on concurrent watchers per replica.
type eventsConfig struct {
	Heartbeat         time.Duration
	WriteTimeout      time.Duration
	PollInterval      time.Duration
	WatchersPerTenant int
}

// readServeConfig reads serve's flags and environment and checks them. An
// environment variable or a flag that does not parse, a value out of range
// or positional arguments stop the command before anything connects.
func readServeConfig(e *env, args []string) (serveConfig, error) {
	fs := newFlagSet(e, "serve", "", "Runs the HTTP API until SIGINT or SIGTERM, then shuts down gracefully.\n"+
		"Every setting that can be off is off at 0 (numbers and durations) or empty (addresses);\n"+
		"retention is kept forever when negative.")
	var (
		common          commonFlags
		listen          = fs.String("listen", fs.envOr("LISTEN_ADDR", "127.0.0.1:8080"), "address to listen on; port 0 picks a free one [LISTEN_ADDR]")
		adminToken      = fs.String("admin-token", "", fmt.Sprintf("token for /v1/admin routes and the console, at least %d bytes [ADMIN_TOKEN]", MinAdminTokenLen))
		adminTokenFile  = fs.String("admin-token-file", fs.envOr("ADMIN_TOKEN_FILE", ""), "file holding the admin token when ADMIN_TOKEN is not set; generated (mode 0600) when missing; with neither, a token is generated into a new temporary file whose path is logged [ADMIN_TOKEN_FILE]")
		allowWeak       = fs.Bool("allow-weak-admin-token", fs.envBool("ALLOW_WEAK_ADMIN_TOKEN", false), fmt.Sprintf("accept an admin token shorter than %d bytes (development only) [ALLOW_WEAK_ADMIN_TOKEN]", MinAdminTokenLen))
		tlsCert         = fs.String("tls-cert-file", fs.envOr("TLS_CERT_FILE", ""), "PEM certificate (chain) to serve HTTPS with; with --tls-key-file [TLS_CERT_FILE]")
		tlsKey          = fs.String("tls-key-file", fs.envOr("TLS_KEY_FILE", ""), "PEM private key of --tls-cert-file [TLS_KEY_FILE]")
		trustProto      = fs.Bool("trust-forwarded-proto", fs.envBool("TRUST_FORWARDED_PROTO", false), "treat X-Forwarded-Proto: https as TLS (Secure __Host- console cookie, HSTS); only behind a proxy that always sets it [TRUST_FORWARDED_PROTO]")
		trustFor        = fs.Bool("trust-forwarded-for", fs.envBool("TRUST_FORWARDED_FOR", false), "count failed authentications against the last X-Forwarded-For address; only behind a proxy that always appends it [TRUST_FORWARDED_FOR]")
		migrateOnStart  = fs.Bool("migrate-on-start", fs.envBool("MIGRATE_ON_START", true), "apply pending migrations before serving [MIGRATE_ON_START]")
		requestTimeout  = fs.Duration("request-timeout", fs.envDuration("REQUEST_TIMEOUT", 30*time.Second), "per-request timeout; 0 means the default, 30s [REQUEST_TIMEOUT]")
		shutdownTimeout = fs.Duration("shutdown-timeout", fs.envDuration("SHUTDOWN_TIMEOUT", 20*time.Second), "how long requests in flight may take to finish at shutdown [SHUTDOWN_TIMEOUT]")
		rateLimit       = fs.Float64("rate-limit", fs.envFloat("RATE_LIMIT", httpapi.DefaultRateLimit), "requests per second each tenant token may sustain (token bucket); 0 is off (no limit) [RATE_LIMIT]")
		rateBurst       = fs.Int("rate-burst", fs.envInt("RATE_BURST", httpapi.DefaultRateBurst), fmt.Sprintf("requests a tenant may send at once above the rate; 0 means the default, %d [RATE_BURST]", httpapi.DefaultRateBurst))
		fleetHeartbeat  = fs.Duration("fleet-heartbeat", fs.envDuration("FLEET_HEARTBEAT", fleet.DefaultHeartbeat), "heartbeat of the replicas sharing the database: each counts the others and enforces its share of --rate-limit and --rate-burst, which are then the fleet's; a replica that dies is counted out within two heartbeats; at least 100ms; 0 is off (the limits are per process) [FLEET_HEARTBEAT]")
		rateRows        = fs.Int("rate-rows-per-request", fs.envInt("RATE_ROWS_PER_REQUEST", httpapi.DefaultRateRowsPerRequest), "rows of a batch route (sync events, sync listings) that cost as much as one request in the rate limit; 0: a batch counts as one request [RATE_ROWS_PER_REQUEST]")
		poolShare       = fs.Float64("tenant-pool-share", fs.envFloat("TENANT_POOL_SHARE", fairshare.DefaultShareFraction), "fraction of --db-max-open-conns one tenant's requests may hold at once (at least 1, always leaving 1 for the others); the admin token has its own; 0 is off [TENANT_POOL_SHARE]")
		poolShareWait   = fs.Duration("tenant-pool-wait", fs.envDuration("TENANT_POOL_WAIT", fairshare.DefaultWait), "how long a request beyond its tenant's share waits for a slot before 429 with Retry-After; 0 answers 429 at once [TENANT_POOL_WAIT]")
		aliasRefresh    = fs.Duration("alias-refresh", fs.envDuration("ALIAS_REFRESH", 30*time.Second), "how often the configured normalizer aliases are reloaded from the database; must be positive (cannot be off) [ALIAS_REFRESH]")
		reportsFold     = fs.Duration("reports-fold-interval", fs.envDuration("REPORTS_FOLD_INTERVAL", 5*time.Second), "how often the ownership report's per-statement deltas are folded into its per-tenant totals (keeps report_ownership O(tenants); the figures are exact either way; every replica folds, safely); 0 is off (only GC runs fold) [REPORTS_FOLD_INTERVAL]")
		metricsRefresh  = fs.Duration("metrics-refresh", fs.envDuration("METRICS_REFRESH", 30*time.Second), "how often the metrics read from the database (repolock_gc_fleet_last_success_timestamp_seconds) are refreshed; must be positive [METRICS_REFRESH]")
		debugListen     = fs.String("debug-listen", fs.envOr("DEBUG_LISTEN_ADDR", ""), "address of a separate listener for Go's profiler (/debug/pprof/); empty (the default) is off; bind it to loopback [DEBUG_LISTEN_ADDR]")
		eventsHeartbeat = fs.Duration("events-heartbeat", fs.envDuration("EVENTS_HEARTBEAT", httpapi.DefaultEventsHeartbeat), "how often an idle event stream (GET /v1/events) gets a heartbeat; must be positive [EVENTS_HEARTBEAT]")
		eventsWrite     = fs.Duration("events-write-timeout", fs.envDuration("EVENTS_WRITE_TIMEOUT", httpapi.DefaultEventsWriteTimeout), "how long a write to an event stream may block before the slow client is disconnected; must be positive [EVENTS_WRITE_TIMEOUT]")
		eventsPoll      = fs.Duration("events-poll-interval", fs.envDuration("EVENTS_POLL_INTERVAL", watch.DefaultPollInterval), "how often the watch reads new events while its LISTEN connection is down; must be positive [EVENTS_POLL_INTERVAL]")
		logBuffer       = fs.Duration("log-buffer", fs.envDuration("LOG_BUFFER", DefaultLogBuffer), "how long log lines below WARN are kept in memory before they are written, in one write for all (a crash loses at most this interval's lines; WARN and above are written at once, with the lines before them); 0 is off: every line written at once [LOG_BUFFER]")
		watchers        = fs.Int("watchers-per-tenant", fs.envInt("WATCHERS_PER_TENANT", watch.DefaultMaxWatchersPerTenant), "concurrent watchers (GET /v1/events) a tenant may hold on this replica; must be positive [WATCHERS_PER_TENANT]")
		gcLoop          gcLoopFlags
		pool            poolFlags
	)
	common.register(fs, usesPool|usesMigrateURL|usesReportsURL)
	gcLoop.register(fs)
	pool.register(fs)
	pos, err := fs.parse(args)
	if err != nil {
		return serveConfig{}, err
	}
	if err := noArgs(fs, pos); err != nil {
		return serveConfig{}, err
	}
	cfg := serveConfig{
		Listen:              *listen,
		LogBuffer:           *logBuffer,
		DebugListen:         *debugListen,
		AdminToken:          *adminToken,
		AdminTokenFile:      *adminTokenFile,
		AllowWeakAdminToken: *allowWeak,
		TLSCertFile:         *tlsCert,
		TLSKeyFile:          *tlsKey,
		TrustForwardedProto: *trustProto,
		TrustForwardedFor:   *trustFor,
		MigrateOnStart:      *migrateOnStart,
		RequestTimeout:      *requestTimeout,
		ShutdownTimeout:     *shutdownTimeout,
		RateLimit:           max(*rateLimit, 0), // a negative rate was always off too
		RateBurst:           *rateBurst,
		AliasRefresh:        *aliasRefresh,
		MetricsRefresh:      *metricsRefresh,
		ReportsFold:         *reportsFold,
		PreparedStatements:  common.db.prepared,
		RateRowsPerRequest:  *rateRows,
		FleetHeartbeat:      *fleetHeartbeat,
		PoolShare:           *poolShare,
		PoolShareWait:       *poolShareWait,
		Events:              eventsConfig{Heartbeat: *eventsHeartbeat, WriteTimeout: *eventsWrite, PollInterval: *eventsPoll, WatchersPerTenant: *watchers},
		// Secrets come from the environment after parsing, never as flag
		// defaults (--help would print them).
		MigrateURL: common.db.migrationURL(),
		ReportsURL: common.db.reportingURL(),
	}
	if cfg.AdminToken == "" {
		cfg.AdminToken = e.getenv("ADMIN_TOKEN")
	}
	if cfg.AdminToken == "" && cfg.AdminTokenFile != "" {
		b, err := os.ReadFile(cfg.AdminTokenFile)
		switch {
		case err == nil:
			if cfg.AdminToken = strings.TrimSpace(string(b)); cfg.AdminToken == "" {
				return serveConfig{}, &exitError{code: 2, err: fmt.Errorf("--admin-token-file %s is empty", cfg.AdminTokenFile)}
			}
		case errors.Is(err, os.ErrNotExist):
			// buildServer generates it.
		default:
			return serveConfig{}, &exitError{code: 2, err: fmt.Errorf("--admin-token-file: %w", err)}
		}
	}
	if err := checkAdminToken(cfg.AdminToken, cfg.AllowWeakAdminToken); err != nil {
		return serveConfig{}, err
	}
	if (cfg.TLSCertFile == "") != (cfg.TLSKeyFile == "") {
		return serveConfig{}, &exitError{code: 2, err: errors.New("--tls-cert-file and --tls-key-file go together")}
	}
	if cfg.Log, err = common.logConfig(); err != nil {
		return serveConfig{}, err
	}
	if cfg.DatabaseURL, err = common.url(); err != nil {
		return serveConfig{}, err
	}
	if cfg.Pool, err = pool.config(); err != nil {
		return serveConfig{}, err
	}
	cfg.TokenCache = pool.tokenCache()
	if cfg.Retention, err = gcLoop.run.retention(); err != nil {
		return serveConfig{}, err
	}
	if cfg.GC, err = gcLoop.config(); err != nil {
		return serveConfig{}, err
	}
	if cfg.LogBuffer < 0 {
		return serveConfig{}, &exitError{code: 2, err: fmt.Errorf("--log-buffer must not be negative (0 is off)")}
	}
	if cfg.ReportsFold < 0 {
		return serveConfig{}, &exitError{code: 2, err: fmt.Errorf("--reports-fold-interval must not be negative")}
	}
	if cfg.AliasRefresh <= 0 {
		return serveConfig{}, &exitError{code: 2, err: fmt.Errorf("--alias-refresh must be positive")}
	}
	if cfg.Events.Heartbeat <= 0 || cfg.Events.WriteTimeout <= 0 || cfg.Events.PollInterval <= 0 || cfg.Events.WatchersPerTenant <= 0 {
		return serveConfig{}, &exitError{code: 2, err: fmt.Errorf("--events-heartbeat, --events-write-timeout, --events-poll-interval and --watchers-per-tenant must be positive")}
	}
	if cfg.MetricsRefresh <= 0 {
		return serveConfig{}, &exitError{code: 2, err: fmt.Errorf("--metrics-refresh must be positive")}
	}
	switch {
	case cfg.RateRowsPerRequest < 0:
		return serveConfig{}, &exitError{code: 2, err: fmt.Errorf("--rate-rows-per-request must not be negative (0 is off)")}
	case cfg.FleetHeartbeat != 0 && cfg.FleetHeartbeat < minFleetHeartbeat:
		return serveConfig{}, &exitError{code: 2, err: fmt.Errorf("--fleet-heartbeat must be at least %v (0 is off), got %v", minFleetHeartbeat, cfg.FleetHeartbeat)}
	case !(cfg.PoolShare >= 0 && cfg.PoolShare <= 1):
		return serveConfig{}, &exitError{code: 2, err: fmt.Errorf("--tenant-pool-share must be a fraction from 0 (off) to 1, got %g", cfg.PoolShare)}
	case cfg.PoolShareWait < 0:
		return serveConfig{}, &exitError{code: 2, err: fmt.Errorf("--tenant-pool-wait must not be negative (0 answers 429 at once)")}
	}
	return cfg, nil
}

// minFleetHeartbeat is the shortest --fleet-heartbeat: every replica
// writes a row four times per second then.
const minFleetHeartbeat = 100 * time.Millisecond

// server is repolock serve built from its serveConfig: the pools, the services
// and the HTTP server, each built once. close releases what buildServer
// opened, in reverse order.
type server struct {
	cfg       serveConfig
	logger    *slog.Logger
	db        *database.DB
	reportsDB *database.DB // nil without REPORTS_DATABASE_URL

	// svc are the domain services (services.go), built as the commands
	// build them; its aliases are loaded by startup and refreshed by run.
	svc *services
	// tokens is the token cache; nil when it is off (TOKEN_CACHE_SIZE=0).
	tokens *tenants.Cache
	// listener is the process's one LISTEN session: the token cache, the
	// watch and leaseNotify subscribe to it.
	listener *pglisten.Listener
	// leaseNotify wakes the waiting lease acquisitions of this process.
	leaseNotify *leases.Notifier
	// gcWatch exports the newest successful GC run of the fleet (run
	// refreshes it).
	gcWatch *gcWatch
	// collector is the process's one GC collector: the scheduled loop,
	// POST /v1/admin/gc and the console share it.
	collector    *gc.Collector
	repositories *repostate.Service
	// fleet is this replica's membership of the fleet (heartbeat, fleet
	// size); nil when FLEET_HEARTBEAT is 0.
	fleet *fleet.Membership
	sync  *syncstate.Store
	// watch is the process's one watch: its event buffer serves every
	// GET /v1/events.
	watch *watch.Service

	http *httpapi.Server
	// tls, when set (TLS_CERT_FILE), makes the listener HTTPS.
	tls   *tls.Config
	ready *readiness

	closers []func()
}

// buildServer builds everything serve serves from cfg. It starts nothing:
// the pools do not connect (serve listens at once, even while the
// database is unreachable, and gets ready when it answers), and no loop
// runs until run.
func buildServer(cfg serveConfig, logger *slog.Logger) (_ *server, err error) {
	s := &server{cfg: cfg, logger: logger, ready: &readiness{}}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	s.ready.set(errors.New("the database has not answered yet"))

	// The metrics registry: the process owns it; every collector below
	// registers on it once (the pool its own metrics), and the server
	// serves it on /metrics.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	// The pools.
	poolCfg := cfg.Pool
	poolCfg.Metrics = reg
	if s.db, err = newPool(cfg.DatabaseURL, cfg.PreparedStatements, poolCfg); err != nil {
		return nil, err
	}
	s.onClose(func() { s.db.Close() })
	if cfg.ReportsURL != "" {
		if s.reportsDB, err = newPool(cfg.ReportsURL, cfg.PreparedStatements, reportsPool); err != nil {
			return nil, fmt.Errorf("REPORTS_DATABASE_URL: %w", err)
		}
		s.onClose(func() { s.reportsDB.Close() })
	}

	// The services, each built once from explicit dependencies. The
	// process's one LISTEN session serves the watch, the waiting lease
	// acquisitions and the token cache (Postgres sessions stay at the pool
	// size + 1). It is a session: behind a transaction-pooling PgBouncer it
	// needs the direct connection, MIGRATE_DATABASE_URL.
	listenURL := cfg.DatabaseURL
	if cfg.MigrateURL != "" {
		listenURL = cfg.MigrateURL
	}
	s.listener = pglisten.New(pglisten.Config{URL: listenURL, Logger: logger})
	s.onClose(s.listener.Close)
	eventRetention := cfg.Retention.Events
	if eventRetention == 0 {
		eventRetention = gc.DefaultEventRetention
	}
	s.watch = watch.New(s.db, watch.Config{Retention: eventRetention, PollInterval: cfg.Events.PollInterval,
		MaxWatchersPerTenant: cfg.Events.WatchersPerTenant, Logger: logger})
	s.onClose(s.watch.Close)
	s.listener.Subscribe(watch.NotifyChannel, pglisten.Subscriber{Notify: s.watch.Notify, State: s.watch.SetListening})
	s.tokens = newTokenCache(cfg.TokenCache, s.listener, logger)
	s.leaseNotify = leases.NewNotifier(logger)
	s.onClose(s.leaseNotify.Close)
	s.listener.Subscribe(leases.NotifyChan, pglisten.Subscriber{Notify: s.leaseNotify.Notify, State: s.leaseNotify.SetListening})
	if s.svc, err = newServices(s.db, rekey.Unloaded(s.db, logger), s.tokens, s.reportsDB, reg, s.leaseNotify); err != nil {
		return nil, err
	}
	// Startup readiness (database answered, migrations applied, rules
	// loaded); /readyz also pings the database on every probe.
	ready := s.ready
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "repolock_ready",
		Help: "1 once the process finished starting (the database answered, migrations applied, keying rules loaded), 0 before: /readyz and the API answer 503 meanwhile."},
		func() float64 {
			if ready.get() != nil {
				return 0
			}
			return 1
		}))
	// Locks left stale by a rules change, as of the last load of the
	// rules (ALIAS_REFRESH): no query at scrape time.
	aliases := s.svc.aliases
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "repolock_rekey_stale_rules_versions",
		Help: "Older keying rules versions that stored locks are still keyed under, as of the last load of the rules (0: nothing left to re-key; above 0 after an upgrade until `repolock rekey` completes, or while re-keying conflicts stay open)."},
		func() float64 { return float64(aliases.StaleVersions()) }))
	if s.collector, err = newCollector(s.db, s.svc, logger, reg, cfg.Retention); err != nil {
		return nil, err
	}
	s.gcWatch = &gcWatch{collector: s.collector, logger: logger}
	reg.MustRegister(s.gcWatch)
	s.repositories = repostate.NewPostgres(s.db, repostate.Config{Logger: logger})
	s.sync = syncstate.New(s.db, syncstate.Options{Logger: logger})

	// The HTTP server: the API, and the operator console under /ui/
	// (docs/console.md).
	adminToken := cfg.AdminToken
	if adminToken == "" {
		path, err := generateAdminToken(cfg.AdminTokenFile)
		if err != nil {
			return nil, err
		}
		if adminToken, err = readTokenFile(path); err != nil {
			return nil, err
		}
		// The path, never the token: logs are read by more people than
		// the admin.
		logger.Warn("ADMIN_TOKEN is not set: generated an admin token into a file (development; set ADMIN_TOKEN or ADMIN_TOKEN_FILE in production)",
			"admin_token_file", path)
	}
	if cfg.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCertFile, cfg.TLSKeyFile)
		if err != nil {
			return nil, &exitError{code: 2, err: fmt.Errorf("TLS: %w", err)}
		}
		s.tls = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	// One throttle of failed authentications for the API and the
	// console: an address has one budget on both.
	guard := authguard.New(authguard.Defaults())
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "repolock_auth_failures_total",
			Help: "Failed authentications (a wrong bearer token on any route, a wrong console sign-in)."},
			func() float64 { return float64(guard.Stats().Failures) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "repolock_auth_refused_total",
			Help: "Authentication attempts answered 429: from an address over its failure budget, or failures over the global budget."},
			func() float64 { return float64(guard.Stats().Refused) }),
	)
	// Each tenant's share of the pool (docs/operations.md, "Multi-tenant
	// isolation").
	var share *fairshare.Limiter
	if cfg.PoolShare > 0 {
		size := poolCfg.MaxOpenConns
		if size <= 0 {
			size = database.DefaultMaxOpenConns
		}
		if share, err = fairshare.New(fairshare.Config{
			Share:    fairshare.ShareOf(size, cfg.PoolShare),
			Wait:     cfg.PoolShareWait,
			Registry: reg,
		}); err != nil {
			return nil, err
		}
		logger.Info("tenant pool share", "connections", share.Share(), "pool", size, "wait", cfg.PoolShareWait.String())
	}
	// The fleet: the replicas on this database count each other so that
	// the per-tenant rate limit is the fleet's (docs/operations.md, "Rate
	// limit"). run starts its heartbeat once the database is migrated.
	var replicas func() int
	if cfg.FleetHeartbeat > 0 {
		host, _ := os.Hostname()
		if s.fleet, err = fleet.New(fleet.Config{DB: s.db, Heartbeat: cfg.FleetHeartbeat, Now: time.Now, Logger: logger,
			Registry: reg, Host: host, PID: os.Getpid()}); err != nil {
			return nil, err
		}
		replicas = s.fleet.Replicas
	}
	s.http, err = httpapi.New(httpapi.Config{
		DB:                  s.db,
		Logger:              logger,
		AdminToken:          adminToken,
		AuthGuard:           guard,
		TrustForwardedFor:   cfg.TrustForwardedFor,
		TrustForwardedProto: cfg.TrustForwardedProto,
		RequestTimeout:      cfg.RequestTimeout,
		RateLimit:           cfg.RateLimit,
		RateBurst:           cfg.RateBurst,
		RateReplicas:        replicas,
		RateRowsPerRequest:  cfg.RateRowsPerRequest,
		Share:               share,
		Registry:            reg,
		Repositories:        s.repositories,
		Sync:                s.sync,
		GC:                  s.collector,
		Tenants:             s.svc.tenants,
		Locks:               s.svc.locks,
		Apps:                s.svc.apps,
		Rekey:               s.svc.rekey,
		Aliases:             s.svc.aliases,
		Reports:             s.svc.reports,
		Leases:              s.svc.leases,
		Watch:               s.watch,
		EventsHeartbeat:     cfg.Events.Heartbeat,
		EventsWriteTimeout:  cfg.Events.WriteTimeout,
		Ready:               s.ready.get,
	})
	if err != nil {
		return nil, err
	}
	ui, err := console.New(console.Config{DB: s.db, Logger: logger, AdminToken: adminToken, AuthGuard: guard,
		TrustForwardedFor: cfg.TrustForwardedFor, TrustForwardedProto: cfg.TrustForwardedProto,
		Collector: s.collector, Sync: s.sync, ReportsDB: s.reportsDB,
		Tenants: s.svc.tenants, Locks: s.svc.locks, Apps: s.svc.apps, Watch: s.watch})
	if err != nil {
		return nil, err
	}
	ui.Mount(s.http.Echo)
	return s, nil
}

func (s *server) onClose(f func()) { s.closers = append(s.closers, f) }

// close releases what buildServer opened, last opened first.
func (s *server) close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
}

// run starts the background loops (alias refresh, scheduled GC, the debug
// listener), listens, and serves until ctx ends or startup fails; the
// loops stop before it returns. Startup runs beside the server: /healthz
// answers at once, /readyz and the API answer 503 until the database
// answered and the migrations ran.
func (s *server) run(ctx context.Context) error {
	aliasCtx, stopAliases := context.WithCancel(ctx)
	defer stopAliases()
	go s.svc.aliases.Run(aliasCtx, s.cfg.AliasRefresh)
	// The LISTEN session (it connects in the background, retrying while
	// the database is unreachable), and the cleanup of expired leases no
	// acquisition replaced (an expired lease is free without it).
	s.listener.Start()
	cleanupDone := make(chan struct{})
	go func() {
		defer close(cleanupDone)
		s.svc.leases.RunCleanup(aliasCtx, time.Minute, 1000, func(err error) {
			s.logger.Warn("leases: cleanup failed; retrying at the next tick", "error", err.Error())
		})
	}()
	defer func() { stopAliases(); <-cleanupDone }()
	foldDone := make(chan struct{})
	go func() { defer close(foldDone); foldOwnership(aliasCtx, reports.New(s.db), s.cfg.ReportsFold, s.logger) }()
	defer func() { stopAliases(); <-foldDone }()
	s.watch.Start(aliasCtx) // reads fail (and are retried) until startup is done
	watchDone := make(chan struct{})
	go func() { defer close(watchDone); s.gcWatch.run(aliasCtx, s.cfg.MetricsRefresh) }()
	defer func() { stopAliases(); <-watchDone }()
	stopGC := startGCLoop(ctx, s.collector, s.cfg.GC, s.logger)
	defer stopGC()
	stopDebug, err := serveDebug(s.cfg.DebugListen, s.logger)
	if err != nil {
		return fmt.Errorf("debug listener: %w", err)
	}
	defer stopDebug()
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if s.tls != nil {
		ln = tls.NewListener(ln, s.tls)
	}
	s.logger.Info("listening", "addr", ln.Addr().String(), "tls", s.tls != nil)

	// A fatal startup error stops the server.
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// The fleet heartbeat runs from a successful startup (its table is
	// migrated then) until shutdown begins (ctx ends: the listener closes
	// and nothing new is admitted); once the requests in flight are done,
	// this replica's row is deleted, and the others take its share back at
	// their next beat.
	fleetCtx, stopFleet := context.WithCancel(ctx)
	defer stopFleet()
	var (
		startErr error
		started  = make(chan struct{})
		beating  sync.WaitGroup
		joined   bool
	)
	go func() {
		defer close(started)
		var migrate func(context.Context) error
		if s.cfg.MigrateOnStart {
			migrate = func(ctx context.Context) error { return migrateUp(ctx, s.cfg.MigrateURL, s.db, s.logger) }
		}
		// The keying rules: this binary's rules version is registered
		// (from then on older replicas claim nothing), then the stored
		// rules are loaded.
		loadRules := func(ctx context.Context) error {
			if err := rekey.RegisterVersion(ctx, s.db, s.svc.locks.Rules().Version()); err != nil {
				return err
			}
			return s.svc.aliases.Reload(ctx)
		}
		err := startup(sctx, s.db, s.logger, migrate, loadRules, s.ready)
		switch {
		case err != nil && sctx.Err() == nil:
			startErr = err
			cancel(err)
		case err == nil && s.fleet != nil:
			joined = true
			beating.Add(1)
			go func() {
				defer beating.Done()
				s.fleet.Run(fleetCtx)
			}()
		}
	}()
	err = s.http.Serve(sctx, ln, s.cfg.ShutdownTimeout)
	cancel(nil)
	<-started
	stopFleet()
	beating.Wait()
	if joined {
		// Waiting longer than a heartbeat gains nothing: the others count
		// this replica out within two anyway.
		lctx, lcancel := context.WithTimeout(context.Background(), s.cfg.FleetHeartbeat)
		if lerr := s.fleet.Leave(lctx); lerr != nil {
			s.logger.Warn("fleet: could not delete this replica's heartbeat row; the others count it out within two heartbeats", "error", lerr.Error())
		}
		lcancel()
	}
	if startErr != nil {
		return startErr
	}
	if err != nil {
		return err
	}
	s.logger.Info("stopped")
	return nil
}

// MinAdminTokenLen is the shortest admin token serve accepts without
// --allow-weak-admin-token: 32 bytes, as many as a generated token has of
// randomness, rules out a token that can be guessed.
const MinAdminTokenLen = 32

// checkAdminToken refuses a set admin token shorter than MinAdminTokenLen
// unless allowWeak (development).
func checkAdminToken(token string, allowWeak bool) error {
	if token == "" || len(token) >= MinAdminTokenLen || allowWeak {
		return nil
	}
	return &exitError{code: 2, err: fmt.Errorf("the admin token is %d bytes; at least %d are required (generate one with: echo rla_$(openssl rand -hex 24)); "+
		"ALLOW_WEAK_ADMIN_TOKEN=1 accepts it for development only", len(token), MinAdminTokenLen)}
}

// generateAdminToken writes a new random token, mode 0600, to path (made
// only if it does not exist), or to a new temporary file when path is "",
// and returns the file's path.
func generateAdminToken(path string) (string, error) {
	var (
		f   *os.File
		err error
	)
	if path == "" {
		f, err = os.CreateTemp("", "repolock-admin-token-*")
	} else {
		f, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	}
	if err != nil {
		return "", fmt.Errorf("generate the admin token: %w", err)
	}
	_, werr := fmt.Fprintln(f, randomToken())
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return "", fmt.Errorf("generate the admin token: %w", werr)
	}
	return f.Name(), nil
}

func readTokenFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("admin token file: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

func randomToken() string {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return "rla_" + hex.EncodeToString(b)
}
