package apps_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/repolock/repolock/internal/apps"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/locks"
	"github.com/repolock/repolock/internal/normalize"
)

// TestDecisionMetrics: every decision about a lock moves its counter once,
// whichever path decided it (the bare acquire on the pool, a create's fast
// path, its transaction, an update, a delete, a tenant's deletion), and
// every series is there at 0 before the first decision.
func TestDecisionMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	reg := prometheus.NewRegistry()
	m, err := locks.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := locks.NewMetrics(reg); err == nil {
		t.Fatal("registering the metrics twice on one registry: no error")
	}
	ls := locks.New(db, locks.Fixed(normalize.Default()), m)
	as := apps.New(db, ls)

	type want map[string]float64
	check := func(step string, w want) {
		t.Helper()
		got := want{}
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			for _, s := range f.GetMetric() {
				name := f.GetName()
				for _, l := range s.GetLabel() {
					name += "/" + l.GetValue()
				}
				got[name] = s.GetCounter().GetValue()
			}
		}
		all := want{
			"repolock_claims_total/acquired": 0, "repolock_claims_total/already_owned": 0,
			"repolock_claims_total/denied": 0, "repolock_claims_total/invalid": 0,
			"repolock_claims_denied_total/claimed": 0, "repolock_claims_denied_total/reserved": 0,
			"repolock_locks_released_total/unreferenced": 0, "repolock_locks_released_total/tenant_deleted": 0,
			"repolock_locks_collected_total": 0,
		}
		for k, v := range w {
			all[k] = v
		}
		if len(got) != len(all) {
			t.Errorf("%s: series %v, want %v", step, got, all)
		}
		for k, v := range all {
			if g, ok := got[k]; !ok || g != v {
				t.Errorf("%s: %s = %v (present %v), want %v", step, k, g, ok, v)
			}
		}
	}
	check("start", nil)

	alice := dbtest.NewTenant(t, db, "")
	bob := dbtest.NewTenant(t, db, "")
	url1, url2 := "https://github.com/metrics-"+alice.Name+"/one", "https://github.com/metrics-"+alice.Name+"/two"

	// The bare acquire, on the pool.
	if _, err := ls.Acquire(ctx, alice.ID, url1); err != nil {
		t.Fatal(err)
	}
	if _, err := ls.Acquire(ctx, alice.ID, url1+".git"); err != nil {
		t.Fatal(err)
	}
	if acq, err := ls.Acquire(ctx, bob.ID, url1); err != nil || acq.Acquired {
		t.Fatalf("bob's acquire: %+v, %v", acq, err)
	}
	if _, err := ls.Acquire(ctx, alice.ID, "not a url"); err == nil {
		t.Fatal("an invalid URL was acquired")
	}
	check("acquire", want{"repolock_claims_total/acquired": 1, "repolock_claims_total/already_owned": 1,
		"repolock_claims_total/denied": 1, "repolock_claims_denied_total/claimed": 1, "repolock_claims_total/invalid": 1})

	// Creates: the fast path (a new lock), the transaction (already owned,
	// denied), an invalid URL.
	a1, err := as.CreateApplication(ctx, alice.ID, apps.NewApplication{Name: "a1", RepoURL: url2})
	if err != nil {
		t.Fatal(err)
	}
	a2, err := as.CreateApplication(ctx, alice.ID, apps.NewApplication{Name: "a2", RepoURL: url2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := as.CreateApplication(ctx, bob.ID, apps.NewApplication{Name: "b1", RepoURL: url2}); err == nil {
		t.Fatal("bob claimed alice's repository")
	}
	if _, err := as.CreateApplication(ctx, bob.ID, apps.NewApplication{Name: "b2", RepoURL: "ftp://nowhere"}); err == nil {
		t.Fatal("an invalid URL was claimed")
	}
	check("create", want{"repolock_claims_total/acquired": 2, "repolock_claims_total/already_owned": 2,
		"repolock_claims_total/denied": 2, "repolock_claims_denied_total/claimed": 2, "repolock_claims_total/invalid": 2})

	// An update to a new URL claims it and releases nothing while a2
	// still references the old lock; deleting a2 releases it.
	url3 := url2 + "-three"
	if _, err := as.UpdateApplication(ctx, alice.ID, a1.ID, apps.ApplicationPatch{RepoURL: &url3}); err != nil {
		t.Fatal(err)
	}
	if err := as.DeleteApplication(ctx, alice.ID, a2.ID); err != nil {
		t.Fatal(err)
	}
	check("update and delete", want{"repolock_claims_total/acquired": 3, "repolock_claims_total/already_owned": 2,
		"repolock_claims_total/denied": 2, "repolock_claims_denied_total/claimed": 2, "repolock_claims_total/invalid": 2,
		"repolock_locks_released_total/unreferenced": 1})

	// Deleting alice releases her two locks (url1, url3).
	if _, err := as.DeleteTenant(ctx, alice.Name); err != nil {
		t.Fatal(err)
	}
	check("tenant deleted", want{"repolock_claims_total/acquired": 3, "repolock_claims_total/already_owned": 2,
		"repolock_claims_total/denied": 2, "repolock_claims_denied_total/claimed": 2, "repolock_claims_total/invalid": 2,
		"repolock_locks_released_total/unreferenced": 1, "repolock_locks_released_total/tenant_deleted": 2})

}
