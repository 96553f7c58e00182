package database_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jmoiron/sqlx"

	"github.com/repolock/repolock/internal/dbtest"
)

func TestPrepared(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	const q = `SELECT $1::int + 1`
	var wg sync.WaitGroup
	stmts := make([]*sqlx.Stmt, 16)
	for i := range stmts {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			s, err := db.Prepared(ctx, q)
			if err != nil {
				t.Error(err)
			}
			stmts[i] = s
		}(i)
	}
	wg.Wait()
	for _, s := range stmts {
		if s != stmts[0] || s == nil {
			t.Fatalf("Prepared returned different statements for one query")
		}
	}
	for i := 0; i < 50; i++ {
		var n int
		if err := db.GetPrepared(ctx, &n, q, i); err != nil || n != i+1 {
			t.Fatalf("GetPrepared(%d) = %d, %v", i, n, err)
		}
	}
	if _, err := db.Prepared(ctx, `SELEC nonsense`); err == nil {
		t.Fatal("a statement that does not parse was prepared")
	}
}
