package gc_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/gc"
)

func TestListRunsPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	// Five runs a minute apart; two share a start time (the id breaks the tie).
	for i, start := range []string{"5 minutes", "4 minutes", "3 minutes", "3 minutes", "1 minute"} {
		mustExec(t, db, `INSERT INTO gc_runs (kind, trigger, holder, min_age, batch_size, status, started_at, finished_at, scanned, deleted, batches)
			VALUES ('gc', 'cli', $1, interval '1 minute', 1000, 'succeeded',
			        date_trunc('second', now()) - $2::interval, date_trunc('second', now()) - $2::interval + interval '2 seconds', $3, $3, 1)`,
			fmt.Sprintf("h%d", i), start, i)
	}
	var want []string
	if err := db.SelectContext(ctx, &want, `SELECT holder FROM gc_runs ORDER BY started_at DESC, id DESC`); err != nil {
		t.Fatal(err)
	}

	c := newCollector(db, gc.Config{})
	var got []string
	token := ""
	pages := 0
	for {
		runs, next, err := c.ListRuns(ctx, 2, token)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, r := range runs {
			got = append(got, r.Holder)
			if r.DurationSeconds != 2 || r.FinishedAt == nil || r.Status != gc.StatusSucceeded {
				t.Fatalf("run %+v", r)
			}
		}
		if next == "" {
			break
		}
		token = next
	}
	if pages != 3 || !equalStrings(got, want) {
		t.Fatalf("pages %d, holders %v; want 3 pages of %v", pages, got, want)
	}
	if _, _, err := c.ListRuns(ctx, 2, "not-a-token"); repolock.ErrorCode(err) != repolock.EInvalid {
		t.Fatalf("bad token: err = %v, want invalid_argument", err)
	}
	if _, err := c.GetRun(ctx, "nope"); repolock.ErrorCode(err) != repolock.ENotFound {
		t.Fatalf("GetRun(bad id): err = %v, want not_found", err)
	}
	if _, err := c.GetRun(ctx, "00000000-0000-0000-0000-000000000001"); repolock.ErrorCode(err) != repolock.ENotFound {
		t.Fatalf("GetRun(missing): err = %v, want not_found", err)
	}
}

func TestRunLoopCollectsUntilCancelled(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	tenant := dbtest.NewTenant(t, db, "t").ID
	for i := range 5 {
		dbtest.NewLock(t, db, tenant, fmt.Sprintf("git.example.com/t/%d", i), time.Hour)
	}
	finished := make(chan gc.Run, 1000)
	c := newCollector(db, gc.Config{Signals: gc.Signals{RunFinished: finished}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.RunLoop(ctx, gc.LoopConfig{Interval: 20 * time.Millisecond, Options: opts(2, time.Minute)})
	}()
	// Wait for scheduled runs, as the collector reports them; orphans made
	// meanwhile are collected by the next ones.
	succeeded := 0
	waitRuns := func(n int) {
		t.Helper()
		for succeeded < n {
			r := <-finished
			if r.Trigger != gc.TriggerSchedule {
				t.Fatalf("a loop run with trigger %q", r.Trigger)
			}
			if r.Status == gc.StatusSucceeded {
				succeeded++
			}
		}
	}
	waitRuns(3)
	if n := len(lockURLs(t, db)); n != 0 {
		t.Fatalf("%d locks left after three scheduled runs", n)
	}
	dbtest.NewLock(t, db, tenant, "git.example.com/t/later", time.Hour)
	waitRuns(succeeded + 2)
	if n := len(lockURLs(t, db)); n != 0 {
		t.Fatalf("the later orphan was not collected")
	}
	cancel()
	<-done // RunLoop returns when its context ends
	if n := countRows(t, db, `SELECT count(*) FROM gc_runs WHERE status = 'running'`); n != 0 {
		t.Fatalf("%d runs left running after the loop stopped", n)
	}
	if n := countRows(t, db, `SELECT count(*) FROM gc_runs WHERE trigger <> 'schedule'`); n != 0 {
		t.Fatalf("loop runs not marked as scheduled")
	}
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	seedScenario(t, db)
	reg := prometheus.NewRegistry()
	m, err := gc.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	// One process registers its metrics once; a second registration is an
	// error, never silently merged.
	var are prometheus.AlreadyRegisteredError
	if again, err := gc.NewMetrics(reg); again != nil || !errors.As(err, &are) {
		t.Fatalf("registering twice = %v, %v; want an AlreadyRegisteredError", again, err)
	}
	c := newCollector(db, gc.Config{Metrics: m})

	dry := opts(1000, time.Minute)
	dry.DryRun = true
	if _, err := c.Collect(ctx, dry); err != nil {
		t.Fatal(err)
	}
	run, err := c.Collect(ctx, opts(1000, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	// A second collector given the same metrics shares the series.
	release := blockRuns(t, db)
	leased := make(chan string, 1)
	holder := newCollector(db, gc.Config{Holder: "holder", Metrics: m, Signals: gc.Signals{LeaseAcquired: leased}})
	done := make(chan error, 1)
	go func() { _, err := holder.Collect(ctx, opts(1000, time.Minute)); done <- err }()
	<-leased
	if r, err := c.Collect(ctx, opts(1000, time.Minute)); err != nil || r.Status != gc.StatusSkipped {
		t.Fatalf("concurrent run = %+v, %v", r, err)
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	got := gatherValues(t, reg)
	want := map[string]float64{
		"repolock_gc_collected_locks_total":                                    3,
		`repolock_gc_runs_total{dry_run="false",kind="gc",result="skipped"}`:   1,
		`repolock_gc_runs_total{dry_run="false",kind="gc",result="succeeded"}`: 2,
		`repolock_gc_runs_total{dry_run="true",kind="gc",result="succeeded"}`:  1,
		`repolock_gc_run_duration_seconds_count{kind="gc",result="succeeded"}`: 3,
		`repolock_gc_last_success_timestamp_seconds{kind="gc"}`:                0, // checked below
		"repolock_gc_cleaned_repositories_total":                               0,
	}
	// Every other result-labelled series exists at 0 from the start (so an
	// increase() alert fires on the first failure).
	for _, kind := range []string{"gc", "clean"} {
		for _, result := range []string{"succeeded", "failed", "skipped"} {
			for _, dry := range []string{"false", "true"} {
				k := fmt.Sprintf(`repolock_gc_runs_total{dry_run="%s",kind="%s",result="%s"}`, dry, kind, result)
				if _, ok := want[k]; !ok {
					want[k] = 0
				}
			}
			k := fmt.Sprintf(`repolock_gc_run_duration_seconds_count{kind="%s",result="%s"}`, kind, result)
			if _, ok := want[k]; !ok && result != "skipped" {
				want[k] = 0
			}
		}
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Fatalf("metric %s missing; have %v", k, got)
		}
		if k != `repolock_gc_last_success_timestamp_seconds{kind="gc"}` && g != w {
			t.Fatalf("%s = %v, want %v", k, g, w)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("metrics = %v, want exactly the keys of %v", got, want)
	}
	// The last success is the finish time of the latest run that is not a
	// dry run.
	last, err := c.GetRun(ctx, mustLatestRun(t, db))
	if err != nil {
		t.Fatal(err)
	}
	if last.FinishedAt.Before(*run.FinishedAt) {
		t.Fatalf("latest run is older than the first")
	}
	if g, w := got[`repolock_gc_last_success_timestamp_seconds{kind="gc"}`], float64(last.FinishedAt.UnixNano())/1e9; g != w {
		t.Fatalf("last success = %v, want %v", g, w)
	}
}

// gatherValues flattens a registry into "name{label=value,...}" -> value
// (counters, gauges, and histogram sample counts as name_count).
func gatherValues(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, lp := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
			}
			key := mf.GetName()
			if len(labels) > 0 {
				key += "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.GetCounter() != nil:
				out[key] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[key] = m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				out[strings.Replace(key, mf.GetName(), mf.GetName()+"_count", 1)] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

func mustLatestRun(t *testing.T, db interface {
	GetContext(ctx context.Context, dest any, query string, args ...any) error
}) string {
	t.Helper()
	var id string
	if err := db.GetContext(context.Background(), &id, `SELECT id FROM gc_runs WHERE NOT dry_run ORDER BY finished_at DESC LIMIT 1`); err != nil {
		t.Fatal(err)
	}
	return id
}
