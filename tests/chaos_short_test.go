package tests

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/repolock/repolock/internal/chaostest"
	"github.com/repolock/repolock/internal/dbtest"
)

// TestChaosShort is the chaos suite in a few seconds, so the recorder, the
// verifier and the Porcupine check run on every change (make test): two
// replicas through a proxy that resets every database connection (what
// pg_terminate_backend does) and cuts a COMMIT in flight (an outcome
// unknown), under 16 clients. make test-chaos is the real run.
func TestChaosShort(t *testing.T) {
	t.Parallel()
	direct := dbtest.NewDatabase(t, true)
	proxy, proxied := dbtest.NewProxy(t, direct)
	env := []string{"GC_INTERVAL=2s", "GC_MIN_AGE=1s", "REQUEST_TIMEOUT=5s", "RATE_LIMIT=0", "MIGRATE_ON_START=false"}
	args := []string{"--log-level", "info"}
	var replicas []*server
	for range 2 {
		replicas = append(replicas, startServerWith(t, serverOptions{DatabaseURL: proxied, Env: env, Args: args}))
	}
	var tenants []chaosTenant
	for i := range 4 {
		name := fmt.Sprintf("tenant-%d", i)
		tenants = append(tenants, chaosTenant{name: name, token: replicas[0].createTenant(t, name)})
	}
	urls := []string{replicas[0].URL, replicas[1].URL}
	rec := chaostest.NewRecorder(nil)
	load := newChaosLoad(rec, tenants, func() []string { return urls })

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		load.run(ctx, 16, 6)
	}()
	time.Sleep(1500 * time.Millisecond) // load before the fault
	rec.SetFault("connections reset")
	cut := proxy.CutNextCommit()
	proxy.Reset()
	select {
	case <-cut:
	case <-time.After(5 * time.Second):
	}
	proxy.Reset()
	load.faultEnded(len(urls), "connections reset")
	time.Sleep(time.Second) // the second after a fault counts as the fault's
	rec.SetFault("")
	time.Sleep(2 * time.Second) // load after it
	cancel()
	wg.Wait()

	db, err := sql.Open("postgres", direct)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	v := load.verify(t, db, 6)
	if v.acked == 0 {
		t.Fatal("no write was acknowledged")
	}
	load.report(t, v, filepath.Join(os.TempDir(), "repolock-chaos-short-"+randomHex(4)), batchFigures(urls))
}
