package gc

import (
	"context"
	"log/slog"

	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/repostate"
)

// RepositoryCleaner adapts the repostate Cleaner (the cleaning of deleted
// repository instances, design 000) to the optional Cleaner step of a run.
func RepositoryCleaner(c *repostate.Cleaner) Cleaner {
	return CleanerFunc(func(ctx context.Context) (CleanerResult, error) {
		res, err := c.Run(ctx)
		return CleanerResult(res), err
	})
}

// NewRepositoryCleaner returns the repostate Cleaner on db's kv table, with
// its defaults, as a Cleaner step. It is what api gc, api clean, the serve
// loop and POST /v1/admin/gc use.
func NewRepositoryCleaner(db *database.DB, logger *slog.Logger) Cleaner {
	return RepositoryCleaner(repostate.NewCleaner(db, repostate.CleanerConfig{Logger: logger}))
}
