package validate

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/rulefmt"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the generated files (the PrometheusRule, metrics.txt) instead of comparing them")

const (
	rulesPath          = "../repolock-rules.yml"
	ruleTestsPath      = "../repolock-rules.test.yml"
	metricsPath        = "../metrics.txt"
	prometheusRulePath = "../../kubernetes/components/servicemonitor/prometheusrule.yaml"
	dashboardPath      = "../../grafana/repolock.json"
	operationsPath     = "../../../docs/operations.md"
	runbookPrefix      = "https://github.com/repolock/repolock/blob/main/docs/operations.md#"
)

func loadRules(t *testing.T) *rulefmt.RuleGroups {
	t.Helper()
	g, err := LoadRules(rulesPath)
	if err != nil {
		t.Fatalf("the rules do not parse:\n%v", err)
	}
	return g
}

// TestRulesParse: Prometheus' rule parser reads the file (unknown fields,
// bad PromQL, bad templates and durations are errors), and every rule is an
// alert with a severity, a summary, a description and its runbook.
func TestRulesParse(t *testing.T) {
	groups := loadRules(t)
	if len(groups.Groups) == 0 {
		t.Fatal("no rule groups")
	}
	doc, err := os.ReadFile(operationsPath)
	if err != nil {
		t.Fatal(err)
	}
	alerts := map[string]bool{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("recording rule %s: the file holds alerts only", r.Record)
				continue
			}
			alerts[r.Alert] = true
			if _, err := Parser.ParseExpr(r.Expr); err != nil {
				t.Errorf("%s: PromQL: %v", r.Alert, err)
			}
			if s := r.Labels["severity"]; !slices.Contains([]string{"critical", "warning", "info"}, s) {
				t.Errorf("%s: severity %q, want critical, warning or info", r.Alert, s)
			}
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if r.Annotations[a] == "" {
					t.Errorf("%s: no %s annotation", r.Alert, a)
				}
			}
			if want := runbookPrefix + strings.ToLower(r.Alert); r.Annotations["runbook_url"] != want {
				t.Errorf("%s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
			}
		}
	}
	// Each alert's runbook: a heading whose anchor is the alert's name in
	// lower case, with the three parts.
	for name := range alerts {
		section := runbookSection(string(doc), name)
		if section == "" {
			t.Errorf("docs/operations.md has no runbook heading \"#### %s\"", name)
			continue
		}
		for _, part := range []string{"What it means", "What to check", "What to do"} {
			if !strings.Contains(section, part) {
				t.Errorf("docs/operations.md, runbook %s: no %q", name, part)
			}
		}
	}
	for _, want := range []string{"RepolockGCNotSucceeding", "RepolockDatabaseUnavailable", "RepolockHighErrorRate", "RepolockReplicaNotReady",
		"RepolockRekeyPending", "RepolockPoolWaitHigh", "RepolockTenantRateLimited"} {
		if !alerts[want] {
			t.Errorf("no alert %s", want)
		}
	}
}

// runbookSection returns the text under the heading "#### name" up to the
// next heading of that level or above.
func runbookSection(doc, name string) string {
	_, rest, ok := strings.Cut(doc, "\n#### "+name+"\n")
	if !ok {
		return ""
	}
	if i := regexp.MustCompile(`\n#{1,4} `).FindStringIndex(rest); i != nil {
		rest = rest[:i[0]]
	}
	return rest
}

// TestRuleParserRefuses: the checks fail on a broken file, so they can fail.
func TestRuleParserRefuses(t *testing.T) {
	for name, text := range map[string]string{
		"bad PromQL":    "groups:\n  - name: x\n    rules:\n      - alert: A\n        expr: sum(rate(x[5m])\n",
		"unknown field": "groups:\n  - name: x\n    rules:\n      - alert: A\n        expr: up == 0\n        fore: 5m\n",
		"bad template":  "groups:\n  - name: x\n    rules:\n      - alert: A\n        expr: up == 0\n        annotations:\n          summary: '{{ $value | nosuchfunc }}'\n",
	} {
		path := filepath.Join(t.TempDir(), "rules.yml")
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadRules(path); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}

// TestPrometheusRuleIsGenerated: the PrometheusRule of the kustomize
// component is the rules file's groups (generated; -update rewrites it),
// and decodes to the same groups.
func TestPrometheusRuleIsGenerated(t *testing.T) {
	src, err := os.ReadFile(rulesPath)
	if err != nil {
		t.Fatal(err)
	}
	want, err := PrometheusRule(string(src))
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(prometheusRulePath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(prometheusRulePath)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("%s differs from the rules file: run `make prometheus-rules` and commit it", prometheusRulePath)
	}
	// The same groups, decoded.
	var plain struct {
		Groups any `json:"groups"`
	}
	var pr struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Spec       struct {
			Groups any `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.UnmarshalStrict(src, &plain); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(got, &pr); err != nil {
		t.Fatal(err)
	}
	pj, _ := yaml.Marshal(plain.Groups)
	kj, _ := yaml.Marshal(pr.Spec.Groups)
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" || string(pj) != string(kj) || len(pj) < 100 {
		t.Fatalf("the PrometheusRule (%s %s) does not hold the rules file's groups", pr.APIVersion, pr.Kind)
	}
}

// TestDashboard: the dashboard's queries parse as PromQL and it covers
// what an operator looks at.
func TestDashboard(t *testing.T) {
	d, err := LoadDashboard(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard uid %q title %q", d.UID, d.Title)
	}
	var titles []string
	for _, p := range d.AllPanels() {
		titles = append(titles, strings.ToLower(p.Title))
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if _, err := Parser.ParseExpr(GrafanaExpr(tg.Expr)); err != nil {
				t.Errorf("panel %q %s: %v", p.Title, tg.RefID, err)
			}
		}
	}
	all := strings.Join(titles, "\n")
	for _, topic := range []string{"claims", "denials", "latency", "pool", "gc", "rekey", "rate limit"} {
		if !strings.Contains(all, topic) {
			t.Errorf("no panel about %s (titles: %v)", topic, titles)
		}
	}
}

// TestMetricsList: metrics.txt lists exactly the names the rules and the
// dashboard use (-update rewrites it); tests/alerting_test.go checks them
// against the binary.
func TestMetricsList(t *testing.T) {
	groups := loadRules(t)
	d, err := LoadDashboard(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	names, err := UsedMetrics(groups, d)
	if err != nil {
		t.Fatal(err)
	}
	want := MetricsFile(names)
	if *update {
		if err := os.WriteFile(metricsPath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(metricsPath)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("%s is not the list of metrics the rules and dashboard use: run `make prometheus-rules`\nwant:\n%s", metricsPath, want)
	}
}

// TestMetricNames: the extraction sees through functions, aggregations and
// binary operators.
func TestMetricNames(t *testing.T) {
	got, err := MetricNames(`sum(rate(a_total{x="1"}[5m])) / on() group_left max(b) or absent(c{job="j"}) and {__name__="d"}`)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a_total", "b", "c", "d"}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if _, err := MetricNames(`{job="x"}`); err == nil {
		t.Fatal("a selector without a metric name passed")
	}
}

// TestRuleUnitTests runs repolock-rules.test.yml: series in, alerts out.
func TestRuleUnitTests(t *testing.T) {
	rt, err := LoadRuleTests(ruleTestsPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(rt.RuleFiles) != 1 || rt.RuleFiles[0] != filepath.Base(rulesPath) {
		t.Fatalf("rule_files %v, want [%s]", rt.RuleFiles, filepath.Base(rulesPath))
	}
	tested := map[string]bool{}
	for _, tg := range rt.Tests {
		for _, at := range tg.AlertRuleTests {
			if len(at.ExpAlerts) > 0 {
				tested[at.Alertname] = true
			}
		}
		t.Run(tg.Name, func(t *testing.T) {
			for _, err := range rt.Run(tg, rulesPath) {
				t.Error(err)
			}
		})
	}
	for _, name := range []string{"RepolockGCNotSucceeding", "RepolockDatabaseUnavailable"} {
		if !tested[name] {
			t.Errorf("no test expects %s to fire", name)
		}
	}
}

// TestRuleUnitTestsCanFail: a test expecting the wrong alert fails.
func TestRuleUnitTestsCanFail(t *testing.T) {
	rt, err := LoadRuleTests(ruleTestsPath)
	if err != nil {
		t.Fatal(err)
	}
	tg := rt.Tests[0] // gc stale: fires at 30m
	last := len(tg.AlertRuleTests) - 1
	at := tg.AlertRuleTests[last]
	at.ExpAlerts = nil
	tg.AlertRuleTests = []AlertTest{at}
	if errs := rt.Run(tg, rulesPath); len(errs) == 0 {
		t.Fatal("expecting no alert where one fires passed")
	}
}
