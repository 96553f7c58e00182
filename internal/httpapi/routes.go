package httpapi

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/tenants"
	"github.com/repolock/repolock/internal/version"
)

// routes registers every route. Domain packages add theirs through a
// register*Routes method in their own file, called here.
func (s *Server) routes() {
	e := s.Echo
	e.Use(s.middlewares()...)
	e.Use(s.requireReady)

	e.GET("/healthz", s.healthz)
	e.HEAD("/healthz", bodyless(s.healthz))
	e.GET("/readyz", s.readyz)
	e.HEAD("/readyz", bodyless(s.readyz))
	e.GET("/version", s.version)
	e.GET("/metrics", echo.WrapHandler(promhttp.HandlerFor(s.Registry, promhttp.HandlerOpts{})))

	s.V1 = e.Group("/v1")
	s.Admin = s.V1.Group("/admin", s.requireAdmin)

	s.V1.GET("/me", s.me, s.requireTenant)
	s.Admin.POST("/users", s.createTenant)
	s.Admin.GET("/users", s.listTenants)
	s.Admin.DELETE("/users/:name/tokens", s.revokeTokens)
	s.Admin.POST("/users/:name/tokens", s.issueToken)

	// Domain routes, one register call per file of handlers.
	s.registerNormalizeRoutes()
	s.registerRepositoryRoutes()
	s.registerAppsRoutes()
	s.registerGCRoutes()
	s.registerReportRoutes()
	s.registerSyncRoutes()
	s.registerLeaseRoutes()
	s.registerRekeyRoutes()
	s.registerReservationRoutes()
	s.registerEventRoutes()
	s.registerTransferRoutes()
	s.registerOpenAPIRoutes()
}

func (s *Server) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

// bodyless answers HEAD with h's status and headers and no body.
func bodyless(h echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		c.Response().Writer = discardBody{c.Response().Writer}
		return h(c)
	}
}

type discardBody struct{ http.ResponseWriter }

func (discardBody) Write(p []byte) (int, error) { return len(p), nil }

func (s *Server) version(c echo.Context) error {
	return c.JSON(http.StatusOK, version.Get())
}

func (s *Server) readyz(c echo.Context) error {
	if s.cfg.Ready != nil {
		if err := s.cfg.Ready(); err != nil {
			return repolock.Errorf(repolock.EUnavailable, "not ready: %s", err.Error())
		}
	}
	if err := s.DB.Ping(c.Request().Context(), 2*time.Second); err != nil {
		s.Logger.Warn("readiness check failed", "error", err.Error())
		return repolock.Errorf(repolock.EUnavailable, "database is not reachable")
	}
	return c.JSON(http.StatusOK, map[string]string{"status": "ready"})
}

// requireReady answers 503 on every route but the probes, the metrics and
// the API document until Config.Ready says the process is ready.
func (s *Server) requireReady(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if s.cfg.Ready == nil {
			return next(c)
		}
		switch c.Request().URL.Path {
		case "/healthz", "/readyz", "/metrics", "/openapi.yaml", "/openapi.json":
			return next(c)
		}
		if err := s.cfg.Ready(); err != nil {
			return repolock.Errorf(repolock.EUnavailable, "the service is starting: %s; try again", err.Error())
		}
		return next(c)
	}
}

func (s *Server) me(c echo.Context) error {
	return c.JSON(http.StatusOK, Tenant(c))
}

type createTenantRequest struct {
	Name        string `json:"name"`
	DisplayName string `json:"display_name"`
}

type createTenantResponse struct {
	tenants.Tenant
	Token string `json:"token"`
}

func (s *Server) createTenant(c echo.Context) error {
	var req createTenantRequest
	if err := DecodeJSON(c, &req); err != nil {
		return err
	}
	u, token, err := s.cfg.Tenants.Create(c.Request().Context(), req.Name, req.DisplayName)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, createTenantResponse{Tenant: u, Token: token})
}

func (s *Server) listTenants(c echo.Context) error {
	p, err := ParsePage(c)
	if err != nil {
		return err
	}
	us, next, err := s.cfg.Tenants.ListPage(c.Request().Context(), p.Size, p.Token)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ListResponse[tenants.Tenant]{Items: us, NextPageToken: next})
}

func (s *Server) revokeTokens(c echo.Context) error {
	n, err := s.cfg.Tenants.RevokeTokens(c.Request().Context(), c.Param("name"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]int64{"revoked": n})
}

func (s *Server) issueToken(c echo.Context) error {
	token, err := s.cfg.Tenants.IssueToken(c.Request().Context(), c.Param("name"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, map[string]string{"token": token})
}
