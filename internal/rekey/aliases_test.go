package rekey_test

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/apps"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/rekey"
)

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// sourced returns db's services keyed under a rekey.Source loaded now (as
// api serve loads it), and the Source.
func sourced(t *testing.T, db *database.DB) (*services, *rekey.Source) {
	t.Helper()
	src, err := rekey.NewSource(t.Context(), db, quietLog)
	if err != nil {
		t.Fatal(err)
	}
	return svcWith(db, src), src
}

func generation(t *testing.T, db *database.DB) int64 {
	t.Helper()
	var g int64
	if err := db.GetContext(t.Context(), &g, `SELECT generation FROM normalizer_state`); err != nil {
		t.Fatal(err)
	}
	return g
}

func aliasCount(t *testing.T, db *database.DB) int {
	t.Helper()
	var n int
	if err := db.GetContext(t.Context(), &n, `SELECT count(*) FROM normalizer_aliases`); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestAliasAddStory is the story of issue 24 on a fresh database: the
// alias moves A's lock in the transaction that adds it, and a claim of B
// through a replica that loaded the rules before the alias (its Source is
// stale) is decided under the new rules: denied.
func TestAliasAddStory(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := t.Context()
	s, src := sourced(t, db)
	a := dbtest.NewTenant(t, db, "a").ID
	b := dbtest.NewTenant(t, db, "b").ID
	app, err := s.apps.CreateApplication(ctx, a, apps.NewApplication{Name: "app", RepoURL: "git@gitlab-ssh.example.com:o/r.git"})
	if err != nil || app.NormalizedURL != "gitlab-ssh.example.com/o/r" {
		t.Fatalf("create: %+v, %v", app, err)
	}
	gen := src.Keying().Generation

	ch, err := s.rekey.AddAlias(ctx, "gitlab-ssh.example.com", "gitlab.example.com", false)
	if err != nil {
		t.Fatal(err)
	}
	if ch.DryRun || ch.Action != "add" || ch.Endpoint != "gitlab-ssh.example.com" || ch.ExaminedLocks != 1 || ch.RekeyedLocks != 1 ||
		ch.MovedReferences != 1 || ch.CreatedLocks != 0 || ch.ReleasedLocks != 0 || len(ch.Conflicts)+len(ch.Rejected) != 0 ||
		ch.Alias.ID == "" || ch.Alias.From != "gitlab-ssh.example.com" || ch.Alias.To != "gitlab.example.com" {
		t.Fatalf("change %+v", ch)
	}
	after := snapshot(t, db)
	diff(t, "locks", after.Locks, []string{"a gitlab.example.com/o/r v3"})
	diff(t, "references", after.Refs, []string{"app app gitlab.example.com/o/r -> gitlab.example.com/o/r"})
	diff(t, "events", after.Events, []string{
		"acquired gitlab-ssh.example.com/o/r a",
		"rekeyed gitlab.example.com/o/r from gitlab-ssh.example.com/o/r a",
	})
	if g := generation(t, db); g <= gen {
		t.Fatalf("generation %d after the alias, %d before", g, gen)
	}

	// The replica has not reloaded: under its rules the ssh spelling keys
	// to the key A's lock just left, which is free. The guard makes the
	// claim reload, and under the new rules A owns it.
	if src.Keying().Generation != gen {
		t.Fatal("the source reloaded before any claim")
	}
	for _, u := range []string{"https://gitlab-ssh.example.com/o/r", "https://gitlab.example.com/o/r"} {
		acq, err := s.locks.Acquire(ctx, b, u)
		if err != nil || acq.Acquired || acq.Owner != "a" || acq.Key != "gitlab.example.com/o/r" {
			t.Fatalf("claim of %s by b: %+v, %v", u, acq, err)
		}
	}
	if _, err := s.apps.CreateApplication(ctx, b, apps.NewApplication{Name: "b", RepoURL: "https://gitlab.example.com/o/r"}); !repolock.IsCode(err, repolock.ERepositoryClaimed) {
		t.Fatalf("b's application: %v", err)
	}
	if src.Keying().Generation == gen {
		t.Fatal("the claims did not reload the rules")
	}
	diff(t, "locks after b's claims", snapshot(t, db).Locks, []string{"a gitlab.example.com/o/r v3"})
}

// TestAliasConflict: an alias that would put two tenants on one key is
// refused with every conflict listed, and changes nothing; a dry run
// returns the plan and changes nothing.
func TestAliasConflict(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := t.Context()
	s, _ := sourced(t, db)
	a := dbtest.NewTenant(t, db, "a").ID
	b := dbtest.NewTenant(t, db, "b").ID
	c := dbtest.NewTenant(t, db, "c").ID
	for _, x := range []struct{ tenant, name, url string }{
		{a, "a1", "git@gitlab-ssh.example.com:o/r.git"},
		{b, "b1", "https://gitlab.example.com/o/r"},
		{c, "c1", "git@gitlab-ssh.example.com:o/free.git"},
	} {
		if _, err := s.apps.CreateApplication(ctx, x.tenant, apps.NewApplication{Name: x.name, RepoURL: x.url}); err != nil {
			t.Fatal(err)
		}
	}
	before, gen := snapshot(t, db), generation(t, db)
	unchanged := func(what string) {
		t.Helper()
		if got := snapshot(t, db); fmt.Sprint(got) != fmt.Sprint(before) {
			t.Fatalf("%s changed rows:\n%v\n%v", what, before, got)
		}
		if g := generation(t, db); g != gen {
			t.Fatalf("%s: generation %d, was %d", what, g, gen)
		}
		if n := aliasCount(t, db); n != 0 {
			t.Fatalf("%s stored %d aliases", what, n)
		}
	}
	for _, dry := range []bool{true, false} {
		ch, err := s.rekey.AddAlias(ctx, "gitlab-ssh.example.com", "gitlab.example.com", dry)
		if !repolock.IsCode(err, repolock.EAliasConflict) {
			t.Fatalf("dry %v: %v", dry, err)
		}
		var re *repolock.Error
		if !errors.As(err, &re) {
			t.Fatal(err)
		}
		ps, ok := re.Details["conflicts"].([]rekey.Problem)
		if !ok || len(ps) != 1 || len(ch.Conflicts) != 1 || ch.ExaminedLocks != 2 {
			t.Fatalf("dry %v: details %#v, change %+v", dry, re.Details, ch)
		}
		p := ps[0]
		if p.Kind != "conflict" || p.TenantName != "a" || p.RepoURL != "git@gitlab-ssh.example.com:o/r.git" /* the stored URL: an ssh login name is kept */ || p.OldKey != "gitlab-ssh.example.com/o/r" ||
			p.NewKey != "gitlab.example.com/o/r" || p.OtherTenant != "b" || p.OtherRepoURL != "https://gitlab.example.com/o/r" ||
			p.OtherKey != "gitlab.example.com/o/r" || p.TenantID != a || p.OtherTenantID != b {
			t.Fatalf("conflict %+v", p)
		}
		unchanged(fmt.Sprintf("a refused change (dry %v)", dry))
	}

	// Without b's lock, the dry run returns the plan and changes nothing.
	for _, q := range []string{`DELETE FROM applications WHERE name = 'b1'`,
		`DELETE FROM RepositoryLockOwner WHERE git_repository_url = 'gitlab.example.com/o/r'`} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	before, gen = snapshot(t, db), generation(t, db)
	ch, err := s.rekey.AddAlias(ctx, "gitlab-ssh.example.com", "gitlab.example.com", true)
	if err != nil || !ch.DryRun || ch.ExaminedLocks != 2 || ch.RekeyedLocks != 2 || ch.MovedReferences != 2 || ch.Alias.ID != "" {
		t.Fatalf("dry run: %+v, %v", ch, err)
	}
	unchanged("a dry run")
}

// TestAliasPerEndpoint: an alias on host X examines only the locks on X's
// endpoint (through the endpoint index) and writes no other lock row.
func TestAliasPerEndpoint(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := t.Context()
	s, _ := sourced(t, db)
	a := dbtest.NewTenant(t, db, "a").ID
	for i, u := range []string{
		"git@x-ssh.example:o/r1.git", "https://x-ssh.example/o/r2", // X: moved
		"https://y.example/o/r1", "git@y.example:o/r2.git", // Y
		"ssh://git@x-ssh.example:2222/o/r3", "https://x-ssh.example.org/o/r4", // other endpoints
	} {
		if _, err := s.apps.CreateApplication(ctx, a, apps.NewApplication{Name: fmt.Sprintf("a%d", i), RepoURL: u}); err != nil {
			t.Fatal(err)
		}
	}
	rows := func() []string {
		var out []string
		if err := db.SelectContext(ctx, &out, `SELECT git_repository_url || ' ' || xmin::text || ' v' || normalizer_version
			FROM RepositoryLockOwner WHERE split_part(git_repository_url, '/', 1) NOT IN ('x-ssh.example', 'x.example') ORDER BY 1`); err != nil {
			t.Fatal(err)
		}
		return out
	}
	others := rows()
	if len(others) != 4 {
		t.Fatalf("other locks %v", others)
	}
	ch, err := s.rekey.AddAlias(ctx, "x-ssh.example", "x.example", false)
	if err != nil {
		t.Fatal(err)
	}
	if ch.Endpoint != "x-ssh.example" || ch.ExaminedLocks != 2 || ch.RekeyedLocks != 2 || ch.MovedReferences != 2 {
		t.Fatalf("change %+v", ch)
	}
	var moved []string
	if err := db.SelectContext(ctx, &moved, `SELECT git_repository_url || ' ' || xmin::text || ' v' || normalizer_version
		FROM RepositoryLockOwner WHERE split_part(git_repository_url, '/', 1) = 'x.example' ORDER BY 1`); err != nil {
		t.Fatal(err)
	}
	if len(moved) != 2 {
		t.Fatalf("moved %v", moved)
	}
	diff(t, "locks on other endpoints (key, xmin, version)", rows(), others)
}

// TestAliasChangeHoldsOffClaims holds an alias change's transaction open
// (its statements run by hand, in AddAlias's order) and claims on the
// affected endpoint meanwhile: the claim waits, and is decided under the
// new rules once the change commits.
func TestAliasChangeHoldsOffClaims(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := t.Context()
	s, _ := sourced(t, db)
	a := dbtest.NewTenant(t, db, "a").ID
	b := dbtest.NewTenant(t, db, "b").ID
	app, err := s.apps.CreateApplication(ctx, a, apps.NewApplication{Name: "app", RepoURL: "git@gitlab-ssh.example.com:o/r.git"})
	if err != nil {
		t.Fatal(err)
	}
	tx, pid := dbtest.BeginWithPID(t, db)
	for _, q := range []string{
		`LOCK TABLE normalizer_aliases IN SHARE ROW EXCLUSIVE MODE`,
		`LOCK TABLE RepositoryLockOwner IN SHARE ROW EXCLUSIVE MODE`,
		`INSERT INTO normalizer_aliases (from_endpoint, to_endpoint) VALUES ('gitlab-ssh.example.com', 'gitlab.example.com')`,
		`UPDATE normalizer_state SET generation = generation + 1`,
		`UPDATE RepositoryLockOwner SET git_repository_url = 'gitlab.example.com/o/r' WHERE git_repository_url = 'gitlab-ssh.example.com/o/r'`,
		`UPDATE applications SET normalized_url = 'gitlab.example.com/o/r' WHERE id = '` + app.ID + `'`,
	} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// Under the rules the replica holds, b's spelling keys to the key
	// A's lock is leaving.
	type result struct {
		acq   any
		owner string
		ok    bool
		err   error
	}
	done := make(chan result, 1)
	go func() {
		acq, err := s.locks.Acquire(ctx, b, "https://gitlab-ssh.example.com/o/r")
		done <- result{acq: acq, owner: acq.Owner, ok: acq.Acquired, err: err}
	}()
	dbtest.WaitUntilBlockedAny(t, db, pid)
	select {
	case r := <-done:
		t.Fatalf("the claim did not wait: %+v", r)
	default:
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.ok || r.owner != "a" {
		t.Fatalf("claim after the change: %+v", r)
	}
	diff(t, "locks", snapshot(t, db).Locks, []string{"a gitlab.example.com/o/r v3"})
}

// TestAliasRemoval: removing an alias moves the locks on its To endpoint
// whose references are spelled with its From host back to From keys; the
// others stay.
func TestAliasRemoval(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := t.Context()
	s, src := sourced(t, db)
	a := dbtest.NewTenant(t, db, "a").ID
	c := dbtest.NewTenant(t, db, "c").ID
	ch, err := s.rekey.AddAlias(ctx, "gitlab-ssh.example.com", "gitlab.example.com", false)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range []struct{ tenant, name, url string }{
		{a, "a1", "git@gitlab-ssh.example.com:o/r.git"},
		{a, "a2", "https://gitlab.example.com/o/r"},
		{a, "a3", "git@gitlab-ssh.example.com:o/solo.git"},
		{c, "c1", "https://gitlab.example.com/o/other"},
	} {
		if _, err := s.apps.CreateApplication(ctx, x.tenant, apps.NewApplication{Name: x.name, RepoURL: x.url}); err != nil {
			t.Fatal(err)
		}
	}
	diff(t, "locks with the alias", snapshot(t, db).Locks, []string{
		"a gitlab.example.com/o/r v3", "a gitlab.example.com/o/solo v3", "c gitlab.example.com/o/other v3"})
	gen := src.Keying().Generation
	rm, err := s.rekey.RemoveAliasByID(ctx, ch.Alias.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	// a's lock on o/r splits: a1 back to the ssh host (created), a2 stays;
	// o/solo moves in place; c's lock is marked current.
	if rm.Action != "remove" || rm.Endpoint != "gitlab.example.com" || rm.ExaminedLocks != 3 || rm.RekeyedLocks != 3 ||
		rm.MovedReferences != 2 || rm.CreatedLocks != 1 || rm.ReleasedLocks != 0 {
		t.Fatalf("removal %+v", rm)
	}
	after := snapshot(t, db)
	diff(t, "locks", after.Locks, []string{
		"a gitlab-ssh.example.com/o/r v3", "a gitlab-ssh.example.com/o/solo v3", "a gitlab.example.com/o/r v3", "c gitlab.example.com/o/other v3"})
	diff(t, "references", after.Refs, []string{
		"app a1 gitlab-ssh.example.com/o/r -> gitlab-ssh.example.com/o/r",
		"app a2 gitlab.example.com/o/r -> gitlab.example.com/o/r",
		"app a3 gitlab-ssh.example.com/o/solo -> gitlab-ssh.example.com/o/solo",
		"app c1 gitlab.example.com/o/other -> gitlab.example.com/o/other",
	})
	if n := aliasCount(t, db); n != 0 {
		t.Fatalf("%d aliases left", n)
	}
	// A claim through the replica (not reloaded) is decided under the
	// rules without the alias.
	acq, err := s.locks.Acquire(ctx, c, "https://gitlab-ssh.example.com/o/solo")
	if err != nil || acq.Acquired || acq.Owner != "a" || acq.Key != "gitlab-ssh.example.com/o/solo" || src.Keying().Generation == gen {
		t.Fatalf("claim after the removal: %+v, %v", acq, err)
	}
	if _, err := s.rekey.RemoveAlias(ctx, "gitlab-ssh.example.com", false); !repolock.IsCode(err, repolock.ENotFound) {
		t.Fatalf("second removal: %v", err)
	}
}
