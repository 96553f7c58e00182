package reports_test

import (
	"context"
	"testing"

	"github.com/repolock/repolock/internal/database"
)

func mustExec(t testing.TB, q database.Querier, query string, args ...any) {
	t.Helper()
	if _, err := q.ExecContext(context.Background(), query, args...); err != nil {
		t.Fatalf("exec %q: %v", query, err)
	}
}

func countRows(t testing.TB, q database.Querier, query string, args ...any) int {
	t.Helper()
	var n int
	if err := q.GetContext(context.Background(), &n, query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}
