package gc

import (
	"errors"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the GC's Prometheus metrics. A nil *Metrics records nothing.
type Metrics struct {
	collected   prometheus.Counter
	cleaned     prometheus.Counter
	runs        *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	lastSuccess *prometheus.GaugeVec
}

// NewMetrics registers the GC metrics on reg. Registering twice on the same
// registry (the serve loop and the HTTP handlers each build a Collector)
// returns metrics backed by the collectors registered first.
func NewMetrics(reg prometheus.Registerer) *Metrics {
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
	m.collected = register(reg, m.collected)
	m.cleaned = register(reg, m.cleaned)
	m.runs = register(reg, m.runs)
	m.duration = register(reg, m.duration)
	m.lastSuccess = register(reg, m.lastSuccess)
	return m
}

func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(err)
	}
	return c
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

func (m *Metrics) observeCleaner(r CleanerResult) {
	if m == nil || r.Cleaned <= 0 {
		return
	}
	m.cleaned.Add(float64(r.Cleaned))
}
