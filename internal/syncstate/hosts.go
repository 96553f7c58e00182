package syncstate

import (
	"context"
	"database/sql"
	"time"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/pagetoken"
)

// hostRow is a sync_hosts row.
type hostRow struct {
	ID                    string        `db:"id"`
	Name                  string        `db:"name"`
	Cursor                sql.NullInt64 `db:"cursor"`
	FirstCursorSinceReset int64         `db:"first_cursor_since_reset"`
	StrictCursor          bool          `db:"strict_cursor"`
	AwaitingFirstEvent    bool          `db:"awaiting_first_event"`
	ResetPending          bool          `db:"reset_pending"`
	Resets                int64         `db:"resets"`
	LastResetAt           sql.NullTime  `db:"last_reset_at"`
	ConnectedAt           sql.NullTime  `db:"connected_at"`
	CreatedAt             time.Time     `db:"created_at"`
	UpdatedAt             time.Time     `db:"updated_at"`
}

const hostColumns = `id, name, cursor, first_cursor_since_reset, strict_cursor, awaiting_first_event,
	reset_pending, resets, last_reset_at, connected_at, created_at, updated_at`

func (h hostRow) host() Host {
	out := Host{
		Name:                  h.Name,
		FirstCursorSinceReset: h.FirstCursorSinceReset,
		StrictCursor:          h.StrictCursor,
		AwaitingFirstEvent:    h.AwaitingFirstEvent,
		ResetPending:          h.ResetPending,
		Resets:                h.Resets,
		CreatedAt:             h.CreatedAt,
		UpdatedAt:             h.UpdatedAt,
	}
	if h.Cursor.Valid {
		c := h.Cursor.Int64
		out.Cursor = &c
	}
	if h.LastResetAt.Valid {
		t := h.LastResetAt.Time
		out.LastResetAt = &t
	}
	if h.ConnectedAt.Valid {
		t := h.ConnectedAt.Time
		out.ConnectedAt = &t
	}
	return out
}

// highestKnownCursor is the largest cursor value the host is known to have
// reached: a "cursor noted before a fetch" cannot be above it.
func (h hostRow) highestKnownCursor() int64 {
	if h.Cursor.Valid && h.Cursor.Int64 > h.FirstCursorSinceReset {
		return h.Cursor.Int64
	}
	return h.FirstCursorSinceReset
}

// firstEvent applies the rule for the first event received after a
// connection, whose cursor is c: after an "outdated cursor" notice, or in
// strict mode when c skips past cursor+1, c becomes the host's
// first_cursor_since_reset (never lowering it). It reports whether the
// value moved.
func (h *hostRow) firstEvent(c int64) (reset bool) {
	if !h.AwaitingFirstEvent {
		return false
	}
	h.AwaitingFirstEvent = false
	pending := h.ResetPending
	h.ResetPending = false
	// c-1 > cursor rather than c > cursor+1: no overflow at MaxInt64.
	gap := h.StrictCursor && h.Cursor.Valid && c-1 > h.Cursor.Int64
	if !pending && !gap {
		return false
	}
	if c <= h.FirstCursorSinceReset {
		return false
	}
	h.FirstCursorSinceReset = c
	return true
}

func getHost(ctx context.Context, q database.Querier, tenantID, name string, forUpdate bool) (hostRow, error) {
	query := `SELECT ` + hostColumns + ` FROM sync_hosts WHERE cluster_user_id = $1 AND name = $2`
	if forUpdate {
		// NO KEY UPDATE, not UPDATE: writers of repositories take FOR KEY
		// SHARE on their host through the foreign key, and must not queue
		// behind a batch that holds the host while it waits for their
		// repository row (a deadlock).
		query += ` FOR NO KEY UPDATE`
	}
	var h hostRow
	if err := q.GetContext(ctx, &h, query, tenantID, name); err != nil {
		if database.IsNoRows(err) {
			return hostRow{}, hostNotFound(name)
		}
		return hostRow{}, database.MapError(err)
	}
	return h, nil
}

// saveHost writes the connection state of h (locked by the caller), raises
// its cursor to lastCursor (when not nil) and its first_cursor_since_reset
// to h's, and counts a reset when reset is true.
func saveHost(ctx context.Context, q database.Querier, h hostRow, lastCursor *int64, reset, connected bool) (hostRow, error) {
	var out hostRow
	err := q.GetContext(ctx, &out, `
		UPDATE sync_hosts SET
			cursor = GREATEST(cursor, $2),
			first_cursor_since_reset = GREATEST(first_cursor_since_reset, $3),
			awaiting_first_event = $4,
			reset_pending = $5,
			resets = resets + CASE WHEN $6 THEN 1 ELSE 0 END,
			last_reset_at = CASE WHEN $6 THEN now() ELSE last_reset_at END,
			connected_at = CASE WHEN $7 THEN now() ELSE connected_at END,
			updated_at = now()
		WHERE id = $1
		RETURNING `+hostColumns,
		h.ID, lastCursor, h.FirstCursorSinceReset, h.AwaitingFirstEvent, h.ResetPending, reset, connected)
	return out, database.MapError(err)
}

// PutHost registers a host for the tenant, or updates its settings when it
// exists (strictCursor nil keeps the current setting; false on creation). It
// reports whether the host was created.
func (s *Store) PutHost(ctx context.Context, tenantID, name string, strictCursor *bool) (_ Host, _ bool, err error) {
	defer repolock.WrapOp(&err, "syncstate.Store.PutHost")
	if err := ValidateHostName(name); err != nil {
		return Host{}, false, err
	}
	var row struct {
		hostRow
		Created bool `db:"created"`
	}
	err = s.db.GetContext(ctx, &row, `
		INSERT INTO sync_hosts AS h (cluster_user_id, name, strict_cursor)
		VALUES ($1, $2, COALESCE($3, false))
		ON CONFLICT (cluster_user_id, name) DO UPDATE SET
			strict_cursor = COALESCE($3, h.strict_cursor),
			updated_at = CASE WHEN h.strict_cursor = COALESCE($3, h.strict_cursor) THEN h.updated_at ELSE now() END
		RETURNING `+hostColumns+`, (xmax = 0) AS created`, tenantID, name, strictCursor)
	if err != nil {
		return Host{}, false, database.MapError(err)
	}
	return row.hostRow.host(), row.Created, nil
}

// GetHost returns one host of the tenant.
func (s *Store) GetHost(ctx context.Context, tenantID, name string) (_ Host, err error) {
	defer repolock.WrapOp(&err, "syncstate.Store.GetHost")
	if err := ValidateHostName(name); err != nil {
		return Host{}, err
	}
	h, err := getHost(ctx, s.db, tenantID, name, false)
	if err != nil {
		return Host{}, err
	}
	return h.host(), nil
}

// ListHosts returns the tenant's hosts ordered by name, a page at a time.
// pageToken is the next-page token of the previous page ("" for the first).
func (s *Store) ListHosts(ctx context.Context, tenantID string, pageSize int, pageToken string) (_ []Host, _ string, err error) {
	defer repolock.WrapOp(&err, "syncstate.Store.ListHosts")
	size, err := pageSizeOrDefault(pageSize)
	if err != nil {
		return nil, "", err
	}
	cur, first, err := pagetoken.Decode[pagetoken.Name](pagetoken.KindSyncHosts, tenantID, pageToken)
	if err != nil {
		return nil, "", err
	}
	if !first && ValidateHostName(cur.Name) != nil {
		return nil, "", pagetoken.Invalid()
	}
	after := cur.Name
	var rows []hostRow
	// Served by sync_hosts_tenant_name_key.
	err = s.db.SelectContext(ctx, &rows, `
		SELECT `+hostColumns+` FROM sync_hosts
		WHERE cluster_user_id = $1 AND name > $2
		ORDER BY name LIMIT $3`, tenantID, after, size+1)
	if err != nil {
		return nil, "", database.MapError(err)
	}
	rows, next := pagetoken.Trim(rows, size, func(last hostRow) string {
		return pagetoken.Encode(pagetoken.KindSyncHosts, tenantID, pagetoken.Name{Name: last.Name})
	})
	hosts := make([]Host, len(rows))
	for i, r := range rows {
		hosts[i] = r.host()
	}
	return hosts, next, nil
}

// Connection describes a (re)connection to a host's stream.
type Connection struct {
	// OutdatedCursor is the host's notice that the cursor we asked for is
	// too old to be replayed: events were missed.
	OutdatedCursor bool
	// FirstCursor is the cursor of the first event received after the
	// connection, when already known. Without it, the first event of the
	// next ApplyEvents call plays that role.
	FirstCursor *int64
}

// ConnectResult is what Connect did.
type ConnectResult struct {
	Host Host `json:"host"`
	// Reset is true when the host's first_cursor_since_reset moved.
	Reset bool `json:"reset"`
}

// Connect records a (re)connection of a host's stream. After an outdated
// cursor notice, the host's first_cursor_since_reset becomes the cursor of
// the first event received (c.FirstCursor, or the first event of the next
// batch). In strict mode the same happens when that first cursor is beyond
// cursor+1. A pending reset is kept until a first event resolves it, so a
// reconnection does not lose it. Replaying a Connect changes nothing more.
func (s *Store) Connect(ctx context.Context, tenantID, name string, c Connection) (_ ConnectResult, err error) {
	return s.ConnectFenced(ctx, tenantID, name, c, 0)
}

// ConnectFenced is Connect guarded by a lease's fencing token (0:
// unguarded) on HostGuard(name), checked in its transaction.
func (s *Store) ConnectFenced(ctx context.Context, tenantID, name string, c Connection, fencingToken int64) (_ ConnectResult, err error) {
	defer repolock.WrapOp(&err, "syncstate.Store.Connect")
	if err := ValidateHostName(name); err != nil {
		return ConnectResult{}, err
	}
	if err := validateToken(fencingToken); err != nil {
		return ConnectResult{}, err
	}
	if c.FirstCursor != nil {
		if err := validateCursor("first_cursor", *c.FirstCursor); err != nil {
			return ConnectResult{}, err
		}
	}
	var res ConnectResult
	err = s.db.WithTx(ctx, func(tx database.Tx) error {
		if err := checkFence(ctx, tx, tenantID, name, fencingToken); err != nil {
			return err
		}
		h, err := getHost(ctx, tx, tenantID, name, true)
		if err != nil {
			return err
		}
		h.AwaitingFirstEvent = true
		h.ResetPending = h.ResetPending || c.OutdatedCursor
		reset := false
		if c.FirstCursor != nil {
			before := h.FirstCursorSinceReset
			reset = h.firstEvent(*c.FirstCursor)
			s.warnBackwards(ctx, h, *c.FirstCursor, before, c.OutdatedCursor)
		}
		saved, err := saveHost(ctx, tx, h, nil, reset, true)
		if err != nil {
			return err
		}
		res = ConnectResult{Host: saved.host(), Reset: reset}
		return nil
	})
	return res, err
}

// warnBackwards logs a reset notice whose first cursor is below what is
// recorded: first_cursor_since_reset never decreases, so such a reset
// cannot be recorded (a host whose sequence restarted needs a new name).
func (s *Store) warnBackwards(ctx context.Context, h hostRow, first, before int64, outdated bool) {
	if outdated && first < before {
		s.logger.WarnContext(ctx, "syncstate: reset to a first cursor below first_cursor_since_reset ignored",
			"host", h.Name, "first_cursor", first, "first_cursor_since_reset", before)
	}
}

func pageSizeOrDefault(n int) (int, error) {
	if n == 0 {
		return DefaultPageSize, nil
	}
	if n < 1 || n > MaxPageSize {
		return 0, repolock.Errorf(repolock.EInvalid, "page_size must be from 1 to %d", MaxPageSize)
	}
	return n, nil
}
