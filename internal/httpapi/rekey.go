package httpapi

import (
	"context"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/normalize"
	"github.com/repolock/repolock/internal/rekey"
)

// Normalizers is where the server gets the normalizer that keys URLs: the
// built-in rules plus the deployment's configured aliases
// (*rekey.Source). Refresh reloads after an alias change made through the
// API.
type Normalizers interface {
	Current() *normalize.Normalizer
	Refresh(ctx context.Context) error
}

// withNormalizer puts the current normalizer into the request's context
// (normalize.NewContext), where internal/apps and internal/locks read it.
func (s *Server) withNormalizer(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if s.cfg.Normalizers != nil {
			r := c.Request()
			c.SetRequest(r.WithContext(normalize.NewContext(r.Context(), s.cfg.Normalizers.Current())))
		}
		return next(c)
	}
}

// registerRekeyRoutes registers the admin routes of re-keying and aliases:
//
//	POST   /v1/admin/rekey          re-key stale locks (?dry_run=true, ?batch_size=N)
//	GET    /v1/admin/aliases        the configured aliases
//	POST   /v1/admin/aliases        add one ({"from": ..., "to": ...})
//	DELETE /v1/admin/aliases/:id    remove one
func (s *Server) registerRekeyRoutes() {
	s.Admin.POST("/rekey", s.rekey)
	s.Admin.GET("/aliases", s.listAliases)
	s.Admin.POST("/aliases", s.addAlias)
	s.Admin.DELETE("/aliases/:id", s.removeAlias)
}

// rekey runs one re-keying under the stored aliases as they are now (not
// this process's cached set) and answers 200 with its report. It is bounded
// by the request timeout; what it re-keyed before stays re-keyed.
func (s *Server) rekey(c echo.Context) error {
	opts := rekey.Options{Logger: s.Logger}
	var err error
	if opts.DryRun, err = ParseBool(c, "dry_run"); err != nil {
		return err
	}
	if v := c.QueryParam("batch_size"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > rekey.MaxBatchSize {
			return repolock.Errorf(repolock.EInvalid, "batch_size must be an integer from 1 to %d", rekey.MaxBatchSize)
		}
		opts.BatchSize = n
	}
	ctx := c.Request().Context()
	n, err := rekey.Load(ctx, s.DB)
	if err != nil {
		return err
	}
	rep, err := rekey.Run(ctx, s.DB, n, opts)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, rep)
}

func (s *Server) listAliases(c echo.Context) error {
	as, err := rekey.ListAliases(c.Request().Context(), s.DB)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ListResponse[rekey.Alias]{Items: as})
}

type aliasRequest struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// addAlias answers 201 with the stored alias. Keys change: the answer does
// not re-key; POST /v1/admin/rekey does.
func (s *Server) addAlias(c echo.Context) error {
	var req aliasRequest
	if err := DecodeJSON(c, &req); err != nil {
		return err
	}
	a, err := rekey.AddAlias(c.Request().Context(), s.DB, req.From, req.To)
	if err != nil {
		return err
	}
	s.refreshNormalizers(c.Request().Context())
	return c.JSON(http.StatusCreated, a)
}

func (s *Server) removeAlias(c echo.Context) error {
	if err := rekey.RemoveAliasByID(c.Request().Context(), s.DB, c.Param("id")); err != nil {
		return err
	}
	s.refreshNormalizers(c.Request().Context())
	return c.NoContent(http.StatusNoContent)
}

// refreshNormalizers makes this process key with the changed set at once
// (other replicas follow at their next refresh).
func (s *Server) refreshNormalizers(ctx context.Context) {
	if s.cfg.Normalizers == nil {
		return
	}
	if err := s.cfg.Normalizers.Refresh(ctx); err != nil {
		s.Logger.Warn("refreshing normalizer aliases failed", "error", err.Error())
	}
}
