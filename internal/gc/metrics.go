package gc

import (
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/repolock/repolock/internal/repostate"
)

// Metrics are the GC's Prometheus metrics. A nil *Metrics records nothing.
type Metrics struct {
	collected   prometheus.Counter
	cleaned     prometheus.Counter
	runs        *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	lastSuccess *prometheus.GaugeVec
}

// NewMetrics registers the GC metrics on reg. A process has one Collector
// and registers its metrics once; registering them twice on the same
// registry is an error.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		collected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "repolock_gc_collected_locks_total",
			Help: "Unreferenced ownership locks deleted by the global GC.",
		}),
		cleaned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "repolock_gc_cleaned_repositories_total",
			Help: "Deleted repository instances cleaned by the repository Cleaner during GC runs.",
		}),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "repolock_gc_runs_total",
			Help: "GC runs by kind (gc, clean), result (succeeded, failed, skipped) and dry_run.",
		}, []string{"kind", "result", "dry_run"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "repolock_gc_run_duration_seconds",
			Help:    "Duration of GC runs that ran (not skipped), by kind and result.",
			Buckets: []float64{.01, .05, .1, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600},
		}, []string{"kind", "result"}),
		lastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "repolock_gc_last_success_timestamp_seconds",
			Help: "Unix time at which the last successful run (not a dry run) of each kind finished.",
		}, []string{"kind"}),
	}
	for _, c := range []prometheus.Collector{m.collected, m.cleaned, m.runs, m.duration, m.lastSuccess} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("gc: register metrics: %w", err)
		}
	}
	// Every result-labelled series exists from the start at 0, so that
	// increase(repolock_gc_runs_total{result="failed"}[...]) > 0 fires on
	// the first failure (a series born at 1 has no increase).
	for _, kind := range []Kind{KindGC, KindClean} {
		for _, result := range []Status{StatusSucceeded, StatusFailed, StatusSkipped} {
			for _, dry := range []string{"false", "true"} {
				m.runs.WithLabelValues(string(kind), string(result), dry)
			}
			if result != StatusSkipped {
				m.duration.WithLabelValues(string(kind), string(result))
			}
		}
	}
	return m, nil
}

func (m *Metrics) observeRun(r Run, seconds float64) {
	if m == nil {
		return
	}
	result := string(r.Status)
	if result == "" || result == string(StatusRunning) {
		result = string(StatusFailed)
	}
	m.runs.WithLabelValues(string(r.Kind), result, strconv.FormatBool(r.DryRun)).Inc()
	if r.Status == StatusSkipped {
		return
	}
	m.duration.WithLabelValues(string(r.Kind), result).Observe(seconds)
	if r.Status == StatusSucceeded && !r.DryRun {
		finished := time.Now()
		if r.FinishedAt != nil {
			finished = *r.FinishedAt
		}
		m.lastSuccess.WithLabelValues(string(r.Kind)).Set(float64(finished.UnixNano()) / 1e9)
	}
}

func (m *Metrics) observeCollected(n int64) {
	if m == nil || n <= 0 {
		return
	}
	m.collected.Add(float64(n))
}

func (m *Metrics) observeCleaner(r repostate.CleanerResult) {
	if m == nil || r.Cleaned <= 0 {
		return
	}
	m.cleaned.Add(float64(r.Cleaned))
}
