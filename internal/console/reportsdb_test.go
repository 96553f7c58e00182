package console

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/repolock/repolock/internal/dbtest"
)

// With Config.ReportsDB (REPORTS_DATABASE_URL, a read replica), the
// read-only statistics (the denials log and its CSV) come from it, while
// sign-in and everything an operator acts on stay on DB. A second database
// with different rows stands in for the replica.
func TestReadOnlyPagesReadTheReportsDatabase(t *testing.T) {
	replica := dbtest.New(t)
	e := newEnv(t, func(c *Config) { c.ReportsDB = replica })
	ctx := context.Background()
	const insert = `INSERT INTO repository_lock_events (event, git_repository_url, cluster_user_name, owner_user_name) VALUES ('denied', $1, 'bob', 'alice')`
	if _, err := replica.ExecContext(ctx, insert, "github.com/on/the-replica"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.ExecContext(ctx, insert, "github.com/on/the-primary"); err != nil {
		t.Fatal(err)
	}
	b := e.browser()
	b.signIn()
	for _, page := range []string{"/ui/denials", "/ui/denials.csv"} {
		r := b.get(page)
		wantStatus(t, r, http.StatusOK)
		if !strings.Contains(r.Body, "github.com/on/the-replica") || strings.Contains(r.Body, "github.com/on/the-primary") {
			t.Errorf("%s does not show (only) the reports database's denial:\n%s", page, r.Body)
		}
	}
	// The tenants page reads the primary.
	e.tenant("carol")
	if r := b.get("/ui/tenants"); !strings.Contains(r.Body, "carol") {
		t.Errorf("/ui/tenants does not show the primary's tenant:\n%s", r.Body)
	}
}
