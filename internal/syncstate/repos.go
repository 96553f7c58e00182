package syncstate

import (
	"context"
	"strconv"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/pagetoken"
)

// IndexResult is the outcome of a full fetch of a repository.
type IndexResult struct {
	// Host is the host the repository was fetched from: the host now
	// serving it. A host other than the recorded one moves the repository.
	Host string `json:"host"`
	// Rev is the rev of the fetched repository.
	Rev string `json:"rev"`
	// CursorBefore is the host's first_cursor_since_reset (or cursor) as
	// read before the fetch started.
	CursorBefore int64 `json:"cursor_before"`
}

// RecordIndexed records a full fetch: last_indexed_rev is raised to the
// fetched rev (never lowered) and the repository's first_cursor_since_reset
// is raised to CursorBefore (never lowered), which clears a cursor-reset
// flag even when the fetch brought nothing new. When the fetch came from
// another host than the recorded one, the repository moves there: its
// first_cursor_since_reset becomes CursorBefore (a value of the new host's
// sequence) and its first_rev_since_reset is unset (nothing has been seen on
// the new host's stream yet; the fetch covers everything up to
// CursorBefore). A repository not yet known is created. Replaying an index
// result changes nothing more.
func (s *Store) RecordIndexed(ctx context.Context, tenantID, repo string, ir IndexResult) (_ Repository, err error) {
	defer repolock.WrapOp(&err, "syncstate.Store.RecordIndexed")
	if err := ValidateRepo(repo); err != nil {
		return Repository{}, err
	}
	if err := ValidateHostName(ir.Host); err != nil {
		return Repository{}, err
	}
	if err := s.ValidateRev(ir.Rev); err != nil {
		return Repository{}, err
	}
	if err := validateCursor("cursor_before", ir.CursorBefore); err != nil {
		return Repository{}, err
	}
	var out Repository
	err = s.db.WithTx(ctx, func(tx database.Tx) error {
		h, err := getHost(ctx, tx, tenantID, ir.Host, false)
		if err != nil {
			return err
		}
		if err := checkCursorBefore(h, ir.CursorBefore); err != nil {
			return err
		}
		// One row, one lock: no ordering concern with the batch writers.
		if _, err := tx.ExecContext(ctx, `
			INSERT INTO sync_repositories AS r
				(cluster_user_id, repo, host_id, first_cursor_since_reset, last_indexed_rev, indexed_at)
			VALUES ($1, $2, $3, $4, $5, now())
			ON CONFLICT (cluster_user_id, repo) DO UPDATE SET
				last_indexed_rev = GREATEST(r.last_indexed_rev, EXCLUDED.last_indexed_rev),
				first_cursor_since_reset = CASE WHEN r.host_id = EXCLUDED.host_id
					THEN GREATEST(r.first_cursor_since_reset, EXCLUDED.first_cursor_since_reset)
					ELSE EXCLUDED.first_cursor_since_reset END,
				first_rev_since_reset = CASE WHEN r.host_id = EXCLUDED.host_id
					THEN r.first_rev_since_reset END,
				host_id = EXCLUDED.host_id,
				indexed_at = now(),
				updated_at = now()`,
			tenantID, repo, h.ID, ir.CursorBefore, ir.Rev); err != nil {
			return database.MapError(err)
		}
		out, err = getRepository(ctx, tx, tenantID, repo)
		return err
	})
	return out, err
}

// repositorySelect reads repositories with their host's name and
// first_cursor_since_reset and the needs-index reason, the rule's
// conditions in order: the first two are the stored needs_index_by_rev
// column, the third compares with the host's row.
const repositorySelect = `
	SELECT r.repo, h.name AS host,
		COALESCE(r.last_indexed_rev, '') AS last_indexed_rev,
		COALESCE(r.first_rev_since_reset, '') AS first_rev_since_reset,
		r.first_cursor_since_reset,
		COALESCE(r.last_firehose_rev, '') AS last_firehose_rev,
		h.first_cursor_since_reset AS host_first_cursor_since_reset,
		CASE
			WHEN r.last_indexed_rev IS NULL THEN 'never_indexed'
			WHEN r.needs_index_by_rev THEN 'revision_gap'
			WHEN r.first_cursor_since_reset < h.first_cursor_since_reset THEN 'cursor_reset'
			ELSE '' END AS reason,
		r.indexed_at, r.created_at, r.updated_at
	FROM sync_repositories r JOIN sync_hosts h ON h.id = r.host_id`

func getRepository(ctx context.Context, q database.Querier, tenantID, repo string) (Repository, error) {
	var r Repository
	err := q.GetContext(ctx, &r, repositorySelect+` WHERE r.cluster_user_id = $1 AND r.repo = $2`, tenantID, repo)
	if err != nil {
		if database.IsNoRows(err) {
			return Repository{}, repolock.Errorf(repolock.ENotFound, "repository %q not found", truncate(repo))
		}
		return Repository{}, database.MapError(err)
	}
	r.NeedsIndex = r.Reason != ReasonNone
	return r, nil
}

// GetRepository returns one repository's indicators and whether it needs a
// re-index, with the reason.
func (s *Store) GetRepository(ctx context.Context, tenantID, repo string) (_ Repository, err error) {
	defer repolock.WrapOp(&err, "syncstate.Store.GetRepository")
	if err := ValidateRepo(repo); err != nil {
		return Repository{}, err
	}
	return getRepository(ctx, s.db, tenantID, repo)
}

// ListOptions select repositories.
type ListOptions struct {
	// Host limits the list to one host's repositories; "" lists all.
	Host string
	// NeedsIndex lists only the repositories that need a re-index; it
	// needs Host.
	NeedsIndex bool
	PageSize   int // 1..500, default 50
	PageToken  string
}

// pageToken is the keyset position after the last repository returned.
// Phase 0 lists by repo. A needs-index list runs in two phases: phase 1 the
// repositories flagged by the rev conditions, by repo (partial index
// sync_repositories_needs_index_by_rev_idx); phase 2 those flagged only by
// the cursor condition, by (first_cursor_since_reset, repo)
// (sync_repositories_host_cursor_idx).
type pageToken struct {
	Phase  int    `json:"p"`
	Cursor int64  `json:"c,omitempty"`
	Repo   string `json:"r"`
}

// Validate range-checks a decoded token (internal/pagetoken runs it).
func (t *pageToken) Validate() error {
	if t.Phase < 0 || t.Phase > 2 || t.Cursor < -1 || len(t.Repo) > MaxRepoLength {
		return pagetoken.Invalid()
	}
	return nil
}

// reposScope binds a repositories token to the tenant and the list's
// filters.
func reposScope(tenantID string, opts ListOptions) string {
	return pagetoken.Scope(tenantID, opts.Host, strconv.FormatBool(opts.NeedsIndex))
}

func (t pageToken) encode(scope string) string {
	return pagetoken.Encode(pagetoken.KindSyncRepos, scope, t)
}

func decodePageToken(scope, s string, needsIndex bool) (pageToken, error) {
	t, first, err := pagetoken.Decode[pageToken](pagetoken.KindSyncRepos, scope, s)
	if err != nil {
		return pageToken{}, err
	}
	if first {
		if needsIndex {
			return pageToken{Phase: 1}, nil
		}
		return pageToken{}, nil
	}
	if (needsIndex && t.Phase != 1 && t.Phase != 2) || (!needsIndex && t.Phase != 0) {
		return pageToken{}, pagetoken.Invalid()
	}
	return t, nil
}

// ListRepositories lists repositories a page at a time. With NeedsIndex it
// lists those of Host that need a re-index (first those flagged by the rev
// conditions, by repo, then those flagged only by a cursor reset, by
// first_cursor_since_reset and repo); every page is an index range scan
// whatever the number of repositories. A repository whose flag changes
// while the pages are read may be missed or repeated by that pass; the next
// pass sees it.
func (s *Store) ListRepositories(ctx context.Context, tenantID string, opts ListOptions) (_ []Repository, _ string, err error) {
	defer repolock.WrapOp(&err, "syncstate.Store.ListRepositories")
	size, err := pageSizeOrDefault(opts.PageSize)
	if err != nil {
		return nil, "", err
	}
	if opts.NeedsIndex && opts.Host == "" {
		return nil, "", repolock.Errorf(repolock.EInvalid, "needs_index=true needs host: the rule compares with the host's first_cursor_since_reset")
	}
	scope := reposScope(tenantID, opts)
	tok, err := decodePageToken(scope, opts.PageToken, opts.NeedsIndex)
	if err != nil {
		return nil, "", err
	}
	var h hostRow
	if opts.Host != "" {
		if err := ValidateHostName(opts.Host); err != nil {
			return nil, "", err
		}
		if h, err = getHost(ctx, s.db, tenantID, opts.Host, false); err != nil {
			return nil, "", err
		}
	}
	var (
		out  []Repository
		next string
	)
	switch {
	case !opts.NeedsIndex:
		out, next, err = s.listAll(ctx, tenantID, h, tok, size, scope)
	default:
		out, next, err = s.listNeedsIndex(ctx, h, tok, size, scope)
	}
	if err != nil {
		return nil, "", err
	}
	if out == nil {
		out = []Repository{} // an empty list, not null, in JSON
	}
	for i := range out {
		out[i].NeedsIndex = out[i].Reason != ReasonNone
	}
	return out, next, nil
}

func (s *Store) listAll(ctx context.Context, tenantID string, h hostRow, tok pageToken, size int, scope string) ([]Repository, string, error) {
	var rows []Repository
	var err error
	if h.ID != "" {
		// sync_repositories_host_repo_idx
		err = s.db.SelectContext(ctx, &rows, repositorySelect+`
			WHERE r.host_id = $1 AND r.repo > $2 ORDER BY r.repo LIMIT $3`, h.ID, tok.Repo, size+1)
	} else {
		// sync_repositories_tenant_repo_key
		err = s.db.SelectContext(ctx, &rows, repositorySelect+`
			WHERE r.cluster_user_id = $1 AND r.repo > $2 ORDER BY r.repo LIMIT $3`, tenantID, tok.Repo, size+1)
	}
	if err != nil {
		return nil, "", database.MapError(err)
	}
	rows, next := pagetoken.Trim(rows, size, func(last Repository) string {
		return pageToken{Repo: last.Repo}.encode(scope)
	})
	return rows, next, nil
}

// Needs-index queries of one host. $1 host id, then the keyset position and
// the limit (and, for phase 2, the host's first_cursor_since_reset).
const (
	needsIndexByRevSQL = repositorySelect + `
		WHERE r.host_id = $1 AND r.needs_index_by_rev AND r.repo > $2
		ORDER BY r.repo LIMIT $3`
	needsIndexByCursorSQL = repositorySelect + `
		WHERE r.host_id = $1 AND r.first_cursor_since_reset < $2 AND NOT r.needs_index_by_rev
			AND (r.first_cursor_since_reset, r.repo) > ($3, $4)
		ORDER BY r.first_cursor_since_reset, r.repo LIMIT $5`
)

func (s *Store) listNeedsIndex(ctx context.Context, h hostRow, tok pageToken, size int, scope string) ([]Repository, string, error) {
	var out []Repository
	if tok.Phase == 1 {
		if err := s.db.SelectContext(ctx, &out, needsIndexByRevSQL, h.ID, tok.Repo, size+1); err != nil {
			return nil, "", database.MapError(err)
		}
		var next string
		out, next = pagetoken.Trim(out, size, func(last Repository) string {
			return pageToken{Phase: 1, Repo: last.Repo}.encode(scope)
		})
		if next != "" {
			return out, next, nil
		}
		// Phase 1 is done: fill the page from phase 2's start.
		tok = pageToken{Phase: 2, Cursor: -1}
	}
	room := size - len(out)
	var more []Repository
	if err := s.db.SelectContext(ctx, &more, needsIndexByCursorSQL,
		h.ID, h.FirstCursorSinceReset, tok.Cursor, tok.Repo, room+1); err != nil {
		return nil, "", database.MapError(err)
	}
	if room == 0 {
		// The page is full of phase 1 rows: continue at phase 2's start
		// if phase 2 has some.
		if len(more) > 0 {
			return out, pageToken{Phase: 2, Cursor: -1}.encode(scope), nil
		}
		return out, "", nil
	}
	more, next := pagetoken.Trim(more, room, func(last Repository) string {
		return pageToken{Phase: 2, Cursor: last.FirstCursorSinceReset, Repo: last.Repo}.encode(scope)
	})
	return append(out, more...), next, nil
}
