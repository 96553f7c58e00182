package locks_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/repolock/repolock/internal/locks"
)

// TestMetricsCountWithoutAllocating: counting a decision is an atomic add
// on a counter resolved at start-up (the acquire path's cost); a nil
// *Metrics counts nothing. Not parallel: AllocsPerRun.
func TestMetricsCountWithoutAllocating(t *testing.T) {
	m, err := locks.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []locks.Acquisition{
		{Acquired: true, New: true}, {Acquired: true}, {Owner: "bob"}, {Owner: "bob", ReservedPrefix: "github.com/bob/"},
	} {
		if n := testing.AllocsPerRun(100, func() { m.Claimed(a) }); n != 0 {
			t.Errorf("Claimed(%+v) allocates %v times", a, n)
		}
	}
	if n := testing.AllocsPerRun(100, func() { m.Invalid(); m.Released(1); m.Collected(2); m.ReleasedWithTenant(3) }); n != 0 {
		t.Errorf("counting allocates %v times", n)
	}
	var none *locks.Metrics
	none.Claimed(locks.Acquisition{Acquired: true})
	none.Invalid()
	none.Released(1)
	none.ReleasedWithTenant(1)
	none.Collected(1)
}
