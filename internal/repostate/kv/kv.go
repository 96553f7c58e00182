// Package kv is a small key-value store interface with optimistic
// concurrency, and its Postgres implementation (one table, see
// db/migrations/000003_repostate.up.sql).
//
// Data lives in partitions; a partition is an independent, byte-ordered key
// space. Every write is a single statement: there are no transactions across
// keys, so callers that need multi-key invariants build them from SetIf (see
// internal/repostate).
//
// The conformance suite every implementation must pass is kvtest.Run.
package kv

import (
	"context"
	"errors"
	"iter"

	"github.com/repolock/repolock"
)

// Errors. Implementations return these (possibly wrapped); test with
// errors.Is.
var (
	// ErrNotFound: Get of a key that does not exist.
	ErrNotFound = errors.New("kv: not found")
	// ErrPredicateFailed: SetIf or DeleteIf whose predicate did not hold (a
	// nil predicate and the key exists; a predicate from Get and the key has
	// changed or was deleted since).
	ErrPredicateFailed = errors.New("kv: predicate failed")
	// ErrMissingPartitionKey: an empty or nil partition key.
	ErrMissingPartitionKey = errors.New("kv: missing partition key")
	// ErrMissingKey: an empty or nil key.
	ErrMissingKey = errors.New("kv: missing key")
	// ErrMissingValue: a nil value. An empty, non-nil value is allowed.
	ErrMissingValue = errors.New("kv: missing value")
	// ErrMissingPredicate: DeleteIf without a predicate.
	ErrMissingPredicate = errors.New("kv: missing predicate")
	// ErrInvalidPredicate: a predicate that this store did not hand out.
	ErrInvalidPredicate = errors.New("kv: predicate was not returned by this store")
	// ErrKeyTooLong: len(partitionKey)+len(key) is over MaxKeyBytes. It is
	// an invalid-argument error (errors.Is(err, &repolock.Error{Code:
	// repolock.EInvalid}) holds, so the API answers 400), returned before
	// any statement runs, by Get, Set, SetIf, Delete and DeleteIf alike: a
	// key that could never be written is not looked up either.
	ErrKeyTooLong = &repolock.Error{Code: repolock.EInvalid, Message: "kv: partition key plus key is longer than 2560 bytes"}
)

// MaxKeyBytes is the most bytes len(partitionKey)+len(key) may have.
//
// Both are columns of the kv table's primary-key btree, and a btree tuple on
// 8 KiB pages holds at most 2704 bytes (BTMaxItemSize); beyond it Postgres
// fails the write with 54000 "index row size exceeds btree maximum". The
// tuple is an 8-byte header plus two bytea values with a 4-byte length
// header each (1 byte when short), each padded to 4 bytes: 8+4+3+4+3 = 22
// bytes of overhead in the worst case, so 2682 bytes of key data always
// fit, even incompressible. 2560 leaves a margin for that arithmetic; the
// tests write the limit with random bytes to real Postgres.
const MaxKeyBytes = 2560

// Defaults used when a page or batch size is not positive.
const (
	DefaultScanPageSize = 1000
	DefaultDeleteBatch  = 1000
)

// Predicate identifies one version of one key, as read by Get or Scan or
// returned by SetIf. It is opaque: only the store that returned it can
// evaluate it. A nil Predicate given to SetIf means "the key must not exist".
type Predicate any

// Entry is one key of a partition, as returned by Scan.
type Entry struct {
	Key       []byte
	Value     []byte
	Predicate Predicate
}

// Store is a partitioned key-value store.
//
// Empty partition keys and keys are rejected with ErrMissingPartitionKey and
// ErrMissingKey, a partition key and key longer than MaxKeyBytes together
// with ErrKeyTooLong, a nil value with ErrMissingValue. Errors caused by a
// cancelled or expired context satisfy errors.Is(err, ctx.Err()).
type Store interface {
	// Get returns the value of key and a predicate for its current
	// version, or ErrNotFound.
	Get(ctx context.Context, partitionKey, key []byte) (value []byte, pred Predicate, err error)
	// Set writes value unconditionally.
	Set(ctx context.Context, partitionKey, key, value []byte) error
	// SetIf writes value only if pred holds: with a nil pred the key must
	// not exist; otherwise it must be unchanged since pred was obtained.
	// It returns the predicate of the version it wrote, or
	// ErrPredicateFailed.
	SetIf(ctx context.Context, partitionKey, key, value []byte, pred Predicate) (Predicate, error)
	// Delete removes key. Deleting a key that does not exist is not an
	// error.
	Delete(ctx context.Context, partitionKey, key []byte) error
	// DeleteIf removes key only if it is unchanged since pred was obtained;
	// otherwise (changed or already gone) it returns ErrPredicateFailed.
	DeleteIf(ctx context.Context, partitionKey, key []byte, pred Predicate) error
	// Scan iterates the partition's entries with key >= fromKey (nil or
	// empty: from the start) in byte order, fetching pageSize entries per
	// round trip (DefaultScanPageSize when pageSize <= 0) and only when
	// the caller asks for more. It is not a snapshot: entries written or
	// deleted after the scan started may or may not be seen, but each key
	// is yielded at most once and in order. After an error is yielded the
	// iteration ends.
	Scan(ctx context.Context, partitionKey, fromKey []byte, pageSize int) iter.Seq2[Entry, error]
	// DeletePartition removes every entry of the partition in batches of
	// batchSize (DefaultDeleteBatch when batchSize <= 0), each batch its own
	// statement, so a huge partition never holds one long transaction. It
	// returns how many entries it removed, also when it fails part way.
	DeletePartition(ctx context.Context, partitionKey []byte, batchSize int) (int64, error)
}

// CheckArgs validates the arguments common to every operation; value is
// checked only when checkValue is set. Implementations call it first.
func CheckArgs(partitionKey, key, value []byte, checkValue bool) error {
	if len(partitionKey) == 0 {
		return ErrMissingPartitionKey
	}
	if len(key) == 0 {
		return ErrMissingKey
	}
	if len(partitionKey)+len(key) > MaxKeyBytes {
		return ErrKeyTooLong
	}
	if checkValue && value == nil {
		return ErrMissingValue
	}
	return nil
}
