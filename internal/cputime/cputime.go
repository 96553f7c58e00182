// Package cputime measures the CPU time of the process for benchmarks:
// on a shared machine the wall time per operation moves with the other
// load, the process's own CPU time (user + system) much less. Tests and
// benchmarks only.
package cputime

import (
	"syscall"
	"testing"
	"time"
)

// Process returns the CPU time (user + system) the process has used so
// far.
func Process() time.Duration {
	var r syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r)
	return time.Duration(r.Utime.Nano() + r.Stime.Nano())
}

// Report starts a measurement and returns the function that ends it: it
// reports the process's CPU time per operation of b as "cpu-ns/op".
// Use it as defer cputime.Report(b)().
func Report(b *testing.B) func() {
	start := Process()
	return func() {
		b.ReportMetric(float64(Process()-start)/float64(b.N), "cpu-ns/op")
	}
}
