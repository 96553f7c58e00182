package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/authguard"
	"github.com/repolock/repolock/internal/tenants"
)

const ctxKeyTenant = "repolock.tenant"

type tenantValue = tenants.Tenant

// bearerToken returns the token of an "Authorization: Bearer" header.
func bearerToken(c echo.Context) (string, error) {
	h := c.Request().Header.Get(echo.HeaderAuthorization)
	if h == "" {
		return "", repolock.Errorf(repolock.EUnauthenticated, "missing Authorization: Bearer token")
	}
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return "", repolock.Errorf(repolock.EUnauthenticated, "Authorization header must be 'Bearer <token>'")
	}
	return strings.TrimSpace(token), nil
}

// guardedBearer is bearerToken behind the failure throttle
// (internal/authguard): a client address that has spent its budget of
// failed authentications gets 429 too_many_requests with Retry-After, the
// correct token included, before anything is checked.
func (s *Server) guardedBearer(c echo.Context) (string, error) {
	addr := authguard.ClientAddr(c.Request(), s.cfg.TrustForwardedFor)
	if wait, blocked := s.cfg.AuthGuard.Blocked(addr, time.Now()); blocked {
		return "", tooManyFailures(c, wait)
	}
	return bearerToken(c)
}

// authFailed counts a failed authentication (an unauthenticated error; any
// other error, such as the database being down, is returned as it is).
// Within the address's and the global budgets the answer stays 401; beyond
// either, 429 with Retry-After. A correct token never reaches here, so the
// global budget never refuses it.
func (s *Server) authFailed(c echo.Context, err error) error {
	if !repolock.IsCode(err, repolock.EUnauthenticated) {
		return err
	}
	addr := authguard.ClientAddr(c.Request(), s.cfg.TrustForwardedFor)
	if wait := s.cfg.AuthGuard.Failed(addr, time.Now()); wait > 0 {
		return tooManyFailures(c, wait)
	}
	return err
}

func tooManyFailures(c echo.Context, wait time.Duration) error {
	secs := authguard.RetryAfter(wait)
	c.Response().Header().Set("Retry-After", strconv.Itoa(secs))
	return repolock.Errorf(repolock.ETooManyRequests, "too many failed authentications; retry after %d s", secs)
}

// isAdminToken compares in constant time (over SHA-256 digests, so the
// lengths do not leak either).
func (s *Server) isAdminToken(token string) bool {
	a := sha256.Sum256([]byte(token))
	b := sha256.Sum256([]byte(s.cfg.AdminToken))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// requireTenant authenticates a tenant token. The admin token is not a
// tenant: it gets 403 on tenant routes.
func (s *Server) requireTenant(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		token, err := s.guardedBearer(c)
		if err != nil {
			return err
		}
		if s.isAdminToken(token) {
			return repolock.Errorf(repolock.EForbidden, "the admin token cannot act as a tenant; use a tenant token")
		}
		u, err := s.cfg.Tenants.Authenticate(c.Request().Context(), token)
		if err != nil {
			return s.authFailed(c, err)
		}
		c.Set(ctxKeyTenant, u)
		return s.admitTenant(c, u.ID, next)
	}
}

// requireAdmin lets only the admin token through; a valid tenant token gets
// 403, anything else 401.
func (s *Server) requireAdmin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		token, err := s.guardedBearer(c)
		if err != nil {
			return err
		}
		if s.isAdminToken(token) {
			return s.admitAdmin(c, next)
		}
		_, err = s.cfg.Tenants.Authenticate(c.Request().Context(), token)
		switch {
		case err == nil:
			return repolock.Errorf(repolock.EForbidden, "admin routes need the admin token")
		case repolock.IsCode(err, repolock.EUnauthenticated):
			return s.authFailed(c, repolock.Errorf(repolock.EUnauthenticated, "invalid or revoked token"))
		default:
			return err
		}
	}
}

// requireAnyToken accepts a tenant token or the admin token.
func (s *Server) requireAnyToken(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		token, err := s.guardedBearer(c)
		if err != nil {
			return err
		}
		if s.isAdminToken(token) {
			return s.admitAdmin(c, next)
		}
		u, err := s.cfg.Tenants.Authenticate(c.Request().Context(), token)
		if err != nil {
			return s.authFailed(c, err)
		}
		c.Set(ctxKeyTenant, u)
		return s.admitTenant(c, u.ID, next)
	}
}

// Tenant returns the authenticated tenant of a request on a V1 route.
func Tenant(c echo.Context) tenants.Tenant {
	u, _ := c.Get(ctxKeyTenant).(tenants.Tenant)
	return u
}

// tenantRoutes adds routes under /v1 with the tenant authentication as route
// middleware (not as a group's, which would also catch unmatched paths).
type tenantRoutes struct{ s *Server }

func (t tenantRoutes) add(method, path string, h echo.HandlerFunc) {
	t.s.V1.Add(method, path, h, t.s.requireTenant)
}
