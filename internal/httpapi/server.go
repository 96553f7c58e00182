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
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/repolock/repolock/internal/database"
)

// Config configures a Server.
type Config struct {
	DB     *database.DB
	Logger *slog.Logger
	// AdminToken authorizes /v1/admin/... routes. Required.
	AdminToken string
	// RequestTimeout bounds each request's context (default 30s).
	RequestTimeout time.Duration
	// BodyLimit caps request bodies in bytes (default 1 MiB).
	BodyLimit int64
	// Registry receives the server's metrics; a new one is made when nil.
	Registry *prometheus.Registry
	// Hooks lets other components (the GC loop, for instance) add routes
	// after the built-in ones; each is called once with the server.
	Hooks []func(*Server)
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
}

// New builds a Server with every route registered.
func New(cfg Config) (*Server, error) {
	if cfg.DB == nil {
		return nil, errors.New("httpapi: Config.DB is required")
	}
	if cfg.AdminToken == "" {
		return nil, errors.New("httpapi: Config.AdminToken is required")
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
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
		cfg.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	cfg.Registry.MustRegister(collectors.NewDBStatsCollector(cfg.DB.DB.DB, "repolock"))

	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	s := &Server{
		Echo:     e,
		DB:       cfg.DB,
		Logger:   cfg.Logger,
		Registry: cfg.Registry,
		cfg:      cfg,
		metrics:  newHTTPMetrics(cfg.Registry),
	}
	e.HTTPErrorHandler = s.handleError
	s.routes()
	for _, h := range cfg.Hooks {
		h(s)
	}
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
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	s.Logger.Info("shutting down", "timeout", shutdownTimeout.String())
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
