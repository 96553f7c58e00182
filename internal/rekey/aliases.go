package rekey

import (
	"context"
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
