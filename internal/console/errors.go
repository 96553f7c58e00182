package console

import (
	"errors"
	"net/http"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/normalize"
)

func errBadRequest(msg string) error { return repolock.Errorf(repolock.EInvalid, "%s", msg) }

// statusOf is the HTTP status of an error shown on an HTML page. It follows
// the API's mapping (internal/httpapi statusByCode) for the codes the
// console can meet.
func statusOf(err error) int {
	if errors.Is(err, normalize.ErrInvalidURL) {
		return http.StatusBadRequest
	}
	switch repolock.ErrorCode(err) {
	case repolock.EInvalid:
		return http.StatusBadRequest
	case repolock.EUnauthenticated:
		return http.StatusUnauthorized
	case repolock.EForbidden:
		return http.StatusForbidden
	case repolock.ENotFound:
		return http.StatusNotFound
	case repolock.EAlreadyExists, repolock.EConflict, repolock.ERepositoryClaimed, repolock.ELockInUse, repolock.EHandoverPending,
		repolock.EReservationConflict:
		return http.StatusConflict
	case repolock.EPrecondition:
		return http.StatusPreconditionFailed
	case repolock.EUnavailable:
		return http.StatusServiceUnavailable
	case repolock.ETimeout:
		return http.StatusGatewayTimeout
	default:
		return http.StatusInternalServerError
	}
}
