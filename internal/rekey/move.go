package rekey

import (
	"context"
	"errors"
	"slices"

	"github.com/lib/pq"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/locks"
	"github.com/repolock/repolock/internal/normalize"
)

// source is a lock a rules change may move: its row (held FOR UPDATE by
// the transaction that moves it) and its references.
type source struct {
	locks.Stale
	refs []ref
}

// mover decides and applies, set-based, the moves of a set of locks under
// new rules: the one engine of re-keying after a version change (Run, in
// batches) and of an alias change (in the change's transaction).
//
// Per lock, every reference's stored repo_url is keyed under the new rules:
//   - a URL the new rules reject, or a new key another tenant holds or
//     another tenant's lock moves to (claims, the plan of the whole
//     change), is a problem: nothing of the lock moves;
//   - every reference keeps the lock's key: the lock is marked current;
//   - every reference moves to one new key nobody holds: the lock gets the
//     new key where it is (one statement for the batch, a "rekeyed" event
//     each), and its references' normalized_url follow;
//   - otherwise (references split across keys, or the tenant already holds
//     a new key): each reference moves to the tenant's lock on its new key
//     (reused, or created), a "rekeyed" event per new key, and the old lock
//     is marked current if some reference keeps it, released if not.
//
// A lock without references is left as it is (the GC collects it), unless
// bare is set (an alias change): then its key is read again under the new
// rules (ParseKey) and it moves like a lock whose references all move.
type mover struct {
	locks  *locks.Service
	keying *locks.Keying
	n      *normalize.Normalizer
	dryRun bool
	bare   bool
	// claims is the plan: per new key, the first claim of each tenant.
	claims map[normalize.Key][]claim
	// dryCreated are the keys a dry run would create a lock on.
	dryCreated map[normalize.Key]bool
}

func newMover(ls *locks.Service, k *locks.Keying, dryRun, bare bool) *mover {
	return &mover{locks: ls, keying: k, n: k.Current, dryRun: dryRun, bare: bare,
		claims: map[normalize.Key][]claim{}, dryCreated: map[normalize.Key]bool{}}
}

// plan notes the new keys of srcs' references (and, when bare, of their
// bare keys) that differ from their lock's key.
func (m *mover) plan(srcs []source) {
	for _, s := range srcs {
		for _, f := range s.refs {
			if key, err := m.n.RepoURL(f.RepoURL); err == nil && key != s.Key {
				m.claim(key, claim{lock: s.Stale, ref: f})
			}
		}
		if m.bare && len(s.refs) == 0 {
			if key, err := m.n.ParseKey(string(s.Key)); err == nil && key != s.Key {
				m.claim(key, claim{lock: s.Stale})
			}
		}
	}
}

// claim notes c's claim of key, once per tenant.
func (m *mover) claim(key normalize.Key, c claim) {
	for _, o := range m.claims[key] {
		if o.lock.TenantID == c.lock.TenantID {
			return
		}
	}
	m.claims[key] = append(m.claims[key], c)
}

// otherClaim returns a claim of key by another tenant than tenantID.
func (m *mover) otherClaim(key normalize.Key, tenantID string) (claim, bool) {
	for _, o := range m.claims[key] {
		if o.lock.TenantID != tenantID {
			return o, true
		}
	}
	return claim{}, false
}

// counts is what apply did (in a dry run: would do).
type counts struct {
	unreferenced, rekeyed, moved, created, released int
	problems                                        []Problem
}

// holder is the lock on a new key.
type holder struct {
	ID       string        `db:"id"`
	Key      normalize.Key `db:"git_repository_url"`
	TenantID string        `db:"cluster_user_id"`
	Name     string        `db:"name"`
}

// holdersSQL returns the locks on the keys $1 and takes FOR KEY SHARE on
// them: a lock the mover reuses cannot be released before it commits.
const holdersSQL = `
SELECT o.id, o.git_repository_url, o.cluster_user_id, u.name
FROM RepositoryLockOwner o JOIN cluster_users u ON u.id = o.cluster_user_id
WHERE o.git_repository_url = ANY ($1::text[])
ORDER BY o.id
FOR KEY SHARE OF o`

// decision is what apply decided for one source.
type decision struct {
	src      source
	keys     []normalize.Key // per reference
	targets  []normalize.Key // distinct new keys other than the lock's
	stays    bool            // some reference keeps the lock's key
	problems []Problem
}

// apply moves srcs in tx: the caller holds them FOR UPDATE, and the rows
// of their references (load), or, for an alias change, SHARE ROW EXCLUSIVE
// on the locks table (see endpointLocksSQL). In a dry run it writes
// nothing.
func (m *mover) apply(ctx context.Context, tx database.Tx, srcs []source) (counts, error) {
	var out counts
	ds := make([]decision, 0, len(srcs))
	var wanted []string
	for _, s := range srcs {
		d := decision{src: s, keys: make([]normalize.Key, len(s.refs))}
		for i, f := range s.refs {
			key, err := m.n.RepoURL(f.RepoURL)
			if err != nil {
				d.problems = append(d.problems, problem("rejected", s.Stale, f, "", repolock.ErrorMessage(err)))
				continue
			}
			d.keys[i] = key
			if key == s.Key {
				d.stays = true
			} else if !slices.Contains(d.targets, key) {
				d.targets = append(d.targets, key)
			}
		}
		if len(s.refs) == 0 && m.bare {
			if key, err := m.n.ParseKey(string(s.Key)); err == nil && key != s.Key {
				d.targets = append(d.targets, key)
			}
		}
		for _, t := range d.targets {
			wanted = append(wanted, string(t))
		}
		ds = append(ds, d)
	}
	holders := map[normalize.Key]holder{}
	if len(wanted) > 0 {
		var hs []holder
		if err := tx.SelectContext(ctx, &hs, holdersSQL, pq.StringArray(wanted)); err != nil {
			return counts{}, database.MapError(err)
		}
		for _, h := range hs {
			holders[h.Key] = h
		}
	}
	// The reservations that decide the new keys nobody holds: a move
	// under another tenant's reservation is a conflict (ReasonReserved),
	// recorded like the others, and the run goes on. A reservation being
	// added cannot slip in between: Reserve takes SHARE on the locks
	// table, which conflicts with the ROW EXCLUSIVE a version run's batch
	// takes first (GuardRules) and the SHARE ROW EXCLUSIVE of an alias
	// change; so either it committed before this statement (which sees
	// it), or it waits for this transaction and then lists the moved lock
	// among those it covers.
	var free []normalize.Key
	for _, w := range wanted {
		if _, ok := holders[normalize.Key(w)]; !ok {
			free = append(free, normalize.Key(w))
		}
	}
	reserved, err := m.locks.ReservedKeys(ctx, tx, free)
	if err != nil {
		return counts{}, err
	}
	var (
		inPlaceIDs       []string
		inPlaceFrom      []normalize.Key
		inPlaceTo        []normalize.Key
		current          []string
		refIDs, refKinds []string
		refKeys          []normalize.Key
		general          []decision
	)
	for _, d := range ds {
		s := d.src
		if len(s.refs) == 0 && len(d.targets) == 0 {
			out.unreferenced++
			continue
		}
		for i, f := range s.refs {
			k := d.keys[i]
			if k == "" || k == s.Key {
				continue
			}
			if h, ok := holders[k]; ok && h.TenantID != s.TenantID {
				d.problems = append(d.problems, m.liveConflict(ctx, tx, s.Stale, f, k, h))
			} else if r, ok := reserved[k]; ok && r.TenantID != s.TenantID {
				d.problems = append(d.problems, reservedConflict(s.Stale, f, k, r))
			} else if c, ok := m.otherClaim(k, s.TenantID); ok {
				p := problem("conflict", s.Stale, f, k, "another tenant's lock re-keys to the same key")
				p.OtherLockID, p.OtherKey, p.OtherTenantID, p.OtherTenant, p.OtherRepoURL = c.lock.ID, c.lock.Key, c.lock.TenantID, c.lock.TenantName, c.ref.RepoURL
				d.problems = append(d.problems, p)
			}
		}
		if len(s.refs) == 0 { // bare, moving
			k := d.targets[0]
			if h, ok := holders[k]; ok && h.TenantID != s.TenantID {
				d.problems = append(d.problems, m.liveConflict(ctx, tx, s.Stale, ref{}, k, h))
			} else if r, ok := reserved[k]; ok && r.TenantID != s.TenantID {
				d.problems = append(d.problems, reservedConflict(s.Stale, ref{}, k, r))
			}
		}
		if len(d.problems) > 0 {
			out.problems = append(out.problems, d.problems...)
			continue
		}
		out.rekeyed++
		for i := range s.refs {
			if d.keys[i] != s.Key {
				out.moved++
			}
		}
		switch {
		case len(d.targets) == 0:
			current = append(current, s.ID)
		case len(d.targets) == 1 && !d.stays && holders[d.targets[0]].ID == "":
			inPlaceIDs = append(inPlaceIDs, s.ID)
			inPlaceFrom = append(inPlaceFrom, s.Key)
			inPlaceTo = append(inPlaceTo, d.targets[0])
			for _, f := range s.refs {
				refIDs, refKinds, refKeys = append(refIDs, f.ID), append(refKinds, f.Kind), append(refKeys, d.targets[0])
			}
		default:
			general = append(general, d)
		}
	}
	if m.dryRun {
		for _, d := range general {
			for _, t := range d.targets {
				if holders[t].ID == "" && !m.dryCreated[t] {
					m.dryCreated[t] = true
					out.created++
				}
			}
			if !d.stays {
				out.released++
			}
		}
		return out, nil
	}
	version := m.n.Version()
	if _, err := m.locks.RekeyInPlace(ctx, tx, version, inPlaceIDs, inPlaceFrom, inPlaceTo); err != nil {
		return counts{}, err
	}
	if err := setNormalizedURLs(ctx, tx, refIDs, refKinds, refKeys); err != nil {
		return counts{}, err
	}
	if err := m.locks.MarkCurrentMany(ctx, tx, version, current); err != nil {
		return counts{}, err
	}
	for _, d := range general {
		c, err := m.applyGeneral(ctx, tx, d, holders)
		if err != nil {
			return counts{}, err
		}
		out.created += c.created
		out.released += c.released
	}
	return out, nil
}

// applyGeneral moves one lock's references to the tenant's locks on their
// new keys, one statement per key: the rare case (references split across
// keys, or a new key the tenant already holds).
func (m *mover) applyGeneral(ctx context.Context, tx database.Tx, d decision, holders map[normalize.Key]holder) (counts, error) {
	var out counts
	s := d.src
	target := map[normalize.Key]string{}
	for _, k := range d.targets {
		if h, ok := holders[k]; ok { // the tenant's own (others' are problems)
			target[k] = h.ID
			continue
		}
		t, err := m.locks.AcquireForRekey(ctx, tx, m.keying, s.TenantID, k)
		if err != nil {
			return counts{}, err
		}
		if t.LockID == "" { // another tenant took it meanwhile: plan again
			return counts{}, errReplan
		}
		if t.Created {
			out.created++
		}
		target[k] = t.LockID
	}
	for i, f := range s.refs {
		k := d.keys[i]
		if k == s.Key {
			continue
		}
		if err := moveRef(ctx, tx, f, target[k], k); err != nil {
			return counts{}, err
		}
	}
	for k, id := range target {
		if err := m.locks.RecordRekeyed(ctx, tx, id, k, s.Key, s.TenantID); err != nil {
			return counts{}, err
		}
	}
	if d.stays {
		return out, m.locks.MarkCurrent(ctx, tx, m.n, s.ID)
	}
	released, err := m.locks.Release(ctx, tx, s.ID)
	if err != nil {
		return counts{}, err
	}
	if released {
		out.released++
	}
	return out, nil
}

// errReplan: a new key was taken by another tenant while the mover held
// its plan; the batch runs again and sees it.
var errReplan = errors.New("rekey: a new key was taken meanwhile; planning again")

// setNormalizedURLs sets the normalized_url of the references (ids, kinds)
// to keys, one statement per kind.
func setNormalizedURLs(ctx context.Context, tx database.Tx, ids, kinds []string, keys []normalize.Key) error {
	var appIDs, appKeys, credIDs, credKeys []string
	for i, id := range ids {
		if kinds[i] == "application" {
			appIDs, appKeys = append(appIDs, id), append(appKeys, string(keys[i]))
		} else {
			credIDs, credKeys = append(credIDs, id), append(credKeys, string(keys[i]))
		}
	}
	for _, q := range []struct {
		table    string
		ids, kys []string
	}{{"applications", appIDs, appKeys}, {"repository_credentials", credIDs, credKeys}} {
		if len(q.ids) == 0 {
			continue
		}
		_, err := tx.ExecContext(ctx, `UPDATE `+q.table+` t SET normalized_url = m.key
			FROM unnest($1::uuid[], $2::text[]) AS m(id, key) WHERE t.id = m.id`, pq.StringArray(q.ids), pq.StringArray(q.kys))
		if err != nil {
			return database.MapError(err)
		}
	}
	return nil
}

// ReasonReserved is the reason of a conflict whose new key is under
// another tenant's reservation (docs/locks.md "Reservations"): its
// other_user is the reserving tenant, other_key the reserved prefix, and
// it has no other lock.
const ReasonReserved = "the new key is under another tenant's reservation"

// reservedConflict is the problem of a new key nobody holds that another
// tenant's reservation covers: the lock stays where it is (the claim would
// be refused with repository_reserved).
func reservedConflict(l locks.Stale, f ref, key normalize.Key, r locks.ReservedBy) Problem {
	p := problem("conflict", l, f, key, ReasonReserved)
	p.OtherKey, p.OtherTenantID, p.OtherTenant = r.Prefix, r.TenantID, r.TenantName
	return p
}

// liveConflict is the problem of a new key another tenant holds now.
func (m *mover) liveConflict(ctx context.Context, tx database.Tx, l locks.Stale, f ref, key normalize.Key, h holder) Problem {
	p := problem("conflict", l, f, key, "another tenant holds the new key")
	p.OtherLockID, p.OtherKey, p.OtherTenantID, p.OtherTenant = h.ID, key, h.TenantID, h.Name
	var other []ref
	if err := tx.SelectContext(ctx, &other, refsSQL, pq.Array([]string{h.ID})); err == nil && len(other) > 0 {
		p.OtherRepoURL = other[0].RepoURL
	}
	return p
}

// lockSourcesSQL takes FOR UPDATE on the locks $1 that are still stale
// under rules version $2 (locks.StaleSQL) (every acquirer holding FOR KEY SHARE on one is
// waited for), in id order.
const lockSourcesSQL = `
SELECT o.id, o.git_repository_url, o.normalizer_version, o.normalizer_rules, o.cluster_user_id, u.name AS user_name
FROM RepositoryLockOwner o JOIN cluster_users u ON u.id = o.cluster_user_id
WHERE o.id = ANY ($1::uuid[]) AND o.normalizer_version < $2
ORDER BY o.id
FOR UPDATE OF o`

// mayMove reports whether some reference of src keys elsewhere under the
// mover's rules (or, when bare, its unreferenced key does).
func (m *mover) mayMove(src source) bool {
	for _, f := range src.refs {
		if key, err := m.n.RepoURL(f.RepoURL); err != nil || key != src.Key {
			return true
		}
	}
	if m.bare && len(src.refs) == 0 {
		key, err := m.n.ParseKey(string(src.Key))
		return err == nil && key != src.Key
	}
	return false
}

// load takes FOR UPDATE on the locks that lockQuery (with args) selects
// (every acquirer holding FOR KEY SHARE on one is waited for, and no new
// reference to them can be written until the transaction ends) and reads
// their references. The locks whose references may move get their
// reference rows locked too (FOR UPDATE, in id order: the row lock
// internal/apps takes before changing a reference) and those references
// read again, so that a concurrent update or delete of an Application or
// Credential is either seen or waits. The locks whose references all keep
// their key need no row locks: marking them current changes no reference.
func (m *mover) load(ctx context.Context, tx database.Tx, lockQuery string, args ...any) ([]source, error) {
	var ls []locks.Stale
	if err := tx.SelectContext(ctx, &ls, lockQuery, args...); err != nil {
		return nil, database.MapError(err)
	}
	if len(ls) == 0 {
		return nil, nil
	}
	srcs, err := withRefs(ctx, tx, ls)
	if err != nil {
		return nil, err
	}
	var moving []locks.Stale
	var movingRefs []ref
	at := map[string]int{}
	for i, s := range srcs {
		if m.mayMove(s) {
			moving = append(moving, s.Stale)
			movingRefs = append(movingRefs, s.refs...)
			at[s.ID] = i
		}
	}
	if len(moving) == 0 {
		return srcs, nil
	}
	if err := lockRows(ctx, tx, movingRefs, map[string]bool{}); err != nil {
		return nil, err
	}
	again, err := withRefs(ctx, tx, moving)
	if err != nil {
		return nil, err
	}
	for _, s := range again {
		srcs[at[s.ID]] = s
	}
	return srcs, nil
}

// withRefs reads the references of the locks ls.
func withRefs(ctx context.Context, tx database.Tx, ls []locks.Stale) ([]source, error) {
	ids := make([]string, len(ls))
	for i, l := range ls {
		ids[i] = l.ID
	}
	var refs []ref
	if err := tx.SelectContext(ctx, &refs, refsSQL, pq.Array(ids)); err != nil {
		return nil, database.MapError(err)
	}
	byLock := map[string][]ref{}
	for _, f := range refs {
		byLock[f.LockID] = append(byLock[f.LockID], f)
	}
	out := make([]source, len(ls))
	for i, l := range ls {
		out[i] = source{Stale: l, refs: byLock[l.ID]}
	}
	return out, nil
}
