package httpapi

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/locks"
	"github.com/repolock/repolock/internal/normalize"
)

// registerReservationRoutes registers the admin routes of reservations
// (locks.Service: Reserve, ListReservations, Unreserve):
//
//	GET    /v1/admin/reservations      one page of them
//	POST   /v1/admin/reservations      reserve a prefix ({"prefix","tenant","existing"}; ?dry_run=true)
//	DELETE /v1/admin/reservations/:id  remove one
func (s *Server) registerReservationRoutes() {
	s.Admin.GET("/reservations", s.listReservations)
	s.Admin.POST("/reservations", s.createReservation)
	s.Admin.DELETE("/reservations/:id", s.deleteReservation)
}

func (s *Server) listReservations(c echo.Context) error {
	p, err := ParsePage(c)
	if err != nil {
		return err
	}
	rs, next, err := s.cfg.Locks.ListReservations(c.Request().Context(), p.Size, p.Token)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ListResponse[locks.Reservation]{Items: rs, NextPageToken: next})
}

type reservationRequest struct {
	Prefix   string `json:"prefix"`
	Tenant   string `json:"tenant"`
	Existing string `json:"existing"`
}

type reservationDryRun struct {
	Prefix normalize.Key       `json:"prefix"`
	Locks  []locks.CoveredLock `json:"locks"`
}

type createdReservation struct {
	Reservation   locks.Reservation   `json:"reservation"`
	Grandfathered []locks.CoveredLock `json:"grandfathered"`
}

// createReservation reserves a prefix: 201 with the reservation and the
// locks it grandfathered, 409 reservation_conflict listing other tenants'
// live locks under it (unless "existing":"keep"), or with ?dry_run=true
// 200 with those locks (nothing changed).
func (s *Server) createReservation(c echo.Context) error {
	dryRun, err := ParseBool(c, "dry_run")
	if err != nil {
		return err
	}
	var req reservationRequest
	if err := DecodeJSON(c, &req); err != nil {
		return err
	}
	keep := false
	switch req.Existing {
	case "", "refuse":
	case "keep":
		keep = true
	default:
		return repolock.Errorf(repolock.EInvalid, `existing must be "refuse" or "keep"`)
	}
	r, covered, err := s.cfg.Locks.Reserve(c.Request().Context(), locks.ReserveRequest{
		Prefix: req.Prefix, Tenant: req.Tenant, Keep: keep, DryRun: dryRun,
	})
	if err != nil {
		return err
	}
	if dryRun {
		return c.JSON(http.StatusOK, reservationDryRun{Prefix: r.Prefix, Locks: covered})
	}
	return c.JSON(http.StatusCreated, createdReservation{Reservation: r, Grandfathered: covered})
}

func (s *Server) deleteReservation(c echo.Context) error {
	if err := s.cfg.Locks.Unreserve(c.Request().Context(), c.Param("id")); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}
