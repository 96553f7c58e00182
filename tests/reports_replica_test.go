package tests

import (
	"bytes"
	"database/sql"
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"github.com/repolock/repolock/internal/dbtest"
)

// REPORTS_DATABASE_URL sends the reports, and only the reports, to another
// database (a read replica in production). Here a second database with
// different contents stands in for the replica, so the test can see which
// one each read went to.
func TestReportsFromReportsDatabase(t *testing.T) {
	t.Parallel()
	primary := dbtest.NewDatabase(t, true)
	replica := dbtest.NewDatabase(t, true)
	rdb, err := sql.Open("postgres", replica)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	if _, err := rdb.Exec(`INSERT INTO cluster_users (name) VALUES ('only-on-the-replica')`); err != nil {
		t.Fatal(err)
	}
	s := startServerWith(t, serverOptions{DatabaseURL: primary, Env: []string{"REPORTS_DATABASE_URL=" + replica, "GC_INTERVAL=0"}})
	s.createTenant(t, "alice") // on the primary

	// The report route reads the replica.
	status, _, body := s.doRaw(t, http.MethodGet, "/v1/admin/reports/ownership?format=csv", s.AdminToken, nil, nil)
	if status != http.StatusOK || !strings.Contains(string(body), ",only-on-the-replica,0,0,0,0\n") || strings.Contains(string(body), "alice") {
		t.Fatalf("GET /v1/admin/reports/ownership with a reports database: %d\n%s", status, body)
	}
	// Everything else reads and writes the primary.
	status, resp := s.do(t, http.MethodGet, "/v1/admin/users", s.AdminToken, nil)
	if items, _ := resp["items"].([]any); status != http.StatusOK || len(items) != 1 || items[0].(map[string]any)["name"] != "alice" {
		t.Fatalf("GET /v1/admin/users: %d %v", status, resp)
	}

	// repolock report: the replica when REPORTS_DATABASE_URL is set, else DATABASE_URL.
	for _, tc := range []struct {
		env       []string
		want, not string
	}{
		{[]string{"DATABASE_URL=" + primary, "REPORTS_DATABASE_URL=" + replica}, ",only-on-the-replica,", "alice"},
		{[]string{"DATABASE_URL=" + primary}, ",alice,", "only-on-the-replica"},
	} {
		cmd := exec.Command(binPath, "report", "ownership", "--format", "csv")
		cmd.Env = append(cleanEnv(), tc.env...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil || !strings.Contains(out.String(), tc.want) || strings.Contains(out.String(), tc.not) {
			t.Fatalf("repolock report ownership with %d variables: %v\n%s\n%s", len(tc.env), err, out.String(), errb.String())
		}
	}
}
