package httpapi

import (
	"context"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/rekey"
)

// Refresher is the rules source the server's Locks keys under, which the
// alias routes refresh after a change (*rekey.Source).
type Refresher interface {
	Refresh(ctx context.Context) error
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
	k, err := rekey.LoadKeying(ctx, s.DB)
	if err != nil {
		return err
	}
	rep, err := s.cfg.Rekey.Run(ctx, k, opts)
	if err != nil {
		if rep.Batches > 0 {
			// Say how far it got: what it re-keyed stays re-keyed, and a
			// second run continues from there.
			return progressError(err, rep)
		}
		return err
	}
	return c.JSON(http.StatusOK, rep)
}

func (s *Server) listAliases(c echo.Context) error {
	as, err := s.cfg.Rekey.ListAliases(c.Request().Context())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ListResponse[rekey.Alias]{Items: as})
}

type aliasRequest struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// aliasResponse is the answer of an applied alias add: the stored alias
// and what its re-key did.
type aliasResponse struct {
	rekey.Alias
	Change rekey.AliasChange `json:"change"`
}

// addAlias adds an alias and re-keys the locks it moves, as one operation
// (rekey.Service.AddAlias): 201 with the alias and the change, 409
// alias_conflict listing every conflict (nothing changed), or with
// ?dry_run=true 200 with the plan (nothing changed).
func (s *Server) addAlias(c echo.Context) error {
	dryRun, err := ParseBool(c, "dry_run")
	if err != nil {
		return err
	}
	var req aliasRequest
	if err := DecodeJSON(c, &req); err != nil {
		return err
	}
	ch, err := s.cfg.Rekey.AddAlias(c.Request().Context(), req.From, req.To, dryRun)
	if err != nil {
		return err
	}
	if dryRun {
		return c.JSON(http.StatusOK, ch)
	}
	s.refreshNormalizers(c.Request().Context())
	return c.JSON(http.StatusCreated, aliasResponse{Alias: ch.Alias, Change: ch})
}

// removeAlias removes an alias and re-keys the locks it moves, as one
// operation: 204, 409 alias_conflict, or with ?dry_run=true 200 with the
// plan.
func (s *Server) removeAlias(c echo.Context) error {
	dryRun, err := ParseBool(c, "dry_run")
	if err != nil {
		return err
	}
	ch, err := s.cfg.Rekey.RemoveAliasByID(c.Request().Context(), c.Param("id"), dryRun)
	if err != nil {
		return err
	}
	if dryRun {
		return c.JSON(http.StatusOK, ch)
	}
	s.refreshNormalizers(c.Request().Context())
	return c.NoContent(http.StatusNoContent)
}

// refreshNormalizers makes this process key with the changed set at once
// (other replicas follow at their next refresh).
func (s *Server) refreshNormalizers(ctx context.Context) {
	if err := s.cfg.Aliases.Refresh(ctx); err != nil {
		s.Logger.Warn("refreshing normalizer aliases failed", "error", err.Error())
	}
}

// progressError adds the report of a run that stopped half-way to its
// error, in Details["progress"].
func progressError(err error, rep rekey.Report) error {
	e := &repolock.Error{Code: repolock.ErrorCode(err), Message: repolock.ErrorMessage(err) +
		" (the run stopped half-way: what it re-keyed stays re-keyed; run it again to continue)", Err: err,
		Details: map[string]any{"progress": rep}}
	return e
}
