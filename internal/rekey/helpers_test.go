package rekey_test

import (
	"sync"

	"github.com/repolock/repolock/internal/apps"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/locks"
	"github.com/repolock/repolock/internal/normalize"
	"github.com/repolock/repolock/internal/rekey"
)

// services are the domain services of one test database, built once per
// pool as cmd/api builds them once per process: locks and apps own the
// pool's batchers. They key under the built-in rules; a run re-keys under
// the rules it is given.
type services struct {
	locks *locks.Service
	apps  *apps.Service
	rekey *rekey.Service
}

var (
	servicesMu sync.Mutex
	servicesOf = map[*database.DB]*services{}
)

// svc returns db's services, building them on first use.
func svc(db *database.DB) *services {
	servicesMu.Lock()
	defer servicesMu.Unlock()
	s, ok := servicesOf[db]
	if !ok {
		l := locks.New(db, normalize.Static(normalize.Default()))
		s = &services{locks: l, apps: apps.New(db, l), rekey: rekey.New(db, l)}
		servicesOf[db] = s
	}
	return s
}
