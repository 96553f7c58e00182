package database_test

import (
	"context"
	neturl "net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
)

func TestConnString(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		// Single-host URLs and key=value strings are lib/pq's to parse.
		{"postgres://u:p@db:5432/repolock?sslmode=disable", "postgres://u:p@db:5432/repolock?sslmode=disable"},
		{"host=a,b port=1,2 dbname=x", "host=a,b port=1,2 dbname=x"},
		{"postgres:///repolock?host=a,b&port=1,2", "postgres:///repolock?host=a,b&port=1,2"},
		// libpq's multi-host URL form.
		{"postgres://u:p%27w@db1:5432,db2:5433/repo%20lock?target_session_attrs=read-write&sslmode=disable",
			`dbname='repo lock' host='db1,db2' password='p\'w' port='5432,5433' sslmode='disable' target_session_attrs='read-write' user='u'`},
		{"postgresql://db1,db2:6000/x", `dbname='x' host='db1,db2' port=',6000'`},
		{"postgres://[::1]:5432,127.0.0.1:5433", `host='::1,127.0.0.1' port='5432,5433'`},
		{"postgres://u@a,b?connect_timeout=2", `connect_timeout='2' host='a,b' user='u'`},
	}
	for _, tt := range tests {
		got, err := database.ConnString(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ConnString(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"postgres://a,,b/x", "postgres://a,b/x?%zz"} {
		if got, err := database.ConnString(bad); err == nil {
			t.Errorf("ConnString(%q) = %q, want an error", bad, got)
		}
	}
}

func TestForTransactionPooling(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"postgres://h/db":                      "postgres://h/db?binary_parameters=yes",
		"postgres://h/db?sslmode=disable":      "postgres://h/db?sslmode=disable&binary_parameters=yes",
		"host=h dbname=db":                     "host=h dbname=db binary_parameters=yes",
		"postgres://h/db?binary_parameters=no": "postgres://h/db?binary_parameters=no",
	} {
		if got := database.ForTransactionPooling(in); got != want {
			t.Errorf("ForTransactionPooling(%q) = %q, want %q", in, got, want)
		}
	}
}

// Two hosts, the first one not listening: lib/pq tries them in order and
// target_session_attrs=read-write accepts the primary.
func TestOpenMultiHost(t *testing.T) {
	t.Parallel()
	url := dbtest.NewDatabase(t, true)
	// The same database through a host list whose first entry refuses
	// connections (port 1).
	multi := replaceHostPort(t, url, "127.0.0.1:1,", "target_session_attrs=read-write")
	db, err := database.Open(context.Background(), multi, database.PoolConfig{})
	if err != nil {
		t.Fatalf("Open(%q): %v", multi, err)
	}
	defer db.Close()
	var n int
	if err := db.GetContext(context.Background(), &n, `SELECT count(*) FROM cluster_users`); err != nil || n != 0 {
		t.Fatalf("query through the host list: %d, %v", n, err)
	}
}

func TestPreparedStatementsOff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.NewDatabase(t, true)
	db, err := database.Open(ctx, database.ForTransactionPooling(url), database.PoolConfig{NoPreparedStatements: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for i := 0; i < 20; i++ {
		var s string
		if err := db.GetPrepared(ctx, &s, `SELECT $1::text || '-' || $2::int`, "x", i); err != nil || s != "x-"+itoa(i) {
			t.Fatalf("GetPrepared = %q, %v", s, err)
		}
	}
	// Nothing was prepared on the server: no named statement exists on any
	// of the pool's connections (pg_prepared_statements is per session, so
	// ask on a connection the pool used).
	var named int
	if err := db.GetContext(ctx, &named, `SELECT count(*) FROM pg_prepared_statements`); err != nil || named != 0 {
		t.Fatalf("named prepared statements on the connection: %d, %v", named, err)
	}
}

// replaceHostPort puts prefix before the URL's host:port and adds param to
// its query.
func replaceHostPort(t *testing.T, raw, prefix, param string) string {
	t.Helper()
	u, err := neturl.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.RawQuery += "&" + param
	if u.RawQuery[0] == '&' {
		u.RawQuery = u.RawQuery[1:]
	}
	host := u.Host
	u.Host = "HOSTS"
	return strings.Replace(u.String(), "HOSTS", prefix+host, 1)
}

func itoa(i int) string { return strconv.Itoa(i) }
