// Package watch is the resumable stream of lock events (issue 26): the rows
// of repository_lock_events that internal/locks writes, in one total order,
// each with an opaque cursor, read by GET /v1/events (long poll and
// Server-Sent Events).
//
// # The order, and why no event is ever skipped
//
// Event ids come from an identity sequence when the row is written, not when
// its transaction commits: a transaction T1 may take id 10, T2 id 11, and T2
// commit first. A watcher reading "id > cursor" after T2's commit would see
// 11, move its cursor to 11, and never see 10. The watch therefore does not
// order by id alone.
//
// Every event row stores xid, the top-level transaction id of the
// transaction that wrote it (migration 000018: DEFAULT pg_current_xact_id()).
// Events are ordered by the pair (xid, id), and a position is such a pair.
// Each read is one statement, with one snapshot S, and returns only rows
// with xid < h, where h = pg_snapshot_xmin(S), the oldest transaction still
// running when S was taken (or S's xmax when none runs):
//
//  1. Every transaction with xid < h had finished when S was taken (that is
//     what xmin means), so S sees all of the committed rows with xid < h,
//     and no row with xid < h can ever appear later: the set of events
//     below h is final the moment a read returns it.
//  2. A transaction that had not finished when S was taken has xid >= h (if
//     it had an xid then, it is in S's running set, whose least member is
//     h; if it gets one later, its xid is >= S's xmax >= h). So every event
//     committed after the read sorts after every event the read returned.
//
// A page is the events after the cursor and below h, in (xid, id) order, at
// most a page size of them. Its next cursor is the last event's position
// when the page is full, else the bookmark (h, 0): the position before
// every event of transaction h and after every event below h. By (1) the
// page together with the next cursor never skips an event that a later
// read could find; by (2) no later read returns an event at or before that
// cursor, so pages concatenate without a gap or a duplicate. The price is
// latency, never loss: an event is held back while an older transaction
// that may write events is still running.
//
// h need not be the snapshot's xmin itself, which counts the transactions
// of every database of the server: any h works for which (1) and (2) hold
// for the transactions that can write this table. When committed events
// are held back by xmin, the read refines h to the least xid running at S
// that is not positively known to run in another database (pg_locks and
// pg_stat_activity name the backend holding the xid and its database); a
// transaction of another database writes no row here, so (1) and (2) still
// hold, and a long transaction of another database sharing the server does
// not delay this one's stream. (A long transaction of this database that
// has an xid does, until it ends.)
//
// TestOutOfOrderCommit forces the out-of-order commit above,
// TestOtherDatabaseDoesNotHoldBack the refinement, and
// TestRandomInterleavings checks the concatenation property on random
// interleavings.
//
// Rows written before migration 000018 have no xid; they are older than any
// cursor this package ever issues (a first cursor is always a bookmark at
// the horizon of its read), so no read looks at them.
//
// Denials are coalesced by internal/locks (one row per tenant, URL and
// window, whose count grows): the watch delivers a window's row once, when
// it is first written; later denials of the window only update its count.
//
// # Cursors and retention
//
// A cursor is a pagetoken (kind "events", bound to the caller: a tenant's
// cursor is refused to another tenant) carrying the position and the
// database time of the read that produced it. The GC deletes events older
// than the event retention (gc.Retention.Events); a cursor older than that
// may stand before deleted events, so it is refused with cursor_expired
// (HTTP 410): the client re-lists and watches from a fresh cursor.
//
// # Fan-out
//
// A Service subscribes to the process's one LISTEN session
// (internal/pglisten, channel repolock_events) and holds one in-memory
// buffer of the newest events of every tenant. A notification makes the service read the
// new events once, append them to the buffer and wake every waiting
// watcher, which then reads from its own cursor in the buffer; a watcher
// whose cursor is older than the buffer reads from the database. Idle
// watchers hold no database connection. While the LISTEN connection is
// down the service polls every PollInterval: cursors make this safe, so
// nothing is flushed.
//
// # Who notifies
//
// The process that wrote events notifies, after its commit, not the
// writing transaction: Written (called by the HTTP API after every request
// that may write) wakes this process's loop at once and, at most once per
// Config.Coalesce, sends NOTIFY in a transaction of its own, which wakes
// every other replica. NOTIFY inside the writing transaction (a trigger,
// as migration 000018 had) would serialize the commits of every writer of
// the server: a transaction that called NOTIFY holds, from its pre-commit
// until after its WAL flush, a lock every notifying transaction shares
// (PostgreSQL's PreCommit_Notify), so concurrent acquire batches could no
// longer share a WAL flush (make bench-http: acquires at 0.72x). Events
// written outside the service (plain SQL, a command such as api gc) send no
// notification; the loop's backstop read, every PollInterval even while
// the LISTEN session is up, delivers them. A lost notification delays
// an event by at most PollInterval; it never loses one (cursors). With no
// watcher waiting on the replica, the loop reads nothing at all and marks
// its buffer stale (readers and Head then go to the database).
package watch

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lib/pq"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/locks"
	"github.com/repolock/repolock/internal/pagetoken"
)

// NotifyChannel is the channel the trigger of migration 000018 notifies on
// every insert into repository_lock_events.
const NotifyChannel = "repolock_events"

// Kinds are the event kinds, in the order the API documents them.
var Kinds = []string{locks.EventAcquired, locks.EventDenied, locks.EventReleased, locks.EventCollected, locks.EventRekeyed,
	locks.EventTransferred, locks.EventHandoverOffered, locks.EventHandoverAccepted, locks.EventHandoverDeclined,
	locks.EventHandoverWithdrawn, locks.EventHandoverExpired,
	locks.EventApplicationCreated, locks.EventApplicationDeleted, locks.EventCredentialCreated, locks.EventCredentialDeleted}

// Matches reports whether an event of kind, naming an Application when
// application and a Credential when credential, passes the kinds filter
// (empty: every kind). An "acquired" event that names an Application is
// also an application_created (the create made the lock: its event is the
// lock's), a "released" one also an application_deleted; the same for
// Credentials. readSQL's filter is the same.
func Matches(kinds []string, kind string, application, credential bool) bool {
	if len(kinds) == 0 || slices.Contains(kinds, kind) {
		return true
	}
	var also string
	switch {
	case application && kind == locks.EventAcquired:
		also = locks.EventApplicationCreated
	case application && kind == locks.EventReleased:
		also = locks.EventApplicationDeleted
	case credential && kind == locks.EventAcquired:
		also = locks.EventCredentialCreated
	case credential && kind == locks.EventReleased:
		also = locks.EventCredentialDeleted
	default:
		return false
	}
	return slices.Contains(kinds, also)
}

// Defaults of Config.
const (
	DefaultPollInterval         = time.Second
	DefaultBufferSize           = 4096
	DefaultMaxWatchersPerTenant = 20
	DefaultCoalesce             = 20 * time.Millisecond
	// MaxPageSize caps one page.
	MaxPageSize = 500
)

// Position is a place in the order of events: (xid, id).
type Position struct {
	X uint64 // transaction id (xid8)
	I int64  // event id
}

// Less orders positions.
func (p Position) Less(q Position) bool {
	if p.X != q.X {
		return p.X < q.X
	}
	return p.I < q.I
}

func maxPos(p, q Position) Position {
	if p.Less(q) {
		return q
	}
	return p
}

// Event is one lock event as the watch delivers it.
type Event struct {
	// Cursor is the position just after this event: resuming from it
	// delivers the events after this one.
	Cursor        string `json:"cursor"`
	ID            int64  `json:"id"`
	Kind          string `json:"kind"`
	LockID        string `json:"lock_id,omitempty"`
	NormalizedURL string `json:"normalized_url"`
	Actor         string `json:"actor,omitempty"`
	Owner         string `json:"owner,omitempty"`
	RekeyedFrom   string `json:"rekeyed_from,omitempty"`
	// ApplicationID and Application name the Application the event is
	// about (application_created, application_deleted, and the acquired
	// or released event of a lock its create made or its delete freed);
	// CredentialID and Credential the same for a Repository Credential.
	ApplicationID string    `json:"application_id,omitempty"`
	Application   string    `json:"application,omitempty"`
	CredentialID  string    `json:"credential_id,omitempty"`
	Credential    string    `json:"credential,omitempty"`
	Count         int       `json:"count"`
	At            time.Time `json:"at"`

	pos     Position
	at      time.Time // database time of the read that settled it
	actorID string
	ownerID string
	// enc caches, for an event of the buffer, its cursor per scope ("\x00"
	// + the scope's binding -> cursor) and its JSON per cursor (cursor ->
	// []byte): the watchers of one tenant share them instead of encoding
	// each.
	enc *sync.Map
}

// JSON is the event's JSON (with its cursor): cached for the watchers of
// one scope when the event came from the buffer.
func (e Event) JSON() ([]byte, error) {
	if e.enc != nil {
		if v, ok := e.enc.Load(e.Cursor); ok {
			return v.([]byte), nil
		}
	}
	b, err := json.Marshal(e)
	if err == nil && e.enc != nil {
		e.enc.Store(e.Cursor, b)
	}
	return b, err
}

// Position is the event's place in the order.
func (e Event) Position() Position { return e.pos }

// Scope is who is watching: a tenant sees the events it acted in (its
// acquires, releases, re-keyings, the denials it got) and the events of
// its locks (collected, denials of others on them); the admin sees all.
type Scope struct {
	TenantID string // "" for the admin
}

// Admin is the scope of the admin token.
var Admin = Scope{}

func (s Scope) sees(e *Event) bool {
	return s.TenantID == "" || e.actorID == s.TenantID || e.ownerID == s.TenantID
}

func (s Scope) bind() string {
	if s.TenantID == "" {
		return "admin"
	}
	return s.TenantID
}

// Page is one answer: the events after the cursor (possibly none) and the
// cursor to resume from.
type Page struct {
	Events []Event `json:"events"`
	Cursor string  `json:"cursor"`
}

// Config configures a Service.
type Config struct {
	// Retention is how long events are kept (gc.Retention.Events, as
	// enforced by the GC); a cursor older than that is expired. Negative:
	// kept forever, no cursor expires. Required (0 is refused: the caller
	// passes the GC's effective value).
	Retention time.Duration
	// PollInterval is how often the service reads while it has no LISTEN
	// connection, and its backstop read while it has one, which delivers
	// events written outside the service (0: DefaultPollInterval).
	PollInterval time.Duration
	// BufferSize is how many of the newest events are kept in memory
	// (0: DefaultBufferSize).
	BufferSize int
	// MaxWatchersPerTenant caps a tenant's concurrent watchers on this
	// process (0: DefaultMaxWatchersPerTenant). The admin has no cap.
	MaxWatchersPerTenant int
	// Coalesce is the least time between two reads of new events: the
	// notifications that come meanwhile are served by one read, which
	// wakes every watcher once (0: DefaultCoalesce).
	Coalesce time.Duration
	// Logger receives the listener's state changes. Required.
	Logger *slog.Logger
}

// Service is the watch of one process: cmd/api builds one with New and
// starts it with Start.
type Service struct {
	db  *database.DB
	cfg Config

	mu       sync.Mutex
	ready    bool     // head is known
	head     Position // every event <= head is in buf or <= bufStart
	headAt   time.Time
	bufStart Position
	buf      []Event
	changed  chan struct{}
	watchers map[string]int
	// interest: someone took Changed since the last read that advanced
	// the stream (a waiting watcher). Without it a wake-up is not worth a
	// read: the loop skips it and marks the buffer stale; memRead then
	// declines and readers go to the database, and the next Changed pokes
	// the loop. staleSince: when the first read was skipped.
	interest   bool
	stale      bool
	staleSince time.Time
	reads      int // reads of the loop (advance), for tests

	wake      chan struct{}
	written   chan struct{}  // Written: a NOTIFY is due
	wg        sync.WaitGroup // Start's goroutines; Close waits for them
	connected bool           // SetListening
	done      chan struct{}
}

// New returns the service on db. It does not connect: Start does.
func New(db *database.DB, cfg Config) *Service {
	if db == nil || cfg.Logger == nil {
		panic("watch.New: a pool and a logger are required")
	}
	if cfg.Retention == 0 {
		panic("watch.New: Config.Retention is required (negative: kept forever)")
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.BufferSize <= 0 {
		cfg.BufferSize = DefaultBufferSize
	}
	if cfg.MaxWatchersPerTenant <= 0 {
		cfg.MaxWatchersPerTenant = DefaultMaxWatchersPerTenant
	}
	if cfg.Coalesce <= 0 {
		cfg.Coalesce = DefaultCoalesce
	}
	return &Service{
		db:       db,
		cfg:      cfg,
		changed:  make(chan struct{}),
		watchers: map[string]int{},
		wake:     make(chan struct{}, 1),
		written:  make(chan struct{}, 1),
		done:     make(chan struct{}),
	}
}

// cursor is the JSON of a cursor token.
type cursor struct {
	X uint64 `json:"x"`
	I int64  `json:"i"`
	T int64  `json:"t"` // Unix seconds of the read that produced it
}

// Validate range-checks a decoded cursor.
func (c *cursor) Validate() error {
	if c.X < 3 || c.I < 0 || c.T <= 0 || c.T > 253402214400 {
		return pagetoken.Invalid()
	}
	return nil
}

func encode(s Scope, p Position, at time.Time) string {
	return pagetoken.Encode(pagetoken.KindEvents, s.bind(), cursor{X: p.X, I: p.I, T: at.Unix()})
}

// ExpiredError is the error of a cursor older than the retention.
func ExpiredError() error {
	return repolock.Errorf(repolock.ECursorExpired, "the cursor is older than the event retention; list again and watch from a new cursor")
}

// decode returns the position of token for scope and the time of the read
// that produced it, or cursor_expired.
func (s *Service) decode(sc Scope, token string, now time.Time) (Position, time.Time, error) {
	if token == "" {
		return Position{}, time.Time{}, repolock.Errorf(repolock.EInvalid, "the cursor is empty")
	}
	c, _, err := pagetoken.Decode[cursor](pagetoken.KindEvents, sc.bind(), token)
	if err != nil {
		return Position{}, time.Time{}, repolock.Errorf(repolock.EInvalid, "the cursor is not valid for this caller")
	}
	at := time.Unix(c.T, 0)
	if s.cfg.Retention > 0 && at.Before(now.Add(-s.cfg.Retention)) {
		return Position{}, time.Time{}, ExpiredError()
	}
	return Position{X: c.X, I: c.I}, at, nil
}

// ValidateKinds checks a kinds filter (nil or empty: every kind).
func ValidateKinds(kinds []string) error {
	for _, k := range kinds {
		if !slices.Contains(Kinds, k) {
			return repolock.Errorf(repolock.EInvalid, "unknown event kind %q (kinds: %s)", k, strings.Join(Kinds, ", "))
		}
	}
	return nil
}

// readSQL reads, with one snapshot S, the horizon h, the database time,
// whether committed events at or above h are held back, and at most $5
// events after ($1, $2) and below h, of the tenant $3 (NULL: every tenant)
// and kinds $4 (empty: all; as Matches), in order. Served by
// repository_lock_events_watch_idx.
//
// The horizon is S's xmin when no committed event is at or above it (the
// common case: one probe of the index's end). Otherwise it is refined: the
// least xid running at S (pg_snapshot_xip) that is not known to belong to
// a backend of another database (pg_locks: the backend holding the xid's
// own lock; pg_stat_activity: that backend's database), or S's xmax. A
// transaction of another database never writes this table, so it cannot
// hold back this database's events; an xid whose backend is not found
// (finished since S, a prepared transaction) keeps counting.
const readSQL = `
WITH s AS MATERIALIZED (
	SELECT pg_current_snapshot() AS snap, now() AS at
), g AS MATERIALIZED (
	SELECT s.snap, s.at, pg_snapshot_xmin(s.snap) AS xmin,
		(SELECT max(w.xid) FROM repository_lock_events w WHERE w.xid IS NOT NULL) AS newest
	FROM s
), h AS MATERIALIZED (
	SELECT g.at, g.newest, CASE WHEN g.newest IS NULL OR g.newest < g.xmin THEN g.xmin ELSE (
		SELECT COALESCE(min(x.xid), pg_snapshot_xmax(g.snap))
		FROM pg_snapshot_xip(g.snap) AS x(xid)
		WHERE NOT EXISTS (
			SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE l.locktype = 'transactionid' AND l.transactionid = x.xid::xid AND l.granted
				AND a.datid <> (SELECT oid FROM pg_database WHERE datname = current_database()))
	) END AS horizon
	FROM g
)
SELECT h.horizon::text AS horizon, h.at, COALESCE(h.newest >= h.horizon, false) AS held,
	e.id, e.xid::text AS xid, e.event, e.lock_id::text AS lock_id, e.git_repository_url,
	e.cluster_user_id::text AS actor_id, e.cluster_user_name, e.owner_user_id::text AS owner_id, e.owner_user_name,
	e.rekeyed_from, e.count, e.created_at,
	e.application_id::text AS application_id, e.application_name, e.credential_id::text AS credential_id, e.credential_name
FROM h LEFT JOIN LATERAL (
	SELECT e.* FROM repository_lock_events e
	WHERE e.xid IS NOT NULL AND (e.xid, e.id) > ($1::xid8, $2::bigint) AND e.xid < h.horizon
		AND ($3::uuid IS NULL OR e.cluster_user_id = $3::uuid OR e.owner_user_id = $3::uuid)
		AND (cardinality($4::text[]) = 0 OR e.event = ANY ($4::text[])
			OR (e.application_id IS NOT NULL AND CASE e.event WHEN '` + locks.EventAcquired + `' THEN '` + locks.EventApplicationCreated + `'
				WHEN '` + locks.EventReleased + `' THEN '` + locks.EventApplicationDeleted + `' END = ANY ($4::text[]))
			OR (e.credential_id IS NOT NULL AND CASE e.event WHEN '` + locks.EventAcquired + `' THEN '` + locks.EventCredentialCreated + `'
				WHEN '` + locks.EventReleased + `' THEN '` + locks.EventCredentialDeleted + `' END = ANY ($4::text[])))
	ORDER BY e.xid, e.id
	LIMIT $5
) e ON true
ORDER BY e.xid, e.id`

type readRow struct {
	Horizon     string     `db:"horizon"`
	At          time.Time  `db:"at"`
	Held        bool       `db:"held"`
	ID          *int64     `db:"id"`
	Xid         *string    `db:"xid"`
	Event       *string    `db:"event"`
	LockID      *string    `db:"lock_id"`
	URL         *string    `db:"git_repository_url"`
	ActorID     *string    `db:"actor_id"`
	ActorName   *string    `db:"cluster_user_name"`
	OwnerID     *string    `db:"owner_id"`
	OwnerName   *string    `db:"owner_user_name"`
	RekeyedFrom *string    `db:"rekeyed_from"`
	Count       *int       `db:"count"`
	CreatedAt   *time.Time `db:"created_at"`
	AppID       *string    `db:"application_id"`
	AppName     *string    `db:"application_name"`
	CredID      *string    `db:"credential_id"`
	CredName    *string    `db:"credential_name"`
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// dbRead is one read of readSQL: the events after `after` in scope sc
// (kinds: nil for all), at most limit, the next position, the database
// time and whether committed events are held back above the horizon.
func (s *Service) dbRead(ctx context.Context, sc Scope, after Position, kinds []string, limit int) (events []Event, next Position, at time.Time, held bool, err error) {
	var tenant *string
	if sc.TenantID != "" {
		tenant = &sc.TenantID
	}
	if kinds == nil {
		kinds = []string{}
	}
	var rows []readRow
	if err := s.db.SelectContext(ctx, &rows, readSQL, strconv.FormatUint(after.X, 10), after.I, tenant, pq.StringArray(kinds), limit); err != nil {
		return nil, Position{}, time.Time{}, false, database.MapError(err)
	}
	if len(rows) == 0 {
		return nil, Position{}, time.Time{}, false, repolock.Errorf(repolock.EInternal, "watch: the read returned no horizon")
	}
	h, err := strconv.ParseUint(rows[0].Horizon, 10, 64)
	if err != nil {
		return nil, Position{}, time.Time{}, false, fmt.Errorf("watch: horizon %q: %w", rows[0].Horizon, err)
	}
	at = rows[0].At
	held = rows[0].Held
	for _, r := range rows {
		if r.ID == nil {
			continue
		}
		x, err := strconv.ParseUint(str(r.Xid), 10, 64)
		if err != nil {
			return nil, Position{}, time.Time{}, false, fmt.Errorf("watch: xid %q: %w", str(r.Xid), err)
		}
		e := Event{
			ID: *r.ID, Kind: str(r.Event), LockID: str(r.LockID), NormalizedURL: str(r.URL),
			Actor: str(r.ActorName), Owner: str(r.OwnerName), RekeyedFrom: str(r.RekeyedFrom),
			ApplicationID: str(r.AppID), Application: str(r.AppName), CredentialID: str(r.CredID), Credential: str(r.CredName),
			pos: Position{X: x, I: *r.ID}, at: at, actorID: str(r.ActorID), ownerID: str(r.OwnerID),
		}
		if r.Count != nil {
			e.Count = *r.Count
		}
		if r.CreatedAt != nil {
			e.At = r.CreatedAt.UTC()
		}
		events = append(events, e)
	}
	if limit > 0 && len(events) == limit {
		next = events[len(events)-1].pos
	} else {
		next = maxPos(after, Position{X: h})
	}
	return events, next, at, held, nil
}

// Head returns a cursor at the current end of the stream for sc: resuming
// from it delivers every event committed after Head returned (and possibly
// a few committed just before). It is what a controller takes before it
// lists.
func (s *Service) Head(ctx context.Context, sc Scope) (_ string, err error) {
	defer repolock.WrapOp(&err, "watch.Head")
	s.mu.Lock()
	if s.ready && !s.stale { // stale: the loop skipped reads, so head may be old
		c := encode(sc, s.head, s.headAt)
		s.mu.Unlock()
		return c, nil
	}
	s.mu.Unlock()
	_, next, at, _, err := s.dbRead(ctx, sc, Position{X: 3}, nil, 0)
	if err != nil {
		return "", err
	}
	return encode(sc, next, at), nil
}

// Read returns the events after the cursor after in scope sc, of the given
// kinds (empty: all), at most limit (1..MaxPageSize), and the cursor to
// resume from (the same position when there is nothing new). An empty
// after starts at Head. A cursor of another caller is invalid_argument, one
// older than the retention cursor_expired.
func (s *Service) Read(ctx context.Context, sc Scope, after string, kinds []string, limit int) (_ Page, err error) {
	defer repolock.WrapOp(&err, "watch.Read")
	if after == "" {
		if after, err = s.Head(ctx, sc); err != nil {
			return Page{}, err
		}
	}
	c, err := s.Decode(sc, after)
	if err != nil {
		return Page{}, err
	}
	events, next, err := s.Next(ctx, c, kinds, limit)
	if err != nil {
		return Page{}, err
	}
	if events == nil {
		events = []Event{}
	}
	return Page{Events: events, Cursor: next.String()}, nil
}

// Cursor is a decoded cursor: a position of one caller's stream. A stream
// keeps one between reads and encodes it (String) only when it sends it.
type Cursor struct {
	sc  Scope
	pos Position
	at  time.Time
}

// Position is the cursor's place in the order.
func (c Cursor) Position() Position { return c.pos }

// String is the opaque cursor.
func (c Cursor) String() string { return encode(c.sc, c.pos, c.at) }

// Decode checks a cursor of sc: invalid_argument when it is not one of
// sc's, cursor_expired when it is older than the retention.
func (s *Service) Decode(sc Scope, token string) (Cursor, error) {
	pos, at, err := s.decode(sc, token, time.Now())
	if err != nil {
		return Cursor{}, err
	}
	return Cursor{sc: sc, pos: pos, at: at}, nil
}

// Next returns the events after c (at most limit, of the given kinds, with
// their cursors) and the cursor after them: from the buffer when it holds
// every event after c, else from the database.
func (s *Service) Next(ctx context.Context, c Cursor, kinds []string, limit int) (_ []Event, _ Cursor, err error) {
	defer repolock.WrapOp(&err, "watch.Next")
	if limit < 1 || limit > MaxPageSize {
		return nil, Cursor{}, repolock.Errorf(repolock.EInvalid, "page_size must be between 1 and %d", MaxPageSize)
	}
	if err := ValidateKinds(kinds); err != nil {
		return nil, Cursor{}, err
	}
	if events, next, at, ok := s.memRead(c.sc, c.pos, kinds, limit); ok {
		return s.withCursors(c.sc, events), Cursor{sc: c.sc, pos: next, at: at}, nil
	}
	events, next, at, _, err := s.dbRead(ctx, c.sc, c.pos, kinds, limit)
	if err != nil {
		return nil, Cursor{}, err
	}
	return s.withCursors(c.sc, events), Cursor{sc: c.sc, pos: next, at: at}, nil
}

func (s *Service) withCursors(sc Scope, events []Event) []Event {
	for i := range events {
		e := &events[i]
		if e.enc == nil {
			e.Cursor = encode(sc, e.pos, e.at)
			continue
		}
		key := "\x00" + sc.bind() // beside the JSON, which is keyed by cursor
		if v, ok := e.enc.Load(key); ok {
			e.Cursor = v.(string)
			continue
		}
		e.Cursor = encode(sc, e.pos, e.at)
		e.enc.Store(key, e.Cursor)
	}
	return events
}

// memRead serves a read from the buffer when the buffer holds every event
// after pos (pos >= bufStart): the events, the next position and the time
// of the read that settled it.
func (s *Service) memRead(sc Scope, pos Position, kinds []string, limit int) ([]Event, Position, time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ready || s.stale || pos.Less(s.bufStart) {
		return nil, Position{}, time.Time{}, false
	}
	i, _ := slices.BinarySearchFunc(s.buf, pos, func(e Event, p Position) int {
		switch {
		case e.pos.Less(p):
			return -1
		case p.Less(e.pos):
			return 1
		}
		return 0
	})
	var events []Event
	next := maxPos(pos, s.head)
	for ; i < len(s.buf); i++ {
		e := &s.buf[i]
		if !pos.Less(e.pos) || !sc.sees(e) || !Matches(kinds, e.Kind, e.ApplicationID != "", e.CredentialID != "") {
			continue
		}
		events = append(events, *e)
		if len(events) == limit {
			next = e.pos
			break
		}
	}
	return events, next, s.headAt, true
}

// Changed returns a channel closed at the next advance of the stream (new
// events, or the horizon moving). Take it before a Read that finds nothing,
// then wait on it: no advance is missed in between.
func (s *Service) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.interest = true
	if s.stale {
		s.poke()
	}
	return s.changed
}

// Enter counts a watcher of sc against the per-tenant cap: too_many_requests
// when the tenant already has MaxWatchersPerTenant on this process. Call
// the returned leave when the watcher ends.
func (s *Service) Enter(sc Scope) (leave func(), err error) {
	if sc.TenantID == "" {
		return func() {}, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watchers[sc.TenantID] >= s.cfg.MaxWatchersPerTenant {
		return nil, repolock.Errorf(repolock.ETooManyRequests, "too many concurrent watchers: a tenant may hold %d on one replica", s.cfg.MaxWatchersPerTenant)
	}
	s.watchers[sc.TenantID]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.watchers[sc.TenantID]--; s.watchers[sc.TenantID] <= 0 {
				delete(s.watchers, sc.TenantID)
			}
		})
	}, nil
}

// Start starts the loop that reads new events, until ctx ends or Close.
// It never fails: while the database is unreachable the loop retries. The
// service does not listen itself: the process's LISTEN session
// (internal/pglisten, wired by cmd/api) calls Notify and SetListening;
// without one the service polls every PollInterval.
func (s *Service) Start(ctx context.Context) {
	s.wg.Add(2)
	go func() { defer s.wg.Done(); s.loop(ctx) }()
	go func() { defer s.wg.Done(); s.notifier(ctx) }()
}

// Written tells the service that this process has committed a change that
// may have written events. It never blocks and never touches the database
// itself: it wakes the loop, and the notifier sends one NOTIFY for every
// burst of calls (see "Who notifies").
func (s *Service) Written() {
	s.poke()
	select {
	case s.written <- struct{}{}:
	default:
	}
}

// notifySQL wakes every replica's watch. It runs outside any writing
// transaction, so the lock PostgreSQL takes for a notifying commit is held
// by this one-statement transaction only.
const notifySQL = `SELECT pg_notify('` + NotifyChannel + `', '')`

// notifier sends a NOTIFY after Written, then waits Config.Coalesce before
// the next one: the writes of that interval share it.
func (s *Service) notifier(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.done:
			return
		case <-s.written:
		}
		nctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if _, err := s.db.ExecContext(nctx, notifySQL); err != nil {
			// The other replicas read it at their next backstop read.
			s.cfg.Logger.Debug("watch: NOTIFY failed", "error", err.Error())
		}
		cancel()
		if !s.pause(ctx, s.cfg.Coalesce) {
			return
		}
	}
}

// pause waits d; false when the service stops first.
func (s *Service) pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-s.done:
		return false
	case <-t.C:
		return true
	}
}

// Listening reports whether the LISTEN session is up (SetListening).
func (s *Service) Listening() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.connected
}

// Notify is a notification on NotifyChannel (pglisten.Subscriber.Notify):
// new events may have been committed.
func (s *Service) Notify(string) { s.poke() }

// SetListening is the state of the LISTEN session
// (pglisten.Subscriber.State): while it is down the service polls; each
// true (up, or up again after notifications may have been lost) wakes the
// loop.
func (s *Service) SetListening(up bool) {
	s.mu.Lock()
	changed := s.connected != up
	s.connected = up
	s.mu.Unlock()
	if up {
		s.poke()
	}
	if !changed {
		return
	}
	if up {
		s.cfg.Logger.Info("watch: listening", "channel", NotifyChannel)
	} else {
		s.cfg.Logger.Warn("watch: not listening; polling until the session is back", "interval", s.cfg.PollInterval.String())
	}
}

func (s *Service) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// loop reads new events while a watcher waits: at a notification or
// Written, and every PollInterval (while the listener is up, a backstop
// for events written outside the service), and again soon after a read that found committed events held back behind
// a running transaction (that transaction's end sends no notification when
// it wrote no event).
func (s *Service) loop(ctx context.Context) {
	retry := time.Duration(0)
	var last time.Time
	for {
		wait := s.cfg.PollInterval
		if retry > 0 && retry < wait {
			wait = retry
		}
		// Coalesce: the notifications of the next Coalesce are served by
		// the next read.
		if d := s.cfg.Coalesce - time.Since(last); d > 0 && !s.pause(ctx, d) {
			return
		}
		// With nobody waiting on this replica, no read is worth its cost:
		// not a wake-up (Written after every write), not the retry of a
		// held read (under a steady write load a read is nearly always
		// held), not the backstop. Each would read every event written
		// since the last one: 8% of the binary's CPU under bench-http's
		// acquires, with no watcher at all. The buffer is marked stale
		// instead: readers go to the database, and the next Changed pokes
		// the loop, whose next read starts over at the horizon.
		s.mu.Lock()
		skip := s.ready && !s.interest
		if skip && !s.stale {
			s.stale, s.staleSince = true, time.Now()
		}
		s.mu.Unlock()
		if skip {
			retry = 0
			if !s.sleep(ctx, s.cfg.PollInterval) {
				return
			}
			continue
		}
		last = time.Now()
		held, err := s.advance(ctx)
		switch {
		case err != nil:
			s.cfg.Logger.Debug("watch: read failed; retrying", "error", err.Error())
			wait = min(wait, s.cfg.PollInterval)
			retry = 0
		case held:
			retry = min(max(2*retry, 10*time.Millisecond), 250*time.Millisecond)
			wait = min(wait, retry)
		default:
			retry = 0
		}
		if !s.sleep(ctx, wait) {
			return
		}
	}
}

// sleep waits up to d for a notification or a wake-up; false when the
// service stops.
func (s *Service) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-s.done:
		return false
	case <-s.wake:
	case <-t.C:
	}
	return true
}

// advance reads every event after head into the buffer and wakes the
// watchers when the stream advanced.
func (s *Service) advance(ctx context.Context) (held bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		s.mu.Lock()
		// After reads were skipped for longer than a poll interval, the
		// read would catch up on everything written meanwhile: it takes
		// the horizon only instead, as the first read does, and the buffer
		// starts over there (older positions are read from the database).
		// A shorter gap is read as usual, so that watchers that took a
		// moment to come back to Changed still read from the buffer.
		ready, head := s.ready, s.head
		restart := s.stale && time.Since(s.staleSince) > s.cfg.PollInterval
		s.mu.Unlock()
		limit := MaxPageSize
		if !ready || restart {
			head = Position{X: 3}
			limit = 0
		}
		events, next, at, h, err := s.dbRead(ctx, Admin, head, nil, limit)
		if err != nil {
			return false, err
		}
		s.mu.Lock()
		if !s.ready || restart {
			s.ready, s.bufStart, s.buf = true, next, s.buf[:0]
		}
		advanced := len(events) > 0 || s.head.Less(next)
		for i := range events {
			events[i].enc = &sync.Map{}
		}
		s.buf = append(s.buf, events...)
		if over := len(s.buf) - s.cfg.BufferSize; over > 0 {
			s.bufStart = s.buf[over-1].pos
			s.buf = slices.Delete(s.buf, 0, over)
		}
		s.head, s.headAt = maxPos(s.head, next), at
		s.stale = false
		s.reads++
		if advanced {
			s.interest = false
			close(s.changed)
			s.changed = make(chan struct{})
		}
		s.mu.Unlock()
		if limit == 0 || len(events) < limit {
			return h, nil
		}
	}
}

// Close stops the loop.
func (s *Service) Close() {
	select {
	case <-s.done:
		return
	default:
	}
	close(s.done)
	// Nothing of the service runs (or logs) after Close returns.
	s.wg.Wait()
}
