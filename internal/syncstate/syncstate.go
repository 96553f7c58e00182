// Package syncstate records, for mirrors of repositories fed by per-host event
// streams and by full fetches, just enough state to know cheaply which
// repositories may have missed events and need a full re-index (design 001,
// "Detailed design").
//
// Every host has a cursor (the last event cursor received) and a
// first_cursor_since_reset (the earliest cursor from which the stream has
// been uninterrupted). Every repository has four indicators:
// last_indexed_rev, first_rev_since_reset, first_cursor_since_reset (a copy
// of its host's value) and last_firehose_rev. A repository needs a re-index
// when
//
//   - last_indexed_rev is unset (ReasonNeverIndexed), or
//   - max(last_indexed_rev, last_firehose_rev) < first_rev_since_reset
//     (ReasonRevisionGap), or
//   - its first_cursor_since_reset < its host's (ReasonCursorReset).
//
// Revs are opaque strings compared byte-wise (COLLATE "C" in Postgres, plain
// string comparison in Go). When a rev is a TID (13 characters of
// base32-sortable, as in atproto) it must not lie more than MaxRevFuture
// ahead of the clock. The never-decrease invariants are enforced by the SQL
// that writes (GREATEST, guarded updates) and, as a last line, by triggers.
//
// Every operation is one transaction and safe to replay. See
// docs/syncstate.md.
package syncstate

import (
	"log/slog"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
)

// Host is an event-stream source (a PDS, a relay...) of one tenant.
type Host struct {
	Name string `json:"name"`
	// Cursor is the last event cursor received; nil before the first event.
	Cursor *int64 `json:"cursor"`
	// FirstCursorSinceReset is the earliest cursor from which the stream has
	// been uninterrupted. It only moves forward, on a cursor reset.
	FirstCursorSinceReset int64 `json:"first_cursor_since_reset"`
	// StrictCursor makes a first event after a connection whose cursor is
	// beyond Cursor+1 count as a reset.
	StrictCursor bool `json:"strict_cursor"`
	// AwaitingFirstEvent is true between a connection and the first event
	// received after it.
	AwaitingFirstEvent bool `json:"awaiting_first_event"`
	// ResetPending is true after an "outdated cursor" notice that did not
	// give the first cursor: the next event's cursor becomes
	// FirstCursorSinceReset.
	ResetPending bool       `json:"reset_pending"`
	Resets       int64      `json:"resets"`
	LastResetAt  *time.Time `json:"last_reset_at"`
	ConnectedAt  *time.Time `json:"connected_at"`
	CreatedAt    time.Time  `json:"created_at"`
	UpdatedAt    time.Time  `json:"updated_at"`
}

// Reason says why a repository needs a re-index; ReasonNone when it does not.
type Reason string

// The reasons, in the order the rule checks them.
const (
	ReasonNone Reason = ""
	// ReasonNeverIndexed: last_indexed_rev is unset.
	ReasonNeverIndexed Reason = "never_indexed"
	// ReasonRevisionGap: max(last_indexed_rev, last_firehose_rev) <
	// first_rev_since_reset: revisions between them may be missing (a
	// reset, a too_big event or a move to another host).
	ReasonRevisionGap Reason = "revision_gap"
	// ReasonCursorReset: the repository's first_cursor_since_reset is below
	// its host's: the host's stream was interrupted since.
	ReasonCursorReset Reason = "cursor_reset"
)

// Repository is one repository's indicators. Unset revs are "".
type Repository struct {
	Repo                  string `json:"repo" db:"repo"`
	Host                  string `json:"host" db:"host"`
	LastIndexedRev        string `json:"last_indexed_rev" db:"last_indexed_rev"`
	FirstRevSinceReset    string `json:"first_rev_since_reset" db:"first_rev_since_reset"`
	FirstCursorSinceReset int64  `json:"first_cursor_since_reset" db:"first_cursor_since_reset"`
	LastFirehoseRev       string `json:"last_firehose_rev" db:"last_firehose_rev"`
	// HostFirstCursorSinceReset is the host's value the cursor condition
	// compares with.
	HostFirstCursorSinceReset int64      `json:"host_first_cursor_since_reset" db:"host_first_cursor_since_reset"`
	NeedsIndex                bool       `json:"needs_index" db:"-"`
	Reason                    Reason     `json:"reason" db:"reason"`
	IndexedAt                 *time.Time `json:"indexed_at" db:"indexed_at"`
	CreatedAt                 time.Time  `json:"created_at" db:"created_at"`
	UpdatedAt                 time.Time  `json:"updated_at" db:"updated_at"`
}

// Event is one stream event: a commit of Repo at Rev, sequenced by Cursor.
// TooBig means the host dropped some of the commit's records.
type Event struct {
	Cursor int64  `json:"cursor"`
	Repo   string `json:"repo"`
	Rev    string `json:"rev"`
	TooBig bool   `json:"too_big"`
}

// ListedRepo is one entry of a host's repository listing.
type ListedRepo struct {
	Repo string `json:"repo"`
	Rev  string `json:"rev"`
}

// Limits.
const (
	// MaxBatch bounds the events of one ApplyEvents call and the
	// repositories of one RecordListing call.
	MaxBatch = 10000
	// MaxRevLength is the longest rev accepted, in bytes.
	MaxRevLength = 256
	// MaxRepoLength is the longest repository id accepted, in bytes.
	MaxRepoLength = 2048
	// MaxHostLength is the longest host name accepted.
	MaxHostLength = 253
	// DefaultMaxRevFuture is how far ahead of the clock a TID rev may be.
	DefaultMaxRevFuture = 5 * time.Minute
	// DefaultPageSize and MaxPageSize bound list pages.
	DefaultPageSize = 50
	MaxPageSize     = 500
)

// Options configure a Store. Zero values select the defaults.
type Options struct {
	// Now is the clock TID revs are checked against (default time.Now).
	Now func() time.Time
	// MaxRevFuture is how far ahead of Now a TID rev may be (default 5m).
	MaxRevFuture time.Duration
	// Logger receives warnings (default slog.Default()).
	Logger *slog.Logger
}

// Store reads and writes sync state.
type Store struct {
	db           *database.DB
	now          func() time.Time
	maxRevFuture time.Duration
	logger       *slog.Logger
}

// New returns a Store on db.
func New(db *database.DB, opts Options) *Store {
	s := &Store{db: db, now: opts.Now, maxRevFuture: opts.MaxRevFuture, logger: opts.Logger}
	if s.now == nil {
		s.now = time.Now
	}
	if s.maxRevFuture <= 0 {
		s.maxRevFuture = DefaultMaxRevFuture
	}
	if s.logger == nil {
		s.logger = slog.Default()
	}
	return s
}

var hostNameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?$`)

// ValidateHostName checks a host name: a lower-case DNS name with an
// optional :port, at most 253 characters.
func ValidateHostName(name string) error {
	if len(name) < 1 || len(name) > MaxHostLength || !hostNameRE.MatchString(name) {
		return repolock.Errorf(repolock.EInvalid,
			"host name must be 1-%d characters of lowercase letters, digits, '.' and '-' with an optional :port, got %q",
			MaxHostLength, truncate(name))
	}
	return nil
}

// ValidateRepo checks a repository id: 1-2048 bytes of UTF-8 without
// control characters.
func ValidateRepo(repo string) error {
	if repo == "" {
		return repolock.Errorf(repolock.EInvalid, "repo is required")
	}
	if len(repo) > MaxRepoLength {
		return repolock.Errorf(repolock.EInvalid, "repo must be at most %d bytes", MaxRepoLength)
	}
	if !printable(repo) {
		return repolock.Errorf(repolock.EInvalid, "repo %q must be UTF-8 without control characters", truncate(repo))
	}
	return nil
}

// ValidateRev checks a rev: 1-256 bytes of UTF-8 without control characters
// and, when it is a TID, not more than the Store's MaxRevFuture ahead of its
// clock (such a rev would otherwise poison last_indexed_rev forever: no
// later rev could ever pass it).
func (s *Store) ValidateRev(rev string) error {
	if rev == "" {
		return repolock.Errorf(repolock.EInvalid, "rev is required")
	}
	if len(rev) > MaxRevLength {
		return repolock.Errorf(repolock.EInvalid, "rev must be at most %d bytes", MaxRevLength)
	}
	if !printable(rev) {
		return repolock.Errorf(repolock.EInvalid, "rev %q must be UTF-8 without control characters", truncate(rev))
	}
	if t, ok := TIDTime(rev); ok {
		limit := s.now().Add(s.maxRevFuture)
		if t.After(limit) {
			return repolock.Errorf(repolock.EInvalid,
				"rev %q is a TID dated %s, more than %s ahead of the server clock", rev,
				t.UTC().Format(time.RFC3339Nano), s.maxRevFuture)
		}
	}
	return nil
}

func validateCursor(name string, c int64) error {
	if c < 0 {
		return repolock.Errorf(repolock.EInvalid, "%s must be >= 0, got %d", name, c)
	}
	return nil
}

func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	return strings.IndexFunc(s, unicode.IsControl) < 0
}

func truncate(s string) string {
	if len(s) <= 64 {
		return s
	}
	return s[:64] + "..."
}

// hostNotFound is the error for a host name the tenant has not registered.
func hostNotFound(name string) error {
	return repolock.Errorf(repolock.ENotFound, "host %q not found; register it with PUT /v1/sync/hosts/%s", name, name)
}
