package httpapi

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/repolock/repolock/internal/locks"
)

// registerLocksRoutes registers the tenant's view of its locks and the bare
// acquire, as tenant routes.
func (s *Server) registerLocksRoutes(t tenantRoutes) {
	t.add(http.MethodGet, "/locks", s.listLocks)
	t.add(http.MethodGet, "/locks/:id", s.getLock)
	t.add(http.MethodPost, "/locks/acquire", s.acquireLock)
}

func (s *Server) listLocks(c echo.Context) error {
	p, err := ParsePage(c)
	if err != nil {
		return err
	}
	items, next, err := s.cfg.Locks.List(c.Request().Context(), Tenant(c).ID, p.Size, p.Token)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ListResponse[locks.Lock]{Items: items, NextPageToken: next})
}

func (s *Server) getLock(c echo.Context) error {
	l, err := s.cfg.Locks.Get(c.Request().Context(), Tenant(c).ID, c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, l)
}

type acquireRequest struct {
	RepoURL string `json:"repo_url"`
}

type acquireResponse struct {
	LockID        string `json:"lock_id"`
	Acquired      bool   `json:"acquired"`
	NormalizedURL string `json:"normalized_url"`
}

// acquireLock is the bare acquire (locks.Service.Acquire): 200 with the lock,
// or 409 repository_claimed naming the owner. The lock it creates has no
// references; the global GC collects it once it is older than its grace
// period unless an Application or Credential starts using it.
func (s *Server) acquireLock(c echo.Context) error {
	var req acquireRequest
	if err := DecodeJSON(c, &req); err != nil {
		return err
	}
	acq, err := s.cfg.Locks.Acquire(c.Request().Context(), Tenant(c).ID, req.RepoURL)
	if err != nil {
		return err
	}
	if !acq.Acquired {
		return acq.DeniedError()
	}
	return c.JSON(http.StatusOK, acquireResponse{LockID: acq.LockID, Acquired: true, NormalizedURL: string(acq.Key)})
}
