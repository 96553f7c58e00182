package rekey

import (
	"context"
	"database/sql"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/locks"
	"github.com/repolock/repolock/internal/normalize"
)

// Source is the keying rules the running service claims under
// (locks.Rules): the stored aliases, the generation of the stored rules,
// the rules versions whose locks are still stored (the shadows of every
// claim) and whether a newer rules version has served. It is loaded at
// start, reloaded every interval (Run) and at once when a claim finds the
// rules changed (Reload). It is safe for concurrent use.
type Source struct {
	db      *database.DB
	logger  *slog.Logger
	current atomic.Pointer[locks.Keying]
	mu      sync.Mutex // one load at a time
}

var _ locks.Rules = (*Source)(nil)

// NewSource loads the stored rules (an error when they cannot be read or
// the aliases do not form a valid set: a service must not claim under
// other rules).
func NewSource(ctx context.Context, db *database.DB, logger *slog.Logger) (*Source, error) {
	s := Unloaded(db, logger)
	if err := s.Reload(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// errNotLoaded is the Keying of a Source before its first load.
var errNotLoaded = repolock.Errorf(repolock.EUnavailable, "the keying rules are not loaded yet")

// Unloaded returns a Source that refuses every claim until its first
// Reload: for `api serve`, which starts before the database answers (and
// before its migrations ran) and loads the rules before it reports ready.
// Its Keying keys under the built-in rules only for lookups; claims are
// refused (unavailable), so nothing is ever claimed without the stored
// rules.
func Unloaded(db *database.DB, logger *slog.Logger) *Source {
	if db == nil || logger == nil {
		panic("rekey.Unloaded: a pool and a logger are required")
	}
	s := &Source{db: db, logger: logger}
	s.current.Store(&locks.Keying{Current: normalize.Default(), Refuse: errNotLoaded})
	return s
}

// Keying returns the rules of the last successful load.
func (s *Source) Keying() *locks.Keying { return s.current.Load() }

// StaleVersions is the number of older rules versions whose locks the
// last load found stored (shadows and versions this binary cannot key
// under): 0 when every lock is keyed under the current rules, or only
// under them and open conflicts' versions once nothing else is stale. A
// rules version change leaves it above 0 until `api rekey` completes; the
// metric repolock_rekey_stale_rules_versions exports it.
func (s *Source) StaleVersions() int {
	k := s.current.Load()
	return len(k.Shadows) + len(k.Unchecked)
}

// Refresh is Reload (the alias routes call it after a change).
func (s *Source) Refresh(ctx context.Context) error { return s.Reload(ctx) }

// Reload loads the stored rules again; on an error the current ones stay.
func (s *Source) Reload(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, err := LoadKeying(ctx, s.db)
	if err != nil {
		return err
	}
	if old := s.current.Swap(k); old.Generation != k.Generation {
		if len(k.Unchecked) > 0 {
			s.logger.Warn("locks keyed under rules versions this binary cannot key under are stored: claims cannot check their old keys until `api rekey` moves them",
				"versions", k.Unchecked)
		}
		s.logger.Info("keying rules loaded", "generation", k.Generation, "version", k.Current.Version(),
			"aliases", len(k.Current.Rules().Aliases), "shadow_versions", len(k.Shadows), "refusing", k.Refuse != nil)
	}
	return nil
}

// Run reloads every interval until ctx is done.
func (s *Source) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := s.Reload(ctx); err != nil && ctx.Err() == nil {
				s.logger.Warn("reloading the keying rules failed; keeping the current ones", "error", err.Error())
			}
		}
	}
}

// storedVersionsSQL lists the distinct rules versions of the stored locks
// by skipping through the index on (normalizer_version, ...): a few index
// probes, however many locks there are.
const storedVersionsSQL = `
WITH RECURSIVE v AS (
	(SELECT normalizer_version FROM RepositoryLockOwner ORDER BY normalizer_version LIMIT 1)
	UNION ALL
	SELECT (SELECT o.normalizer_version FROM RepositoryLockOwner o WHERE o.normalizer_version > v.normalizer_version
		ORDER BY o.normalizer_version LIMIT 1)
	FROM v WHERE v.normalizer_version IS NOT NULL
)
SELECT normalizer_version FROM v WHERE normalizer_version IS NOT NULL`

// openVersionsSQL lists the distinct rules versions of the locks of open
// re-keying conflicts: the stale locks once a complete run has checked
// every lock under the current version (checked_version).
const openVersionsSQL = `
SELECT DISTINCT o.normalizer_version
FROM rekey_conflicts c JOIN RepositoryLockOwner o ON o.id = c.lock_id
WHERE c.resolved_at IS NULL
ORDER BY 1`

// LoadKeying reads the stored rules in one snapshot: the aliases, the
// generation, the newest version that has served and the versions of the
// stored locks. The Keying keys under this binary's rules version with the
// aliases; its shadows are the older stored versions it supports; it
// refuses claims when a newer version has served.
func LoadKeying(ctx context.Context, db *database.DB) (_ *locks.Keying, err error) {
	defer repolock.WrapOp(&err, "rekey.LoadKeying")
	return loadKeying(ctx, db, nil)
}

// loadKeying is LoadKeying; tests pass next to key under a newer rules
// version built from the loaded ones (nil: this binary's rules).
func loadKeying(ctx context.Context, db *database.DB, next func(*normalize.Normalizer) *normalize.Normalizer) (*locks.Keying, error) {
	var (
		k     = &locks.Keying{}
		as    []Alias
		state struct {
			Generation int64 `db:"generation"`
			MaxVersion int   `db:"max_version"`
			Checked    int   `db:"checked_version"`
		}
		versions []int
		open     []int // the versions of the open conflicts' locks
	)
	err := db.Transact(ctx, database.TxOptions{ReadOnly: true, Isolation: sql.LevelRepeatableRead}, func(tx database.Tx) error {
		var err error
		if as, err = listAliases(ctx, tx); err != nil {
			return err
		}
		if err := tx.GetContext(ctx, &state, `SELECT generation, max_version, checked_version FROM normalizer_state`); err != nil {
			return database.MapError(err)
		}
		versions, open = versions[:0], open[:0]
		if err := tx.SelectContext(ctx, &versions, storedVersionsSQL); err != nil {
			return database.MapError(err)
		}
		return database.MapError(tx.SelectContext(ctx, &open, openVersionsSQL))
	})
	if err != nil {
		return nil, err
	}
	aliases, err := parseAliases(as)
	if err != nil {
		return nil, err
	}
	base, err := normalize.New(normalize.Rules{Aliases: aliases})
	if err != nil {
		return nil, err
	}
	k.Current = base
	if next != nil {
		k.Current = next(base)
	}
	k.Generation = state.Generation
	if state.Checked >= k.Current.Version() {
		// A complete run checked every lock under these rules: the locks
		// of older versions still stale are those of open conflicts.
		versions = open
	}
	for _, v := range versions {
		if v >= k.Current.Version() {
			continue
		}
		n, err := rulesFor(v, aliases, base)
		if err != nil {
			// A version older than this binary can key under (rules v1):
			// its keys cannot be computed, so claims cannot check them.
			// Reload logs it; `api rekey` moves those locks.
			k.Unchecked = append(k.Unchecked, v)
			continue
		}
		k.Shadows = append(k.Shadows, n)
	}
	if state.MaxVersion > k.Current.Version() {
		k.Refuse = repolock.Errorf(repolock.EUnavailable,
			"a replica with keying rules version %d has served; this one has version %d and claims nothing until it is upgraded",
			state.MaxVersion, k.Current.Version())
	}
	return k, nil
}

// rulesFor returns the normalizer of rules version v with aliases; base is
// the current version's.
func rulesFor(v int, aliases []normalize.Alias, base *normalize.Normalizer) (*normalize.Normalizer, error) {
	if v == base.Version() {
		return base, nil
	}
	return normalize.ForVersion(v, aliases)
}

// parseAliases reads stored aliases into normalize's form.
func parseAliases(as []Alias) ([]normalize.Alias, error) {
	out := make([]normalize.Alias, 0, len(as))
	for _, a := range as {
		from, err := normalize.ParseEndpoint(a.From)
		if err != nil {
			return nil, err
		}
		to, err := normalize.ParseEndpoint(a.To)
		if err != nil {
			return nil, err
		}
		out = append(out, normalize.Alias{From: from, To: to})
	}
	return out, nil
}

// lockClaimsSQL holds off every claim (each one inserts into
// RepositoryLockOwner, which takes ROW EXCLUSIVE) and waits for those in
// flight, until the transaction that changes the rules commits.
const lockClaimsSQL = `LOCK TABLE RepositoryLockOwner IN SHARE ROW EXCLUSIVE MODE`

// bumpGenerationSQL marks a change of the rules in force: every claim keyed
// under the old generation is refused by the guard from the commit on.
const bumpGenerationSQL = `UPDATE normalizer_state SET generation = generation + 1 RETURNING generation`

// RegisterVersion records that this binary, keying under rules version
// version, serves from now on: when no newer or equal version has served
// yet, it raises max_version and bumps the generation, holding off every
// claim while it does (the replicas of older versions then refuse claims,
// and their late claims fail the guard). api serve calls it at startup,
// after the migrations and before it reports ready; api rekey before it
// writes keys of its version.
func RegisterVersion(ctx context.Context, db *database.DB, version int) (err error) {
	defer repolock.WrapOp(&err, "rekey.RegisterVersion")
	return db.WithTx(ctx, func(tx database.Tx) error {
		var newest int
		if err := tx.GetContext(ctx, &newest, `SELECT max_version FROM normalizer_state`); err != nil {
			return database.MapError(err)
		}
		if newest >= version {
			return nil
		}
		if _, err := tx.ExecContext(ctx, lockClaimsSQL); err != nil {
			return database.MapError(err)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE normalizer_state SET max_version = greatest(max_version, $1), generation = generation + 1`, version); err != nil {
			return database.MapError(err)
		}
		return nil
	})
}
