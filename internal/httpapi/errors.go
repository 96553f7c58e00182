package httpapi

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
)

// RetryAfterSeconds is the Retry-After of every 503: short, since a
// replica reconnects within a second of the database's return.
const RetryAfterSeconds = "1"

// statusByCode is the single mapping from domain error codes to HTTP status.
var statusByCode = map[repolock.Code]int{
	repolock.EInvalid:             http.StatusBadRequest,
	repolock.ESecretInField:       http.StatusBadRequest,
	repolock.EUnauthenticated:     http.StatusUnauthorized,
	repolock.EForbidden:           http.StatusForbidden,
	repolock.ENotFound:            http.StatusNotFound,
	repolock.EMethodNotAllowed:    http.StatusMethodNotAllowed,
	repolock.EAlreadyExists:       http.StatusConflict,
	repolock.EConflict:            http.StatusConflict,
	repolock.ERepositoryClaimed:   http.StatusConflict,
	repolock.ERepositoryReserved:  http.StatusConflict,
	repolock.EReservationConflict: http.StatusConflict,
	repolock.EAliasConflict:       http.StatusConflict,
	repolock.ELeaseHeld:           http.StatusConflict,
	repolock.EFenced:              http.StatusConflict,
	repolock.ELockInUse:           http.StatusConflict,
	repolock.EHandoverPending:     http.StatusConflict,
	repolock.EGone:                http.StatusGone,
	repolock.ECursorExpired:       http.StatusGone,
	repolock.EPrecondition:        http.StatusPreconditionFailed,
	repolock.EPayloadTooLarge:     http.StatusRequestEntityTooLarge,
	repolock.EUnsupportedMedia:    http.StatusUnsupportedMediaType,
	repolock.ETooManyRequests:     http.StatusTooManyRequests,
	repolock.EInternal:            http.StatusInternalServerError,
	repolock.EUnavailable:         http.StatusServiceUnavailable,
	repolock.ETimeout:             http.StatusGatewayTimeout,
}

// codeByStatus maps Echo's own errors (unknown route, wrong method...) back
// onto the vocabulary.
var codeByStatus = map[int]repolock.Code{
	http.StatusBadRequest:            repolock.EInvalid,
	http.StatusUnauthorized:          repolock.EUnauthenticated,
	http.StatusForbidden:             repolock.EForbidden,
	http.StatusNotFound:              repolock.ENotFound,
	http.StatusMethodNotAllowed:      repolock.EMethodNotAllowed,
	http.StatusConflict:              repolock.EConflict,
	http.StatusRequestEntityTooLarge: repolock.EPayloadTooLarge,
	http.StatusUnsupportedMediaType:  repolock.EUnsupportedMedia,
	http.StatusServiceUnavailable:    repolock.EUnavailable,
	http.StatusTooManyRequests:       repolock.ETooManyRequests,
}

// allowedMethods lists the methods that have a real (not catch-all) route for
// the request's path: the path the router routed (the escaped one when the
// request has escapes Go would not produce itself, echo.GetPath), so that
// Allow names only methods that would really be served.
func (s *Server) allowedMethods(c echo.Context) []string {
	var allowed []string
	path := echo.GetPath(c.Request())
	// Only a registered route of that method counts: a group's catch-all
	// (its prefix, and prefix/*) is registered for no method, and
	// answers 404 whatever the method.
	registered := map[string]bool{}
	for _, r := range s.Echo.Routes() {
		registered[r.Method+" "+r.Path] = true
	}
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if m == c.Request().Method {
			continue
		}
		probe := s.Echo.NewContext(c.Request(), nil)
		s.Echo.Router().Find(m, path, probe)
		// The router marks a path that matched without this method with
		// the Allow key (and answers 405); only a real match counts.
		if p := probe.Path(); p != "" && !strings.HasSuffix(p, "*") && probe.Get(echo.ContextKeyHeaderAllow) == nil &&
			registered[m+" "+p] {
			allowed = append(allowed, m)
		}
	}
	return allowed
}

// methodNotAllowedMessage is the one message of every 405.
func methodNotAllowedMessage(method string, allowed []string) string {
	return "method " + methodLabel(method) + " is not allowed here; allowed: " + strings.Join(allowed, ", ")
}

// StatusFor returns the HTTP status of a domain error code.
func StatusFor(code repolock.Code) int {
	if st, ok := statusByCode[code]; ok {
		return st
	}
	return http.StatusInternalServerError
}

// ErrorBody is the JSON shape of every error response:
// {"error":{"code":"...","message":"...", ...details}}.
type ErrorBody struct {
	Error map[string]any `json:"error"`
}

// StatusClientClosedRequest is the status recorded for a request whose
// client went away before the answer (no answer is sent).
const StatusClientClosedRequest = 499

// ctxKeyClient holds the request's context as the server received it,
// before the request timeout wrapped it (Server.timeout).
const ctxKeyClient = "repolock.client_context"

// clientGone reports whether the request's client went away: its own
// context (not the request timeout's, which also ends when a handler
// panics past it) is cancelled.
func clientGone(c echo.Context) bool {
	ctx := c.Request().Context()
	if cc, ok := c.Get(ctxKeyClient).(context.Context); ok {
		ctx = cc
	}
	return errors.Is(ctx.Err(), context.Canceled)
}

// handleError is Echo's error handler: every error of every route goes
// through here and leaves as one JSON shape. Internal errors are logged with
// their cause and answered with a generic message.
func (s *Server) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	var (
		status  int
		code    repolock.Code
		message string
		details map[string]any
		he      *echo.HTTPError
	)
	switch {
	case errors.As(err, &he):
		status = he.Code
		code = codeByStatus[status]
		if code == "" {
			code = repolock.EInternal
		}
		message = http.StatusText(status)
		if m, ok := he.Message.(string); ok && status < 500 {
			message = m
		}
		if status == http.StatusNotFound && he == echo.ErrNotFound {
			message = "no such route"
		}
		// Echo answers 404 for a wrong method on a route that exists
		// (group middleware registers catch-all routes) and 405 with its
		// own text otherwise: both leave as one 405 shape.
		if (status == http.StatusNotFound && he == echo.ErrNotFound) || status == http.StatusMethodNotAllowed {
			if allowed := s.allowedMethods(c); len(allowed) > 0 {
				status, code = http.StatusMethodNotAllowed, repolock.EMethodNotAllowed
				message = methodNotAllowedMessage(c.Request().Method, allowed)
				c.Response().Header().Set(echo.HeaderAllow, strings.Join(allowed, ", "))
			}
		}
	case clientGone(c):
		// The client went away: whatever the error says (a cancelled
		// statement, a context error), nobody reads an answer, and the
		// server did nothing wrong. 499 (nginx's "client closed request") keeps
		// it out of the 5xx figures, the alerts and the error log; the
		// access log and repolock_http_requests_total still show it.
		c.Response().WriteHeader(StatusClientClosedRequest)
		return
	case errors.Is(err, context.DeadlineExceeded):
		code, status, message = repolock.ETimeout, http.StatusGatewayTimeout, "the request timed out"
		// Keep the details of a domain error around the timeout: a re-key
		// run that timed out after some batches says how far it got
		// (progress).
		details = repolock.ErrorDetails(err)
	default:
		if repolock.ErrorCode(err) == repolock.EInternal && database.IsConnectionError(err) &&
			!errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			// A database error a domain package forgot to map: an
			// outage is never a 500. (EOF is left out: it may come
			// from a request body; the driver reports a lost
			// connection as driver.ErrBadConn or a network error.)
			err = database.MapError(err)
		}
		code = repolock.ErrorCode(err)
		status = StatusFor(code)
		message = repolock.ErrorMessage(err)
		details = repolock.ErrorDetails(err)
		if code == repolock.EInternal {
			message = "internal error"
			details = nil
		}
	}
	if status == http.StatusServiceUnavailable {
		// Every 503 says when to come back (docs/operations.md).
		c.Response().Header().Set("Retry-After", RetryAfterSeconds)
	}
	if status >= 500 {
		s.Logger.ErrorContext(c.Request().Context(), "request failed",
			"op", repolock.Op(err), "error", err.Error(), "request_id", requestID(c), "method", c.Request().Method, "route", c.Path())
	}
	body := map[string]any{}
	for k, v := range details {
		body[k] = v
	}
	body["code"] = string(code)
	body["message"] = message
	if c.Request().Method == http.MethodHead {
		_ = c.NoContent(status)
		return
	}
	_ = c.JSON(status, ErrorBody{Error: body})
}
