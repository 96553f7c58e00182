package repostate_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/repostate"
	"github.com/repolock/repolock/internal/repostate/kv"
	"github.com/repolock/repolock/internal/repostate/kv/kvtest"
)

func median(d []time.Duration) time.Duration { return pct(d, 50) }

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	if i > 0 {
		i--
	}
	return s[i]
}

// BenchmarkCommits measures commits/s with 16 committers on one branch (each
// commit races the others for the branch and retries with backoff) against
// 16 committers on 16 branches (no contention), with the default retry
// policy. Attempts are counted from the commit writes the store sees. The
// two scenarios alternate over two rounds in the same process and database.
//
// The workload is fixed and runs once, whatever b.N.
func BenchmarkCommits(b *testing.B) {
	ctx := context.Background()
	db := dbtest.New(b)
	quietLog := slog.New(slog.NewTextHandler(io.Discard, nil))
	const (
		committers = 16
		perWorker  = 10
		rounds     = 2
	)
	type result struct {
		commits, conflicts, attempts int
		wall                         time.Duration
		lat                          []time.Duration
	}
	results := map[string]*result{"one branch": {}, "16 branches": {}}
	for round := range rounds {
		order := []string{"one branch", "16 branches"}
		if round%2 == 1 {
			slices.Reverse(order) // alternate which goes first
		}
		for _, scenario := range order {
			faults := kvtest.NewFaultStore(kv.NewPostgres(db))
			svc := repostate.New(faults, repostate.Config{Logger: quietLog})
			tenant := newTenant()
			if _, err := svc.Create(ctx, tenant, repostate.CreateParams{Name: "bench", StorageNamespace: "s3://bench"}); err != nil {
				b.Fatal(err)
			}
			branch := func(w int) string {
				if scenario == "one branch" {
					return "main"
				}
				return fmt.Sprintf("b%02d", w)
			}
			if scenario == "16 branches" {
				for w := range committers {
					if _, err := svc.CreateBranch(ctx, tenant, "bench", branch(w), "main"); err != nil {
						b.Fatal(err)
					}
				}
			}
			before := len(faults.Log())
			r := results[scenario]
			var (
				wg    sync.WaitGroup
				mu    sync.Mutex
				start = make(chan struct{})
			)
			for w := range committers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					for i := range perWorker {
						t0 := time.Now()
						_, err := svc.Commit(ctx, tenant, "bench", branch(w), repostate.CommitParams{Message: fmt.Sprintf("w%d c%d", w, i)})
						d := time.Since(t0)
						mu.Lock()
						switch {
						case err == nil:
							r.commits++
							r.lat = append(r.lat, d)
						case repolock.IsCode(err, repolock.EConflict):
							r.conflicts++
						default:
							b.Errorf("commit: %v", err)
						}
						mu.Unlock()
					}
				}()
			}
			t0 := time.Now()
			close(start)
			wg.Wait()
			r.wall += time.Since(t0)
			for _, w := range faults.Log()[before:] {
				if w.Op == "SetIf" && bytes.HasPrefix(w.Key, []byte("commits/")) {
					r.attempts++
				}
			}
		}
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "\nCommits, %d committers x %d commits, %d rounds, default retry policy (%d attempts, %s..%s backoff)\n",
		committers, perWorker, rounds, repostate.DefaultCommitRetry.MaxAttempts, repostate.DefaultCommitRetry.BaseDelay, repostate.DefaultCommitRetry.MaxDelay)
	fmt.Fprintf(&sb, "%-12s %9s %9s %10s %9s %9s %13s\n", "scenario", "commits", "409s", "commits/s", "p50", "p99", "attempts/commit")
	for _, s := range []string{"one branch", "16 branches"} {
		r := results[s]
		fmt.Fprintf(&sb, "%-12s %9d %9d %10.0f %9s %9s %13.2f\n", s, r.commits, r.conflicts, float64(r.commits)/r.wall.Seconds(),
			median(r.lat).Round(time.Millisecond), pct(r.lat, 99).Round(time.Millisecond), float64(r.attempts)/float64(max(r.commits, 1)))
	}
	one, many := results["one branch"], results["16 branches"]
	ratio := (float64(one.commits) / one.wall.Seconds()) / (float64(many.commits) / many.wall.Seconds())
	fmt.Fprintf(&sb, "one branch / 16 branches commits/s ratio: %.2f (no target: one branch serializes on SetIf by design; every commit must still land once or answer 409)\n", ratio)
	fmt.Print(sb.String())
	b.ReportMetric(float64(one.commits)/one.wall.Seconds(), "commits/s-one-branch")
	b.ReportMetric(float64(many.commits)/many.wall.Seconds(), "commits/s-16-branches")
	b.ReportMetric(ratio, "one/16-ratio")
	b.ReportMetric(float64(one.conflicts), "409s-one-branch")
}

// BenchmarkDeleteReuse measures, for repositories holding 1,000, 10,000 and
// 100,000 commits, how long until a deleted repository's name is reusable
// (Delete returns; then a Create of the same name) and how long the Cleaner
// then takes to remove the instance. The commits are seeded set-based with
// SQL straight into the instance partition (going through Commit would
// take minutes for 100,000); they are chained first-parent commits with
// synthetic ids. Each size is measured three times; medians are shown.
// Target: the time until the name is reusable does not grow with size.
//
// The workload is fixed and runs once, whatever b.N.
func BenchmarkDeleteReuse(b *testing.B) {
	ctx := context.Background()
	db := dbtest.New(b)
	quietLog := slog.New(slog.NewTextHandler(io.Discard, nil))
	// The fault wrapper injects nothing; it counts the statements Delete
	// issues, which shows the cost is independent of size by construction.
	counted := kvtest.NewFaultStore(kv.NewPostgres(db))
	svc := repostate.New(counted, repostate.Config{Logger: quietLog})
	cleaner := repostate.NewStoreCleaner(kv.NewPostgres(db), repostate.CleanerConfig{Logger: quietLog})
	tenant := newTenant()
	sizes := []int{1000, 10000, 100000}
	const reps = 5
	type result struct {
		del, reuse, clean []time.Duration
		rows              int64
		deleteWrites      int
	}
	results := map[int]*result{}
	seed := func(name, uid string, n int) {
		_, err := db.ExecContext(ctx, `
			INSERT INTO kv (partition_key, key, value, version)
			SELECT convert_to($1, 'UTF8'),
			       convert_to('commits/' || id, 'UTF8'),
			       convert_to(json_build_object(
			           'id', id, 'version', 1, 'committer', 'bench', 'message', 'commit ' || i,
			           'meta_range_id', '', 'creation_date', '2025-01-01T00:00:00Z',
			           'parents', CASE WHEN i = 1 THEN '[]'::json ELSE json_build_array(parent) END,
			           'metadata', '{}'::json, 'generation', i + 1)::text, 'UTF8'),
			       nextval('kv_version_seq')
			FROM (SELECT i,
			             encode(sha256(convert_to($2 || ':' || i, 'UTF8')), 'hex') AS id,
			             encode(sha256(convert_to($2 || ':' || (i - 1), 'UTF8')), 'hex') AS parent
			      FROM generate_series(1, $3::int) i) c`,
			tenant+"/"+name+"-"+uid, uid, n)
		if err != nil {
			b.Fatal(err)
		}
	}
	for range reps {
		for _, n := range sizes {
			name := fmt.Sprintf("repo-%d", n)
			r, err := svc.Create(ctx, tenant, repostate.CreateParams{Name: name, StorageNamespace: "s3://bench"})
			if err != nil {
				b.Fatal(err)
			}
			seed(name, r.InstanceUID, n)
			if _, err := db.ExecContext(ctx, `ANALYZE kv`); err != nil {
				b.Fatal(err)
			}
			res := results[n]
			if res == nil {
				res = &result{}
				results[n] = res
			}
			writes := counted.Writes()
			t0 := time.Now()
			if err := svc.Delete(ctx, tenant, name); err != nil {
				b.Fatal(err)
			}
			del := time.Since(t0)
			res.deleteWrites = counted.Writes() - writes
			if _, err := svc.Create(ctx, tenant, repostate.CreateParams{Name: name, StorageNamespace: "s3://bench"}); err != nil {
				b.Fatal(err)
			}
			reuse := time.Since(t0)
			t1 := time.Now()
			cr, err := cleaner.Run(ctx)
			if err != nil || cr.Cleaned != 1 || cr.Failed != 0 {
				b.Fatalf("cleaner: %+v, %v", cr, err)
			}
			clean := time.Since(t1)
			res.del = append(res.del, del)
			res.reuse = append(res.reuse, reuse)
			res.clean = append(res.clean, clean)
			res.rows = cr.RowsDeleted
			// Leave nothing for the next measurement.
			if err := svc.Delete(ctx, tenant, name); err != nil {
				b.Fatal(err)
			}
			if _, err := cleaner.Run(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "\nDelete until the name is reusable, and the Cleaner after it (medians of %d)\n", reps)
	fmt.Fprintf(&sb, "%9s %13s %10s %17s %10s %12s %12s %s\n", "commits", "Delete writes", "Delete", "Delete+Create", "Cleaner", "rows", "rows/s", "reuse vs 1,000 (target: no growth)")
	base := median(results[sizes[0]].reuse)
	for _, n := range sizes {
		r := results[n]
		c := median(r.clean)
		growth := float64(median(r.reuse)) / float64(base)
		fmt.Fprintf(&sb, "%9d %13d %10s %17s %10s %12d %12.0f %.2fx\n", n, r.deleteWrites,
			median(r.del).Round(10*time.Microsecond), median(r.reuse).Round(10*time.Microsecond), c.Round(time.Millisecond),
			r.rows, float64(r.rows)/c.Seconds(), growth)
		b.ReportMetric(float64(median(r.reuse).Microseconds())/1000, fmt.Sprintf("ms-reuse-%d", n))
		b.ReportMetric(float64(c.Milliseconds()), fmt.Sprintf("ms-clean-%d", n))
	}
	b.ReportMetric(float64(median(results[sizes[len(sizes)-1]].reuse))/float64(base), "reuse-growth-100k/1k")
	fmt.Print(sb.String())
}
