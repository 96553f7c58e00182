package console

// data.go is the console's one door to the domain packages and the database:
// every call into users, apps, locks, gc, syncstate and normalize, and every
// read the pages need that no package offers (counts, events per hour, a
// lock's history), as literal read-only SQL. The console never writes locks,
// lock events or tenants itself: creating, revoking and deleting tenants and
// running GC go through the same domain functions as the admin HTTP API.

import (
	"context"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/lib/pq"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/apps"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/gc"
	"github.com/repolock/repolock/internal/locks"
	"github.com/repolock/repolock/internal/normalize"
	"github.com/repolock/repolock/internal/pagetoken"
	"github.com/repolock/repolock/internal/syncstate"
	"github.com/repolock/repolock/internal/tenants"
)

// data adapts the domain packages to what the pages show.
type data struct {
	db        *database.DB
	tenants   *tenants.Service
	locks     *locks.Service
	apps      *apps.Service
	reportsDB *database.DB // Config.ReportsDB, or db
	collector *gc.Collector
	sync      *syncstate.Store
}

func newData(cfg Config) *data {
	d := &data{db: cfg.DB, tenants: cfg.Tenants, locks: cfg.Locks, apps: cfg.Apps,
		reportsDB: cfg.ReportsDB, collector: cfg.Collector, sync: cfg.Sync}
	if d.reportsDB == nil {
		d.reportsDB = cfg.DB
	}
	return d
}

// ---- tenants, tokens ----

// tenantToken reports whether token is a valid tenant token (so sign-in can
// tell "a tenant token" from "no token at all").
func (d *data) tenantToken(ctx context.Context, token string) bool {
	_, err := d.tenants.Authenticate(ctx, token)
	return err == nil
}

// tenantRow is a tenant with what it holds.
type tenantRow struct {
	ID           string    `db:"id"`
	Name         string    `db:"name"`
	DisplayName  string    `db:"display_name"`
	CreatedAt    time.Time `db:"created_at"`
	Locks        int64     `db:"locks"`
	Applications int64     `db:"applications"`
	Credentials  int64     `db:"credentials"`
	ActiveTokens int64     `db:"active_tokens"`
}

// The figures come from report_ownership (maintained per tenant, migration
// 000023): a page costs its tenants, not their locks.
const tenantRowSelect = `
	SELECT u.id, u.name, u.display_name, u.created_at, r.locks, r.applications, r.credentials,
		(SELECT count(*) FROM api_tokens t WHERE t.cluster_user_id = u.id AND t.revoked_at IS NULL) AS active_tokens
	FROM cluster_users u JOIN report_ownership r ON r.tenant_id = u.id`

// listTenants returns a page of tenants by name after the name after
// (cluster_users_name_key), and the after of the next page ("" after the
// last).
func (d *data) listTenants(ctx context.Context, after string, size int) ([]tenantRow, string, error) {
	var rows []tenantRow
	err := d.db.SelectContext(ctx, &rows, tenantRowSelect+` WHERE u.name > $1 ORDER BY u.name LIMIT $2`, after, size+1)
	if err != nil {
		return nil, "", database.MapError(err)
	}
	rows, next := pagetoken.Trim(rows, size, func(last tenantRow) string { return last.Name })
	return rows, next, nil
}

func (d *data) tenant(ctx context.Context, name string) (tenantRow, error) {
	var t tenantRow
	err := d.db.GetContext(ctx, &t, tenantRowSelect+` WHERE u.name = $1`, name)
	if database.IsNoRows(err) {
		return tenantRow{}, repolock.Errorf(repolock.ENotFound, "tenant %q not found", name)
	}
	return t, database.MapError(err)
}

func (d *data) createTenant(ctx context.Context, name, displayName string) (tenants.Tenant, string, error) {
	return d.tenants.Create(ctx, name, displayName)
}

func (d *data) revokeTokens(ctx context.Context, name string) (int64, error) {
	return d.tenants.RevokeTokens(ctx, name)
}

func (d *data) deleteTenant(ctx context.Context, name string) (apps.TenantDeletion, error) {
	d2, err := d.apps.DeleteTenant(ctx, name)
	if err == nil {
		d.tenants.Flush()
	}
	return d2, err
}

// ---- overview ----

type counts struct {
	Tenants      int64 `db:"tenants"`
	Locks        int64 `db:"locks"`
	Applications int64 `db:"applications"`
	Credentials  int64 `db:"credentials"`
	Repositories int64 `db:"repositories"`
	SyncHosts    int64 `db:"sync_hosts"`
}

func (d *data) counts(ctx context.Context) (counts, error) {
	var c counts
	err := d.reportsDB.GetContext(ctx, &c, `SELECT
		(SELECT count(*) FROM cluster_users) AS tenants,
		(SELECT coalesce(sum(locks), 0) FROM report_ownership) AS locks,
		(SELECT coalesce(sum(applications), 0) FROM report_ownership) AS applications,
		(SELECT coalesce(sum(credentials), 0) FROM report_ownership) AS credentials,
		(SELECT count(*) FROM sync_repositories) AS repositories,
		(SELECT count(*) FROM sync_hosts) AS sync_hosts`)
	return c, database.MapError(err)
}

// hourCount is the number of events of one kind in one hour (hour is the
// Unix time of the hour's start divided by 3600).
type hourCount struct {
	Hour  int64  `db:"hour"`
	Event string `db:"event"`
	N     int64  `db:"n"`
}

// eventsPerHour counts lock events of the given kinds per hour from since
// (repository_lock_events_created_at_idx; repository_lock_events_denied_idx
// when only denials are asked for). A coalesced denial row
// counts its count, in the hour of its first denial.
func (d *data) eventsPerHour(ctx context.Context, events []string, since time.Time) ([]hourCount, error) {
	var rows []hourCount
	err := d.reportsDB.SelectContext(ctx, &rows, `
		SELECT floor(extract(epoch FROM created_at) / 3600)::bigint AS hour, event, sum(count) AS n
		FROM repository_lock_events
		WHERE event = ANY($1) AND created_at >= $2
		GROUP BY 1, 2 ORDER BY 1, 2`, pq.Array(events), since)
	return rows, database.MapError(err)
}

// lastRun is the newest recorded real (not dry) GC run, or nil, and the
// newest dry run when it started after that one (nil otherwise): the
// overview reports what the GC did, and says when a dry run came since.
func (d *data) lastRun(ctx context.Context) (real, laterDry *gc.Run, err error) {
	if real, err = d.collector.LastRun(ctx, false); err != nil {
		return nil, nil, err
	}
	dry, err := d.collector.LastRun(ctx, true)
	if err != nil {
		return nil, nil, err
	}
	if dry != nil && (real == nil || dry.StartedAt.After(real.StartedAt)) {
		laterDry = dry
	}
	return real, laterDry, nil
}

// ---- ownership ----

// normalizeURL is the API's normalization: the lock key of any spelling,
// under the rules the locks check keys under (with the deployment's
// aliases).
func (d *data) normalizeURL(raw string) (normalize.Key, error) {
	return d.locks.Rules().RepoURL(raw)
}

// owner returns the lock on key, or nil when the URL is free.
func (d *data) owner(ctx context.Context, key normalize.Key) (*locks.Owner, error) {
	o, err := d.locks.OwnerOf(ctx, key)
	if repolock.IsCode(err, repolock.ENotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &o, nil
}

// handoverOfLock is the lock's open handover offer (nil for none).
func (d *data) handoverOfLock(ctx context.Context, lockID string) (*locks.Handover, error) {
	return d.locks.HandoverOfLock(ctx, lockID)
}

// tenantHandovers are the first limit of the tenant's open offers
// received and of those made (the API's own listing, one page each), and
// whether either side has more.
func (d *data) tenantHandovers(ctx context.Context, tenantID string, limit int) (received, offered []locks.Handover, more bool, err error) {
	received, nextR, err := d.locks.ListHandovers(ctx, locks.HandoverFilter{TenantID: tenantID, Direction: locks.HandoversReceived}, limit, "")
	if err != nil {
		return nil, nil, false, err
	}
	offered, nextO, err := d.locks.ListHandovers(ctx, locks.HandoverFilter{TenantID: tenantID, Direction: locks.HandoversOffered}, limit, "")
	if err != nil {
		return nil, nil, false, err
	}
	return received, offered, nextR != "" || nextO != "", nil
}

// cancelHandover is the ownership page's Withdraw button:
// locks.Service.CancelHandover, as DELETE /v1/admin/handovers/{id}.
func (d *data) cancelHandover(ctx context.Context, id, actor string) (locks.Handover, error) {
	return d.locks.CancelHandover(ctx, id, actor)
}

// reserve is the reservations page's form: locks.Service.Reserve, as
// POST /v1/admin/reservations (?dry_run=true).
func (d *data) reserve(ctx context.Context, req locks.ReserveRequest) (locks.Reservation, []locks.CoveredLock, error) {
	return d.locks.Reserve(ctx, req)
}

// unreserve is the reservations page's Remove button:
// locks.Service.Unreserve, as DELETE /v1/admin/reservations/{id}.
func (d *data) unreserve(ctx context.Context, id string) error {
	return d.locks.Unreserve(ctx, id)
}

// transfer is the transfer form's action: locks.Service.Transfer, as
// POST /v1/admin/locks/{id}/transfer.
func (d *data) transfer(ctx context.Context, lockID, to, references, actor string) (locks.Transfer, error) {
	return d.locks.Transfer(ctx, locks.TransferRequest{LockID: lockID, To: to, References: references, Actor: actor})
}

// holder is an Application or a Repository Credential holding a lock.
type holder struct {
	Kind      string    `db:"kind"`
	ID        string    `db:"id"`
	Tenant    string    `db:"tenant"`
	Name      string    `db:"name"`
	RepoURL   string    `db:"repo_url"`
	CreatedAt time.Time `db:"created_at"`
}

// holderCursor is a keyset position in a lock's holders, ordered by
// (kind, created_at, id): applications first, then credentials.
type holderCursor struct {
	Kind      string
	CreatedAt time.Time
	ID        string
}

var holderStart = holderCursor{Kind: "", CreatedAt: time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), ID: "00000000-0000-0000-0000-000000000000"}

func (h holderCursor) encode() string {
	return base64.RawURLEncoding.EncodeToString([]byte(h.Kind + "|" + h.CreatedAt.UTC().Format(time.RFC3339Nano) + "|" + h.ID))
}

func decodeHolderCursor(s string) (holderCursor, error) {
	if s == "" {
		return holderStart, nil
	}
	bad := repolock.Errorf(repolock.EInvalid, "holders_after is not valid")
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) > 200 {
		return holderCursor{}, bad
	}
	parts := strings.Split(string(b), "|")
	if len(parts) != 3 || (parts[0] != "application" && parts[0] != "credential") {
		return holderCursor{}, bad
	}
	t, err := time.Parse(time.RFC3339Nano, parts[1])
	if err != nil || t.Year() < 1 || t.Year() > 9999 {
		return holderCursor{}, bad
	}
	if _, err := uuid.Parse(parts[2]); err != nil {
		return holderCursor{}, bad
	}
	return holderCursor{Kind: parts[0], CreatedAt: t.UTC(), ID: parts[2]}, nil
}

// holders returns a page of what holds lockID (the reference tables'
// lock_id indexes, then the rows by primary key) and the cursor of the next
// page ("" after the last).
func (d *data) holders(ctx context.Context, lockID, after string, size int) ([]holder, string, error) {
	cur, err := decodeHolderCursor(after)
	if err != nil {
		return nil, "", err
	}
	var rows []holder
	err = d.db.SelectContext(ctx, &rows, `
		SELECT * FROM (
			(SELECT 'application' AS kind, a.id, u.name AS tenant, a.name, a.repo_url, a.created_at
			   FROM RepositoryLockApplication r
			   JOIN applications a ON a.id = r.application_id
			   JOIN cluster_users u ON u.id = a.cluster_user_id
			  WHERE r.lock_id = $1 AND ('application', a.created_at, a.id) > ($2::text, $3::timestamptz, $4::uuid)
			  ORDER BY a.created_at, a.id LIMIT $5)
			UNION ALL
			(SELECT 'credential' AS kind, c.id, u.name AS tenant, c.name, c.repo_url, c.created_at
			   FROM RepositoryLockRepositoryCredential r
			   JOIN repository_credentials c ON c.id = r.repository_credential_id
			   JOIN cluster_users u ON u.id = c.cluster_user_id
			  WHERE r.lock_id = $1 AND ('credential', c.created_at, c.id) > ($2::text, $3::timestamptz, $4::uuid)
			  ORDER BY c.created_at, c.id LIMIT $5)
		) h
		ORDER BY kind, created_at, id LIMIT $5`, lockID, cur.Kind, cur.CreatedAt, cur.ID, size+1)
	if err != nil {
		return nil, "", database.MapError(err)
	}
	rows, next := pagetoken.Trim(rows, size, func(last holder) string {
		return holderCursor{Kind: last.Kind, CreatedAt: last.CreatedAt, ID: last.ID}.encode()
	})
	return rows, next, nil
}

// lockEvent is a row of repository_lock_events.
type lockEvent struct {
	ID        int64     `db:"id"`
	Event     string    `db:"event"`
	URL       string    `db:"git_repository_url"`
	Actor     *string   `db:"cluster_user_name"`
	Owner     *string   `db:"owner_user_name"`
	CreatedAt time.Time `db:"created_at"`
	// Count is how many events the row stands for: repeated denials of one
	// tenant for one URL within a window coalesce into one row (locks
	// package); LastAt is the newest of them (nil for a single event).
	Count  int64      `db:"count"`
	LastAt *time.Time `db:"last_at"`
	// Reason is a denial's: "claimed" (nil on rows older than
	// reservations) or "reserved", with the reservation's prefix.
	Reason         *string `db:"reason"`
	ReservedPrefix *string `db:"reserved_prefix"`
}

// DenialReason is why a denial was refused: "claimed" or "reserved"
// (report_denials' reason).
func (e lockEvent) DenialReason() string {
	if e.Reason == nil {
		return "claimed"
	}
	return *e.Reason
}

// Last is when the row's newest event happened.
func (e lockEvent) Last() time.Time {
	if e.LastAt != nil {
		return *e.LastAt
	}
	return e.CreatedAt
}

// eventFilter selects lock events; zero fields do not filter.
type eventFilter struct {
	Event     string
	URL       string // exact key
	Requester string // the acting tenant's name
	Owner     string // the owning tenant's name
	Since     time.Time
	Before    int64 // keyset: events with a smaller id (newest first)
}

func (f eventFilter) where() (string, []any) {
	where := "WHERE true"
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		where += " AND " + cond + strconv.Itoa(len(args))
	}
	if f.Event != "" {
		add("event = $", f.Event)
	}
	if f.URL != "" {
		add("git_repository_url = $", f.URL)
	}
	if f.Requester != "" {
		add("cluster_user_name = $", f.Requester)
	}
	if f.Owner != "" {
		add("owner_user_name = $", f.Owner)
	}
	if !f.Since.IsZero() {
		add("coalesce(last_at, created_at) >= $", f.Since)
	}
	if f.Before > 0 {
		add("id < $", f.Before)
	}
	return where, args
}

const lockEventColumns = `id, event, git_repository_url, cluster_user_name, owner_user_name, created_at, count, last_at, reason, reserved_prefix`

// events returns a page of lock events, newest first, and the before of the
// next page (the last event's id; "" after the last page).
func (d *data) events(ctx context.Context, f eventFilter, size int) ([]lockEvent, string, error) {
	where, args := f.where()
	args = append(args, size+1)
	var rows []lockEvent
	err := d.reportsDB.SelectContext(ctx, &rows, `SELECT `+lockEventColumns+` FROM repository_lock_events `+
		where+` ORDER BY id DESC LIMIT $`+strconv.Itoa(len(args)), args...)
	if err != nil {
		return nil, "", database.MapError(err)
	}
	rows, next := pagetoken.Trim(rows, size, func(last lockEvent) string { return strconv.FormatInt(last.ID, 10) })
	return rows, next, nil
}

// eachEvent calls fn for every event f selects, newest first, streaming
// (for the CSV download), at most limit rows.
func (d *data) eachEvent(ctx context.Context, f eventFilter, limit int, fn func(lockEvent) error) error {
	where, args := f.where()
	args = append(args, limit)
	rows, err := d.reportsDB.QueryxContext(ctx, `SELECT `+lockEventColumns+` FROM repository_lock_events `+
		where+` ORDER BY id DESC LIMIT $`+strconv.Itoa(len(args)), args...)
	if err != nil {
		return database.MapError(err)
	}
	defer rows.Close()
	for rows.Next() {
		var e lockEvent
		if err := rows.StructScan(&e); err != nil {
			return database.MapError(err)
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	return database.MapError(rows.Err())
}

// tenantLocks is a page of a tenant's locks (the API's own listing).
func (d *data) tenantLocks(ctx context.Context, tenantID string, size int, token string) ([]locks.Lock, string, error) {
	return d.locks.List(ctx, tenantID, size, token)
}

// reservations is a page of the reservations (the API's own listing).
func (d *data) reservations(ctx context.Context, size int, token string) ([]locks.Reservation, string, error) {
	return d.locks.ListReservations(ctx, size, token)
}

// ---- GC ----

func (d *data) gcRuns(ctx context.Context, size int, token string) ([]gc.Run, string, error) {
	return d.collector.ListRuns(ctx, size, token)
}

// collect runs the GC (or a dry run) exactly as POST /v1/admin/gc does.
func (d *data) collect(ctx context.Context, dryRun bool) (gc.Run, error) {
	opts := gc.DefaultOptions(gc.TriggerAPI)
	opts.DryRun = dryRun
	return d.collector.Collect(ctx, opts)
}

// ---- sync ----

// syncHost is a host of any tenant.
type syncHost struct {
	TenantID              string     `db:"tenant_id"`
	Tenant                string     `db:"tenant"`
	Name                  string     `db:"name"`
	Cursor                *int64     `db:"cursor"`
	FirstCursorSinceReset int64      `db:"first_cursor_since_reset"`
	Resets                int64      `db:"resets"`
	LastResetAt           *time.Time `db:"last_reset_at"`
	ConnectedAt           *time.Time `db:"connected_at"`
	Repositories          int64      `db:"repositories"`
}

// syncHosts returns a page of every tenant's hosts by (tenant, host) after
// the position after ("tenant/host", "" for the first page), and the after
// of the next page ("" after the last).
func (d *data) syncHosts(ctx context.Context, after string, size int) ([]syncHost, string, error) {
	afterTenant, afterHost, _ := strings.Cut(after, "/")
	var rows []syncHost
	err := d.db.SelectContext(ctx, &rows, `
		SELECT u.id AS tenant_id, u.name AS tenant, h.name, h.cursor, h.first_cursor_since_reset,
			h.resets, h.last_reset_at, h.connected_at,
			(SELECT count(*) FROM sync_repositories r WHERE r.host_id = h.id) AS repositories
		FROM sync_hosts h JOIN cluster_users u ON u.id = h.cluster_user_id
		WHERE (u.name, h.name) > ($1, $2 COLLATE "C")
		ORDER BY u.name, h.name COLLATE "C" LIMIT $3`, afterTenant, afterHost, size+1)
	if err != nil {
		return nil, "", database.MapError(err)
	}
	rows, next := pagetoken.Trim(rows, size, func(last syncHost) string { return last.Tenant + "/" + last.Name })
	return rows, next, nil
}

// leaseRow is a valid lease as the Leases page shows it: its holder, its
// fencing token, and its time left by the database's clock.
type leaseRow struct {
	Tenant     string    `db:"tenant"`
	Key        string    `db:"key"`
	Holder     string    `db:"holder"`
	Token      int64     `db:"token"`
	TTLMillis  int64     `db:"ttl_ms"`
	AcquiredAt time.Time `db:"acquired_at"`
	ExpiresAt  time.Time `db:"expires_at"`
	Remaining  float64   `db:"remaining"`
}

// TTLSeconds is the lease's TTL in seconds.
func (l leaseRow) TTLSeconds() float64 { return float64(l.TTLMillis) / 1000 }

// leases returns a page of every tenant's valid leases by (tenant, key)
// after the position after ("tenant/key", "" for the first page), and the
// after of the next page. Validity and the time left are the database's
// (clock_timestamp()), as the leases service judges them.
func (d *data) leases(ctx context.Context, after string, size int) ([]leaseRow, string, error) {
	afterTenant, afterKey, _ := strings.Cut(after, "/")
	var rows []leaseRow
	err := d.db.SelectContext(ctx, &rows, `
		SELECT u.name AS tenant, l.key, l.holder, l.token, l.ttl_ms, l.acquired_at, l.expires_at,
			greatest(extract(epoch FROM l.expires_at - clock_timestamp()), 0)::float8 AS remaining
		FROM leases l JOIN cluster_users u ON u.id = l.cluster_user_id
		WHERE l.expires_at > clock_timestamp() AND (u.name, l.key) > ($1, $2 COLLATE "C")
		ORDER BY u.name, l.key LIMIT $3`, afterTenant, afterKey, size+1)
	if err != nil {
		return nil, "", database.MapError(err)
	}
	rows, next := pagetoken.Trim(rows, size, func(last leaseRow) string { return last.Tenant + "/" + last.Key })
	return rows, next, nil
}

// needsIndex is a page of a host's repositories that need a re-index, with
// the reason (the API's own needs-index listing).
func (d *data) needsIndex(ctx context.Context, tenant, host string, size int, token string) ([]syncstate.Repository, string, error) {
	u, err := d.tenants.GetByName(ctx, tenant)
	if err != nil {
		return nil, "", err
	}
	return d.sync.ListRepositories(ctx, u.ID, syncstate.ListOptions{Host: host, NeedsIndex: true, PageSize: size, PageToken: token})
}

// isNotFound reports a domain not-found error.
func isNotFound(err error) bool { return repolock.IsCode(err, repolock.ENotFound) }

// userMessage is the message of a domain error, safe to show; other errors
// get a generic text (and are logged by the caller).
func userMessage(err error) (string, bool) {
	var e *repolock.Error
	if errors.As(err, &e) && e.Code != repolock.EInternal {
		return e.Message, true
	}
	var ne *normalize.Error
	if errors.As(err, &ne) {
		return ne.Error(), true
	}
	return "internal error", false
}
