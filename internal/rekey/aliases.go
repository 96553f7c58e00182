package rekey

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/normalize"
)

// Alias is one stored configured alias (table normalizer_aliases).
type Alias struct {
	ID        string    `db:"id" json:"id"`
	From      string    `db:"from_endpoint" json:"from"`
	To        string    `db:"to_endpoint" json:"to"`
	CreatedAt time.Time `db:"created_at" json:"created_at"`
}

// ListAliases returns every stored alias, ordered by From.
func (s *Service) ListAliases(ctx context.Context) (_ []Alias, err error) {
	defer repolock.WrapOp(&err, "rekey.ListAliases")
	return listAliases(ctx, s.db)
}

func listAliases(ctx context.Context, q database.Querier) (_ []Alias, err error) {
	out := []Alias{}
	err = q.SelectContext(ctx, &out, `SELECT id, from_endpoint, to_endpoint, created_at FROM normalizer_aliases ORDER BY from_endpoint`)
	return out, database.MapError(err)
}

// Load returns the normalizer of the stored aliases (the built-in rules
// plus them), as they are now in the database.
func (s *Service) Load(ctx context.Context) (_ *normalize.Normalizer, err error) {
	defer repolock.WrapOp(&err, "rekey.Load")
	return load(ctx, s.db)
}

func load(ctx context.Context, q database.Querier) (*normalize.Normalizer, error) {
	as, err := listAliases(ctx, q)
	if err != nil {
		return nil, err
	}
	return build(as)
}

func build(as []Alias) (*normalize.Normalizer, error) {
	rules := normalize.Rules{}
	for _, a := range as {
		from, err := normalize.ParseEndpoint(a.From)
		if err != nil {
			return nil, err
		}
		to, err := normalize.ParseEndpoint(a.To)
		if err != nil {
			return nil, err
		}
		rules.Aliases = append(rules.Aliases, normalize.Alias{From: from, To: to})
	}
	return normalize.New(rules)
}

// lockAliasesSQL serializes changes of the alias set, so that the set is
// validated as a whole (normalize.New) against what the change commits
// next to. Readers are not blocked.
const lockAliasesSQL = `LOCK TABLE normalizer_aliases IN SHARE ROW EXCLUSIVE MODE`

// AddAlias stores the alias from -> to (endpoints in key syntax,
// host[+port][/prefix], stored canonical). The resulting set must pass
// normalize.New; an existing alias with the same From is already_exists.
// Adding an alias changes keys: run `api rekey` afterwards.
func (s *Service) AddAlias(ctx context.Context, from, to string) (_ Alias, err error) {
	defer repolock.WrapOp(&err, "rekey.AddAlias")
	fe, err := normalize.ParseEndpoint(from)
	if err != nil {
		return Alias{}, repolock.Wrap(repolock.EInvalid, err, "from: %s", repolock.ErrorMessage(err))
	}
	te, err := normalize.ParseEndpoint(to)
	if err != nil {
		return Alias{}, repolock.Wrap(repolock.EInvalid, err, "to: %s", repolock.ErrorMessage(err))
	}
	var a Alias
	err = s.db.WithTx(ctx, func(tx database.Tx) error {
		if _, err := tx.ExecContext(ctx, lockAliasesSQL); err != nil {
			return database.MapError(err)
		}
		cur, err := listAliases(ctx, tx)
		if err != nil {
			return err
		}
		for _, c := range cur {
			if c.From == fe.String() {
				return repolock.Errorf(repolock.EAlreadyExists, "an alias from %s already exists", c.From)
			}
		}
		if _, err := build(append(cur, Alias{From: fe.String(), To: te.String()})); err != nil {
			return err
		}
		err = tx.GetContext(ctx, &a, `INSERT INTO normalizer_aliases (from_endpoint, to_endpoint) VALUES ($1, $2)
			RETURNING id, from_endpoint, to_endpoint, created_at`, fe.String(), te.String())
		return database.MapError(err)
	})
	return a, err
}

// RemoveAlias deletes the alias whose From is from (key syntax, read
// canonically). Removing an alias changes keys: run `api rekey` afterwards.
func (s *Service) RemoveAlias(ctx context.Context, from string) (err error) {
	defer repolock.WrapOp(&err, "rekey.RemoveAlias")
	fe, err := normalize.ParseEndpoint(from)
	if err != nil {
		return repolock.Wrap(repolock.EInvalid, err, "from: %s", repolock.ErrorMessage(err))
	}
	return s.db.WithTx(ctx, func(tx database.Tx) error {
		if _, err := tx.ExecContext(ctx, lockAliasesSQL); err != nil {
			return database.MapError(err)
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM normalizer_aliases WHERE from_endpoint = $1`, fe.String())
		if err != nil {
			return database.MapError(err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return repolock.Errorf(repolock.ENotFound, "no alias from %s", fe.String())
		}
		return nil
	})
}

// Source is the normalizer the running service keys URLs with: the stored
// aliases, loaded at start and refreshed every interval. It is safe for
// concurrent use.
type Source struct {
	db      *database.DB
	logger  *slog.Logger
	current atomic.Pointer[normalize.Normalizer]
}

// NewSource loads the stored aliases (an error when they cannot be read or
// do not form a valid set: the service must not start on other rules).
func NewSource(ctx context.Context, db *database.DB, logger *slog.Logger) (*Source, error) {
	s := Unloaded(db, logger)
	if err := s.Refresh(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Unloaded returns a Source holding the built-in rules until its first
// Refresh: for `api serve`, which starts before the database answers (and
// before its migrations ran) and loads the aliases before it reports ready;
// until then its API answers 503, so nothing is keyed without them.
func Unloaded(db *database.DB, logger *slog.Logger) *Source {
	if logger == nil {
		logger = slog.Default()
	}
	s := &Source{db: db, logger: logger}
	s.current.Store(normalize.Default())
	return s
}

// Current returns the normalizer of the last successful load.
func (s *Source) Current() *normalize.Normalizer { return s.current.Load() }

// Refresh reloads the stored aliases; on an error the current set stays.
func (s *Source) Refresh(ctx context.Context) error {
	n, err := load(ctx, s.db)
	if err != nil {
		return err
	}
	if old := s.current.Swap(n); old.Fingerprint() != n.Fingerprint() {
		s.logger.Info("normalizer aliases changed", "normalizer_rules", n.Fingerprint(), "aliases", len(n.Rules().Aliases))
	}
	return nil
}

// Run refreshes every interval until ctx is done.
func (s *Source) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := s.Refresh(ctx); err != nil && ctx.Err() == nil {
				s.logger.Warn("refreshing normalizer aliases failed; keeping the current set", "error", err.Error())
			}
		}
	}
}

// RemoveAliasByID deletes the alias id (not found when there is none).
func (s *Service) RemoveAliasByID(ctx context.Context, id string) (err error) {
	defer repolock.WrapOp(&err, "rekey.RemoveAliasByID")
	if _, perr := uuid.Parse(id); perr != nil {
		return repolock.Errorf(repolock.ENotFound, "alias %s not found", id)
	}
	return s.db.WithTx(ctx, func(tx database.Tx) error {
		if _, err := tx.ExecContext(ctx, lockAliasesSQL); err != nil {
			return database.MapError(err)
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM normalizer_aliases WHERE id = $1`, id)
		if err != nil {
			return database.MapError(err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return repolock.Errorf(repolock.ENotFound, "alias %s not found", id)
		}
		return nil
	})
}
