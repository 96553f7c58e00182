package tenants_test

import (
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/tenants"
)

// newTenants is the tenants service on db without a token cache: every
// Authenticate asks the database, as in a command (api serve passes its
// Cache).
func newTenants(db *database.DB) *tenants.Service { return tenants.New(db, nil) }
