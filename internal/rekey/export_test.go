package rekey

import (
	"context"

	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/locks"
	"github.com/repolock/repolock/internal/normalize"
)

// LoadKeyingNext is LoadKeying under the rules next builds from the loaded
// ones (normalize.NextForTest): the keying of a replica of rules N+1.
func LoadKeyingNext(ctx context.Context, db *database.DB, next func(*normalize.Normalizer) *normalize.Normalizer) (*locks.Keying, error) {
	return loadKeying(ctx, db, next)
}

// SetNextRules makes s's runs key under the rules next builds, after the
// reload that follows their registration (a Run under N+1 rules).
func SetNextRules(s *Service, next func(*normalize.Normalizer) *normalize.Normalizer) { s.next = next }
