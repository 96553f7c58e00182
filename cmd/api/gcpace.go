package main

import (
	"context"
	"log/slog"
	"math"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// serveGCPercent is the Go collector's pace `repolock serve` runs at when the
// environment sets no GOGC: the heap may grow to five times what is live
// before a collection, instead of Go's default of twice.
//
// The server's live heap is small (tens of MB: caches, prepared statements,
// requests in flight) and its garbage is per request, so the default pace
// collects often: in make bench-http, 100 spent 91-100 µs of the binary's
// CPU per create and 400 spent 74-76, and the creates per second rose by
// about a fifth (docs/benchmarks.md, "The Go collector's pace"). The price
// is memory, which serveMemoryLimit bounds.
const serveGCPercent = 400

// serveMemoryLimit is the soft memory limit (debug.SetMemoryLimit) `api
// serve` runs with when the environment sets no GOMEMLIMIT: the collector
// keeps the pace above while the Go runtime's memory is below it, and
// collects sooner as it nears it, so the slack GOGC=400 gives the heap
// does not grow the process past it. 128 MiB: with 1,000 watchers under
// 500 acquires/s (make bench-watch) the server has about 20 MiB of live
// heap and 20 MiB of goroutine stacks, and GOGC=400 alone let its resident
// memory reach 171 MiB; under this limit the collector's goal stays below
// it, and the resident memory (the limit plus what the runtime does not
// count: the binary's text, about 8 MiB) below the 150 MiB target of issue
// 26 (docs/operations.md, "Memory and the Go collector").
//
// The limit is soft and never lets the collector run more often than
// GOGC=100 would: while the limit is the environment's default, it is
// raised to twice the live heap plus the rest of the runtime's memory when
// that is more (memoryLimitFloor), so a server whose live heap is large
// (many watchers, a large token cache) is paced like Go's default rather
// than collecting continuously near a limit its live data fills.
const serveMemoryLimit = 128 << 20

// setServeGCPace applies serveGCPercent unless GOGC is set, and
// serveMemoryLimit unless GOMEMLIMIT is set (the runtime has then read
// them), and logs the pace in effect. It returns the loop that keeps the
// default limit above memoryLimitFloor (run it until the server stops),
// or nil when GOMEMLIMIT is set.
func setServeGCPace(getenv func(string) string, logger *slog.Logger) (follow func(context.Context)) {
	source := "GOGC"
	if getenv("GOGC") == "" {
		debug.SetGCPercent(serveGCPercent)
		source = "serve's default"
	}
	limitSource := "GOMEMLIMIT"
	if getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(serveMemoryLimit)
		limitSource = "serve's default"
		follow = func(ctx context.Context) { followMemoryLimit(ctx, time.Second) }
	}
	pace := []metrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/gomemlimit:bytes"}}
	metrics.Read(pace)
	attrs := []any{"gogc", pace[0].Value.Uint64(), "source", source}
	if limit := pace[1].Value.Uint64(); limit != math.MaxInt64 {
		attrs = append(attrs, "gomemlimit_bytes", limit, "gomemlimit_source", limitSource)
	}
	logger.Info("go collector pace", attrs...)
	return follow
}

// memoryLimitFloor is the least soft limit that lets the collector keep
// at least Go's default pace: twice the live heap (what GOGC=100 lets the
// heap reach) plus the runtime's memory that is not heap objects (stacks,
// metadata, free spans), read from runtime/metrics.
func memoryLimitFloor() int64 {
	s := []metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
	}
	metrics.Read(s)
	for _, v := range s {
		if v.Value.Kind() != metrics.KindUint64 {
			return 0
		}
	}
	live := s[0].Value.Uint64()
	counted := s[2].Value.Uint64() + s[3].Value.Uint64() + s[4].Value.Uint64()
	other := uint64(0)
	if total := s[1].Value.Uint64(); total > counted {
		other = total - counted
	}
	return int64(min(2*live+other, math.MaxInt64/2))
}

// followMemoryLimit sets the soft limit, every interval, to
// max(serveMemoryLimit, memoryLimitFloor()), until ctx ends.
func followMemoryLimit(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	current := int64(serveMemoryLimit)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if want := max(serveMemoryLimit, memoryLimitFloor()); want != current {
			debug.SetMemoryLimit(want)
			current = want
		}
	}
}
