// Package repostate keeps graveler-style repository state (repositories,
// branches, commits, tags and staging areas) on a key-value store
// (internal/repostate/kv), following designs 003 (key schema, SetIf for
// optimistic branch updates) and 000 (repository state, unique instance id,
// the Step 2 create and delete flows, and the Cleaner of deleted instances).
//
// There are no transactions across keys. Correctness comes from three rules:
//
//   - Every repository record carries a state (initial, active, deleting)
//     and a random instance uid that is new on every create. Everything a
//     repository owns lives in a partition named after that uid, so an
//     instance's data is reachable only through its record: once the record
//     is gone (or replaced by a new instance of the same name), nothing of
//     the old instance can be reached.
//   - Every change of a record is a SetIf on the predicate read (or a
//     DeleteIf), never an unconditional write, so a slow actor can never
//     clobber a newer instance of the same name.
//   - A deleted (or failed) instance is listed in the deleted-repositories
//     partition before its record goes away; the Cleaner deletes what the
//     list names.
//
// Every repository belongs to a tenant (an internal/users id) and a tenant
// only ever sees its own.
package repostate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/repostate/kv"
)

// State is the lifecycle state of a repository record.
type State string

const (
	// StateInitial: being created. Invisible; declared failed once older
	// than the initial timeout.
	StateInitial State = "initial"
	// StateActive: created and usable.
	StateActive State = "active"
	// StateDeleting: being deleted (or declared failed). Answers 410.
	StateDeleting State = "deleting"
)

// Repository is a repository record.
type Repository struct {
	Name             string    `json:"name"`
	StorageNamespace string    `json:"storage_namespace"`
	DefaultBranch    string    `json:"default_branch"`
	State            State     `json:"state"`
	InstanceUID      string    `json:"instance_uid"`
	CreatedAt        time.Time `json:"created_at"`
}

// Branch is a branch record: the commit it points at, the staging token
// new writes go to, and staging tokens sealed by commits in progress.
type Branch struct {
	Name         string   `json:"name"`
	CommitID     string   `json:"commit_id"`
	StagingToken string   `json:"staging_token"`
	SealedTokens []string `json:"sealed_tokens"`
}

// Commit is an immutable commit. ID is the hex SHA-256 of the commit's
// canonical encoding (every other field), so equal commits have equal ids.
type Commit struct {
	ID           string            `json:"id"`
	Version      int               `json:"version"`
	Committer    string            `json:"committer"`
	Message      string            `json:"message"`
	MetaRangeID  string            `json:"meta_range_id"`
	CreationDate time.Time         `json:"creation_date"`
	Parents      []string          `json:"parents"`
	Metadata     map[string]string `json:"metadata"`
	Generation   int               `json:"generation"`
}

// Tag names a commit.
type Tag struct {
	Name     string `json:"name"`
	CommitID string `json:"commit_id"`
}

// StagedObject is one entry of a branch's staging area.
type StagedObject struct {
	Path string `json:"path"`
	Data []byte `json:"data"`
}

// RetryPolicy bounds the optimistic retries of branch updates (commits):
// the same policy, with the same capped full-jitter backoff, as the
// database layer's transaction retries.
type RetryPolicy = database.RetryPolicy

// DefaultCommitRetry is used when Config.CommitRetry is zero.
var DefaultCommitRetry = RetryPolicy{MaxAttempts: 20, BaseDelay: 2 * time.Millisecond, MaxDelay: 100 * time.Millisecond}

// DefaultInitialTimeout is how long a repository may stay in the initial
// state before it is declared failed.
const DefaultInitialTimeout = 2 * time.Minute

// Config configures a Service. Zero values select the defaults.
type Config struct {
	// InitialTimeout: an initial record older than this is declared failed
	// (default 2 minutes).
	InitialTimeout time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// CommitRetry bounds retries of a commit that lost a race for its
	// branch (default DefaultCommitRetry).
	CommitRetry RetryPolicy
	// DeleteBatch is the batch size of partition deletes (default 1000).
	DeleteBatch int
}

func (c Config) withDefaults() Config {
	if c.InitialTimeout <= 0 {
		c.InitialTimeout = DefaultInitialTimeout
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.CommitRetry.MaxAttempts <= 0 {
		c.CommitRetry = DefaultCommitRetry
	}
	if c.DeleteBatch <= 0 {
		c.DeleteBatch = kv.DefaultDeleteBatch
	}
	return c
}

// Service is the repository state API on a kv.Store. It is safe for
// concurrent use; any number of Services (in any number of processes) may
// share one store.
type Service struct {
	store kv.Store
	cfg   Config
	log   *slog.Logger

	// tenants remembers tenants already in the tenants partition.
	tenants sync.Map
}

// New returns a Service on store.
func New(store kv.Store, cfg Config) *Service {
	cfg = cfg.withDefaults()
	return &Service{store: store, cfg: cfg, log: cfg.Logger}
}

// NewPostgres returns a Service on the Postgres kv table of db.
func NewPostgres(db *database.DB, cfg Config) *Service {
	return New(kv.NewPostgres(db), cfg)
}

func (s *Service) now() time.Time { return s.cfg.Now().UTC() }

// newUID returns 128 random bits as hex.
func newUID() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic("repostate: crypto/rand failed: " + err.Error())
	}
	return hex.EncodeToString(b)
}

// storeErr turns an error of the store into a domain error. Context errors
// stay recognizable with errors.Is.
func storeErr(err error) error {
	if err == nil {
		return nil
	}
	var de *repolock.Error
	switch {
	case errors.As(err, &de):
		return err
	case errors.Is(err, context.Canceled):
		return err
	case errors.Is(err, context.DeadlineExceeded):
		return repolock.Wrap(repolock.ETimeout, err, "the operation timed out")
	}
	if mapped := database.MapError(err); errors.As(mapped, &de) {
		return mapped
	}
	return repolock.Wrap(repolock.EInternal, err, "repository state store failed")
}

// Honest answers from multi-step flows. A flow that writes more than once
// (Create, Delete, Commit, ...) has one deciding write: the one after which
// the caller's view changes (the promotion of a new record, the mark of a
// deleted one, the move of a branch). Before it lands, an error means
// nothing the caller can see was applied. A deciding write whose outcome
// cannot be read back answers unavailable with outcome unknown
// (unknownOutcome), never a plain "try again"; once it has landed, the flow
// finishes or answers success for what will be finished (a marked delete is
// completed by the Cleaner).

// ambiguousError is a write that reported a failure that may have happened
// after it reached the store, and that could not be resolved by reading
// the key back.
type ambiguousError struct{ err error }

func (e *ambiguousError) Error() string { return e.err.Error() }
func (e *ambiguousError) Unwrap() error { return e.err }

// mayHaveLanded reports whether a failed write may have been applied: the
// connection was lost after the statement could have reached the server,
// or the deadline expired while it ran. A connection never made (refused,
// dial error, 57P03 at startup) sent nothing.
func mayHaveLanded(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	return database.IsConnectionError(err) && errors.Is(database.UnknownOutcome(err), database.ErrCommitOutcomeUnknown)
}

// decidingErr maps the failure of a flow's deciding write: outcome unknown
// when it may have landed and could not be read back, else storeErr
// (nothing applied).
func decidingErr(err error) error {
	var amb *ambiguousError
	if errors.As(err, &amb) && mayHaveLanded(amb.err) {
		return unknownOutcome(err)
	}
	return storeErr(err)
}

// unknownOutcome is the answer of a flow whose deciding write may or may
// not have landed: unavailable (503, Retry-After) with the detail
// outcome: unknown, as the database layer answers for a COMMIT in flight.
// A cancelled context stays itself (nobody is waiting for the answer).
func unknownOutcome(err error) error {
	if errors.Is(err, context.Canceled) {
		return err
	}
	e := repolock.Wrap(repolock.EUnavailable, err,
		"the database connection was lost while the change was being applied: the outcome is unknown; re-read before retrying")
	e.Details = map[string]any{"outcome": "unknown"}
	return e
}

// IsUnknownOutcome reports whether err says the outcome of a change is
// unknown (detail outcome: unknown).
func IsUnknownOutcome(err error) bool {
	return repolock.IsCode(err, repolock.EUnavailable) && repolock.ErrorDetails(err)["outcome"] == "unknown"
}

// cleanupContext returns a context for compensating writes that must run
// even when the caller's context was cancelled.
func cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
}
