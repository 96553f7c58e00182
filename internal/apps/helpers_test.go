package apps_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/repolock/repolock/internal/apps"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/locks"
	"github.com/repolock/repolock/internal/normalize"
)

// newApps returns the apps service on db and the locks service it acquires
// and releases through, keying under the built-in rules (as keyOf does).
// Build one of each per pool (they own the pool's Batchers).
// The pool's BatchStallAfter (dbtest.Pool) applies: New makes the Batchers.
func newApps(db *database.DB) (*apps.Service, *locks.Service) {
	ls := locks.New(db, locks.Fixed(normalize.Default()), nil)
	return apps.New(db, ls), ls
}

// spellings are five ways of writing repository i of org, all with the same
// key github.com/<org>/repo-<i>.
func spellings(org string, i int) []string {
	return []string{
		fmt.Sprintf("https://github.com/%s/repo-%d", org, i),
		fmt.Sprintf("git@github.com:%s/repo-%d.git", org, i),
		fmt.Sprintf("ssh://git@github.com/%s/repo-%d", org, i),
		fmt.Sprintf("HTTPS://GitHub.com/%s/Repo-%d/", org, i),
		fmt.Sprintf("https://deploy:s3cret@github.com/%s/repo-%d.git", org, i),
	}
}

func keyOf(t testing.TB, raw string) string {
	t.Helper()
	k, err := normalize.RepoURL(raw)
	if err != nil {
		t.Fatalf("normalize %q: %v", raw, err)
	}
	return string(k)
}

func TestSpellingsShareAKey(t *testing.T) {
	t.Parallel()
	for _, s := range spellings("acme", 7) {
		if k := keyOf(t, s); k != "github.com/acme/repo-7" {
			t.Fatalf("%q -> %q", s, k)
		}
	}
}

// lockOf returns the lock on key: its id and owner's name, or "" "" when
// there is none.
func lockOf(t testing.TB, q database.Querier, key string) (id, owner string) {
	t.Helper()
	var row struct {
		ID   string `db:"id"`
		Name string `db:"name"`
	}
	err := q.GetContext(context.Background(), &row, `
		SELECT o.id, u.name FROM RepositoryLockOwner o JOIN cluster_users u ON u.id = o.cluster_user_id
		WHERE o.git_repository_url = $1`, key)
	if err == sql.ErrNoRows {
		return "", ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return row.ID, row.Name
}

// checkInvariants fails the test unless the database is in the state the
// package promises: every lock is referenced; every application and
// credential has a reference to its tenant's lock on its normalized URL.
func checkInvariants(t testing.TB, q database.Querier) {
	t.Helper()
	for _, c := range []struct{ what, query string }{
		{"locks without references", `
			SELECT count(*) FROM RepositoryLockOwner o
			WHERE NOT EXISTS (SELECT 1 FROM RepositoryLockApplication r WHERE r.lock_id = o.id)
			  AND NOT EXISTS (SELECT 1 FROM RepositoryLockRepositoryCredential r WHERE r.lock_id = o.id)`},
		{"applications without a reference", `
			SELECT count(*) FROM applications a
			WHERE NOT EXISTS (SELECT 1 FROM RepositoryLockApplication r WHERE r.application_id = a.id)`},
		{"credentials without a reference", `
			SELECT count(*) FROM repository_credentials c
			WHERE NOT EXISTS (SELECT 1 FROM RepositoryLockRepositoryCredential r WHERE r.repository_credential_id = c.id)`},
		{"applications referencing a lock of another tenant or URL", `
			SELECT count(*) FROM applications a
			JOIN RepositoryLockApplication r ON r.application_id = a.id
			JOIN RepositoryLockOwner o ON o.id = r.lock_id
			WHERE o.cluster_user_id <> a.cluster_user_id OR o.git_repository_url <> a.normalized_url`},
		{"credentials referencing a lock of another tenant or URL", `
			SELECT count(*) FROM repository_credentials c
			JOIN RepositoryLockRepositoryCredential r ON r.repository_credential_id = c.id
			JOIN RepositoryLockOwner o ON o.id = r.lock_id
			WHERE o.cluster_user_id <> c.cluster_user_id OR o.git_repository_url <> c.normalized_url`},
	} {
		var n int
		if err := q.GetContext(context.Background(), &n, c.query); err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		if n != 0 {
			t.Errorf("invariant broken: %d %s", n, c.what)
		}
	}
}

type lockEvent struct {
	Event      string         `db:"event"`
	LockID     sql.NullString `db:"lock_id"`
	TenantName sql.NullString `db:"cluster_user_name"`
	OwnerName  sql.NullString `db:"owner_user_name"`
	// Count is how many events the row stands for (repeated denials of
	// one tenant for one URL within a window are one row).
	Count int `db:"count"`
}

func lockEvents(t testing.TB, q database.Querier, key string) []lockEvent {
	t.Helper()
	var evs []lockEvent
	if err := q.SelectContext(context.Background(), &evs, `
		SELECT event, lock_id, cluster_user_name, owner_user_name, count
		FROM repository_lock_events WHERE git_repository_url = $1 ORDER BY id`, key); err != nil {
		t.Fatal(err)
	}
	return evs
}

// eventSummary is "acquired/released/denied" counts (a coalesced denial
// row counts as many denials as it stands for).
func eventSummary(evs []lockEvent) map[string]int {
	m := map[string]int{}
	for _, e := range evs {
		m[e.Event] += e.Count
	}
	return m
}

// checkLifecycle checks that the acquired and released events of one URL
// alternate, each release naming the lock the previous acquire created: a
// lock never changed hands without being released first.
func checkLifecycle(t testing.TB, evs []lockEvent) {
	t.Helper()
	var current string // lock id held, "" when free
	for i, e := range evs {
		switch e.Event {
		case "acquired":
			if current != "" {
				t.Fatalf("event %d: %s acquired lock %s while lock %s was held", i, e.TenantName.String, e.LockID.String, current)
			}
			current = e.LockID.String
		case "released":
			if current == "" || e.LockID.String != current {
				t.Fatalf("event %d: released lock %s, held: %q", i, e.LockID.String, current)
			}
			current = ""
		case "denied":
			if e.OwnerName.String == e.TenantName.String {
				t.Fatalf("event %d: %s denied its own lock", i, e.TenantName.String)
			}
		}
	}
}
