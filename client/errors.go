package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Code is an error code of the API's one error shape.
type Code string

// The error codes (the ErrorCode enum of the document).
const (
	CodeInvalidArgument      Code = "invalid_argument"       // 400
	CodeSecretInField        Code = "secret_in_field"        // 400: a credential field holds a secret
	CodeUnauthenticated      Code = "unauthenticated"        // 401
	CodeForbidden            Code = "forbidden"              // 403
	CodeNotFound             Code = "not_found"              // 404
	CodeMethodNotAllowed     Code = "method_not_allowed"     // 405
	CodeAlreadyExists        Code = "already_exists"         // 409
	CodeConflict             Code = "conflict"               // 409
	CodeRepositoryClaimed    Code = "repository_claimed"     // 409
	CodeRepositoryReserved   Code = "repository_reserved"    // 409
	CodeReservationConflict  Code = "reservation_conflict"   // 409
	CodeAliasConflict        Code = "alias_conflict"         // 409
	CodeLeaseHeld            Code = "lease_held"             // 409
	CodeFenced               Code = "fenced"                 // 409
	CodeLockInUse            Code = "lock_in_use"            // 409: the owner still has references on the lock ("references")
	CodeHandoverPending      Code = "handover_pending"       // 409: the lock already has an open handover offer
	CodeRepositoryDeleting   Code = "repository_deleting"    // 410
	CodeCursorExpired        Code = "cursor_expired"         // 410: list again, watch from a new cursor
	CodePreconditionFailed   Code = "precondition_failed"    // 412
	CodePayloadTooLarge      Code = "payload_too_large"      // 413
	CodeUnsupportedMediaType Code = "unsupported_media_type" // 415
	CodeTooManyRequests      Code = "too_many_requests"      // 429
	CodeInternal             Code = "internal"               // 500
	CodeUnavailable          Code = "unavailable"            // 503
	CodeTimeout              Code = "timeout"                // 504
)

// Error is an error answered by the server:
// {"error":{"code":"...","message":"...", ...details}}.
type Error struct {
	StatusCode int
	Code       Code
	Message    string
	// Details holds the other fields of the error object ("owner" of
	// repository_claimed, "valid_names" of an unknown report...).
	Details map[string]any
	// RequestID is the response's X-Request-ID (the server logs it).
	RequestID string
	// RetryAfter is the response's Retry-After, 0 when absent.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	return fmt.Sprintf("repolock: %d %s: %s", e.StatusCode, e.Code, e.Message)
}

// OutcomeUnknown reports a 503 whose change may have been applied: the
// server lost its database connection while committing it. Re-read before
// retrying a create.
func (e *Error) OutcomeUnknown() bool {
	s, _ := e.Details["outcome"].(string)
	return s == "unknown"
}

// Owner is the tenant named by a repository_claimed error ("" otherwise).
func (e *Error) Owner() string {
	s, _ := e.Details["owner"].(string)
	return s
}

// References are the references a lock_in_use error lists (at most 100;
// ReferenceCount says how many there are in all). ok is false for any
// other error.
func (e *Error) References() (refs []LockReference, ok bool) {
	if e.Code != CodeLockInUse {
		return nil, false
	}
	refs = []LockReference{}
	e.detail("references", &refs)
	return refs, true
}

// AliasConflicts are the problems listed by an alias_conflict error:
// every reference the alias change would put on a key another tenant holds
// or gets (conflicts) and every reference whose URL its rules reject
// (rejected). ok is false for any other error.
func (e *Error) AliasConflicts() (conflicts, rejected []RekeyProblem, ok bool) {
	if e.Code != CodeAliasConflict {
		return nil, nil, false
	}
	conflicts, rejected = []RekeyProblem{}, []RekeyProblem{}
	e.detail("conflicts", &conflicts)
	e.detail("rejected", &rejected)
	return conflicts, rejected, true
}

// Progress is the report of a re-key run (RunRekey) that failed after
// some batches: what it did, which stays done. ok is false when the error
// carries none.
func (e *Error) Progress() (rep RekeyReport, ok bool) {
	return rep, e.detail("progress", &rep)
}

// ReservationConflicts are the locks listed by a reservation_conflict
// error (at most 100) and how many there are in all. ok is false for any
// other error.
func (e *Error) ReservationConflicts() (locks []CoveredLock, total int, ok bool) {
	if e.Code != CodeReservationConflict {
		return nil, 0, false
	}
	e.detail("locks", &locks)
	e.detail("total", &total)
	return locks, total, true
}

// detail decodes the detail key into out.
func (e *Error) detail(key string, out any) bool {
	v, ok := e.Details[key]
	if !ok {
		return false
	}
	b, err := json.Marshal(v)
	return err == nil && json.Unmarshal(b, out) == nil
}

func newError(resp *http.Response, body []byte) *Error {
	e := &Error{
		StatusCode: resp.StatusCode,
		RequestID:  resp.Header.Get("X-Request-ID"),
		RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()),
	}
	var shape struct {
		Error map[string]any `json:"error"`
	}
	if json.Unmarshal(body, &shape) == nil && shape.Error != nil {
		for k, v := range shape.Error {
			switch k {
			case "code":
				s, _ := v.(string)
				e.Code = Code(s)
			case "message":
				e.Message, _ = v.(string)
			default:
				if e.Details == nil {
					e.Details = map[string]any{}
				}
				e.Details[k] = v
			}
		}
	}
	if e.Code == "" {
		// Not the API's shape (a proxy's page, a HEAD response...).
		e.Code = codeOfStatus(resp.StatusCode)
		if e.Message == "" {
			e.Message = http.StatusText(resp.StatusCode)
		}
	}
	return e
}

func codeOfStatus(status int) Code {
	switch status {
	case 400:
		return CodeInvalidArgument
	case 401:
		return CodeUnauthenticated
	case 403:
		return CodeForbidden
	case 404:
		return CodeNotFound
	case 405:
		return CodeMethodNotAllowed
	case 409:
		return CodeConflict
	case 410:
		return CodeRepositoryDeleting
	case 412:
		return CodePreconditionFailed
	case 413:
		return CodePayloadTooLarge
	case 415:
		return CodeUnsupportedMediaType
	case 429:
		return CodeTooManyRequests
	case 503:
		return CodeUnavailable
	case 504:
		return CodeTimeout
	}
	return CodeInternal
}

// IsCode reports whether err is (or wraps) an *Error with the code.
func IsCode(err error, code Code) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// ClaimedBy returns the owner named by a repository_claimed error.
func ClaimedBy(err error) (owner string, ok bool) {
	var e *Error
	if errors.As(err, &e) && e.Code == CodeRepositoryClaimed {
		return e.Owner(), true
	}
	return "", false
}

// IsClaimed: another tenant owns the repository URL (409 repository_claimed).
func IsClaimed(err error) bool { return IsCode(err, CodeRepositoryClaimed) }

// IsReserved: the repository URL is under another tenant's reservation
// (409 repository_reserved); Reserved names the tenant and the prefix.
func IsReserved(err error) bool { return IsCode(err, CodeRepositoryReserved) }

// Reserved returns the tenant and the prefix of the reservation named by a
// repository_reserved error.
func Reserved(err error) (tenant, prefix string, ok bool) {
	var e *Error
	if errors.As(err, &e) && e.Code == CodeRepositoryReserved {
		tenant, _ = e.Details["tenant"].(string)
		prefix, _ = e.Details["prefix"].(string)
		return tenant, prefix, true
	}
	return "", "", false
}

// IsReservationConflict: a new reservation covers other tenants' live
// locks (409 reservation_conflict); nothing was changed.
// Error.ReservationConflicts lists them.
func IsReservationConflict(err error) bool { return IsCode(err, CodeReservationConflict) }

// IsLeaseHeld: the key's lease is held by another acquisition (409
// lease_held), at once or at the end of the wait.
func IsLeaseHeld(err error) bool { return IsCode(err, CodeLeaseHeld) }

// IsFenced: a guarded write was refused because a newer fencing token was
// issued for its guarding key (409 fenced): the writer's lease is lost.
func IsFenced(err error) bool { return IsCode(err, CodeFenced) }

// IsAliasConflict: an alias change was refused because it would give a
// repository two owners or leave a reference its rules reject (409
// alias_conflict); nothing was changed. Error.AliasConflicts lists why.
func IsAliasConflict(err error) bool { return IsCode(err, CodeAliasConflict) }

// IsNotFound: no such resource, or not the caller's (404).
func IsNotFound(err error) bool { return IsCode(err, CodeNotFound) }

// IsAlreadyExists: the name is taken (409 already_exists).
func IsAlreadyExists(err error) bool { return IsCode(err, CodeAlreadyExists) }

// IsConflict: a concurrent change won; retrying may succeed (409 conflict).
func IsConflict(err error) bool { return IsCode(err, CodeConflict) }

// IsInvalid: the request was refused as bad input (400).
func IsInvalid(err error) bool { return IsCode(err, CodeInvalidArgument) }

// IsUnauthenticated: no token, or an unknown or revoked one (401).
func IsUnauthenticated(err error) bool { return IsCode(err, CodeUnauthenticated) }

// IsForbidden: a token of the wrong kind (403).
func IsForbidden(err error) bool { return IsCode(err, CodeForbidden) }

// IsPreconditionFailed: an expected value did not match (412).
func IsPreconditionFailed(err error) bool { return IsCode(err, CodePreconditionFailed) }

// IsCursorExpired reports a cursor_expired error (410): the watch cursor
// is older than the server's event retention. List again and watch from
// a new cursor (docs/watch.md).
func IsCursorExpired(err error) bool { return IsCode(err, CodeCursorExpired) }

// IsDeleting: the repository is being deleted (410).
func IsDeleting(err error) bool { return IsCode(err, CodeRepositoryDeleting) }

// IsOutcomeUnknown: a 503 after which the change may or may not have been
// applied (the connection to the database was lost during its commit).
func IsOutcomeUnknown(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.OutcomeUnknown()
}

// IsUnavailable: the server or its database is unavailable (503), or asks
// to slow down (429); both are worth retrying later.
func IsUnavailable(err error) bool {
	return IsCode(err, CodeUnavailable) || IsCode(err, CodeTooManyRequests)
}
