package database

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"

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
	CodeCannotConnectNow     = "57P03"
)

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
	case CodeTooManyConnections, CodeAdminShutdown, CodeCannotConnectNow:
		return repolock.Wrap(repolock.EUnavailable, err, "the database is unavailable; try again")
	}
	// Class 08: connection exceptions.
	if c := PQCode(err); len(c) == 5 && c[:2] == "08" {
		return repolock.Wrap(repolock.EUnavailable, err, "the database is unavailable; try again")
	}
	if errors.Is(err, driver.ErrBadConn) {
		return repolock.Wrap(repolock.EUnavailable, err, "the database is unavailable; try again")
	}
	return err
}
