package rekey_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/rekey"
)

func TestMain(m *testing.M) { os.Exit(m.Run()) }

// oldRef is an Application or Credential stored under older rules.
type oldRef struct {
	kind, name, url string
}

// insertOld writes a lock keyed key under rules version version (as a
// service of that version wrote it) and its references, directly in SQL.
func insertOld(t *testing.T, db *database.DB, tenantID, key string, version int, refs ...oldRef) string {
	t.Helper()
	ctx := t.Context()
	var lockID string
	if err := db.GetContext(ctx, &lockID, `INSERT INTO RepositoryLockOwner (git_repository_url, normalizer_version, cluster_user_id)
		VALUES ($1, $2, $3) RETURNING id`, key, version, tenantID); err != nil {
		t.Fatalf("insert lock %s: %v", key, err)
	}
	for _, r := range refs {
		var id string
		table, refTable, col := "applications", "RepositoryLockApplication", "application_id"
		if r.kind == "credential" {
			table, refTable, col = "repository_credentials", "RepositoryLockRepositoryCredential", "repository_credential_id"
		}
		if err := db.GetContext(ctx, &id, `INSERT INTO `+table+` (cluster_user_id, name, repo_url, normalized_url)
			VALUES ($1, $2, $3, $4) RETURNING id`, tenantID, r.name, r.url, key); err != nil {
			t.Fatalf("insert %s %s: %v", r.kind, r.name, err)
		}
		if _, err := db.ExecContext(ctx, `INSERT INTO `+refTable+` (`+col+`, lock_id) VALUES ($1, $2)`, id, lockID); err != nil {
			t.Fatal(err)
		}
	}
	return lockID
}

// state is every row re-keying may touch, rendered as sorted lines.
type state struct {
	Locks, Refs, Events, Conflicts []string
}

func snapshot(t *testing.T, db *database.DB) state {
	t.Helper()
	var s state
	q := func(dst *[]string, query string) {
		if err := db.SelectContext(t.Context(), dst, query); err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		slices.Sort(*dst)
	}
	q(&s.Locks, `SELECT u.name || ' ' || o.git_repository_url || ' v' || o.normalizer_version || coalesce(nullif(':' || o.normalizer_rules, ':'), '')
		FROM RepositoryLockOwner o JOIN cluster_users u ON u.id = o.cluster_user_id`)
	q(&s.Refs, `SELECT 'app ' || a.name || ' ' || a.normalized_url || ' -> ' || o.git_repository_url
		FROM applications a JOIN RepositoryLockApplication r ON r.application_id = a.id JOIN RepositoryLockOwner o ON o.id = r.lock_id
		UNION ALL
		SELECT 'cred ' || c.name || ' ' || c.normalized_url || ' -> ' || o.git_repository_url
		FROM repository_credentials c JOIN RepositoryLockRepositoryCredential r ON r.repository_credential_id = c.id JOIN RepositoryLockOwner o ON o.id = r.lock_id`)
	q(&s.Events, `SELECT e.event || ' ' || e.git_repository_url || coalesce(' from ' || e.rekeyed_from, '') || ' ' || coalesce(e.cluster_user_name, '-')
		FROM repository_lock_events e`)
	q(&s.Conflicts, `SELECT kind || ' ' || tenant_name || ' ' || repo_url || ' ' || old_key || ' -> ' || new_key
		|| coalesce(' vs ' || other_tenant_name || ' ' || other_repo_url || ' ' || other_key, '') || ' ' || reason
		FROM report_rekey_conflicts`)
	return s
}

func diff(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s:\n got:\n  %s\nwant:\n  %s", what, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// populateV2 is a database written by version 2 services, for version 3
// rules (scp-like paths keyed as git sends them: a '%' is "%25" in the
// key): a lock moved in place, a URL v3 rejects, a collision of two stale
// locks (written under a legacy alias set), a new key another tenant
// holds (under v3, and under v2 with a key v3 keeps), a split, an
// unchanged key, a reuse and an unreferenced lock.
func populateV2(t *testing.T, db *database.DB) {
	ten := func(name string) string { return dbtest.NewTenant(t, db, name).ID }
	alice, carol, dave, erin, frank, gina, hank, ivan, judy := ten("alice"), ten("carol"), ten("dave"), ten("erin"), ten("frank"), ten("gina"), ten("hank"), ten("ivan"), ten("judy")
	// Every reference moves to one new key nobody holds: in place.
	insertOld(t, db, alice, "p.example/o/test", 2,
		oldRef{"application", "a1", "git@p.example:o/te%73t"},
		oldRef{"credential", "c1", "p.example:o/te%73t"})
	// v3 rejects a '%' the Azure DevOps SSH server would decode again.
	insertOld(t, db, alice, "dev.azure.com/org/p/_git/te%2573t", 2, oldRef{"application", "az", "git@ssh.dev.azure.com:v3/org/p/te%2573t"})
	// Two stale locks re-key to one key: dave's was written before the
	// alias y-ssh.example -> y.example (a legacy per-set fingerprint).
	insertOld(t, db, carol, "y.example/o/test", 2, oldRef{"application", "cy", "git@y.example:o/te%73t"})
	insertOld(t, db, dave, "y-ssh.example/o/test", 2, oldRef{"application", "dy", "git@y-ssh.example:o/te%73t"})
	if _, err := db.ExecContext(t.Context(), `INSERT INTO normalizer_aliases (from_endpoint, to_endpoint) VALUES ('y-ssh.example', 'y.example')`); err != nil {
		t.Fatal(err)
	}
	// Another tenant holds the new key, under v3 ...
	insertOld(t, db, gina, "g.example/o/test", 2, oldRef{"application", "g1", "git@g.example:o/te%73t"})
	insertOld(t, db, hank, "g.example/o/te%2573t", 3, oldRef{"application", "h1", "ssh://git@g.example/o/te%2573t"})
	// ... or under v2, with a key v3 keeps (ivan's lock is marked current).
	insertOld(t, db, ivan, "k.example/o/te%2573t", 2, oldRef{"application", "i1", "ssh://git@k.example/o/te%2573t"})
	insertOld(t, db, judy, "k.example/o/test", 2, oldRef{"application", "j1", "git@k.example:o/te%73t"})
	// One v2 lock whose references split into two v3 keys.
	insertOld(t, db, erin, "s.example/o/test", 2,
		oldRef{"application", "e1", "git@s.example:o/te%73t"},
		oldRef{"credential", "e2", "https://s.example/o/te%73t"})
	// Unchanged key: only the version moves.
	insertOld(t, db, erin, "e.example/o/r", 2, oldRef{"application", "e3", "https://e.example/o/r.git"})
	// Reuse: frank already holds the v3 key.
	insertOld(t, db, frank, "f.example/o/te%2573t", 3, oldRef{"application", "f1", "ssh://git@f.example/o/te%2573t"})
	insertOld(t, db, frank, "f.example/o/test", 2, oldRef{"application", "f2", "git@f.example:o/te%73t"})
	// Unreferenced stale lock: left to GC.
	insertOld(t, db, hank, "u.example/o/r", 2)
}

// wantV2 are the rows of populateV2 after a complete run.
var wantV2 = state{
	Locks: []string{
		"alice dev.azure.com/org/p/_git/te%2573t v2",
		"alice p.example/o/te%2573t v3",
		"carol y.example/o/test v2",
		"dave y-ssh.example/o/test v2",
		"erin e.example/o/r v2", // checked, unchanged: not rewritten
		"erin s.example/o/te%2573t v3",
		"erin s.example/o/test v3",
		"frank f.example/o/te%2573t v3",
		"gina g.example/o/test v2",
		"hank g.example/o/te%2573t v3",
		"hank u.example/o/r v2",
		"ivan k.example/o/te%2573t v2",
		"judy k.example/o/test v2",
	},
	Refs: []string{
		"app a1 p.example/o/te%2573t -> p.example/o/te%2573t",
		"app az dev.azure.com/org/p/_git/te%2573t -> dev.azure.com/org/p/_git/te%2573t",
		"app cy y.example/o/test -> y.example/o/test",
		"app dy y-ssh.example/o/test -> y-ssh.example/o/test",
		"app e1 s.example/o/te%2573t -> s.example/o/te%2573t",
		"app e3 e.example/o/r -> e.example/o/r",
		"app f1 f.example/o/te%2573t -> f.example/o/te%2573t",
		"app f2 f.example/o/te%2573t -> f.example/o/te%2573t",
		"app g1 g.example/o/test -> g.example/o/test",
		"app h1 g.example/o/te%2573t -> g.example/o/te%2573t",
		"app i1 k.example/o/te%2573t -> k.example/o/te%2573t",
		"app j1 k.example/o/test -> k.example/o/test",
		"cred c1 p.example/o/te%2573t -> p.example/o/te%2573t",
		"cred e2 s.example/o/test -> s.example/o/test",
	},
	// The lock moved in place keeps its id: one "rekeyed" event, no
	// acquired/released pair.
	Events: []string{
		"acquired s.example/o/te%2573t erin",
		"rekeyed f.example/o/te%2573t from f.example/o/test frank",
		"rekeyed p.example/o/te%2573t from p.example/o/test alice",
		"rekeyed s.example/o/te%2573t from s.example/o/test erin",
		"released f.example/o/test frank",
	},
	Conflicts: []string{
		"conflict carol git@y.example:o/te%73t y.example/o/test -> y.example/o/te%2573t vs dave git@y-ssh.example:o/te%73t y-ssh.example/o/test another tenant's lock re-keys to the same key",
		"conflict dave git@y-ssh.example:o/te%73t y-ssh.example/o/test -> y.example/o/te%2573t vs carol git@y.example:o/te%73t y.example/o/test another tenant's lock re-keys to the same key",
		"conflict gina git@g.example:o/te%73t g.example/o/test -> g.example/o/te%2573t vs hank ssh://git@g.example/o/te%2573t g.example/o/te%2573t another tenant holds the new key",
		"conflict judy git@k.example:o/te%73t k.example/o/test -> k.example/o/te%2573t vs ivan ssh://git@k.example/o/te%2573t k.example/o/te%2573t another tenant holds the new key",
		"rejected alice git@ssh.dev.azure.com:v3/org/p/te%2573t dev.azure.com/org/p/_git/te%2573t ->  invalid repository URL: '%' in an Azure DevOps SSH path is not allowed (its SSH server decodes the path once more)",
	},
}

type runCounts struct{ stale, rekeyed, moved, created, released, unref, conflicts, rejected int }

func countsOf(r rekey.Report) runCounts {
	return runCounts{r.StaleLocks, r.Rekeyed, r.MovedReferences, r.CreatedLocks, r.ReleasedLocks, r.Unreferenced, len(r.Conflicts), len(r.Rejected)}
}

func TestRekeyVersion2Database(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	rs := svc(db).rekey
	populateV2(t, db)
	before := snapshot(t, db)
	ctx := t.Context()

	// A dry run reports and changes nothing.
	dry, err := rs.Run(ctx, keying(t, db), rekey.Options{DryRun: true, BatchSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got := snapshot(t, db); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Fatalf("dry run changed rows:\n%v\n%v", before, got)
	}
	var maxVersion, checked int
	if err := db.QueryRowContext(ctx, `SELECT max_version, checked_version FROM normalizer_state`).Scan(&maxVersion, &checked); err != nil || maxVersion != 0 || checked != 0 {
		t.Fatalf("a dry run registered its version or marked the locks checked: %d, %d, %v", maxVersion, checked, err)
	}

	rep, err := rs.Run(ctx, keying(t, db), rekey.Options{BatchSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	// 11 stale locks: 5 re-keyed (alice p in place, erin s split, erin e
	// and ivan current, frank's reuse); 4 references moved; one lock
	// created (erin's split), one released (frank's); hank's u.example is
	// unreferenced; carol/dave, gina and judy are conflicts, alice's
	// Azure URL is rejected.
	want := runCounts{stale: 11, rekeyed: 5, moved: 4, created: 1, released: 1, unref: 1, conflicts: 4, rejected: 1}
	if got := countsOf(rep); got != want {
		t.Errorf("report counts = %+v, want %+v", got, want)
	}
	if got := countsOf(dry); got != want {
		t.Errorf("dry-run counts = %+v, want %+v (the same as the run)", got, want)
	}
	if rep.Batches < 6 || rep.NormalizerVersion != 3 || rep.NormalizerRules != "" { // at least one transaction per 2 stale locks (BatchSize 2)
		t.Errorf("batches %d version %d rules %q", rep.Batches, rep.NormalizerVersion, rep.NormalizerRules)
	}

	after := snapshot(t, db)
	diff(t, "locks", after.Locks, wantV2.Locks)
	diff(t, "references", after.Refs, wantV2.Refs)
	diff(t, "events", after.Events, wantV2.Events)
	diff(t, "open conflicts", after.Conflicts, wantV2.Conflicts)

	var versions []string
	if err := db.SelectContext(ctx, &versions, `SELECT normalizer_version || '/' || normalizer_rules || ' ' || locks
		FROM report_normalizer_versions ORDER BY 1`); err != nil {
		t.Fatal(err)
	}
	diff(t, "report_normalizer_versions", versions, []string{"2/ 8", "3/ 5"})
	// The run checked every lock: the ones left stale are the open
	// conflicts' (so a second run reads only those), and claims check the
	// keys of version 2 for those only.
	if err := db.GetContext(ctx, &checked, `SELECT checked_version FROM normalizer_state`); err != nil || checked != 3 {
		t.Fatalf("checked_version after a complete run: %d, %v; want 3", checked, err)
	}

	// A second run moves nothing and writes nothing; the conflicts stay
	// reported.
	again, err := rs.Run(ctx, keying(t, db), rekey.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := countsOf(again); got != (runCounts{stale: 5, conflicts: 4, rejected: 1}) {
		t.Errorf("second run counts = %+v", got)
	}
	if got := snapshot(t, db); fmt.Sprint(got) != fmt.Sprint(after) {
		t.Errorf("second run changed rows:\n%v\n%v", after, got)
	}

	// The operator resolves the collision by deleting carol's application
	// (leaving her lock unreferenced, for the GC): the next run moves
	// dave's lock and closes both conflict rows.
	if _, err := db.ExecContext(ctx, `DELETE FROM applications WHERE name = 'cy'`); err != nil {
		t.Fatal(err)
	}
	third, err := rs.Run(ctx, keying(t, db), rekey.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := countsOf(third); got != (runCounts{stale: 5, rekeyed: 1, moved: 1, unref: 1, conflicts: 2, rejected: 1}) {
		t.Errorf("third run counts = %+v", got)
	}
	diff(t, "open conflicts after resolving", snapshot(t, db).Conflicts, wantV2.Conflicts[2:])
	if k := keying(t, db); len(k.Shadows) != 1 || k.Shadows[0].Version() != 2 {
		t.Fatalf("shadows with conflicts open: %d, want version 2's", len(k.Shadows))
	}

	// Once no conflict is open, claims check no older keys: every lock of
	// version 2 left was checked, and its key is its references' key under
	// version 3 (so another tenant's claim of erin's URL is still denied).
	if _, err := db.ExecContext(ctx, `DELETE FROM applications WHERE name IN ('g1', 'j1', 'az')`); err != nil {
		t.Fatal(err)
	}
	if _, err := rs.Run(ctx, keying(t, db), rekey.Options{}); err != nil {
		t.Fatal(err)
	}
	k := keying(t, db)
	if len(k.Shadows) != 0 || len(k.Unchecked) != 0 {
		t.Fatalf("shadows after every conflict closed: %d (unchecked %v), want none", len(k.Shadows), k.Unchecked)
	}
	mallory := dbtest.NewTenant(t, db, "mallory")
	// svc's locks key under the built-in rules with no shadows: what the
	// loaded keying is now.
	acq, err := svc(db).locks.Acquire(ctx, mallory.ID, "git@e.example:o/r")
	if err != nil || acq.Acquired || acq.Owner != "erin" {
		t.Fatalf("mallory's claim of erin's checked v2 lock: %+v, %v; want denied by erin", acq, err)
	}
}

// TestRekeyResumes stops a run after its first batch (its context ends):
// every lock is re-keyed or untouched, and the next run finishes the work
// with the same rows as one complete run.
func TestRekeyResumes(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	rs := svc(db).rekey
	populateV2(t, db)
	ctx, cancel := context.WithCancel(t.Context())
	var batches int
	rep, err := rs.Run(ctx, keying(t, db), rekey.Options{BatchSize: 2, Progress: func(rekey.Report) {
		batches++
		cancel()
	}})
	// The run reads and moves in two stages that both report progress:
	// a batch already in flight when the context ended may still report
	// (CI saw 2), but the run must end with the context's error, before
	// checking every lock.
	if !errors.Is(err, context.Canceled) || batches < 1 {
		t.Fatalf("stopped run: %d batches, %+v, %v", batches, rep, err)
	}
	var checked int
	if err := db.GetContext(t.Context(), &checked, `SELECT checked_version FROM normalizer_state`); err != nil || checked != 0 {
		t.Fatalf("checked_version after a stopped run: %d, %v; want 0 (it did not check every lock)", checked, err)
	}
	var moved int
	if err := db.GetContext(t.Context(), &moved, `SELECT count(*) FROM RepositoryLockOwner WHERE normalizer_version = 3`); err != nil {
		t.Fatal(err)
	}
	if moved >= 5 { // 5 once complete
		t.Fatalf("%d locks of version 3 after the stopped run: it did not stop", moved)
	}
	if _, err := rs.Run(t.Context(), keying(t, db), rekey.Options{BatchSize: 2}); err != nil {
		t.Fatal(err)
	}
	after := snapshot(t, db)
	diff(t, "locks", after.Locks, wantV2.Locks)
	diff(t, "references", after.Refs, wantV2.Refs)
	diff(t, "events", after.Events, wantV2.Events)
	diff(t, "open conflicts", after.Conflicts, wantV2.Conflicts)
	again, err := rs.Run(t.Context(), keying(t, db), rekey.Options{})
	if err != nil || again.Rekeyed != 0 || again.MovedReferences != 0 {
		t.Fatalf("third run: %+v, %v", again, err)
	}
}
