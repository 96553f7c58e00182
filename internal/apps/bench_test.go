package apps_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/repolock/repolock/internal/apps"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/httpapi"
	"github.com/repolock/repolock/internal/httpapi/httpapitest"
	"github.com/repolock/repolock/internal/locks"
	"github.com/repolock/repolock/internal/normalize"
)

// Benchmark workload. Every phase runs a fixed number of operations on fresh
// URLs with the same number of concurrent workers, against the same
// database. The phases are interleaved: the workload is cut into rounds and
// every round runs a slice of every phase, in a rotating order, so that the
// phases share whatever else the machine is doing and the growth of the
// tables equally.
const (
	benchWorkers       = 32    // a, b, c, d: goroutines; e: HTTP clients
	benchOps           = 10000 // a, aP, a', b, c
	benchCreateOps     = 6000  // d, e
	benchRounds        = 5
	benchSequentialOps = 1000 // per phase, one worker: latency without queueing
	benchContendedCli  = 64
	benchContendedURLs = 1000
	benchContendedOps  = 6400
	benchTenants       = 8 // contended case
)

// phase is the measured outcome of one workload.
type phase struct {
	name      string
	ops       int
	elapsed   time.Duration
	latencies []time.Duration
	errors    int64
}

func (p phase) opsPerSec() float64 { return float64(p.ops) / p.elapsed.Seconds() }

func (p phase) quantile(q float64) time.Duration {
	if len(p.latencies) == 0 {
		return 0
	}
	return p.latencies[min(len(p.latencies)-1, int(q*float64(len(p.latencies))))]
}

// runPhase runs ops operations on workers goroutines; op gets the operation's
// index (unique across workers) and reports an error for failed operations.
func runPhase(name string, workers, ops int, op func(ctx context.Context, worker, i int) error) phase {
	ctx := context.Background()
	var next atomic.Int64
	var errs atomic.Int64
	lat := make([][]time.Duration, workers)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= ops {
					return
				}
				t0 := time.Now()
				if err := op(ctx, w, i); err != nil {
					errs.Add(1)
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		}(w)
	}
	wg.Wait()
	p := phase{name: name, ops: ops, elapsed: time.Since(start), errors: errs.Load()}
	for _, l := range lat {
		p.latencies = append(p.latencies, l...)
	}
	slices.Sort(p.latencies)
	return p
}

// job is one phase of the interleaved workload.
type job struct {
	name string
	ops  int
	op   func(ctx context.Context, worker, i int) error
}

// runInterleaved runs every job's ops in benchRounds rounds on workers
// goroutines and returns one merged phase per job, in the jobs' order.
func runInterleaved(workers int, jobs []job) []phase {
	out := make([]phase, len(jobs))
	for j := range jobs {
		out[j].name = jobs[j].name
	}
	for r := 0; r < benchRounds; r++ {
		for k := range jobs {
			j := (k + r) % len(jobs)
			per := jobs[j].ops / benchRounds
			offset := r * per
			p := runPhase(jobs[j].name, workers, per, func(ctx context.Context, w, i int) error {
				return jobs[j].op(ctx, w, offset+i)
			})
			out[j].ops += p.ops
			out[j].elapsed += p.elapsed
			out[j].errors += p.errors
			out[j].latencies = append(out[j].latencies, p.latencies...)
		}
	}
	for j := range out {
		slices.Sort(out[j].latencies)
	}
	return out
}

func truncateLockTables(b *testing.B, db *database.DB) {
	b.Helper()
	if _, err := db.ExecContext(context.Background(), `TRUNCATE RepositoryLockApplication, RepositoryLockRepositoryCredential,
		applications, repository_credentials, RepositoryLockOwner, repository_lock_events`); err != nil {
		b.Fatal(err)
	}
}

// naiveAcquire is the design document's pseudocode: SELECT, then INSERT,
// with a unique violation read as "someone else won". It refuses the
// caller's own URL, which is one of the design's bugs.
func naiveAcquire(ctx context.Context, db *database.DB, user, key string) (string, bool, error) {
	var owner string
	err := db.GetContext(ctx, &owner, `SELECT cluster_user_id FROM RepositoryLockOwner WHERE git_repository_url = $1`, key)
	if err == nil {
		return "", false, nil
	}
	if !database.IsNoRows(err) {
		return "", false, err
	}
	var id string
	err = db.GetContext(ctx, &id, `INSERT INTO RepositoryLockOwner (git_repository_url, normalizer_version, cluster_user_id) VALUES ($1, $2, $3) RETURNING id`,
		key, normalize.Version, user)
	if database.PQCode(err) == database.CodeUniqueViolation {
		return "", false, nil
	}
	return id, err == nil, err
}

type httpClient struct {
	base   string
	client *http.Client
}

func (c httpClient) post(ctx context.Context, path, token string, body any) (int, map[string]any, error) {
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(b))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := c.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return res.StatusCode, nil, err
	}
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	return res.StatusCode, m, nil
}

// errorLog is the server's log handler in the benchmark: it formats every
// record as the real server does (to io.Discard) and keeps the causes of
// failed requests, to print them.
type errorLog struct {
	slog.Handler
	mu   sync.Mutex
	seen map[string]int
}

func (h *errorLog) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "error" {
				h.mu.Lock()
				h.seen[a.Value.String()]++
				h.mu.Unlock()
			}
			return true
		})
	}
	return h.Handler.Handle(ctx, r)
}

func errorCodeOf(resp map[string]any) string {
	e, _ := resp["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

// BenchmarkLocks is the harness: (a) a raw INSERT ... ON CONFLICT DO
// NOTHING loop, the floor; (b) the design's naive SELECT-then-INSERT acquire;
// (c) locks.Service.Acquire; (d) apps.Service.CreateApplication; (e)
// POST /v1/applications over loopback HTTP; and the contended case, 64 HTTP
// clients of 8 tenants on 1,000 URLs. It runs its workload once, whatever
// b.N is, and prints the figures; targets are printed, never asserted.
func BenchmarkLocks(b *testing.B) {
	ctx := context.Background()
	// One pool of 32 connections serves the library phases (one connection
	// per worker) and the HTTP server, so d and e run on the same pool.
	// Postgres' max_connections is shared with everything else on the
	// machine; the benchmark never holds more than these 32.
	db := dbtest.New(b, dbtest.Pool(database.PoolConfig{MaxOpenConns: benchWorkers}))

	serverErrors := &errorLog{Handler: slog.NewJSONHandler(io.Discard, nil), seen: map[string]int{}}
	serverLog := slog.New(serverErrors)
	// The server's services are the library phases' too: one locks and one
	// apps service per pool (they own its Batchers), as in api serve.
	cfg := httpapitest.Config(b, db, serverLog, "rla_bench_admin")
	ls, svc := cfg.Locks, cfg.Apps
	owner, ownerToken, err := cfg.Tenants.Create(ctx, "bench-owner", "")
	if err != nil {
		b.Fatal(err)
	}
	srv, err := httpapi.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	client := httpClient{base: ts.URL, client: &http.Client{Transport: &http.Transport{
		MaxIdleConns: 2 * benchContendedCli, MaxIdleConnsPerHost: 2 * benchContendedCli, IdleConnTimeout: time.Minute,
	}}}

	const rawInsert = `INSERT INTO RepositoryLockOwner (git_repository_url, normalizer_version, cluster_user_id)
		VALUES ($1, $2, $3) ON CONFLICT (git_repository_url) DO NOTHING`
	// Warm the pool and the server (connections, plans, caches).
	runPhase("warm-up", benchWorkers, 2000, func(ctx context.Context, _, i int) error {
		_, err := db.ExecContext(ctx, rawInsert, fmt.Sprintf("warm.example.com/o/r%d", i), normalize.Version, owner.ID)
		return err
	})
	truncateLockTables(b, db)

	// aP is a as a prepared statement (one round trip, cached plan), the
	// strictest floor. a' is the floor of an audited acquire: the lock row
	// and its "acquired" event row in one prepared statement, one acquire
	// per statement (NewLocksCTE; the statement Acquire sends differs in
	// writing the lock as a GC candidate, one entry in a small partial
	// index, and in taking arrays, so that concurrent acquires share it).
	auditedInsert := `WITH input AS (SELECT $1::text AS key, $2::text AS rules, $3::uuid AS tenant), ` + locks.NewLocksCTE + ` SELECT id FROM lock`
	var e5xx atomic.Int64
	jobs := []job{
		{"a  raw INSERT ON CONFLICT DO NOTHING", benchOps, func(ctx context.Context, _, i int) error {
			_, err := db.ExecContext(ctx, rawInsert, fmt.Sprintf("a.example.com/o/r%d", i), normalize.Version, owner.ID)
			return err
		}},
		{"aP raw INSERT ON CONFLICT DO NOTHING, prepared", benchOps, func(ctx context.Context, _, i int) error {
			stmt, err := db.Prepared(ctx, rawInsert)
			if err == nil {
				_, err = stmt.ExecContext(ctx, fmt.Sprintf("ap.example.com/o/r%d", i), normalize.Version, owner.ID)
			}
			return err
		}},
		{"a' raw INSERT + its audit row, prepared", benchOps, func(ctx context.Context, _, i int) error {
			var id string
			return db.GetPrepared(ctx, &id, auditedInsert, fmt.Sprintf("a2.example.com/o/r%d", i), normalize.Version, owner.ID)
		}},
		{"b  naive SELECT-then-INSERT acquire", benchOps, func(ctx context.Context, _, i int) error {
			_, ok, err := naiveAcquire(ctx, db, owner.ID, fmt.Sprintf("b.example.com/o/r%d", i))
			if err == nil && !ok {
				err = fmt.Errorf("not acquired")
			}
			return err
		}},
		{"c  locks.Service.Acquire", benchOps, func(ctx context.Context, _, i int) error {
			acq, err := ls.Acquire(ctx, owner.ID, fmt.Sprintf("c.example.com/o/r%d", i))
			ok := acq.Acquired
			if err == nil && !ok {
				err = fmt.Errorf("not acquired")
			}
			return err
		}},
		{"d  apps.Service.CreateApplication (library)", benchCreateOps, func(ctx context.Context, _, i int) error {
			_, err := svc.CreateApplication(ctx, owner.ID, apps.NewApplication{Name: fmt.Sprintf("d-%d", i), RepoURL: fmt.Sprintf("https://d.example.com/o/r%d.git", i)})
			return err
		}},
		{"e  POST /v1/applications (HTTP)", benchCreateOps, func(ctx context.Context, _, i int) error {
			status, _, err := client.post(ctx, "/v1/applications", ownerToken, map[string]any{"name": fmt.Sprintf("e-%d", i), "repo_url": fmt.Sprintf("https://e.example.com/o/r%d.git", i)})
			if status >= 500 {
				e5xx.Add(1)
			}
			if err == nil && status != http.StatusCreated {
				err = fmt.Errorf("status %d", status)
			}
			return err
		}},
	}
	phases := runInterleaved(benchWorkers, jobs)
	truncateLockTables(b, db)

	// The same operations one at a time: the latency of one operation
	// without queueing (round trips and commit), not throughput.
	seqJobs := []job{}
	for _, j := range []int{0, 1, 2, 4, 5} {
		j := jobs[j]
		seqJobs = append(seqJobs, job{name: j.name, ops: benchSequentialOps, op: func(ctx context.Context, w, i int) error {
			return j.op(ctx, w, 1_000_000+i)
		}})
	}
	sequential := runInterleaved(1, seqJobs)
	truncateLockTables(b, db)

	// Contended: 64 clients of 8 tenants create applications on 1,000 URLs
	// in random spellings; most requests are refused with 409.
	tokens := make([]string, benchTenants)
	for i := range tokens {
		if _, tokens[i], err = cfg.Tenants.Create(ctx, fmt.Sprintf("bench-tenant-%d", i), ""); err != nil {
			b.Fatal(err)
		}
	}
	var created, claimed, other4xx, fivexx, transport atomic.Int64
	contended := runPhase("contended: 64 clients, 8 tenants, 1,000 URLs (HTTP)", benchContendedCli, benchContendedOps, func(ctx context.Context, w, i int) error {
		r := rand.New(rand.NewPCG(uint64(i), 3))
		repo := r.IntN(benchContendedURLs)
		url := spellings("contended", repo)[r.IntN(5)]
		status, resp, err := client.post(ctx, "/v1/applications", tokens[w%benchTenants], map[string]any{"name": fmt.Sprintf("x-%d", i), "repo_url": url})
		switch {
		case err != nil:
			transport.Add(1)
			return err
		case status == http.StatusCreated:
			created.Add(1)
		case status == http.StatusConflict && errorCodeOf(resp) == "repository_claimed":
			claimed.Add(1)
		case status >= 500:
			fivexx.Add(1)
			return fmt.Errorf("status %d", status)
		default:
			other4xx.Add(1)
			return fmt.Errorf("status %d %v", status, resp)
		}
		return nil
	})

	var buf bytes.Buffer
	fmt.Fprintf(&buf, "\nBenchmarkLocks: %d workers for a-e (e: HTTP clients); a, aP, a', b, c: %d ops; d, e: %d ops; interleaved in %d rounds\n"+
		"one pool of %d connections for the library and the HTTP server\n",
		benchWorkers, benchOps, benchCreateOps, benchRounds, benchWorkers)
	table := func(ps []phase) {
		fmt.Fprintf(&buf, "%-52s %7s %9s %9s %9s %7s\n", "phase", "ops", "ops/s", "p50", "p99", "errors")
		for _, p := range ps {
			fmt.Fprintf(&buf, "%-52s %7d %9.0f %9s %9s %7d\n", p.name, p.ops, p.opsPerSec(),
				p.quantile(0.50).Round(10*time.Microsecond), p.quantile(0.99).Round(10*time.Microsecond), p.errors)
		}
	}
	table(append(slices.Clone(phases), contended))
	fmt.Fprintf(&buf, "\nOne worker, %d ops each (latency of a single operation):\n", benchSequentialOps)
	table(sequential)

	a, aP, a2, bb, c, d, e := phases[0], phases[1], phases[2], phases[3], phases[4], phases[5], phases[6]
	ratio := func(x, y phase) float64 { return x.opsPerSec() / y.opsPerSec() }
	fmt.Fprintf(&buf, "\n%-52s %6s %8s\n", "throughput ratio", "value", "target")
	for _, r := range []struct {
		name   string
		v, min float64
	}{
		{"c/a  Acquire / raw insert", ratio(c, a), 0.8},
		{"d/a  create application / raw insert", ratio(d, a), 0.4},
		{"e/d  HTTP / library", ratio(e, d), 0.5},
		{"b/a  naive acquire / raw insert", ratio(bb, a), 0},
		{"c/aP Acquire / prepared raw insert", ratio(c, aP), 0},
		{"a'/aP audit row cost: audited / raw, both prepared", ratio(a2, aP), 0},
		{"c/a' Acquire / its own SQL alone", ratio(c, a2), 0},
		{"d/aP create application / prepared raw insert", ratio(d, aP), 0},
	} {
		if r.min > 0 {
			verdict := "met"
			if r.v < r.min {
				verdict = "MISSED"
			}
			fmt.Fprintf(&buf, "%-52s %6.2f %8s %s\n", r.name, r.v, fmt.Sprintf(">= %.1f", r.min), verdict)
		} else {
			fmt.Fprintf(&buf, "%-52s %6.2f %8s\n", r.name, r.v, "-")
		}
	}
	verdict := "met"
	if fivexx.Load() != 0 || e5xx.Load() != 0 || transport.Load() != 0 {
		verdict = "MISSED"
	}
	fmt.Fprintf(&buf, "\ncontended: %d created, %d refused repository_claimed, %d other 4xx, %d 5xx, %d transport errors (target 0 5xx: %s); e: %d 5xx\n",
		created.Load(), claimed.Load(), other4xx.Load(), fivexx.Load(), transport.Load(), verdict, e5xx.Load())
	for cause, n := range serverErrors.seen {
		fmt.Fprintf(&buf, "server error x%d: %s\n", n, cause)
	}
	var lockRows int
	if err := db.GetContext(ctx, &lockRows, `SELECT count(*) FROM RepositoryLockOwner`); err == nil {
		fmt.Fprintf(&buf, "contended: %d locks for %d URLs\n", lockRows, benchContendedURLs)
	}
	// The table goes to stdout: the testing package truncates long b.Log
	// output of benchmarks.
	fmt.Print(buf.String())
	b.Logf("c/a %.2f (target 0.8), d/a %.2f (target 0.4), e/d %.2f (target 0.5), contended 5xx %d (target 0)",
		ratio(c, a), ratio(d, a), ratio(e, d), fivexx.Load())

	b.ReportMetric(ratio(c, a), "c/a")
	b.ReportMetric(ratio(c, aP), "c/aP")
	b.ReportMetric(ratio(d, a), "d/a")
	b.ReportMetric(ratio(e, d), "e/d")
	b.ReportMetric(float64(fivexx.Load()), "contended-5xx")
	b.ReportMetric(a.opsPerSec(), "a-ops/s")
	b.ReportMetric(c.opsPerSec(), "c-ops/s")
	b.ReportMetric(e.opsPerSec(), "e-ops/s")
}
