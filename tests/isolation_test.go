package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/repolock/repolock/client"
)

// The noisy neighbour (issue 29): tenant A floods the real binary with the
// heaviest requests it has (sync batches of 10,000 events over many hosts,
// from many connections at once, as fast as it is answered) while tenant B
// reads one row (GET /v1/locks) every 25 ms (the B read every
// 100 ms; four times as many reads make B's p99 a percentile rather than
// its single worst read on a busy machine). TestNoisyNeighbour asserts the
// isolation; BenchmarkNoisyNeighbour (make bench-isolation) prints the
// figures.

// isolationConfig is one run of the noisy neighbour.
type isolationConfig struct {
	Quiet, Flood time.Duration // B alone, then B beside A
	Workers      int           // A's concurrent connections
	Hosts        int           // A's hosts (each worker has its own)
	Events       int           // events per batch
	Repos        int           // repositories per host
	Args         []string      // serve's flags
}

// isolationResult is what a run measured.
type isolationResult struct {
	BQuiet, BFlood     []time.Duration // B's latencies
	BFailures          int             // B's answers other than 200, and transport errors
	BFailureSample     string
	A200, A429, A504   int
	AOther             int
	AOtherSample       string
	AEvents            int64 // events A got applied (200)
	QuietP99, FloodP99 time.Duration
	FloodP50, FloodMax time.Duration
	BQuietN, BFloodN   int
	Bound              time.Duration // max(250ms, 10 × quiet p99)
	Flood              time.Duration
	AMax429            time.Duration // the slowest 429 A got
}

func (r isolationResult) floodSeconds() float64 { return r.Flood.Seconds() }

func p(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.999999) - 1
	return s[max(0, min(i, len(s)-1))]
}

// isolationDuration is the flood's duration: REPOLOCK_ISOLATION_DURATION
// (a Go duration) or def.
func isolationDuration(tb testing.TB, def time.Duration) time.Duration {
	if v := os.Getenv("REPOLOCK_ISOLATION_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			tb.Fatalf("REPOLOCK_ISOLATION_DURATION=%q: want a positive duration", v)
		}
		return d
	}
	return def
}

// eventsBatch encodes one batch of n events of host h (the w-th batch of
// that host), by hand: encoding/json would cost the test process more CPU
// than the server spends decoding. Cursors and revs increase across the
// batches of a host, so every batch applies events.
func eventsBatch(buf *bytes.Buffer, batch, n, repos, hostIdx int) []byte {
	buf.Reset()
	buf.WriteString(`{"events":[`)
	for i := range n {
		if i > 0 {
			buf.WriteByte(',')
		}
		c := batch*n + i + 1
		buf.WriteString(`{"cursor":`)
		buf.WriteString(strconv.Itoa(c))
		buf.WriteString(`,"repo":"did:plc:h`)
		buf.WriteString(strconv.Itoa(hostIdx))
		buf.WriteString(`-r`)
		buf.WriteString(strconv.Itoa(i % repos))
		buf.WriteString(`","rev":"`)
		d := strconv.Itoa(c)
		for range 16 - len(d) {
			buf.WriteByte('0')
		}
		buf.WriteString(d)
		buf.WriteString(`"}`)
	}
	buf.WriteString(`]}`)
	return buf.Bytes()
}

// noisyEnv is the server, A's hosts and B's client of a noisy neighbour.
type noisyEnv struct {
	cfg   isolationConfig
	s     *server
	tokA  string
	b     *client.Client
	hosts []string
}

func newNoisyEnv(tb testing.TB, cfg isolationConfig) *noisyEnv {
	tb.Helper()
	s := startServerWith(tb, serverOptions{Args: cfg.Args})
	ctx := context.Background()
	tokA, tokB := s.createTenant(tb, "noisy-a"), s.createTenant(tb, "quiet-b")
	b := s.client(tb, tokB)
	if _, err := b.AcquireLock(ctx, "https://github.com/quiet/b.git"); err != nil {
		tb.Fatal(err)
	}
	hosts := make([]string, cfg.Hosts)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("pds%02d.noisy.example", i)
		if st, resp := s.do(tb, http.MethodPut, "/v1/sync/hosts/"+hosts[i], tokA, nil); st != http.StatusCreated {
			tb.Fatalf("PUT host: %d %v", st, resp)
		}
	}
	return &noisyEnv{cfg: cfg, s: s, tokA: tokA, b: b, hosts: hosts}
}

// round measures B alone, then B beside A's flood. Round n's batches
// continue the cursors of the rounds before.
func (e *noisyEnv) round(tb testing.TB, n int) isolationResult {
	tb.Helper()
	cfg, s, b, tokA, hosts := e.cfg, e.s, e.b, e.tokA, e.hosts
	ctx := context.Background()

	// B: one one-row read every 25 ms, through the public client (and
	// the contract validator), never retried.
	var res isolationResult
	var mu sync.Mutex
	poll := func(until time.Time, into *[]time.Duration) {
		tick := time.NewTicker(25 * time.Millisecond)
		defer tick.Stop()
		for time.Now().Before(until) {
			start := time.Now()
			page, err := b.ListLocksPage(ctx, client.ListOptions{})
			d := time.Since(start)
			mu.Lock()
			*into = append(*into, d)
			if err != nil || len(page.Items) != 1 {
				res.BFailures++
				if res.BFailureSample == "" {
					res.BFailureSample = fmt.Sprintf("%v (%d items)", err, len(page.Items))
				}
			}
			mu.Unlock()
			<-tick.C
		}
	}
	poll(time.Now().Add(cfg.Quiet), &res.BQuiet)

	// A: in a process of its own (this test binary, running
	// TestNoisyNeighbourFlood), so that its client's CPU does not delay B's
	// in the Go scheduler of this process: B measures the server.
	fc := floodConfig{URL: s.URL, Token: tokA, Hosts: hosts, Workers: cfg.Workers, Events: cfg.Events, Repos: cfg.Repos, Duration: cfg.Flood, FirstBatch: n * 100000}
	spec, err := json.Marshal(fc)
	if err != nil {
		tb.Fatal(err)
	}
	child := exec.Command(os.Args[0], "-test.run=^TestNoisyNeighbourFlood$", "-test.count=1", "-test.v")
	child.Env = append(os.Environ(), "REPOLOCK_NOISY_FLOOD="+string(spec))
	var out bytes.Buffer
	child.Stdout, child.Stderr = &out, &out
	if err := child.Start(); err != nil {
		tb.Fatal(err)
	}
	// B polls while A floods (A's process starts within the quiet margin
	// of its own Duration; B polls for the flood's whole length).
	poll(time.Now().Add(cfg.Flood), &res.BFlood)
	if err := child.Wait(); err != nil {
		tb.Fatalf("A's flood process: %v\n%s", err, out.String())
	}
	var fr floodResult
	_, after, ok := strings.Cut(out.String(), "FLOOD-RESULT ")
	line, _, _ := strings.Cut(after, "\n")
	if !ok || json.Unmarshal([]byte(line), &fr) != nil {
		tb.Fatalf("A's flood process printed no result:\n%s", out.String())
	}
	res.A200, res.A429, res.A504, res.AOther, res.AOtherSample, res.AEvents = fr.A200, fr.A429, fr.A504, fr.AOther, fr.AOtherSample, fr.AEvents
	res.AMax429 = fr.Max429
	res.QuietP99, res.FloodP99 = p(res.BQuiet, 0.99), p(res.BFlood, 0.99)
	res.FloodP50, res.FloodMax = p(res.BFlood, 0.5), p(res.BFlood, 1)
	res.BQuietN, res.BFloodN = len(res.BQuiet), len(res.BFlood)
	res.Bound = max(250*time.Millisecond, 10*res.QuietP99)
	res.Flood = cfg.Flood
	return res
}

// noisyDefaults: A at the scale, with the rate limit off, so that
// only the pool share stands between A and the database ("tenant A at any
// request rate and batch size"); everything else at serve's defaults (a
// pool of 20, a share of 10, a wait of 1 s, a request timeout of 30 s).
func noisyDefaults(flood time.Duration) isolationConfig {
	return isolationConfig{
		Quiet:   3 * time.Second,
		Flood:   flood,
		Workers: 32,
		Hosts:   64,
		Events:  10000,
		Repos:   2000,
		Args:    append([]string{"--rate-limit", "0", "--log-level", "info"}, extraArgs()...),
	}
}

func (r isolationResult) String() string {
	return fmt.Sprintf("B quiet p99 %v (%d reads), B under A p50 %v p99 %v max %v (%d reads, bound %v), B failures %d; "+
		"A: %d × 200 (%d events), %d × 429 (slowest %v), %d × 504, %d other",
		r.QuietP99, r.BQuietN, r.FloodP50, r.FloodP99, r.FloodMax, r.BFloodN, r.Bound, r.BFailures,
		r.A200, r.AEvents, r.A429, r.AMax429, r.A504, r.AOther)
}

// TestNoisyNeighbour is the isolation property of issue 29, through the
// binary: whatever A sends, B's one-row reads all succeed and B's p99 stays
// within max(250 ms, 10 × its quiet p99); A is told to slow down (429) and
// never left to time out (504). The latency bound is the issue's, and
// deliberately generous (a property of isolation, not a speed figure: on a
// shared 2-core machine B without isolation waited 16.9 s); the speed
// figures are BenchmarkNoisyNeighbour's.
func TestNoisyNeighbour(t *testing.T) {
	t.Parallel()
	e := newNoisyEnv(t, noisyDefaults(isolationDuration(t, 5*time.Second)))
	// Failures and 504s are checked in every round, strictly. B's p99 is
	// a wall-clock figure on a machine that also runs the other tests: a
	// round may stall for reasons that are not A's (a 2-core machine at a
	// load of 20 deschedules the server for a few hundred ms at times), so
	// the bound must hold in one of up to three rounds. Without the share
	// B's p99 is seconds in every round (issue 29: 16.9 s).
	const rounds = 3
	for n := range rounds {
		r := e.round(t, n)
		t.Logf("round %d: %s", n+1, r)
		if r.BFailures != 0 {
			t.Errorf("B had %d failed reads (first: %s)", r.BFailures, r.BFailureSample)
		}
		if r.A504 != 0 || r.AOther != 0 {
			t.Errorf("A got %d × 504 and %d other answers (first: %s); want only 200 and 429", r.A504, r.AOther, r.AOtherSample)
		}
		if r.A429 == 0 {
			t.Errorf("A was never refused (429): the flood did not reach its share")
		}
		if r.A200 == 0 {
			t.Errorf("A had no batch applied: its share must serve it")
		}
		if t.Failed() {
			return
		}
		if r.FloodP99 <= r.Bound {
			return
		}
		if n == rounds-1 {
			t.Errorf("B's p99 under A stayed above max(250ms, 10 × quiet p99) in %d rounds; last: %v, bound %v", rounds, r.FloodP99, r.Bound)
		}
	}
}

// BenchmarkNoisyNeighbour prints the noisy-neighbour figures (make
// bench-isolation): with serve's defaults ("share") and with the share off
// ("no-share", --tenant-pool-share 0: the pool as before issue 29).
// REPOLOCK_ISOLATION_DURATION sets the flood (10s by default);
// REPOLOCK_ISOLATION_ARGS adds serve flags to both.
func BenchmarkNoisyNeighbour(b *testing.B) {
	for _, bc := range []struct {
		name string
		args []string
	}{{"share", nil}, {"no-share", []string{"--tenant-pool-share", "0"}}} {
		b.Run(bc.name, func(b *testing.B) {
			for range b.N {
				cfg := noisyDefaults(isolationDuration(b, 10*time.Second))
				cfg.Args = append(cfg.Args, bc.args...)
				r := newNoisyEnv(b, cfg).round(b, 0)
				b.Log(r)
				b.ReportMetric(float64(r.QuietP99.Microseconds())/1000, "B_quiet_p99_ms")
				b.ReportMetric(float64(r.FloodP99.Microseconds())/1000, "B_flood_p99_ms")
				b.ReportMetric(float64(r.FloodMax.Microseconds())/1000, "B_flood_max_ms")
				b.ReportMetric(float64(r.BFailures), "B_failures")
				b.ReportMetric(float64(r.A200), "A_200")
				b.ReportMetric(float64(r.A429), "A_429")
				b.ReportMetric(float64(r.A504), "A_504")
				b.ReportMetric(float64(r.AEvents)/r.floodSeconds(), "A_events/s")
			}
		})
	}
}

// extraArgs are REPOLOCK_ISOLATION_ARGS's serve flags.
func extraArgs() []string {
	if v := os.Getenv("REPOLOCK_ISOLATION_ARGS"); v != "" {
		return strings.Fields(v)
	}
	return nil
}

// floodConfig is A's flood, handed to its process as JSON.
type floodConfig struct {
	URL, Token string
	Hosts      []string
	Workers    int
	Events     int
	Repos      int
	Duration   time.Duration
	FirstBatch int // the number of every host's first batch
}

// floodResult is what A's process counted.
type floodResult struct {
	A200, A429, A504, AOther int
	AOtherSample             string
	AEvents                  int64
	Max429                   time.Duration // the slowest 429 A got
}

// TestNoisyNeighbourFlood is A's process of the noisy neighbour: it runs
// only when runNoisyNeighbour starts it (REPOLOCK_NOISY_FLOOD), floods and
// prints its counts.
func TestNoisyNeighbourFlood(t *testing.T) {
	spec := os.Getenv("REPOLOCK_NOISY_FLOOD")
	if spec == "" {
		t.Skip("A's side of TestNoisyNeighbour; runs only in the process it starts")
	}
	var cfg floodConfig
	if err := json.Unmarshal([]byte(spec), &cfg); err != nil {
		t.Fatal(err)
	}
	r := flood(cfg)
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("FLOOD-RESULT %s\n", b)
}

// flood sends A's batches from Workers connections, each to hosts of its
// own, as fast as it is answered, without backing off, for Duration.
func flood(cfg floodConfig) floodResult {
	hc := &http.Client{
		Transport: &http.Transport{MaxIdleConnsPerHost: cfg.Workers},
		Timeout:   2 * time.Minute,
	}
	var (
		mu                       sync.Mutex
		res                      floodResult
		a200, a429, a504, aOther atomic.Int64
		aEvents                  atomic.Int64
		wg                       sync.WaitGroup
		nHosts                   = len(cfg.Hosts)
		stop                     = time.Now().Add(cfg.Duration)
	)
	sample := func(s string) {
		mu.Lock()
		if res.AOtherSample == "" {
			res.AOtherSample = s
		}
		mu.Unlock()
	}
	for w := range cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf bytes.Buffer
			next := map[int]int{}      // batch number per host
			bodies := map[int][]byte{} // its encoded batch, sent until applied
			per := max(nHosts/cfg.Workers, 1)
			for k := 0; time.Now().Before(stop); k++ {
				// Each worker has hosts of its own: cursors stay in order.
				hi := (w*per + k%per) % nHosts
				body, ok := bodies[hi]
				if !ok {
					body = slices.Clone(eventsBatch(&buf, cfg.FirstBatch+next[hi], cfg.Events, cfg.Repos, hi))
					bodies[hi] = body
				}
				req, err := http.NewRequest(http.MethodPost, cfg.URL+"/v1/sync/hosts/"+cfg.Hosts[hi]+"/events", bytes.NewReader(body))
				if err != nil {
					panic(err)
				}
				req.Header.Set("Authorization", "Bearer "+cfg.Token)
				req.Header.Set("Content-Type", "application/json")
				start := time.Now()
				resp, err := hc.Do(req)
				if err != nil {
					aOther.Add(1)
					sample(err.Error())
					continue
				}
				var msg bytes.Buffer
				_, _ = msg.ReadFrom(resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusOK:
					a200.Add(1)
					aEvents.Add(int64(cfg.Events))
					next[hi]++
					delete(bodies, hi)
				case http.StatusTooManyRequests:
					a429.Add(1)
					mu.Lock()
					res.Max429 = max(res.Max429, time.Since(start))
					mu.Unlock()
				case http.StatusGatewayTimeout:
					a504.Add(1)
				default:
					aOther.Add(1)
					sample(fmt.Sprintf("%d %s", resp.StatusCode, msg.String()))
				}
			}
		}()
	}
	wg.Wait()
	res.A200, res.A429, res.A504, res.AOther = int(a200.Load()), int(a429.Load()), int(a504.Load()), int(aOther.Load())
	res.AEvents = aEvents.Load()
	return res
}
