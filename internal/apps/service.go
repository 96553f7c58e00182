package apps

import (
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/locks"
)

// Service is the Applications and Repository Credentials of one
// deployment. cmd/api builds one with New.
//
// Its methods run on the pool and open their own transactions (a create,
// update or delete is one transaction with the lock it acquires or
// releases); none can run inside a caller's transaction.
type Service struct {
	db    *database.DB
	locks *locks.Service
	// The group-commit Batchers of the creates' fast path, one per kind.
	createApplication *database.Batcher[newRow, createdRow[Application]]
	createCredential  *database.Batcher[newRow, createdRow[RepositoryCredential]]
}

// New returns the service on db, acquiring and releasing locks through
// locks. It keys repo_urls under locks.Rules(), a snapshot per request: the
// rules the locks check keys under, so the two cannot disagree. Both are
// required: a missing one is a wiring error and panics at start-up.
func New(db *database.DB, locks *locks.Service) *Service {
	if db == nil || locks == nil {
		panic("apps.New: a pool and the locks service are required")
	}
	return &Service{
		db: db, locks: locks,
		createApplication: newCreateBatcher[Application](db, applications),
		createCredential:  newCreateBatcher[RepositoryCredential](db, credentials),
	}
}
