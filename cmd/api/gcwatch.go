package main

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/repolock/repolock/internal/gc"
)

// gcWatch exports when the newest successful collection recorded in the
// database finished, whichever process ran it: on Kubernetes the CronJob
// collects and its own metrics are never scraped, and a replica's
// repolock_gc_last_success_timestamp_seconds only knows its own runs. It
// reads the database every METRICS_REFRESH, never at scrape time; before the
// first successful read, or when no successful run is recorded, it exports
// nothing (the alert then fires on the metric's absence).
type gcWatch struct {
	collector *gc.Collector
	logger    *slog.Logger
	last      atomic.Int64 // Unix nanoseconds; 0: unknown or none
}

var gcFleetLastSuccessDesc = prometheus.NewDesc("repolock_gc_fleet_last_success_timestamp_seconds",
	"Unix time at which the newest successful collection (not a dry run) recorded in the database finished, run by any replica, CronJob, timer or the API; read every METRICS_REFRESH; absent while none is recorded.",
	[]string{"kind"}, nil)

func (w *gcWatch) Describe(ch chan<- *prometheus.Desc) { ch <- gcFleetLastSuccessDesc }

func (w *gcWatch) Collect(ch chan<- prometheus.Metric) {
	if n := w.last.Load(); n != 0 {
		ch <- prometheus.MustNewConstMetric(gcFleetLastSuccessDesc, prometheus.GaugeValue, float64(n)/1e9, string(gc.KindGC))
	}
}

// refresh reads the newest successful run once; on an error the last value
// stays (a database outage also stops the collections: the alert's age
// keeps growing).
func (w *gcWatch) refresh(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	t, ok, err := w.collector.LastSuccess(ctx, gc.KindGC)
	switch {
	case err != nil:
		w.logger.Debug("gc: reading the newest successful run failed; keeping the last value", "error", err.Error())
	case ok:
		w.last.Store(t.UnixNano())
	}
}

// run refreshes at once and then every interval until ctx is done.
func (w *gcWatch) run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		w.refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
