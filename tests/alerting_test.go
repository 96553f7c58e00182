package tests

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// metricsUsedByAlerting is deploy/prometheus/metrics.txt: the metric names
// the alert rules and the Grafana dashboard use, extracted with
// Prometheus' PromQL parser by deploy/prometheus/validate (make
// test-deploy fails when the list is not the files').
func metricsUsedByAlerting(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../deploy/prometheus/metrics.txt")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			names = append(names, line)
		}
	}
	if len(names) < 10 {
		t.Fatalf("metrics.txt lists %d names", len(names))
	}
	return names
}

// scrape returns /metrics as series (name plus labels, as written) to
// value, and the set of sample names.
func scrape(t *testing.T, s *server) (map[string]float64, map[string]bool) {
	t.Helper()
	status, _, body := s.doRaw(t, http.MethodGet, "/metrics", "", nil, nil)
	if status != http.StatusOK {
		t.Fatalf("/metrics: %d", status)
	}
	series := map[string]float64{}
	names := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("/metrics line %q: %v", line, err)
		}
		series[line[:i]] = v
		names[line[:strings.IndexAny(line, "{ ")]] = true
	}
	return series, names
}

// tenantID returns the ID of the tenant name (the label of the per-tenant
// metrics), asked with the admin token so that the tenant's own rate limit
// is not spent.
func tenantID(t *testing.T, s *server, name string) string {
	t.Helper()
	status, resp := s.do(t, http.MethodGet, "/v1/admin/users?page_size=100", s.AdminToken, nil)
	if status != http.StatusOK {
		t.Fatalf("list tenants: %d %v", status, resp)
	}
	items, _ := resp["items"].([]any)
	for _, it := range items {
		if m, _ := it.(map[string]any); m["name"] == name {
			return m["id"].(string)
		}
	}
	t.Fatalf("tenant %s not listed: %v", name, resp)
	return ""
}

// decisionSeries are the decision counters of issue 30, each present at 0
// from start-up.
var decisionSeries = []string{
	`repolock_claims_total{result="acquired"}`, `repolock_claims_total{result="already_owned"}`,
	`repolock_claims_total{result="denied"}`, `repolock_claims_total{result="invalid"}`,
	`repolock_claims_denied_total{reason="claimed"}`, `repolock_claims_denied_total{reason="reserved"}`,
	`repolock_locks_released_total{cause="unreferenced"}`, `repolock_locks_released_total{cause="tenant_deleted"}`,
	`repolock_locks_collected_total`, `repolock_rate_limited_total`,
}

// TestAlertingMetricsExist: every metric an alert rule or a dashboard panel
// uses is on /metrics of the running binary after a little traffic (claims,
// a denial, a rate-limit refusal, a GC run by `repolock gc` as the Kubernetes
// CronJob runs it). A rule on a name the binary does not expose would never
// fire.
func TestAlertingMetricsExist(t *testing.T) {
	s := startServerWith(t, serverOptions{Args: []string{"--rate-limit", "1", "--rate-burst", "3", "--metrics-refresh", "100ms", "--gc-interval", "0"}})
	// No collection recorded yet: the fleet's GC gauge is absent, not 0
	// (0 would read as "last success in 1970").
	time.Sleep(300 * time.Millisecond) // a few METRICS_REFRESH
	start, names := scrape(t, s)
	if names["repolock_gc_fleet_last_success_timestamp_seconds"] {
		t.Fatal("repolock_gc_fleet_last_success_timestamp_seconds is exported before any collection")
	}
	// The decision counters are there at 0 before the first decision, so
	// that increase() and ratios see their first event.
	for _, series := range decisionSeries {
		if v, ok := start[series]; !ok || v != 0 {
			t.Errorf("at start-up %s = %v (present %v), want 0", series, v, ok)
		}
	}
	alice, bob := s.createTenant(t, "alice"), s.createTenant(t, "bob")
	if status, resp := s.do(t, http.MethodPost, "/v1/locks/acquire", alice, map[string]any{"repo_url": "https://github.com/acme/alerting"}); status != http.StatusOK && status != http.StatusCreated {
		t.Fatalf("alice acquires: %d %v", status, resp)
	}
	if status, resp := s.do(t, http.MethodPost, "/v1/locks/acquire", bob, map[string]any{"repo_url": "https://github.com/acme/alerting"}); status != http.StatusConflict {
		t.Fatalf("bob acquires alice's repository: %d %v, want 409", status, resp)
	}
	refused := false
	for range 10 {
		if status, _ := s.do(t, http.MethodGet, "/v1/me", alice, nil); status == http.StatusTooManyRequests {
			refused = true
		}
	}
	if !refused {
		t.Fatal("10 requests at once with a burst of 3: none refused")
	}
	if out, errOut, code := runCLI(t, s.DatabaseURL, "gc"); code != 0 {
		t.Fatalf("repolock gc: exit %d\n%s\n%s", code, out, errOut)
	}

	want := metricsUsedByAlerting(t)
	var missing []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, names := scrape(t, s)
		missing = slices.DeleteFunc(slices.Clone(want), func(n string) bool { return names[n] })
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(missing) > 0 {
		t.Fatalf("used by the alert rules or the dashboard, not on /metrics: %v", missing)
	}

	series, _ := scrape(t, s)
	for k, want := range map[string]float64{
		`repolock_claims_total{result="acquired"}`: 1, `repolock_claims_total{result="denied"}`: 1,
		`repolock_claims_denied_total{reason="claimed"}`: 1, `repolock_claims_total{result="already_owned"}`: 0,
	} {
		if v := series[k]; v != want {
			t.Errorf("%s = %v, want %v", k, v, want)
		}
	}
	if v := series[`repolock_rate_limited_total`]; v < 1 {
		t.Errorf("repolock_rate_limited_total = %v after a refusal", v)
	}
	if v := series[`repolock_ready`]; v != 1 {
		t.Errorf("repolock_ready %v, want 1", v)
	}
	if v := series[`repolock_rekey_stale_rules_versions`]; v != 0 {
		t.Errorf("repolock_rekey_stale_rules_versions %v on a fresh database, want 0", v)
	}
	// The GC run of `repolock gc`, another process, as the database recorded it.
	if v := series[`repolock_gc_fleet_last_success_timestamp_seconds{kind="gc"}`]; time.Since(time.Unix(int64(v), 0)) > 2*time.Minute || v > float64(time.Now().Unix()+1) {
		t.Errorf("repolock_gc_fleet_last_success_timestamp_seconds %v, want about now (%d)", v, time.Now().Unix())
	}
}

// TestRateLimitMetricsPerTenant: the rate limit counts its refusals by
// tenant ID, and the requests it checked from the tenant's first refusal
// on; a tenant never refused has no series.
func TestRateLimitMetricsPerTenant(t *testing.T) {
	s := startServerWith(t, serverOptions{Args: []string{"--rate-limit", "0.01", "--rate-burst", "2"}})
	alice, bob := s.createTenant(t, "alice"), s.createTenant(t, "bob")
	aliceID, bobID := tenantID(t, s, "alice"), tenantID(t, s, "bob")
	const n = 12
	first, rejected := -1, 0
	for i := range n {
		status, _ := s.do(t, http.MethodGet, "/v1/me", alice, nil)
		if status == http.StatusTooManyRequests {
			rejected++
			if first < 0 {
				first = i
			}
		}
	}
	if status, _ := s.do(t, http.MethodGet, "/v1/me", bob, nil); status != http.StatusOK {
		t.Fatalf("bob: %d", status)
	}
	if first < 0 {
		t.Fatal("alice was never refused")
	}
	series, _ := scrape(t, s)
	if got := series[fmt.Sprintf(`repolock_rate_limit_rejected_requests_total{tenant=%q}`, aliceID)]; got != float64(rejected) {
		t.Errorf("alice rejected %v, want %d (the 429s she got)", got, rejected)
	}
	if got := series[`repolock_rate_limited_total`]; got != float64(rejected) {
		t.Errorf("repolock_rate_limited_total %v, want %d (the 429s alice got)", got, rejected)
	}
	if got := series[fmt.Sprintf(`repolock_rate_limit_checked_requests_total{tenant=%q}`, aliceID)]; got != float64(n-first) {
		t.Errorf("alice checked %v, want %d (from her first refusal, request %d, on)", got, n-first, first)
	}
	for k := range series {
		if strings.Contains(k, bobID) {
			t.Errorf("bob, never refused, has a series: %s", k)
		}
	}
}
