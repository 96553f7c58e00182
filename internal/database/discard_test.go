package database_test

import (
	"context"
	"database/sql"
	"sync"
	"testing"

	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
)

// TestConcurrentDiscardIdle runs DiscardIdle from two goroutines at once,
// as a storm of connection errors during a failover does, while
// connections in use are returned to the pool. Go's database/sql
// SetMaxIdleConns closes the connections it drops after unlocking the
// pool, through a slice that shares its array with the pool's free list:
// once the other call restored the idle limit, a connection returned
// meanwhile was written into that array, closed while it sat in the free
// list, and handed out later with no driver connection (make
// test-patroni's replica died of that nil dereference). DiscardIdle runs
// one discard at a time. Under -race the unsynchronized read of that array
// is reported; without -race a statement may panic.
func TestConcurrentDiscardIdle(t *testing.T) {
	t.Parallel()
	_, url := dbtest.NewWithURL(t)
	const idle, busy = 24, 6
	db, err := database.Open(t.Context(), url, database.PoolConfig{MaxOpenConns: idle + busy})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	take := func(n int) []*sql.Conn {
		conns := make([]*sql.Conn, n)
		for i := range conns {
			c, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			conns[i] = c
		}
		return conns
	}
	for range 40 {
		// idle connections to discard, and busy ones returned while
		// the discards run.
		for _, c := range take(idle) {
			c.Close()
		}
		held := take(busy)
		var wg sync.WaitGroup
		wg.Go(db.DiscardIdle)
		wg.Go(func() {
			db.DiscardIdle()
			for _, c := range held {
				c.Close()
			}
		})
		wg.Wait()
		for range idle + busy {
			var one int
			if err := db.GetContext(ctx, &one, `SELECT 1`); err != nil || one != 1 {
				t.Fatalf("after the discards: %d, %v", one, err)
			}
		}
	}
}
