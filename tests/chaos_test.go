//go:build chaos

package tests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"math/rand/v2"

	"github.com/repolock/repolock/client"
	"github.com/repolock/repolock/internal/chaostest"
	"github.com/repolock/repolock/internal/leases/leasecheck"
)

// TestChaos is make test-chaos: its own Postgres (initdb on a free port),
// three replicas of the real binary, CHAOS_CLIENTS clients (default 64)
// and the four faults, in cycles until CHAOS_DURATION (default 75s: two
// cycles, about two minutes in all) has passed:
//
//  1. rounds of pg_terminate_backend on every client backend;
//  2. pg_ctl restart -m immediate;
//  3. kill -9 of a replica, and its restart;
//  4. a full stop of the database for CHAOS_STOP (default 5s; 12s for
//     a long run).
//
// CHAOS_CHECK_TIMEOUT (default 10m) bounds each Porcupine check.
//
// The verifier then compares what was acknowledged with what is stored,
// checks every key's ownership history with Porcupine and prints the
// table; a failure saves the histories and Porcupine's visualization in
// CHAOS_ARTEFACTS (default .artifacts/chaos).
func TestChaos(t *testing.T) {
	duration := chaosEnvDuration(t, "CHAOS_DURATION", 75*time.Second)
	stopFor := chaosEnvDuration(t, "CHAOS_STOP", 5*time.Second)
	clients := chaosEnvInt(t, "CHAOS_CLIENTS", 64)
	rounds := chaosEnvInt(t, "CHAOS_TERMINATE_ROUNDS", 10)
	const keys = 24
	artefacts := os.Getenv("CHAOS_ARTEFACTS")
	if artefacts == "" {
		artefacts = filepath.Join("..", ".artifacts", "chaos")
	}

	pg := newChaosPostgres(t)
	admin := pg.open(t, "postgres")
	if _, err := admin.Exec(`CREATE DATABASE repolock`); err != nil {
		t.Fatal(err)
	}
	admin.Close()
	url := pg.url("repolock")
	env := []string{"GC_INTERVAL=5s", "GC_MIN_AGE=2s", "REQUEST_TIMEOUT=5s", "RATE_LIMIT=0"}
	args := []string{"--log-level", "info"}
	replicas := make([]*server, 3)
	var urlMu sync.Mutex
	for i := range replicas {
		replicas[i] = startServerWith(t, serverOptions{DatabaseURL: url, Env: env, Args: args})
	}
	current := func() []string {
		urlMu.Lock()
		defer urlMu.Unlock()
		out := make([]string, len(replicas))
		for i, s := range replicas {
			out[i] = s.URL
		}
		return out
	}
	var tenants []chaosTenant
	for i := range 4 {
		name := fmt.Sprintf("tenant-%d", i)
		tenants = append(tenants, chaosTenant{name: name, token: replicas[0].createTenant(t, name)})
	}
	// Every request and answer, kept after the run (the artefacts
	// directory, emptied first).
	if err := os.RemoveAll(artefacts); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(artefacts, 0o755); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(artefacts, "requests-log.jsonl")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	rec := chaostest.NewRecorder(logFile)
	load := newChaosLoad(rec, tenants, current)
	load.checkTimeout = chaosEnvDuration(t, "CHAOS_CHECK_TIMEOUT", 10*time.Minute)
	leaseTarget, leaseKeys := chaosLeaseTarget(t, replicas, &urlMu)
	leaseRec := leasecheck.NewRecorder()

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		load.run(ctx, clients, keys)
	}()
	// The lease workload, through the same replicas and faults: lease
	// clients (some paused past their TTL, then writing with their stale
	// token) on a few keys, each guarding a branch written with fencing.
	wg.Go(func() {
		leasecheck.Run(ctx, leaseRec, leaseTarget, leasecheck.Workload{
			Keys: leaseKeys, Clients: 10, Pausers: 3,
			TTL: 2 * time.Second, Wait: 2 * time.Second, Pause: 500 * time.Millisecond,
			Duration: 24 * time.Hour, // until the run ends
		})
	})
	pause := func(d time.Duration) { time.Sleep(d) } // load between faults
	fault := func(name string, do func()) {
		t.Logf("fault: %s", name)
		rec.SetFault(name)
		do()
		load.faultEnded(len(replicas), name)
		pause(3 * time.Second) // the window after a fault counts as the fault's
		rec.SetFault("")
	}
	start := time.Now()
	pause(5 * time.Second)
	for cycle := 0; cycle == 0 || time.Since(start) < duration; cycle++ {
		fault("pg_terminate_backend", func() {
			db := pg.open(t, "postgres")
			defer db.Close()
			for range rounds {
				if _, err := db.Exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = 'repolock' AND pid <> pg_backend_pid()`); err != nil {
					t.Logf("pg_terminate_backend: %v", err)
				}
				time.Sleep(500 * time.Millisecond)
			}
		})
		pause(3 * time.Second)
		fault("restart -m immediate", func() {
			pg.c.run("pg_ctl", "-D", pg.dir, "-l", pg.log, "-m", "immediate", "-w", "-t", "60", "restart")
		})
		pause(3 * time.Second)
		victim := 1 + cycle%2
		fault("kill -9 replica", func() {
			urlMu.Lock()
			s := replicas[victim]
			urlMu.Unlock()
			_ = s.cmd.Process.Signal(syscall.SIGKILL)
			<-s.exited
			s.err = nil // killed on purpose
			time.Sleep(time.Second)
			fresh := startServerWith(t, serverOptions{DatabaseURL: url, Env: env, Args: args})
			urlMu.Lock()
			replicas[victim] = fresh
			urlMu.Unlock()
		})
		pause(3 * time.Second)
		fault(fmt.Sprintf("full stop %s", stopFor), func() {
			pg.stopImmediate()
			time.Sleep(stopFor)
			pg.start()
		})
		pause(3 * time.Second)
	}
	cancel()
	wg.Wait()
	batches := batchFigures(current())

	db := pg.open(t, "repolock")
	defer db.Close()
	v := load.verify(t, db, keys)
	if v.acked == 0 {
		t.Fatal("no write was acknowledged")
	}
	t.Logf("every request and answer: %s", logPath)
	table := load.report(t, v, artefacts, batches)
	table += chaosLeaseReport(t, leaseRec, artefacts, load.checkTimeout)
	if out := os.Getenv("CHAOS_REPORT"); out != "" {
		_ = os.WriteFile(out, []byte(table), 0o644)
	}
}

// chaosLeaseTarget is the lease workload's target: a tenant of its own
// with one repository whose branches are the registers the lease keys
// guard; each operation goes to a replica picked at random (a killed one
// until it is back: an unknown outcome).
func chaosLeaseTarget(t *testing.T, replicas []*server, mu *sync.Mutex) (*replicaTarget, []string) {
	t.Helper()
	const repo = "lease-chaos"
	token := replicas[0].createTenant(t, "leases")
	c := replicas[0].client(t, token)
	if _, err := c.CreateRepository(t.Context(), client.CreateRepositoryRequest{Name: repo, StorageNamespace: "s3://chaos/leases"}); err != nil {
		t.Fatal(err)
	}
	keys := []string{"repositories/" + repo + "/branches/main"}
	for _, b := range []string{"b1", "b2"} {
		if _, err := c.CreateBranch(t.Context(), repo, b, "main"); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, "repositories/"+repo+"/branches/"+b)
	}
	var cmu sync.Mutex
	clients := map[*server]*client.Client{}
	choose := func() *client.Client {
		mu.Lock()
		s := replicas[rand.IntN(len(replicas))]
		mu.Unlock()
		cmu.Lock()
		defer cmu.Unlock()
		if clients[s] == nil {
			clients[s] = s.client(t, token)
		}
		return clients[s]
	}
	return &replicaTarget{t: t, repo: repo, choose: choose}, keys
}

// chaosLeaseReport checks the lease history with Porcupine (a failure
// saves it and the visualization under artefacts) and returns its lines
// of the report.
func chaosLeaseReport(t *testing.T, rec *leasecheck.Recorder, artefacts string, timeout time.Duration) string {
	t.Helper()
	ops := rec.Operations()
	counts := leasecheck.Counts(ops)
	failed := rec.Failed()
	for _, want := range []string{"acquire/ok", "write/ok", "write/fenced", "keepalive/ok", "release/ok"} {
		if counts[want] == 0 {
			t.Errorf("the lease history has no %s", want)
		}
	}
	names := make([]string, 0, len(counts))
	for k, n := range failed {
		counts[k] = n
	}
	for k := range counts {
		names = append(names, k)
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, k := range names {
		parts = append(parts, fmt.Sprintf("%s %d", k, counts[k]))
	}
	began := time.Now()
	res := leasecheck.CheckInto(t, artefacts, "chaos", ops, timeout)
	out := fmt.Sprintf("leases: %d operations checked; answers (failed ones: nothing happened, not checked): %s\nPorcupine: leases: %s (checked in %s)\n",
		len(ops), strings.Join(parts, ", "), res, time.Since(began).Round(time.Millisecond))
	t.Log(out)
	return out
}

// newChaosPostgres builds and starts one server with initdb on a free port
// (stopped when t ends), as the HA harness builds its primary.
func newChaosPostgres(t *testing.T) *pgNode {
	t.Helper()
	if _, err := os.Stat(filepath.Join(pgBinDir(), "initdb")); err != nil {
		t.Fatalf("no PostgreSQL server binaries in %s (install Debian's postgresql, or set PG_BINDIR): %v", pgBinDir(), err)
	}
	c := newHARoot(t, "repolock-chaos-")
	n := &pgNode{name: "chaos", dir: filepath.Join(c.root, "data"), port: freePort(t), log: filepath.Join(c.root, "postgres.log"), c: c}
	c.run("initdb", "-D", n.dir, "-U", "postgres", "--auth=trust", "--no-sync")
	c.appendConf(n, fmt.Sprintf(`
listen_addresses = '127.0.0.1'
port = %d
unix_socket_directories = '%s'
shared_buffers = 32MB
max_connections = 100
fsync = on
`, n.port, c.root))
	n.start()
	t.Cleanup(n.stopImmediate)
	return n
}

func chaosEnvDuration(t *testing.T, key string, def time.Duration) time.Duration {
	if v := os.Getenv(key); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s=%q: want a duration such as 2m", key, v)
		}
		return d
	}
	return def
}

func chaosEnvInt(t *testing.T, key string, def int) int {
	if v := os.Getenv(key); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive whole number", key, v)
		}
		return n
	}
	return def
}
