package httpapi

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/locks"
)

// maxListed bounds the unpaginated lists of this file: the denied tenants
// of one lock, and a tenant's open handover offers (each way).
const maxListed = 1000

// registerTransferRoutes registers transfers, handovers and the owner's
// view of denials (issue 25, internal/locks/transfer.go):
//
//	POST   /v1/admin/locks/:id/transfer  an admin moves a lock
//	GET    /v1/locks/:id/denials         the owner reads the denials on its lock
//	POST   /v1/locks/:id/handover        the owner offers its lock
//	GET    /v1/handovers                 offers received and made
//	POST   /v1/handovers/:id/accept      the recipient takes the lock
//	POST   /v1/handovers/:id/decline     the recipient refuses
//	DELETE /v1/handovers/:id             the owner withdraws
func (s *Server) registerTransferRoutes() {
	s.Admin.POST("/locks/:id/transfer", s.transferLock)
	t := tenantRoutes{s}
	t.add(http.MethodGet, "/locks/:id/denials", s.lockDenials)
	t.add(http.MethodPost, "/locks/:id/handover", s.offerHandover)
	t.add(http.MethodGet, "/handovers", s.listHandovers)
	t.add(http.MethodPost, "/handovers/:id/accept", s.acceptHandover)
	t.add(http.MethodPost, "/handovers/:id/decline", s.declineHandover)
	t.add(http.MethodDelete, "/handovers/:id", s.withdrawHandover)
}

type transferRequest struct {
	To         string `json:"to"`
	References string `json:"references"`
}

// transferLock: 200 with what the transfer did; 409 lock_in_use listing
// the old owner's references (references "refuse", the default); 404 for
// an unknown lock or user.
func (s *Server) transferLock(c echo.Context) error {
	var req transferRequest
	if err := DecodeJSON(c, &req); err != nil {
		return err
	}
	tr, err := s.cfg.Locks.Transfer(c.Request().Context(), locks.TransferRequest{
		LockID: c.Param("id"), To: req.To, References: req.References, Actor: locks.AdminActor(s.cfg.AdminToken),
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, tr)
}

func (s *Server) lockDenials(c echo.Context) error {
	ds, err := s.cfg.Locks.Denials(c.Request().Context(), Tenant(c).ID, c.Param("id"), maxListed)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"items": ds})
}

type handoverRequest struct {
	To        string `json:"to"`
	ExpiresIn string `json:"expires_in"`
}

// offerHandover: 201 with the offer; 409 handover_pending when the lock
// already has an open one.
func (s *Server) offerHandover(c echo.Context) error {
	var req handoverRequest
	if err := DecodeJSON(c, &req); err != nil {
		return err
	}
	var in time.Duration
	if req.ExpiresIn != "" {
		d, err := time.ParseDuration(req.ExpiresIn)
		if err != nil || d <= 0 {
			return repolock.Errorf(repolock.EInvalid, "expires_in must be a positive duration such as 72h")
		}
		in = d
	}
	u := Tenant(c)
	h, err := s.cfg.Locks.OfferHandover(c.Request().Context(), locks.OfferRequest{
		TenantID: u.ID, TenantName: u.Name, LockID: c.Param("id"), To: req.To, ExpiresIn: in,
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, h)
}

type handoversResponse struct {
	Received []locks.Handover `json:"received"`
	Offered  []locks.Handover `json:"offered"`
}

func (s *Server) listHandovers(c echo.Context) error {
	recv, sent, err := s.cfg.Locks.ListHandovers(c.Request().Context(), Tenant(c).ID, maxListed)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, handoversResponse{Received: recv, Offered: sent})
}

// acceptHandover: 200 with the move; 409 lock_in_use while the old owner
// still has references (listed).
func (s *Server) acceptHandover(c echo.Context) error {
	u := Tenant(c)
	tr, err := s.cfg.Locks.AcceptHandover(c.Request().Context(), u.ID, u.Name, c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, tr)
}

func (s *Server) declineHandover(c echo.Context) error {
	u := Tenant(c)
	if err := s.cfg.Locks.DeclineHandover(c.Request().Context(), u.ID, u.Name, c.Param("id")); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

func (s *Server) withdrawHandover(c echo.Context) error {
	u := Tenant(c)
	if err := s.cfg.Locks.WithdrawHandover(c.Request().Context(), u.ID, u.Name, c.Param("id")); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}
