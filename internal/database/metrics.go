package database

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// registerMetrics registers the pool's collectors on reg
// (PoolConfig.Metrics): database/sql's pool statistics and the counts of
// the pool's Batchers. docs/operations.md lists them.
func (db *DB) registerMetrics(reg prometheus.Registerer) error {
	if err := reg.Register(collectors.NewDBStatsCollector(db.x.DB, "repolock")); err != nil {
		return fmt.Errorf("database: register the pool metrics: %w", err)
	}
	if err := reg.Register(batchCollector{db: db}); err != nil {
		return fmt.Errorf("database: register the batch metrics: %w", err)
	}
	return nil
}

// batchCollector exports the pool's Batchers' counts: calls / batches is
// the mean batch size of a statement.
type batchCollector struct{ db *DB }

var (
	batchesDesc = prometheus.NewDesc("repolock_db_batches_total",
		"Statements run by a batcher of concurrent writes (group commit), by statement.", []string{"statement"}, nil)
	batchCallsDesc = prometheus.NewDesc("repolock_db_batch_calls_total",
		"Calls (requests) those statements carried, by statement; divided by repolock_db_batches_total, the mean batch size.", []string{"statement"}, nil)
)

func (c batchCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- batchesDesc
	ch <- batchCallsDesc
}

func (c batchCollector) Collect(ch chan<- prometheus.Metric) {
	for name, st := range c.db.BatchStats() {
		ch <- prometheus.MustNewConstMetric(batchesDesc, prometheus.CounterValue, float64(st.Batches), name)
		ch <- prometheus.MustNewConstMetric(batchCallsDesc, prometheus.CounterValue, float64(st.Calls), name)
	}
}
