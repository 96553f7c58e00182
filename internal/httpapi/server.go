// Package httpapi is the Echo HTTP API: middleware, authentication, the one
// mapping from domain errors to JSON error bodies, and the handlers of every
// domain package. Handlers decode and validate requests, call the domain
// packages and encode results; they hold no business rules.
package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/repolock/repolock/internal/apps"
	"github.com/repolock/repolock/internal/authguard"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/fairshare"
	"github.com/repolock/repolock/internal/gc"
	"github.com/repolock/repolock/internal/leases"
	"github.com/repolock/repolock/internal/locks"
	"github.com/repolock/repolock/internal/rekey"
	"github.com/repolock/repolock/internal/reports"
	"github.com/repolock/repolock/internal/repostate"
	"github.com/repolock/repolock/internal/syncstate"
	"github.com/repolock/repolock/internal/tenants"
	"github.com/repolock/repolock/internal/watch"
)

// Config configures a Server. The caller (cmd/api) builds every service the
// server serves and hands it over here; the server builds none itself.
type Config struct {
	// DB is the pool /readyz pings. Required.
	DB     *database.DB
	Logger *slog.Logger
	// AdminToken authorizes /v1/admin/... routes. Required.
	AdminToken string
	// AuthGuard throttles failed authentications per client address and
	// globally (internal/authguard); cmd/api shares one with the console.
	// Required.
	AuthGuard *authguard.Guard
	// TrustForwardedFor counts failures against the address a trusted
	// proxy appended to X-Forwarded-For instead of the peer's
	// (authguard.ClientAddr). Only behind a proxy that always sets it.
	TrustForwardedFor bool
	// TrustForwardedProto treats "X-Forwarded-Proto: https" as TLS: the
	// responses then carry HSTS, as over the server's own TLS listener.
	// Only behind a proxy that always sets it.
	TrustForwardedProto bool
	// RequestTimeout bounds each request's context (default 30s).
	RequestTimeout time.Duration
	// BodyLimit caps request bodies in bytes (default 1 MiB).
	BodyLimit int64
	// RateLimit is each tenant's sustained request rate per second (token
	// bucket); 0 is off, as on --rate-limit (serve's default is
	// DefaultRateLimit). RateBurst is the bucket size (0 =
	// DefaultRateBurst). The admin token is not limited.
	RateLimit float64
	RateBurst int
	// RateReplicas, when not nil, is the number of replicas RateLimit and
	// RateBurst are shared by (fleet.Membership.Replicas: read on every
	// limited request, so it must not block): this process enforces
	// RateLimit/n and ceil(RateBurst/n) per tenant, and the fleet the
	// configured figures. Nil: the limits are this process's alone.
	RateReplicas func() int
	// RateRowsPerRequest charges the batch routes by their rows: a sync
	// batch of events or a listing of repositories costs one request per
	// RateRowsPerRequest rows (serve's default DefaultRateRowsPerRequest);
	// 0 charges a batch as one request.
	RateRowsPerRequest int
	// Share bounds each tenant's requests in flight, its share of the
	// database pool (internal/fairshare; cmd/api builds it from the pool
	// size); the admin token has a share of its own. Nil is off.
	Share *fairshare.Limiter
	// Registry is the process's metrics registry, owned by the caller: the
	// server registers its HTTP metrics on it (once; a second server on
	// the same registry is an error) and serves it on /metrics (the pool
	// registers its own there: database.PoolConfig.Metrics). Required.
	Registry *prometheus.Registry
	// Repositories serves /v1/repositories (internal/repostate). Required.
	Repositories *repostate.Service
	// Sync serves /v1/sync (internal/syncstate). Required.
	Sync *syncstate.Store
	// Tenants authenticates tokens (through its cache) and serves
	// /v1/admin/users. Required.
	Tenants *tenants.Service
	// Locks serves /v1/locks and keys URLs: the HTTP API keys every URL
	// under Locks.Rules(), the rules the locks check keys under. Required.
	Locks *locks.Service
	// Apps serves /v1/applications, /v1/repository-credentials and the
	// deletion of a tenant. Required.
	Apps *apps.Service
	// Rekey serves /v1/admin/rekey and /v1/admin/aliases. Required.
	Rekey *rekey.Service
	// Aliases is the rules source Locks keys under (cmd/api: the
	// refreshing *rekey.Source); the alias routes refresh it after a
	// change so that this process keys with the new set at once. Required.
	Aliases Refresher
	// Reports serves /v1/admin/reports, on the primary or on the read
	// replica of REPORTS_DATABASE_URL. Required.
	Reports *reports.Service
	// Ready reports whether the process is ready to serve API routes: nil
	// when it is, else why not (for example: the database has not
	// answered yet, migrations are pending). Until it returns nil every
	// route but /healthz, /readyz, /metrics and /openapi.* answers 503
	// unavailable with Retry-After, and /readyz answers 503. Nil means
	// always ready.
	Ready func() error
	// Leases serves /v1/leases (internal/leases). Required.
	Leases *leases.Service
	// GC serves POST /v1/admin/gc. It is the process's one Collector: the
	// scheduled loop of serve runs on the same one. Required.
	GC *gc.Collector
	// Watch serves GET /v1/events (internal/watch). Required.
	Watch *watch.Service
	// EventsHeartbeat is how often an idle event stream gets a comment
	// (and a bookmark when its cursor moved); 0: DefaultEventsHeartbeat.
	// EventsWriteTimeout bounds each write to a stream: a client that
	// does not read for that long is disconnected; 0:
	// DefaultEventsWriteTimeout.
	EventsHeartbeat    time.Duration
	EventsWriteTimeout time.Duration
}

// Server is the HTTP API.
type Server struct {
	Echo     *echo.Echo
	DB       *database.DB
	Logger   *slog.Logger
	Registry *prometheus.Registry
	// V1 is the tenant-authenticated /v1 group; Admin is /v1/admin, which
	// only the admin token may call.
	V1    *echo.Group
	Admin *echo.Group

	cfg     Config
	metrics *httpMetrics
	limiter *tenantLimiter
	// stopping is closed when Serve begins its graceful shutdown: event
	// streams and long polls end then instead of holding it up.
	stopping chan struct{}
}

// New builds a Server with every route registered.
func New(cfg Config) (*Server, error) {
	switch {
	case cfg.DB == nil:
		return nil, errors.New("httpapi: Config.DB is required")
	case cfg.AdminToken == "":
		return nil, errors.New("httpapi: Config.AdminToken is required")
	case cfg.AuthGuard == nil:
		return nil, errors.New("httpapi: Config.AuthGuard is required")
	case cfg.Registry == nil:
		return nil, errors.New("httpapi: Config.Registry is required")
	case cfg.Repositories == nil || cfg.Sync == nil || cfg.GC == nil || cfg.Leases == nil:
		return nil, errors.New("httpapi: Config.Repositories, Config.Sync, Config.GC and Config.Leases are required")
	case cfg.Watch == nil:
		return nil, errors.New("httpapi: Config.Watch is required")
	case cfg.Tenants == nil || cfg.Locks == nil || cfg.Apps == nil || cfg.Rekey == nil || cfg.Aliases == nil || cfg.Reports == nil:
		return nil, errors.New("httpapi: Config.Tenants, Config.Locks, Config.Apps, Config.Rekey, Config.Aliases and Config.Reports are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 30 * time.Second
	}
	if cfg.BodyLimit <= 0 {
		cfg.BodyLimit = 1 << 20
	}
	if cfg.EventsHeartbeat <= 0 {
		cfg.EventsHeartbeat = DefaultEventsHeartbeat
	}
	if cfg.EventsWriteTimeout <= 0 {
		cfg.EventsWriteTimeout = DefaultEventsWriteTimeout
	}
	metrics, err := newHTTPMetrics(cfg.Registry)
	if err != nil {
		return nil, err
	}

	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	s := &Server{
		Echo:     e,
		DB:       cfg.DB,
		Logger:   cfg.Logger,
		Registry: cfg.Registry,
		cfg:      cfg,
		metrics:  metrics,
		limiter:  newTenantLimiter(cfg.RateLimit, cfg.RateBurst, cfg.RateReplicas),
		stopping: make(chan struct{}),
	}
	e.HTTPErrorHandler = s.handleError
	s.routes()
	return s, nil
}

// ServeHTTP makes the Server an http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.Echo.ServeHTTP(w, r) }

// Serve serves on ln until ctx is done, then shuts down gracefully, letting
// requests in flight finish within shutdownTimeout.
func (s *Server) Serve(ctx context.Context, ln net.Listener, shutdownTimeout time.Duration) error {
	hs := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       s.cfg.RequestTimeout + 5*time.Second,
		WriteTimeout:      s.cfg.RequestTimeout + 10*time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.Logger.Handler(), slog.LevelWarn),
		// Connection states at debug level: what an operator (or the
		// graceful-shutdown test) reads to see a request in flight.
		ConnState: func(c net.Conn, st http.ConnState) {
			s.Logger.Debug("http connection", "state", st.String(), "remote", c.RemoteAddr().String())
		},
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	s.Logger.Info("shutting down", "timeout", shutdownTimeout.String())
	close(s.stopping)
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
