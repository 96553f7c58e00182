package rekey

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are re-keying's collectors.
type Metrics struct {
	rekeyed *prometheus.CounterVec
}

// NewMetrics registers re-keying's collectors on reg: a second registration
// on one registry is an error.
//
//	repolock_rekeyed_locks_total{cause="version"|"alias"}  locks re-keyed (moved or marked current)
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{rekeyed: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "repolock_rekeyed_locks_total",
		Help: "Locks re-keyed under new keying rules: by api rekey and POST /v1/admin/rekey after a rules version change (cause=version), or by an alias change (cause=alias).",
	}, []string{"cause"})}
	if err := reg.Register(m.rekeyed); err != nil {
		return nil, fmt.Errorf("rekey: register metrics: %w", err)
	}
	m.rekeyed.WithLabelValues("version")
	m.rekeyed.WithLabelValues("alias")
	return m, nil
}
