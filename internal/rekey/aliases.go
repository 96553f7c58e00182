package rekey

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"time"

	"github.com/google/uuid"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/locks"
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

// build returns the normalizer of the alias set as (the built-in rules
// plus them), or why the set is not valid.
func build(as []Alias) (*normalize.Normalizer, error) {
	aliases, err := parseAliases(as)
	if err != nil {
		return nil, err
	}
	return normalize.New(normalize.Rules{Aliases: aliases})
}

// lockAliasesSQL serializes changes of the alias set, so that the set is
// validated as a whole (normalize.New) against what the change commits
// next to. Readers are not blocked.
const lockAliasesSQL = `LOCK TABLE normalizer_aliases IN SHARE ROW EXCLUSIVE MODE`

// AliasChange is the plan of an alias change and, unless it is a dry run,
// what it did: an alias change is a re-key, applied as one operation.
type AliasChange struct {
	DryRun bool   `json:"dry_run"`
	Action string `json:"action"` // "add" or "remove"
	Alias  Alias  `json:"alias"`
	// Endpoint is the endpoint (host[+port]) whose locks the change can
	// move: the alias's from for an add, its to for a removal. They are
	// found through the endpoint index; no other lock is read.
	Endpoint string `json:"endpoint"`
	// ExaminedLocks are the locks on Endpoint under the alias's prefix.
	ExaminedLocks int `json:"examined_locks"`
	// RekeyedLocks are those moved (or marked current); MovedReferences,
	// CreatedLocks and ReleasedLocks as in a Report.
	RekeyedLocks    int `json:"rekeyed_locks"`
	MovedReferences int `json:"moved_references"`
	CreatedLocks    int `json:"created_locks"`
	ReleasedLocks   int `json:"released_locks"`
	// Conflicts and Rejected: why the change is refused (never applied
	// with any: alias_conflict lists them).
	Conflicts []Problem `json:"conflicts"`
	Rejected  []Problem `json:"rejected"`
}

// AliasConflictError is the error of an alias change that would give a
// repository a second owner (or leave a reference its new rules reject):
// code alias_conflict (HTTP 409), with every conflict in Details.
func AliasConflictError(c AliasChange) error {
	return &repolock.Error{
		Code: repolock.EAliasConflict,
		Message: fmt.Sprintf("the alias change would put %d references of different tenants on one key and reject %d: nothing was changed",
			len(c.Conflicts), len(c.Rejected)),
		Details: map[string]any{"conflicts": c.Conflicts, "rejected": c.Rejected},
	}
}

// AddAlias adds the alias from -> to (endpoints in key syntax,
// host[+port][/prefix], stored canonical) and re-keys, in the same
// transaction, every lock it moves: the locks on from's endpoint (found
// through the endpoint index), whose references are keyed again under the
// new set. Claims wait while it runs and are keyed under the new set after
// (the generation it bumps). The resulting set must pass normalize.New; an
// existing alias with the same From is already_exists. A change that
// would give a key two tenants, or leave a reference the new rules
// reject, is refused with AliasConflictError and changes nothing. A dry
// run returns the plan and changes nothing.
func (s *Service) AddAlias(ctx context.Context, from, to string, dryRun bool) (_ AliasChange, err error) {
	defer repolock.WrapOp(&err, "rekey.AddAlias")
	fe, err := normalize.ParseEndpoint(from)
	if err != nil {
		return AliasChange{}, repolock.Wrap(repolock.EInvalid, err, "from: %s", repolock.ErrorMessage(err))
	}
	te, err := normalize.ParseEndpoint(to)
	if err != nil {
		return AliasChange{}, repolock.Wrap(repolock.EInvalid, err, "to: %s", repolock.ErrorMessage(err))
	}
	return s.changeAliases(ctx, dryRun, "add", func(ctx context.Context, tx database.Tx, cur []Alias) (Alias, []Alias, normalize.Endpoint, error) {
		for _, c := range cur {
			if c.From == fe.String() {
				return Alias{}, nil, normalize.Endpoint{}, repolock.Errorf(repolock.EAlreadyExists, "an alias from %s already exists", c.From)
			}
		}
		next := append(slices.Clone(cur), Alias{From: fe.String(), To: te.String()})
		if _, err := build(next); err != nil {
			return Alias{}, nil, normalize.Endpoint{}, err
		}
		var a Alias
		if dryRun {
			a = Alias{From: fe.String(), To: te.String()}
		} else if err := tx.GetContext(ctx, &a, `INSERT INTO normalizer_aliases (from_endpoint, to_endpoint) VALUES ($1, $2)
			RETURNING id, from_endpoint, to_endpoint, created_at`, fe.String(), te.String()); err != nil {
			return Alias{}, nil, normalize.Endpoint{}, database.MapError(err)
		}
		return a, next, fe, nil
	})
}

// RemoveAlias removes the alias whose From is from (key syntax, read
// canonically) and re-keys, in the same transaction, the locks on its To
// endpoint whose references now key elsewhere, as AddAlias does.
func (s *Service) RemoveAlias(ctx context.Context, from string, dryRun bool) (_ AliasChange, err error) {
	defer repolock.WrapOp(&err, "rekey.RemoveAlias")
	fe, err := normalize.ParseEndpoint(from)
	if err != nil {
		return AliasChange{}, repolock.Wrap(repolock.EInvalid, err, "from: %s", repolock.ErrorMessage(err))
	}
	return s.removeAlias(ctx, dryRun, func(a Alias) bool { return a.From == fe.String() },
		repolock.Errorf(repolock.ENotFound, "no alias from %s", fe.String()))
}

// RemoveAliasByID is RemoveAlias of the alias id (not found when there is
// none).
func (s *Service) RemoveAliasByID(ctx context.Context, id string, dryRun bool) (_ AliasChange, err error) {
	defer repolock.WrapOp(&err, "rekey.RemoveAliasByID")
	notFound := repolock.Errorf(repolock.ENotFound, "alias %s not found", id)
	if _, perr := uuid.Parse(id); perr != nil {
		return AliasChange{}, notFound
	}
	return s.removeAlias(ctx, dryRun, func(a Alias) bool { return a.ID == id }, notFound)
}

func (s *Service) removeAlias(ctx context.Context, dryRun bool, match func(Alias) bool, notFound error) (AliasChange, error) {
	return s.changeAliases(ctx, dryRun, "remove", func(ctx context.Context, tx database.Tx, cur []Alias) (Alias, []Alias, normalize.Endpoint, error) {
		i := slices.IndexFunc(cur, match)
		if i < 0 {
			return Alias{}, nil, normalize.Endpoint{}, notFound
		}
		a := cur[i]
		te, err := normalize.ParseEndpoint(a.To)
		if err != nil {
			return Alias{}, nil, normalize.Endpoint{}, err
		}
		if !dryRun {
			if _, err := tx.ExecContext(ctx, `DELETE FROM normalizer_aliases WHERE id = $1`, a.ID); err != nil {
				return Alias{}, nil, normalize.Endpoint{}, database.MapError(err)
			}
		}
		return a, slices.Delete(slices.Clone(cur), i, i+1), te, nil
	})
}

// endpointLocksSQL reads the locks on the endpoint $1 (through the
// endpoint index), whatever their rules version, in id order. It takes no
// row locks, and the references are read once without them (withRefs): the
// change holds SHARE ROW EXCLUSIVE on RepositoryLockOwner (lockClaimsSQL),
// which waits for every transaction that wrote a lock row or took one FOR
// KEY SHARE to claim it (every claim and every reference move starts by
// inserting into that table) and holds off the next ones, so no reference
// to these locks can be added or moved until it commits. What can still run
// is the deletion of an Application or Credential, whose Release then waits
// for the change (a deadlock the database breaks, and the loser retries),
// and an update that keeps the row's URL, which the change's update of
// normalized_url waits for and then applies to the row as it is. Taking
// the rows FOR UPDATE as well cost a third of a 100k-lock change (every
// page of both tables dirtied and logged once more), for no guarantee.
const endpointLocksSQL = `
SELECT o.id, o.git_repository_url, o.normalizer_version, o.normalizer_rules, o.cluster_user_id, u.name AS user_name
FROM RepositoryLockOwner o JOIN cluster_users u ON u.id = o.cluster_user_id
WHERE split_part(o.git_repository_url, '/', 1) = $1
ORDER BY o.id`

// changeAliases runs an alias change as one transaction: it serializes
// alias changes, holds off every claim (and waits for those in flight),
// lets mutate change the stored set (mutate returns the alias, the new set
// and the endpoint whose locks may move), bumps the rules generation,
// re-keys the locks under the endpoint with the new set, and commits only
// when none of them conflicts. A dry run rolls back.
func (s *Service) changeAliases(ctx context.Context, dryRun bool, action string,
	mutate func(ctx context.Context, tx database.Tx, cur []Alias) (Alias, []Alias, normalize.Endpoint, error)) (AliasChange, error) {
	var ch AliasChange
	err := s.db.WithTx(ctx, func(tx database.Tx) error {
		ch = AliasChange{DryRun: dryRun, Action: action, Conflicts: []Problem{}, Rejected: []Problem{}}
		if _, err := tx.ExecContext(ctx, lockAliasesSQL); err != nil {
			return database.MapError(err)
		}
		if _, err := tx.ExecContext(ctx, lockClaimsSQL); err != nil {
			return database.MapError(err)
		}
		cur, err := listAliases(ctx, tx)
		if err != nil {
			return err
		}
		a, next, ep, err := mutate(ctx, tx, cur)
		if err != nil {
			return err
		}
		ch.Alias = a
		n, err := build(next)
		if err != nil {
			return err
		}
		var gen int64
		if err := tx.GetContext(ctx, &gen, bumpGenerationSQL); err != nil {
			return database.MapError(err)
		}
		host := normalize.Endpoint{Host: ep.Host, Port: ep.Port}
		ch.Endpoint = host.String()
		var ls []locks.Stale
		if err := tx.SelectContext(ctx, &ls, endpointLocksSQL, ch.Endpoint); err != nil {
			return database.MapError(err)
		}
		m := newMover(s.locks, &locks.Keying{Current: n, Generation: gen}, dryRun, true)
		srcs, err := withRefs(ctx, tx, ls)
		if err != nil {
			return err
		}
		srcs = slices.DeleteFunc(srcs, func(src source) bool { return !underEndpoint(src.Key, ep) })
		ch.ExaminedLocks = len(srcs)
		m.plan(srcs)
		c, err := m.apply(ctx, tx, srcs)
		if err != nil {
			return err
		}
		ch.RekeyedLocks, ch.MovedReferences, ch.CreatedLocks, ch.ReleasedLocks = c.rekeyed, c.moved, c.created, c.released
		for _, p := range c.problems {
			if p.Kind == "conflict" {
				ch.Conflicts = append(ch.Conflicts, p)
			} else {
				ch.Rejected = append(ch.Rejected, p)
			}
		}
		if len(c.problems) > 0 {
			return AliasConflictError(ch)
		}
		if dryRun {
			return errDryRun
		}
		return nil
	})
	if errors.Is(err, errDryRun) {
		err = nil
	}
	if err != nil {
		return ch, err
	}
	if !dryRun {
		s.metrics.rekeyed.WithLabelValues("alias").Add(float64(ch.RekeyedLocks))
	}
	return ch, nil
}

// underEndpoint reports whether key lies under e (host, port and prefix).
func underEndpoint(key normalize.Key, e normalize.Endpoint) bool {
	p := normalize.Endpoint{Host: e.Host, Port: e.Port}.String()
	if e.Prefix != "" {
		p += "/" + e.Prefix
	}
	return strings.HasPrefix(string(key), p+"/")
}
