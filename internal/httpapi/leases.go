package httpapi

import (
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/leases"
)

// registerLeaseRoutes registers the tenant's leases (internal/leases).
func (s *Server) registerLeaseRoutes() {
	t := tenantRoutes{s}
	t.add(http.MethodPost, "/leases", s.acquireLease)
	t.add(http.MethodGet, "/leases", s.listLeases)
	t.add(http.MethodPost, "/leases/:id/keepalive", s.keepaliveLease)
	t.add(http.MethodDelete, "/leases/:id", s.releaseLease)
}

type acquireLeaseRequest struct {
	Key    string `json:"key"`
	TTL    string `json:"ttl"`
	Wait   string `json:"wait"`
	Holder string `json:"holder"`
}

// leaseResponse is a lease as the API shows it: ttl as a Go duration
// string, the times by the database's clock.
type leaseResponse struct {
	leases.Lease
	TTL string `json:"ttl"`
}

func leaseJSON(l leases.Lease) leaseResponse { return leaseResponse{Lease: l, TTL: l.TTL().String()} }

func parseLeaseDuration(field, v string, required bool) (time.Duration, error) {
	if v == "" {
		if required {
			return 0, repolock.Errorf(repolock.EInvalid, "%s is required (a duration such as 15s)", field)
		}
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, repolock.Errorf(repolock.EInvalid, "%s must be a duration with a unit, such as 15s or 500ms", field)
	}
	return d, nil
}

// acquireLease: POST /v1/leases. 201 with the lease, 409 lease_held when
// the key is still held at the end of the wait, 409 repository_claimed for
// a repository another tenant owns. The wait must end before the request
// times out.
func (s *Server) acquireLease(c echo.Context) error {
	var req acquireLeaseRequest
	if err := DecodeJSON(c, &req); err != nil {
		return err
	}
	ttl, err := parseLeaseDuration("ttl", req.TTL, true)
	if err != nil {
		return err
	}
	wait, err := parseLeaseDuration("wait", req.Wait, false)
	if err != nil {
		return err
	}
	if wait >= s.cfg.RequestTimeout {
		return repolock.Errorf(repolock.EInvalid, "wait must be shorter than the server's request timeout (%s)", s.cfg.RequestTimeout)
	}
	l, err := s.cfg.Leases.Acquire(c.Request().Context(), Tenant(c).ID,
		leases.AcquireRequest{Key: req.Key, TTL: ttl, Wait: wait, Holder: req.Holder})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, leaseJSON(l))
}

func (s *Server) keepaliveLease(c echo.Context) error {
	l, err := s.cfg.Leases.Keepalive(c.Request().Context(), Tenant(c).ID, c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, leaseJSON(l))
}

func (s *Server) releaseLease(c echo.Context) error {
	if err := s.cfg.Leases.Release(c.Request().Context(), Tenant(c).ID, c.Param("id")); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// listLeases: GET /v1/leases?key_prefix=&page_size=&page_token=, the
// tenant's valid leases by key.
func (s *Server) listLeases(c echo.Context) error {
	p, err := ParsePage(c)
	if err != nil {
		return err
	}
	items, next, err := s.cfg.Leases.List(c.Request().Context(), Tenant(c).ID, c.QueryParam("key_prefix"), p.Size, p.Token)
	if err != nil {
		return err
	}
	out := make([]leaseResponse, len(items))
	for i, l := range items {
		out[i] = leaseJSON(l)
	}
	return c.JSON(http.StatusOK, ListResponse[leaseResponse]{Items: out, NextPageToken: next})
}

// FencingTokenHeader carries a lease's fencing token on a guarded write.
const FencingTokenHeader = "Repolock-Fencing-Token"

// fencingToken is the guarded write's token: the Repolock-Fencing-Token
// header or the body's fencing_token (body nil: the route has no body
// field); 0 when neither is given. Both given must agree.
func fencingToken(c echo.Context, body *int64) (int64, error) {
	var token int64
	if v := c.Request().Header.Get(FencingTokenHeader); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return 0, repolock.Errorf(repolock.EInvalid, "%s must be a positive 64-bit integer", FencingTokenHeader)
		}
		token = n
	}
	if body != nil {
		if *body < 1 {
			return 0, repolock.Errorf(repolock.EInvalid, "fencing_token must be a positive 64-bit integer")
		}
		if token != 0 && token != *body {
			return 0, repolock.Errorf(repolock.EInvalid, "fencing_token and the %s header differ", FencingTokenHeader)
		}
		token = *body
	}
	return token, nil
}
