package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
)

// cpuCategory is one line of the CPU split: a name and the functions that
// are its own.
type cpuCategory struct {
	name string
	re   *regexp.Regexp
}

func cat(name, re string) cpuCategory { return cpuCategory{name, regexp.MustCompile(re)} }

// The categories of benchsql cpusplit. A sample whose stack holds a frame
// of a background loop (wholeStack) is that loop's. Otherwise its stack is
// walked from the leaf to the root and the first frame that matches a
// category of leafFirst decides: an allocation or a system call is charged
// to the code that made it (lib/pq's write to lib/pq, slog's to logging).
// A stack with no such frame is net/http's own work (reading the request,
// writing and flushing the response) when it has a frame of netHTTP, else
// the Go runtime's (the collector's workers, the scheduler).
var (
	wholeStack = []cpuCategory{
		cat("watch (background reads and NOTIFY)", `internal/watch\.\(\*Service\)\.(loop|notifier|Start)`),
		cat("other background loops (GC, fold, fleet, aliases, the LISTEN session)", `internal/(gc|reports|fleet|rekey|pglisten)\.|cmd/api\.foldOwnership`),
	}
	leafFirst = []cpuCategory{
		cat("logging (the access log: slog, the buffer, its write)", `^log/slog\.|cmd/api\.\(\*logBuffer\)|cmd/api\.logFlushHandler|httpapi\.\(\*Server\)\.accessLog`),
		cat("metrics (prometheus)", `prometheus|observeRequest|observeRateLimit|locks\.\(\*Metrics\)`),
		cat("JSON (decode and encode)", `^encoding/json\.|httpapi\.DecodeJSON|httpapi\.decodeStrict|echo/v4\.\(\*context\)\.JSON|httpapi\.writeJSON`),
		cat("auth (token cache, sha256, bearer)", `internal/tenants\.|internal/authguard\.|httpapi\.bearerToken|guardedBearer|isAdminToken|^crypto/sha256|requireTenant`),
		cat("database driver (lib/pq, database/sql, sqlx, pool, batcher)", `lib/pq|^database/sql|jmoiron/sqlx|repolock/internal/database\.`),
		cat("rate limit and fair share", `internal/fairshare\.|internal/fleet\.|tenantLimiter|limitTenant|admitTenant|withShare|golang.org/x/time/rate`),
		cat("handler and domain (normalize, claim, apps)", `internal/(locks|apps|normalize|leases|repostate|syncstate|pagetoken)\.|httpapi\.\(\*Server\)\.(acquireLock|createApplication)|httpapi\.Tenant$`),
		cat("routing and middleware (echo, request ID, checks, timeout)", `labstack/echo|httpapi\.\(\*Server\)\.(requestID|strictTransport|recoverPanic|announceWrites|limitBody|timeout|checkParams|requireReady|ServeHTTP)|httpapi\.newRequestID|repolock\.ValidateText|httpapi\.scanValue|httpapi\.pathParam`),
	}
	netHTTP    = cat("net/http (read the request, write and flush the response)", `^net/http\.|^net/textproto\.|^net\.|^bufio\.`)
	goRuntime  = "Go runtime (collector, scheduler, other)"
	traceSep   = regexp.MustCompile(`(?m)^-+\+-+$`)
	inlineMark = regexp.MustCompile(` \(inline\)$`)
)

// runCPUSplit: benchsql cpusplit [-us N] BINARY PROFILE prints the CPU
// samples of a CPU profile of the binary by category (see wholeStack), as
// a Markdown table: share, and µs per operation when -us gives the
// binary's CPU per operation (bench-http's "binary µs/op").
func runCPUSplit(args []string) error {
	fs := flag.NewFlagSet("cpusplit", flag.ContinueOnError)
	usPerOp := fs.Float64("us", 0, "the binary's CPU per operation in µs (0: shares only)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return fmt.Errorf("usage: benchsql cpusplit [-us N] BINARY PROFILE")
	}
	out, err := exec.Command("go", "tool", "pprof", "-traces", fs.Arg(0), fs.Arg(1)).Output()
	if err != nil {
		return fmt.Errorf("go tool pprof -traces: %w", err)
	}
	split, total, err := cpuSplit(string(out))
	if err != nil {
		return err
	}
	writeCPUSplit(os.Stdout, split, total, *usPerOp)
	return nil
}

// cpuSplit sums the samples of pprof -traces output by category, in
// seconds.
func cpuSplit(traces string) (map[string]float64, float64, error) {
	split := map[string]float64{}
	total := 0.0
	blocks := traceSep.Split(traces, -1)
	for _, block := range blocks[1:] {
		var frames []string
		var v float64
		for i, line := range strings.Split(strings.TrimSpace(block), "\n") {
			line = strings.TrimSpace(line)
			if line == "" {
				continue
			}
			if i == 0 {
				value, frame, ok := strings.Cut(line, " ")
				if !ok {
					return nil, 0, fmt.Errorf("unexpected trace line %q", line)
				}
				d, err := parseSampleValue(value)
				if err != nil {
					return nil, 0, err
				}
				v, line = d, strings.TrimSpace(frame)
			}
			frames = append(frames, inlineMark.ReplaceAllString(line, ""))
		}
		if len(frames) == 0 {
			continue
		}
		split[classify(frames)] += v
		total += v
	}
	return split, total, nil
}

func classify(frames []string) string {
	for _, c := range wholeStack {
		for _, f := range frames {
			if c.re.MatchString(f) {
				return c.name
			}
		}
	}
	for _, f := range frames {
		for _, c := range leafFirst {
			if c.re.MatchString(f) {
				return c.name
			}
		}
	}
	for _, f := range frames {
		if netHTTP.re.MatchString(f) {
			return netHTTP.name
		}
	}
	return goRuntime
}

// parseSampleValue reads pprof's "10ms", "1.20s", "500us".
func parseSampleValue(s string) (float64, error) {
	for _, u := range []struct {
		suffix string
		scale  float64
	}{{"ms", 1e-3}, {"us", 1e-6}, {"µs", 1e-6}, {"ns", 1e-9}, {"s", 1}} {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			f, err := strconv.ParseFloat(n, 64)
			if err != nil {
				return 0, fmt.Errorf("sample value %q: %w", s, err)
			}
			return f * u.scale, nil
		}
	}
	return 0, fmt.Errorf("sample value %q: no unit", s)
}

func writeCPUSplit(w io.Writer, split map[string]float64, total, usPerOp float64) {
	fmt.Fprintf(w, "%.2fs of samples\n\n| category | µs/op | share |\n| --- | ---: | ---: |\n", total)
	names := []string{}
	for _, c := range leafFirst {
		names = append(names, c.name)
	}
	for _, c := range wholeStack {
		names = append(names, c.name)
	}
	names = append(names, netHTTP.name, goRuntime)
	for _, n := range names {
		share := 0.0
		if total > 0 {
			share = split[n] / total
		}
		us := "-"
		if usPerOp > 0 {
			us = fmt.Sprintf("%.1f", usPerOp*share)
		}
		fmt.Fprintf(w, "| %s | %s | %.1f%% |\n", n, us, 100*share)
	}
}
