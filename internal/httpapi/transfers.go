package httpapi

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/locks"
)

// registerTransferRoutes registers transfers, handovers and the owner's
// view of denials (issue 25, internal/locks/transfer.go):
//
//	POST   /v1/admin/locks/:id/transfer  an admin moves a lock
//	GET    /v1/admin/locks/:id/denials   every denial on a lock (paginated)
//	GET    /v1/admin/handovers           every open offer (paginated)
//	DELETE /v1/admin/handovers/:id       an admin cancels an offer
//	GET    /v1/locks/:id/denials         the owner reads the denials on its lock (paginated)
//	POST   /v1/locks/:id/handover        the owner offers its lock
//	GET    /v1/handovers                 offers received and made (paginated; ?direction=)
//	POST   /v1/handovers/:id/accept      the recipient takes the lock
//	POST   /v1/handovers/:id/decline     the recipient refuses
//	DELETE /v1/handovers/:id             the owner withdraws
func (s *Server) registerTransferRoutes() {
	s.Admin.POST("/locks/:id/transfer", s.transferLock)
	s.Admin.GET("/locks/:id/denials", s.adminLockDenials)
	s.Admin.GET("/handovers", s.adminListHandovers)
	s.Admin.DELETE("/handovers/:id", s.cancelHandover)
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
	return s.denialsOf(c, Tenant(c).ID)
}

// adminLockDenials: every denial recorded on the lock, whoever owned it.
func (s *Server) adminLockDenials(c echo.Context) error {
	return s.denialsOf(c, "")
}

func (s *Server) denialsOf(c echo.Context, tenantID string) error {
	p, err := ParsePage(c)
	if err != nil {
		return err
	}
	ds, next, err := s.cfg.Locks.Denials(c.Request().Context(), tenantID, c.Param("id"), p.Size, p.Token)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ListResponse[locks.Denial]{Items: ds, NextPageToken: next})
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

// listHandovers: one page of the caller's open offers, received and made
// (?direction=received|offered: one side only).
func (s *Server) listHandovers(c echo.Context) error {
	p, err := ParsePage(c)
	if err != nil {
		return err
	}
	dir := c.QueryParam("direction")
	if dir != locks.HandoversReceived && dir != locks.HandoversOffered && dir != "" {
		return repolock.Errorf(repolock.EInvalid, "direction must be %q or %q", locks.HandoversReceived, locks.HandoversOffered)
	}
	return s.handoversPage(c, locks.HandoverFilter{TenantID: Tenant(c).ID, Direction: dir}, p)
}

// adminListHandovers: one page of every tenant's open offers.
func (s *Server) adminListHandovers(c echo.Context) error {
	p, err := ParsePage(c)
	if err != nil {
		return err
	}
	return s.handoversPage(c, locks.HandoverFilter{}, p)
}

func (s *Server) handoversPage(c echo.Context, f locks.HandoverFilter, p Page) error {
	hs, next, err := s.cfg.Locks.ListHandovers(c.Request().Context(), f, p.Size, p.Token)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ListResponse[locks.Handover]{Items: hs, NextPageToken: next})
}

// cancelHandover: an admin ends an open offer (204); 404 when it does not
// exist or expired.
func (s *Server) cancelHandover(c echo.Context) error {
	if _, err := s.cfg.Locks.CancelHandover(c.Request().Context(), c.Param("id"), locks.AdminActor(s.cfg.AdminToken)); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
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
