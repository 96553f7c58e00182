package main

import (
	"log/slog"
	"math"
	"runtime/debug"
	"runtime/metrics"
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
// is memory: set GOMEMLIMIT (the Kubernetes base sets it below the
// container's limit) so that the collector speeds up again near the limit.
const serveGCPercent = 400

// setServeGCPace applies serveGCPercent unless GOGC is set (the runtime has
// then read it) and logs the pace in effect.
func setServeGCPace(getenv func(string) string, logger *slog.Logger) {
	source := "GOGC"
	if getenv("GOGC") == "" {
		debug.SetGCPercent(serveGCPercent)
		source = "serve's default"
	}
	pace := []metrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/gomemlimit:bytes"}}
	metrics.Read(pace)
	attrs := []any{"gogc", pace[0].Value.Uint64(), "source", source}
	if limit := pace[1].Value.Uint64(); limit != math.MaxInt64 {
		attrs = append(attrs, "gomemlimit_bytes", limit)
	}
	logger.Info("go collector pace", attrs...)
}
