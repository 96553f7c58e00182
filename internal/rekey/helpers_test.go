package rekey_test

import (
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/repolock/repolock/internal/apps"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/locks"
	"github.com/repolock/repolock/internal/normalize"
	"github.com/repolock/repolock/internal/rekey"
)

// services are the domain services of one test pool, built once per pool
// as cmd/api builds them once per process: locks and apps own the pool's
// batchers.
type services struct {
	locks *locks.Service
	apps  *apps.Service
	rekey *rekey.Service
}

var (
	servicesMu sync.Mutex
	servicesOf = map[*database.DB]*services{}
)

// svc returns db's services keyed under fixed built-in rules (generation
// 0: the guard lets them through, no shadows), building them on first use.
// A run re-keys under the Keying it is given.
func svc(db *database.DB) *services {
	return svcWith(db, locks.Fixed(normalize.Default()))
}

// svcWith returns db's services, building them on first use with rules;
// later calls return the services first built, whatever rules they pass.
func svcWith(db *database.DB, rules locks.Rules) *services {
	servicesMu.Lock()
	defer servicesMu.Unlock()
	s, ok := servicesOf[db]
	if !ok {
		m, err := rekey.NewMetrics(prometheus.NewRegistry())
		if err != nil {
			panic(err)
		}
		l := locks.New(db, rules, nil)
		s = &services{locks: l, apps: apps.New(db, l), rekey: rekey.New(db, l, m)}
		servicesOf[db] = s
	}
	return s
}

// keying is the keying a run uses in production: the stored rules.
func keying(t testing.TB, db *database.DB) *locks.Keying {
	t.Helper()
	k, err := rekey.LoadKeying(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
