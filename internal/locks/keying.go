package locks

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/normalize"
)

// Keying is the rules claims are keyed and checked under at one moment, as
// loaded from the database (rekey.Source) or fixed (Fixed, in tests).
//
// The one-owner promise across rules changes rests on three parts of it:
//
//   - Generation is the generation of the stored rules it was loaded at
//     (table normalizer_state). Every statement that creates a lock calls
//     repolock_rules_guard(Generation), which raises RL001 when the stored
//     rules changed since: the claim is then keyed again under the new
//     rules (Service.Keyed). A change of the rules (an alias added or
//     removed, a newer rules version starting to serve) bumps the
//     generation in the transaction that applies it, after taking SHARE
//     ROW EXCLUSIVE on RepositoryLockOwner, which waits for every claim in
//     flight and holds off the next ones until it commits. So no lock is
//     ever created under rules other than the stored ones.
//   - Shadows are the rules of the older versions whose locks may still be
//     stored (until `api rekey` moves them): a claim is refused when any of
//     the keys the URL had under them, or any predecessor of its key
//     (normalize's Predecessors: the older keys of the repository's other
//     spellings), is held by another tenant. A lock the claimant holds
//     under one of them does not stop the claim, which gets its own lock
//     on the current key (re-keying then merges the two). (Predecessors are declared one version
//     back: with locks stored under a version older than the one before
//     the current, only the claimed URL's own old keys are checked.)
//   - Refuse is set when a binary with a newer rules version has served:
//     this binary then claims nothing (unavailable), since the newer
//     replicas key the same URLs differently.
type Keying struct {
	Current    *normalize.Normalizer
	Shadows    []*normalize.Normalizer
	Generation int64
	Refuse     error
	// Unchecked are older rules versions of stored locks that no shadow
	// covers (this binary cannot key under them; `api rekey` moves those
	// locks).
	Unchecked []int
}

// Rules is where the locks service gets its Keying: in serve and the
// commands, rekey.Source (the stored aliases, versions and generation).
type Rules interface {
	// Keying returns the rules in force as last loaded.
	Keying() *Keying
	// Reload loads them again: a claim found that they changed.
	Reload(ctx context.Context) error
}

// Fixed returns Rules that always key under n, with no shadows and
// generation 0, which the guard lets through: for tests and tools that do
// not change the stored rules while they run. A service that must follow
// alias changes and upgrades uses rekey.Source.
func Fixed(n *normalize.Normalizer) Rules {
	if n == nil {
		panic("locks.Fixed: nil Normalizer")
	}
	return fixed{&Keying{Current: n}}
}

type fixed struct{ k *Keying }

func (f fixed) Keying() *Keying              { return f.k }
func (f fixed) Reload(context.Context) error { return nil }

// Claim is one repository URL keyed for a claim: its key under the current
// rules, the other keys it had under the shadow rules, and the generation
// of the rules. Only Keying.Claim makes one.
type Claim struct {
	key     normalize.Key
	shadows []normalize.Key
	gen     int64
	version int
}

// Key is the claim's key under the current rules.
func (c Claim) Key() normalize.Key { return c.key }

// Shadows are the claim's other keys, under older rules versions.
func (c Claim) Shadows() []normalize.Key { return c.shadows }

// rules is the rule set a lock created by the claim stores.
func (c Claim) rules() string { return RuleSetVersion(c.version) }

// keys is the claim's key followed by its shadow keys.
func (c Claim) keys() []string {
	out := make([]string, 0, 1+len(c.shadows))
	out = append(out, string(c.key))
	for _, s := range c.shadows {
		out = append(out, string(s))
	}
	return out
}

// ShadowList is the shadow keys as one text, '\n'-separated ("" for none):
// the form NewLocksCTE's input takes them in (a key holds no newline).
func (c Claim) ShadowList() string {
	parts := make([]string, len(c.shadows))
	for i, s := range c.shadows {
		parts[i] = string(s)
	}
	return strings.Join(parts, "\n")
}

// Claim keys raw for a claim. The error is invalid_argument for a URL the
// current rules reject, or k.Refuse.
func (k *Keying) Claim(raw string) (Claim, error) {
	if k.Refuse != nil {
		return Claim{}, k.Refuse
	}
	key, err := k.Current.RepoURL(raw)
	if err != nil {
		return Claim{}, err
	}
	c := Claim{key: key, gen: k.Generation, version: k.Current.Version()}
	for _, s := range k.Shadows {
		sk, err := s.RepoURL(raw)
		if err != nil || sk == key || slices.Contains(c.shadows, sk) {
			continue // a URL older rules reject has no old key to hold
		}
		c.shadows = append(c.shadows, sk)
	}
	if len(k.Shadows) > 0 {
		// The older keys of the repository's other spellings: two
		// spellings the older rules keyed apart may be one repository
		// now, and another tenant may hold it under the other one.
		for _, pk := range k.Current.Predecessors(key) {
			if pk != key && !slices.Contains(c.shadows, pk) {
				c.shadows = append(c.shadows, pk)
			}
		}
	}
	return c, nil
}

// KeyClaim is a claim of an already normalized key (checked under the
// current rules), with no shadows: for re-keying, which moves the locks of
// older keys itself.
func (k *Keying) KeyClaim(key normalize.Key) (Claim, error) {
	if k.Refuse != nil {
		return Claim{}, k.Refuse
	}
	if err := ValidateKeyWith(k.Current, key); err != nil {
		return Claim{}, err
	}
	return Claim{key: key, gen: k.Generation, version: k.Current.Version()}, nil
}

// Codes of the guards of migration 000014.
const (
	codeRulesChanged = "RL001" // repolock_rules_guard: the stored generation moved
	codeStaleVersion = "RL002" // the trigger: a lock keyed under an older version than has served
)

// ErrRulesChanged is the error of a claim keyed under rules that are no
// longer the stored ones (repolock_rules_guard raised RL001). Keyed reloads
// the rules and runs the claim again; a caller that sees it has given up
// after maxRekeyings reloads (code unavailable).
var ErrRulesChanged = &repolock.Error{Code: repolock.EUnavailable,
	Message: "the keying rules changed while the request was decided; try again"}

// MapRulesError turns the errors of the rules guards (an RL001 or RL002
// raised by a statement that creates locks, such as one built on
// NewLocksCTE) into domain errors: ErrRulesChanged, which Keyed handles,
// or unavailable. Other errors pass unchanged.
func MapRulesError(err error) error { return mapRulesError(err) }

func mapRulesError(err error) error {
	switch database.PQCode(err) {
	case codeRulesChanged:
		return repolock.Wrap(repolock.EUnavailable, errors.Join(ErrRulesChanged, err), "%s", ErrRulesChanged.Message)
	case codeStaleVersion:
		return repolock.Wrap(repolock.EUnavailable, err, "a replica with newer keying rules has served: this replica must be upgraded before it claims repositories")
	}
	return err
}

// maxRekeyings bounds how often Keyed reloads the rules for one call.
const maxRekeyings = 4

// Keyed runs fn with the keying rules in force. When fn fails because the
// stored rules changed under it (ErrRulesChanged), the rules are reloaded
// and fn runs again with them, so a claim is always decided under the
// rules stored when it commits. fn must key its URLs under the Keying it
// is given, and must have no effect outside the database when it fails.
func (s *Service) Keyed(ctx context.Context, fn func(k *Keying) error) error {
	var err error
	for range maxRekeyings {
		if err = fn(s.rules.Keying()); !errors.Is(err, ErrRulesChanged) {
			return err
		}
		if rerr := s.rules.Reload(ctx); rerr != nil {
			return rerr
		}
	}
	return err
}
