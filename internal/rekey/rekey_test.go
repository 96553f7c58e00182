package rekey_test

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/normalize"
	"github.com/repolock/repolock/internal/rekey"
)

func TestMain(m *testing.M) { os.Exit(m.Run()) }

// v1Ref is an Application or Credential stored under version 1 rules.
type v1Ref struct {
	kind, name, url string
}

// insertV1 writes a lock keyed key under version 1 rules (normalizer_version
// 1, as a v1 service wrote it) and its references, directly in SQL.
func insertV1(t *testing.T, db *database.DB, tenantID, key string, version int, refs ...v1Ref) string {
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

// populateV1 is a database written by a version 1 service: the three
// holes of issue 10, a cross-tenant collision, a same-tenant split, a reuse
// and a key that does not change.
func populateV1(t *testing.T, db *database.DB) {
	ten := func(name string) string { return dbtest.NewTenant(t, db, name).ID }
	alice, bob, carol, dave, erin, frank, gina, hank := ten("alice"), ten("bob"), ten("carol"), ten("dave"), ten("erin"), ten("frank"), ten("gina"), ten("hank")
	// Ported keys: v1 wrote host:port, v2 host+port.
	insertV1(t, db, alice, "p.example:8443/o/r", 1,
		v1Ref{"application", "a1", "https://p.example:8443/o/r"},
		v1Ref{"credential", "c1", "ssh://git@p.example:8443/o/r.git"})
	// Hole 1: `..` after an empty segment; v2 rejects it.
	insertV1(t, db, alice, "github.com/o", 1, v1Ref{"application", "dotdot", "https://github.com/o/r//.."})
	// Hole 2: user-less host:DIGITS/path was host and port in v1, scp in v2.
	insertV1(t, db, bob, "github.com:1234/repo", 1, v1Ref{"application", "b1", "github.com:1234/repo"})
	// Hole 3 and a cross-tenant collision: carol's ssh://.../~/o/r was
	// h.example/~/o/r in v1 and is h.example/o/r in v2, the key dave holds.
	insertV1(t, db, carol, "h.example/~/o/r", 1, v1Ref{"application", "tilde", "ssh://git@h.example/~/o/r"})
	insertV1(t, db, dave, "h.example/o/r", 1, v1Ref{"application", "d1", "https://h.example/o/r"})
	// One v1 lock whose references split into two v2 keys.
	insertV1(t, db, erin, "s.example:2222/o/r", 1,
		v1Ref{"application", "e1", "ssh://git@s.example:2222/o/r"},
		v1Ref{"credential", "e2", "s.example:2222/o/r"})
	// Unchanged key: only the version moves.
	insertV1(t, db, erin, "e.example/o/r", 1, v1Ref{"application", "e3", "https://e.example/o/r.git"})
	// Reuse: frank already holds the v2 key.
	insertV1(t, db, frank, "f.example+8443/o/r", 2, v1Ref{"application", "f1", "https://f.example:8443/o/r"})
	insertV1(t, db, frank, "f.example:8443/o/r", 1, v1Ref{"application", "f2", "https://F.example:8443/o/r/"})
	// Another tenant already holds the v2 key (created under v2 rules).
	insertV1(t, db, gina, "g.example:8443/o/r", 1, v1Ref{"application", "g1", "https://g.example:8443/o/r"})
	insertV1(t, db, hank, "g.example+8443/o/r", 2, v1Ref{"application", "h1", "https://g.example:8443/o/r.git"})
	// Unreferenced stale lock: left to GC.
	insertV1(t, db, hank, "u.example/o/r", 1)
}

func TestRekeyVersion1Database(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	rs := svc(db).rekey
	populateV1(t, db)
	before := snapshot(t, db)
	ctx := t.Context()

	// A dry run reports and changes nothing.
	dry, err := rs.Run(ctx, normalize.Default(), rekey.Options{DryRun: true, BatchSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got := snapshot(t, db); !slices.Equal(got.Locks, before.Locks) || !slices.Equal(got.Refs, before.Refs) ||
		!slices.Equal(got.Events, before.Events) || !slices.Equal(got.Conflicts, before.Conflicts) {
		t.Fatalf("dry run changed rows:\n%v\n%v", before, got)
	}

	rep, err := rs.Run(ctx, normalize.Default(), rekey.Options{BatchSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	type counts struct{ stale, rekeyed, moved, created, released, unref, conflicts, rejected int }
	c := func(r rekey.Report) counts {
		return counts{r.StaleLocks, r.Rekeyed, r.MovedReferences, r.CreatedLocks, r.ReleasedLocks, r.Unreferenced, len(r.Conflicts), len(r.Rejected)}
	}
	// 10 stale locks: 5 re-keyed (alice p, bob, erin s, erin e, frank f:8443),
	// 4 references moved into 4 created locks (p, bob, s+2222, s/2222) and
	// one reused; 4 old locks released; the u.example lock is unreferenced;
	// carol/dave and gina are conflicts, alice's `..` URL is rejected.
	want := counts{stale: 10, rekeyed: 5, moved: 6, created: 4, released: 4, unref: 1, conflicts: 3, rejected: 1}
	if got := c(rep); got != want {
		t.Errorf("report counts = %+v, want %+v", got, want)
	}
	if got := c(dry); got != want {
		t.Errorf("dry-run counts = %+v, want %+v (the same as the run)", got, want)
	}
	if rep.Batches != 5 || rep.NormalizerVersion != 2 || rep.NormalizerRules != "" {
		t.Errorf("batches %d version %d rules %q", rep.Batches, rep.NormalizerVersion, rep.NormalizerRules)
	}

	after := snapshot(t, db)
	diff(t, "locks", after.Locks, []string{
		"alice github.com/o v1",
		"alice p.example+8443/o/r v2",
		"bob github.com/1234/repo v2",
		"carol h.example/~/o/r v1",
		"dave h.example/o/r v1",
		"erin e.example/o/r v2",
		"erin s.example+2222/o/r v2",
		"erin s.example/2222/o/r v2",
		"frank f.example+8443/o/r v2",
		"gina g.example:8443/o/r v1",
		"hank g.example+8443/o/r v2",
		"hank u.example/o/r v1",
	})
	diff(t, "references", after.Refs, []string{
		"app a1 p.example+8443/o/r -> p.example+8443/o/r",
		"app b1 github.com/1234/repo -> github.com/1234/repo",
		"app d1 h.example/o/r -> h.example/o/r",
		"app dotdot github.com/o -> github.com/o",
		"app e1 s.example+2222/o/r -> s.example+2222/o/r",
		"app e3 e.example/o/r -> e.example/o/r",
		"app f1 f.example+8443/o/r -> f.example+8443/o/r",
		"app f2 f.example+8443/o/r -> f.example+8443/o/r",
		"app g1 g.example:8443/o/r -> g.example:8443/o/r",
		"app h1 g.example+8443/o/r -> g.example+8443/o/r",
		"app tilde h.example/~/o/r -> h.example/~/o/r",
		"cred c1 p.example+8443/o/r -> p.example+8443/o/r",
		"cred e2 s.example/2222/o/r -> s.example/2222/o/r",
	})
	diff(t, "events", after.Events, []string{
		"acquired github.com/1234/repo bob",
		"acquired p.example+8443/o/r alice",
		"acquired s.example+2222/o/r erin",
		"acquired s.example/2222/o/r erin",
		"rekeyed f.example+8443/o/r from f.example:8443/o/r frank",
		"rekeyed github.com/1234/repo from github.com:1234/repo bob",
		"rekeyed p.example+8443/o/r from p.example:8443/o/r alice",
		"rekeyed s.example+2222/o/r from s.example:2222/o/r erin",
		"rekeyed s.example/2222/o/r from s.example:2222/o/r erin",
		"released f.example:8443/o/r frank",
		"released github.com:1234/repo bob",
		"released p.example:8443/o/r alice",
		"released s.example:2222/o/r erin",
	})
	wantConflicts := []string{
		"conflict carol ssh://git@h.example/~/o/r h.example/~/o/r -> h.example/o/r vs dave https://h.example/o/r h.example/o/r another tenant's lock re-keys to the same key",
		"conflict dave https://h.example/o/r h.example/o/r -> h.example/o/r vs carol ssh://git@h.example/~/o/r h.example/~/o/r another tenant's lock re-keys to the same key",
		"conflict gina https://g.example:8443/o/r g.example:8443/o/r -> g.example+8443/o/r vs hank https://g.example:8443/o/r.git g.example+8443/o/r another tenant holds the new key",
		"rejected alice https://github.com/o/r//.. github.com/o ->  invalid repository URL: path contains a '..' segment (git resolves it differently per transport)",
	}
	diff(t, "open conflicts", after.Conflicts, wantConflicts)

	var versions []string
	if err := db.SelectContext(ctx, &versions, `SELECT normalizer_version || '/' || normalizer_rules || ' ' || locks
		FROM report_normalizer_versions ORDER BY 1`); err != nil {
		t.Fatal(err)
	}
	diff(t, "report_normalizer_versions", versions, []string{"1/ 5", "2/ 7"})

	// A second run moves nothing and writes nothing; the conflicts stay
	// reported.
	again, err := rs.Run(ctx, normalize.Default(), rekey.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := c(again); got != (counts{stale: 5, unref: 1, conflicts: 3, rejected: 1}) {
		t.Errorf("second run counts = %+v", got)
	}
	if got := snapshot(t, db); fmt.Sprint(got) != fmt.Sprint(after) {
		t.Errorf("second run changed rows:\n%v\n%v", after, got)
	}

	// The operator resolves the collision by deleting carol's application
	// (leaving her lock unreferenced, for the GC): the next run marks dave's
	// lock current and closes both conflict rows.
	if _, err := db.ExecContext(ctx, `DELETE FROM applications WHERE name = 'tilde'`); err != nil {
		t.Fatal(err)
	}
	third, err := rs.Run(ctx, normalize.Default(), rekey.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := c(third); got != (counts{stale: 5, rekeyed: 1, unref: 2, conflicts: 1, rejected: 1}) {
		t.Errorf("third run counts = %+v", got)
	}
	diff(t, "open conflicts after resolving", snapshot(t, db).Conflicts, []string{wantConflicts[2], wantConflicts[3]})
}

func TestRekeyConfiguredAliases(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	rs := svc(db).rekey
	ctx := t.Context()
	ann := dbtest.NewTenant(t, db, "ann").ID
	// Written under v2 without aliases: two keys for one GitLab repository.
	insertV1(t, db, ann, "gitlab.example.com+2222/g/r", 2, v1Ref{"application", "ssh", "ssh://git@gitlab.example.com:2222/g/r.git"})
	insertV1(t, db, ann, "gitlab.example.com/g/r", 2, v1Ref{"application", "https", "https://gitlab.example.com/g/r"})
	n0, err := rs.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := rs.Run(ctx, n0, rekey.Options{}); err != nil || rep.StaleLocks != 0 {
		t.Fatalf("without aliases: %+v, %v", rep, err)
	}
	src, err := rekey.NewSource(ctx, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rs.AddAlias(ctx, "GitLab.example.com+2222", "gitlab.example.com"); err != nil {
		t.Fatal(err)
	}
	// A running service keys with the set it loaded until it refreshes.
	if f := src.Current().Fingerprint(); f != "" {
		t.Fatalf("source changed before a refresh: %q", f)
	}
	if err := src.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if k, err := src.Current().RepoURL("ssh://git@gitlab.example.com:2222/g/r"); err != nil || k != "gitlab.example.com/g/r" {
		t.Fatalf("after a refresh: %q, %v", k, err)
	}
	n, err := rs.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n.Fingerprint() == "" || n.Fingerprint() != src.Current().Fingerprint() {
		t.Fatalf("fingerprints %q, %q", n.Fingerprint(), src.Current().Fingerprint())
	}
	rep, err := rs.Run(ctx, n, rekey.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.StaleLocks != 2 || rep.Rekeyed != 2 || rep.MovedReferences != 1 || rep.ReleasedLocks != 1 || rep.CreatedLocks != 0 {
		t.Errorf("report %+v", rep)
	}
	diff(t, "locks", snapshot(t, db).Locks, []string{"ann gitlab.example.com/g/r v2:" + n.Fingerprint()})
	diff(t, "references", snapshot(t, db).Refs, []string{
		"app https gitlab.example.com/g/r -> gitlab.example.com/g/r",
		"app ssh gitlab.example.com/g/r -> gitlab.example.com/g/r",
	})
}
