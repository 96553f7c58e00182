package syncstate

import (
	"context"

	"github.com/lib/pq"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
)

// ListingResult is what RecordListing did.
type ListingResult struct {
	// Created counts repositories seen for the first time.
	Created int `json:"created"`
	// Initialized counts known repositories of the host whose
	// first_rev_since_reset was unset and now is the listed rev.
	Initialized int `json:"initialized"`
	// Unchanged counts the others: first_rev_since_reset already set, or
	// the repository is recorded on another host (a listing does not move
	// repositories; an event or an index result does).
	Unchanged int `json:"unchanged"`
}

// RecordListing records a host's listing of its repositories (discovery).
// cursorBefore is the host's first_cursor_since_reset (or cursor) as read
// before the listing call. For each listed repository on this host whose
// first_rev_since_reset is unset, it becomes the listed rev and the
// repository's first_cursor_since_reset is raised to cursorBefore;
// repositories not yet known are created on this host. Replaying a listing
// changes nothing more.
func (s *Store) RecordListing(ctx context.Context, tenantID, host string, cursorBefore int64, repos []ListedRepo) (_ ListingResult, err error) {
	defer repolock.WrapOp(&err, "syncstate.Store.RecordListing")
	if err := ValidateHostName(host); err != nil {
		return ListingResult{}, err
	}
	if err := validateCursor("cursor_before", cursorBefore); err != nil {
		return ListingResult{}, err
	}
	if len(repos) > MaxBatch {
		return ListingResult{}, repolock.Errorf(repolock.EInvalid, "a listing holds at most %d repositories, got %d", MaxBatch, len(repos))
	}
	names := make(pq.StringArray, len(repos))
	revs := make(pq.StringArray, len(repos))
	seen := make(map[string]int, len(repos))
	for i, r := range repos {
		if err := ValidateRepo(r.Repo); err != nil {
			return ListingResult{}, repolock.Wrap(repolock.EInvalid, err, "repos[%d]: %s", i, repolock.ErrorMessage(err))
		}
		if err := s.ValidateRev(r.Rev); err != nil {
			return ListingResult{}, repolock.Wrap(repolock.EInvalid, err, "repos[%d]: %s", i, repolock.ErrorMessage(err))
		}
		if j, dup := seen[r.Repo]; dup {
			return ListingResult{}, repolock.Errorf(repolock.EInvalid, "repos[%d]: repo %q is listed twice (also repos[%d])", i, truncate(r.Repo), j)
		}
		seen[r.Repo] = i
		names[i], revs[i] = r.Repo, r.Rev
	}
	var res ListingResult
	err = s.db.WithTx(ctx, func(tx database.Tx) error {
		h, err := getHost(ctx, tx, tenantID, host, false)
		if err != nil {
			return err
		}
		if err := checkCursorBefore(h, cursorBefore); err != nil {
			return err
		}
		if len(repos) == 0 {
			res = ListingResult{}
			return nil
		}
		// Rows are inserted or updated in repo order, the lock order of
		// every multi-row write of this package.
		var inserted []bool
		err = tx.SelectContext(ctx, &inserted, `
			INSERT INTO sync_repositories AS r
				(cluster_user_id, repo, host_id, first_cursor_since_reset, first_rev_since_reset)
			SELECT $1, l.repo, $2, $3, l.rev
			FROM unnest($4::text[], $5::text[]) AS l(repo, rev)
			ORDER BY l.repo COLLATE "C"
			ON CONFLICT (cluster_user_id, repo) DO UPDATE SET
				first_rev_since_reset = EXCLUDED.first_rev_since_reset,
				first_cursor_since_reset = GREATEST(r.first_cursor_since_reset, EXCLUDED.first_cursor_since_reset),
				updated_at = now()
			WHERE r.first_rev_since_reset IS NULL AND r.host_id = EXCLUDED.host_id
			RETURNING (xmax = 0) AS inserted`,
			tenantID, h.ID, cursorBefore, names, revs)
		if err != nil {
			return database.MapError(err)
		}
		res = ListingResult{}
		for _, ins := range inserted {
			if ins {
				res.Created++
			} else {
				res.Initialized++
			}
		}
		res.Unchanged = len(repos) - res.Created - res.Initialized
		return nil
	})
	return res, err
}

// checkCursorBefore rejects a "cursor noted before the call" that the host
// never reached: it would raise repositories' first_cursor_since_reset past
// future resets and hide them.
func checkCursorBefore(h hostRow, cursorBefore int64) error {
	if highest := h.highestKnownCursor(); cursorBefore > highest {
		return repolock.Errorf(repolock.EInvalid,
			"cursor_before %d is ahead of host %s (first_cursor_since_reset and cursor are at most %d); note the host's first_cursor_since_reset before the call",
			cursorBefore, h.Name, highest)
	}
	return nil
}
