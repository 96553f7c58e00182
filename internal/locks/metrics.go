package locks

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics count the decisions about ownership locks (issue 30): claims by
// result, locks released, locks collected. cmd/api builds them once with
// NewMetrics on its registry and hands them to New; a nil *Metrics counts
// nothing (commands and tests that do not look).
//
// Every series exists from the start at 0, and each one is resolved here,
// once: counting a decision is one atomic add, with no label lookup and no
// allocation on the acquire path.
//
// A decision is counted by the code that knows it is final: Acquire (on
// the pool) counts its own claims; the callers of AcquireTx, Release and
// DeleteUnreferenced count theirs after their transaction committed
// (internal/apps, internal/gc), so a transaction that is retried or
// rolled back counts once or not at all.
type Metrics struct {
	acquired, alreadyOwned, denied, invalid prometheus.Counter
	deniedClaimed, deniedReserved           prometheus.Counter
	released, releasedTenant                prometheus.Counter
	collected                               prometheus.Counter
}

// Claim results, the values of repolock_claims_total's result label.
const (
	ClaimAcquired     = "acquired"      // the claim created the lock
	ClaimAlreadyOwned = "already_owned" // the claimant held it already
	ClaimDenied       = "denied"        // another tenant's lock or reservation refused it
	ClaimInvalid      = "invalid"       // the request was refused as invalid (bad URL or field)
)

// NewMetrics registers the lock decision metrics on reg:
// repolock_claims_total{result}, repolock_claims_denied_total{reason},
// repolock_locks_released_total{cause} and repolock_locks_collected_total.
// Registering them twice on one registry is an error.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	claims := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "repolock_claims_total",
		Help: "Claims of a repository (POST /v1/locks/acquire, creating an Application or Repository Credential, changing its repo_url) by result: acquired (a new lock), already_owned, denied (another tenant's lock or reservation), invalid (refused as bad input).",
	}, []string{"result"})
	denied := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "repolock_claims_denied_total",
		Help: "Denied claims by reason: claimed (another tenant holds the lock) or reserved (the key is under another tenant's reservation). Sums to repolock_claims_total{result=\"denied\"}.",
	}, []string{"reason"})
	released := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "repolock_locks_released_total",
		Help: "Locks released by cause: unreferenced (their last Application or Repository Credential was deleted or moved) or tenant_deleted.",
	}, []string{"cause"})
	collected := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "repolock_locks_collected_total",
		Help: "Locks without references deleted by the global GC (not dry runs).",
	})
	for _, c := range []prometheus.Collector{claims, denied, released, collected} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("locks: register metrics: %w", err)
		}
	}
	return &Metrics{
		acquired:       claims.WithLabelValues(ClaimAcquired),
		alreadyOwned:   claims.WithLabelValues(ClaimAlreadyOwned),
		denied:         claims.WithLabelValues(ClaimDenied),
		invalid:        claims.WithLabelValues(ClaimInvalid),
		deniedClaimed:  denied.WithLabelValues(reasonClaimed),
		deniedReserved: denied.WithLabelValues(reasonReserved),
		released:       released.WithLabelValues("unreferenced"),
		releasedTenant: released.WithLabelValues("tenant_deleted"),
		collected:      collected,
	}, nil
}

// Claimed counts the decision of one claim, a.
func (m *Metrics) Claimed(a Acquisition) {
	switch {
	case m == nil:
	case a.Acquired && a.New:
		m.acquired.Inc()
	case a.Acquired:
		m.alreadyOwned.Inc()
	case a.ReservedPrefix != "":
		m.denied.Inc()
		m.deniedReserved.Inc()
	default:
		m.denied.Inc()
		m.deniedClaimed.Inc()
	}
}

// Invalid counts a claim refused as invalid input.
func (m *Metrics) Invalid() {
	if m != nil {
		m.invalid.Inc()
	}
}

// Released counts n locks released because their last reference went.
func (m *Metrics) Released(n int64) {
	if m != nil && n > 0 {
		m.released.Add(float64(n))
	}
}

// ReleasedWithTenant counts n locks released by deleting their tenant.
func (m *Metrics) ReleasedWithTenant(n int64) {
	if m != nil && n > 0 {
		m.releasedTenant.Add(float64(n))
	}
}

// Collected counts n locks deleted by the GC.
func (m *Metrics) Collected(n int64) {
	if m != nil && n > 0 {
		m.collected.Add(float64(n))
	}
}
