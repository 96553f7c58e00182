package database

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/lib/pq"

	"github.com/repolock/repolock"
)

// Postgres SQLSTATE codes the service reacts to.
const (
	CodeUniqueViolation      = "23505"
	CodeForeignKeyViolation  = "23503"
	CodeCheckViolation       = "23514"
	CodeNotNullViolation     = "23502"
	CodeExclusionViolation   = "23P01"
	CodeStringTooLong        = "22001"
	CodeInvalidText          = "22P02"
	CodeSerializationFailure = "40001"
	CodeDeadlockDetected     = "40P01"
	CodeLockNotAvailable     = "55P03"
	CodeQueryCanceled        = "57014"
	CodeTooManyConnections   = "53300"
	CodeAdminShutdown        = "57P01"
	CodeCrashShutdown        = "57P02"
	CodeCannotConnectNow     = "57P03"
	CodeReadOnlyTransaction  = "25006"
	CodeFeatureNotSupported  = "0A000"
)

// ErrCommitOutcomeUnknown marks a transaction whose connection was lost
// while its COMMIT was in flight: it may or may not have been applied.
var ErrCommitOutcomeUnknown = errors.New("the connection was lost during commit")

// UnknownOutcome marks the error of a write run outside a transaction
// (one autocommit statement): when the connection was lost after the
// statement may have reached the server, it may have been applied, as with
// a COMMIT in flight (ErrCommitOutcomeUnknown). Failures to connect, where
// nothing was sent, are returned as they are.
func UnknownOutcome(err error) error {
	if !IsConnectionError(err) || errors.Is(err, ErrCommitOutcomeUnknown) || notSent(err) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrCommitOutcomeUnknown, err)
}

// notSent reports connection errors that happen before anything is sent:
// dialing, and the server refusing the connection at startup.
func notSent(err error) bool {
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return true
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) || errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	switch PQCode(err) {
	case CodeTooManyConnections, CodeCannotConnectNow:
		return true
	}
	return OnStandby(err)
}

// OnStandby reports whether err is a standby refusing to write: 25006
// (read-only transaction: "cannot execute INSERT in a read-only
// transaction", "cannot execute ... during recovery"), or 0A000 with
// "during recovery" in its message: BEGIN READ WRITE on a standby answers
// "cannot set transaction read-write mode during recovery" with the
// generic feature-not-supported code, so only the message tells it apart
// (in English: a server with lc_messages set to another language gives
// such a BEGIN a 500, as before). The server reached is typically a node
// being promoted, that a proxy following Patroni's GET /primary already
// sends connections to (make test-patroni once met such a refusal through
// the proxy it runs, during the switch). Nothing was applied.
func OnStandby(err error) bool {
	var pqErr *pq.Error
	if !errors.As(err, &pqErr) {
		return false
	}
	switch pqErr.Code {
	case CodeReadOnlyTransaction:
		return true
	case CodeFeatureNotSupported:
		return strings.Contains(pqErr.Message, "during recovery")
	}
	return false
}

// IsConnectionError reports whether err means the database could not be
// reached or the connection to it was lost: dial errors and other network
// errors, resets, EOF from the driver, driver.ErrBadConn, SQLSTATE classes
// 08 (connection exception) and 57P01..57P03 (shutdown, cannot connect
// now), 53300 (too many connections), and a standby refusing to write
// (OnStandby: the statement was refused, so nothing was applied). Call it only on errors
// that come out of database calls (an io.EOF from a request body is not an
// outage).
func IsConnectionError(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNABORTED) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ETIMEDOUT) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, net.ErrClosed) || errors.Is(err, ErrCommitOutcomeUnknown) {
		return true
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		return true
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return true
	}
	if OnStandby(err) {
		return true
	}
	switch c := PQCode(err); {
	case c == CodeTooManyConnections, c == CodeAdminShutdown, c == CodeCrashShutdown, c == CodeCannotConnectNow:
		return true
	case len(c) == 5 && c[:2] == "08":
		return true
	case c != "":
		return false
	}
	return isProtocolDesync(err)
}

// protocolDesync are the messages lib/pq gives, as plain errors (no
// driver.ErrBadConn, no SQLSTATE), when a connection's protocol state is
// not what it expects: typically a session the server ended
// (pg_terminate_backend, a restart) that was read half-way. The connection
// is no longer usable, so they are connection errors; as plain errors they
// were answered 500 (seen once in about ten runs of the chaos suite, on a
// create under pg_terminate_backend).
var protocolDesync = []string{
	"unexpected transaction status",
	"unexpected command tag",
	"pq: unexpected message",
	"pq: unknown response for simple query",
	"pq: unexpected DataRow",
	"pq: unexpected describe",
	"pq: unexpected bind response",
	"pq: unexpected parse response",
}

func isProtocolDesync(err error) bool {
	msg := err.Error()
	for _, m := range protocolDesync {
		if strings.Contains(msg, m) {
			return true
		}
	}
	return false
}

// PQCode returns the SQLSTATE of the first *pq.Error in err's chain, or "".
func PQCode(err error) string {
	var pqErr *pq.Error
	if errors.As(err, &pqErr) {
		return string(pqErr.Code)
	}
	return ""
}

// Constraint returns the constraint name of the first *pq.Error in err's
// chain, or "".
func Constraint(err error) string {
	var pqErr *pq.Error
	if errors.As(err, &pqErr) {
		return pqErr.Constraint
	}
	return ""
}

// IsRetryable reports whether err is a serialization failure or a deadlock,
// after which the whole transaction may be run again.
func IsRetryable(err error) bool {
	switch PQCode(err) {
	case CodeSerializationFailure, CodeDeadlockDetected:
		return true
	}
	return false
}

// MapError is the single place where database errors become domain errors.
// Errors that already are *repolock.Error pass through unchanged; nil stays
// nil. The original error is kept as the cause (for logs), never in the
// message.
func MapError(err error) error {
	if err == nil {
		return nil
	}
	var de *repolock.Error
	if errors.As(err, &de) {
		return err
	}
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return repolock.Wrap(repolock.ENotFound, err, "not found")
	case errors.Is(err, context.Canceled):
		return err
	case errors.Is(err, context.DeadlineExceeded):
		return repolock.Wrap(repolock.ETimeout, err, "the operation timed out")
	}
	if errors.Is(err, ErrCommitOutcomeUnknown) {
		e := repolock.Wrap(repolock.EUnavailable, err,
			"the database connection was lost while committing: the outcome is unknown; re-read before retrying")
		e.Details = map[string]any{"outcome": "unknown"}
		return e
	}
	if IsConnectionError(err) {
		return repolock.Wrap(repolock.EUnavailable, err, "the database is unavailable; try again")
	}
	switch PQCode(err) {
	case CodeUniqueViolation, CodeExclusionViolation:
		return repolock.Wrap(repolock.EAlreadyExists, err, "already exists")
	case CodeForeignKeyViolation:
		return repolock.Wrap(repolock.EConflict, err, "the change conflicts with rows that reference or are referenced by it")
	case CodeCheckViolation, CodeNotNullViolation, CodeInvalidText:
		return repolock.Wrap(repolock.EInvalid, err, "a value is not valid")
	case CodeStringTooLong:
		return repolock.Wrap(repolock.EInvalid, err, "a value is too long")
	case CodeSerializationFailure, CodeDeadlockDetected, CodeLockNotAvailable:
		return repolock.Wrap(repolock.EConflict, err, "the change conflicted with a concurrent change; try again")
	case CodeQueryCanceled:
		return repolock.Wrap(repolock.ETimeout, err, "the operation timed out")
	}
	return err
}
