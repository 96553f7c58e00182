// Package repolock holds the domain vocabulary shared by every part of the
// service: error codes and the Error type. Packages under internal/ return
// *Error values (or wrap them), the database layer maps Postgres error codes
// onto them once (internal/database), and the HTTP layer maps them onto status
// codes and JSON bodies once (internal/httpapi).
package repolock

import (
	"errors"
	"fmt"
)

// Code is a machine-readable error class. It is part of the HTTP API: the
// JSON error body carries it verbatim.
type Code string

const (
	EInvalid             Code = "invalid_argument"       // 400
	ESecretInField       Code = "secret_in_field"        // 400: a field that names or describes a credential holds a secret
	EUnauthenticated     Code = "unauthenticated"        // 401
	EForbidden           Code = "forbidden"              // 403
	ENotFound            Code = "not_found"              // 404
	EAlreadyExists       Code = "already_exists"         // 409
	EConflict            Code = "conflict"               // 409
	ERepositoryClaimed   Code = "repository_claimed"     // 409
	ERepositoryReserved  Code = "repository_reserved"    // 409: the key is under another tenant's reservation
	EReservationConflict Code = "reservation_conflict"   // 409: a new reservation covers other tenants' live locks
	EAliasConflict       Code = "alias_conflict"         // 409: an alias change would give a repository two owners
	ELeaseHeld           Code = "lease_held"             // 409: the key's lease is held by another acquisition
	EFenced              Code = "fenced"                 // 409: a newer fencing token was issued for the write's guarding key
	EGone                Code = "repository_deleting"    // 410
	ECursorExpired       Code = "cursor_expired"         // 410: a watch cursor older than the event retention
	EPrecondition        Code = "precondition_failed"    // 412
	EPayloadTooLarge     Code = "payload_too_large"      // 413
	EUnsupportedMedia    Code = "unsupported_media_type" // 415
	EUnavailable         Code = "unavailable"            // 503
	EInternal            Code = "internal"               // 500
	ETimeout             Code = "timeout"                // 504
	ETooManyRequests     Code = "too_many_requests"      // 429
	EMethodNotAllowed    Code = "method_not_allowed"     // 405
	ELockInUse           Code = "lock_in_use"            // 409: the lock's owner still has Applications or Credentials on it (listed)
	EHandoverPending     Code = "handover_pending"       // 409: the lock already has an open handover offer
	defaultInternalError      = "internal error"
)

// Error is the one error type of the domain. Message is safe to show to the
// caller; it must never contain SQL, stack traces or secrets. Details carries
// extra machine-readable fields (for example the owner of a claimed
// repository) and is copied into the JSON error body.
type Error struct {
	Code    Code
	Message string
	Details map[string]any
	// Err is the underlying cause, kept for logs and errors.Is/As; it is
	// never shown to API callers.
	Err error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// Is lets errors.Is(err, &repolock.Error{Code: X}) match on the code alone.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	return t.Code == e.Code && (t.Message == "" || t.Message == e.Message)
}

// Errorf returns an *Error with the given code and a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Wrap returns an *Error with the given code and message whose cause is err.
func Wrap(code Code, err error, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Err: err}
}

// ErrorCode returns the code of the first *Error in err's chain, or EInternal
// when there is none (and "" for a nil error).
func ErrorCode(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return EInternal
}

// ErrorMessage returns the caller-safe message of err: the message of the first
// *Error in its chain, or a generic text for anything else.
func ErrorMessage(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return defaultInternalError
}

// ErrorDetails returns the details of the first *Error in err's chain.
func ErrorDetails(err error) map[string]any {
	var e *Error
	if errors.As(err, &e) {
		return e.Details
	}
	return nil
}

// IsCode reports whether err carries the given code.
func IsCode(err error, code Code) bool { return err != nil && ErrorCode(err) == code }

// OpError records which operation an error came out of. It is transparent to
// errors.Is and errors.As (the *Error and its code stay reachable) and to the
// caller-safe ErrorMessage: only Error(), which goes to logs, names the
// operation.
type OpError struct {
	Op  string // "package.Function" or "package.Type.Method"
	Err error
}

func (e *OpError) Error() string { return e.Op + ": " + e.Err.Error() }

func (e *OpError) Unwrap() error { return e.Err }

// WrapOp wraps a non-nil *errp with the operation op. It is meant to be
// deferred on a named error result at the top of an exported function:
//
//	func Acquire(ctx context.Context, ...) (_ Lock, err error) {
//		defer repolock.WrapOp(&err, "locks.Acquire")
//		...
//	}
//
// An error that already carries op (a recursive call) is not wrapped again.
func WrapOp(errp *error, op string) {
	if *errp == nil {
		return
	}
	var oe *OpError
	if errors.As(*errp, &oe) && oe.Op == op {
		return
	}
	*errp = &OpError{Op: op, Err: *errp}
}

// Op returns the outermost operation recorded in err's chain, or "".
func Op(err error) string {
	var oe *OpError
	if errors.As(err, &oe) {
		return oe.Op
	}
	return ""
}

// WithoutOps returns err's text without the operation prefixes WrapOp added
// at the top of its chain: what a command-line user is shown.
func WithoutOps(err error) string {
	for {
		oe, ok := err.(*OpError)
		if !ok {
			return err.Error()
		}
		err = oe.Err
	}
}
