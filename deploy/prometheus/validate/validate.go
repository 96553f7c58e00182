// Package validate checks the Prometheus alert rules and the Grafana
// dashboard of deploy/ with Prometheus' own parsers: the rules file parses
// with the rule parser (model/rulefmt) and each expression with the PromQL
// parser, the PrometheusRule of the kustomize monitoring component is
// generated from the rules file (the one source), the dashboard's queries
// parse, and the list of metric names they use (deploy/prometheus/metrics.txt,
// which tests/alerting_test.go checks against the running binary's
// /metrics) is current. The rules' unit tests (repolock-rules.test.yml)
// run here too. It is a module of its own so that the prometheus dependency
// stays out of the binary's go.mod.
package validate

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

// Parser is the PromQL parser the rules are loaded with: Prometheus'
// defaults, no experimental syntax.
var Parser = parser.NewParser(parser.Options{})

// LoadRules parses a rules file with Prometheus' rule parser, which also
// parses every expression and template; unknown fields are errors.
func LoadRules(path string) (*rulefmt.RuleGroups, error) {
	groups, errs := rulefmt.ParseFile(path, false, model.UTF8Validation, Parser, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if len(errs) > 0 {
		msgs := make([]string, len(errs))
		for i, err := range errs {
			msgs[i] = err.Error()
		}
		return nil, fmt.Errorf("%s", strings.Join(msgs, "\n"))
	}
	return groups, nil
}

// MetricNames returns the metric names an expression selects, sorted and
// without duplicates.
func MetricNames(expr string) ([]string, error) {
	e, err := Parser.ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	var missing error
	parser.Inspect(e, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		if name == "" {
			for _, m := range vs.LabelMatchers {
				if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
					name = m.Value
				}
			}
		}
		if name == "" {
			missing = fmt.Errorf("%s selects no single metric name", vs.String())
			return nil
		}
		names = append(names, name)
		return nil
	})
	if missing != nil {
		return nil, missing
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// Dashboard is the part of a Grafana dashboard the checks read.
type Dashboard struct {
	Title  string  `json:"title"`
	UID    string  `json:"uid"`
	Panels []Panel `json:"panels"`
}

// Panel is a Grafana panel; rows nest panels.
type Panel struct {
	Title   string   `json:"title"`
	Type    string   `json:"type"`
	Targets []Target `json:"targets"`
	Panels  []Panel  `json:"panels"`
}

// Target is a panel's query.
type Target struct {
	Expr  string `json:"expr"`
	RefID string `json:"refId"`
}

// LoadDashboard reads a Grafana dashboard JSON file.
func LoadDashboard(path string) (*Dashboard, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var d Dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &d, nil
}

// AllPanels returns the dashboard's panels, those nested in rows included,
// rows themselves excluded.
func (d *Dashboard) AllPanels() []Panel {
	var out []Panel
	var walk func([]Panel)
	walk = func(ps []Panel) {
		for _, p := range ps {
			if p.Type != "row" {
				out = append(out, p)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// grafanaVariable matches the dashboard variables a query may use:
// $__rate_interval and friends, and the dashboard's own ($job, ${job}).
var grafanaVariable = regexp.MustCompile(`\$\{?(__[a-z_]+|[a-z_]+)\}?`)

// GrafanaExpr replaces Grafana's variables in expr with values PromQL
// parses: intervals by 5m, every other variable by "repolock".
func GrafanaExpr(expr string) string {
	return grafanaVariable.ReplaceAllStringFunc(expr, func(v string) string {
		name := strings.Trim(v, "${}")
		if strings.HasPrefix(name, "__") {
			return "5m"
		}
		return "repolock"
	})
}

// External are metric names the rules use that the repolock binary does
// not expose: Prometheus' own per-target series.
var External = []string{"up"}

// UsedMetrics returns the metric names used by the rules and the
// dashboard, without External ones, sorted.
func UsedMetrics(groups *rulefmt.RuleGroups, dash *Dashboard) ([]string, error) {
	var names []string
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			ns, err := MetricNames(r.Expr)
			if err != nil {
				return nil, fmt.Errorf("rule %s: %w", r.Alert+r.Record, err)
			}
			names = append(names, ns...)
		}
	}
	for _, p := range dash.AllPanels() {
		for _, t := range p.Targets {
			ns, err := MetricNames(GrafanaExpr(t.Expr))
			if err != nil {
				return nil, fmt.Errorf("panel %q %s: %w", p.Title, t.RefID, err)
			}
			names = append(names, ns...)
		}
	}
	names = slices.DeleteFunc(names, func(n string) bool { return slices.Contains(External, n) })
	slices.Sort(names)
	return slices.Compact(names), nil
}

// MetricsFile is the text of deploy/prometheus/metrics.txt for names.
func MetricsFile(names []string) string {
	var b strings.Builder
	b.WriteString("# Metric names used by deploy/prometheus/repolock-rules.yml and\n")
	b.WriteString("# deploy/grafana/repolock.json, generated by `make prometheus-rules`\n")
	b.WriteString("# (deploy/prometheus/validate). tests/alerting_test.go checks that the\n")
	b.WriteString("# running binary exposes every one on /metrics. Not listed: " + strings.Join(External, ", ") + " (Prometheus' own).\n")
	for _, n := range names {
		b.WriteString(n + "\n")
	}
	return b.String()
}

// PrometheusRule returns the PrometheusRule of the kustomize monitoring
// component for the rules file's text: its groups, comments included,
// under spec.
func PrometheusRule(rulesFile string) (string, error) {
	_, groups, ok := strings.Cut(rulesFile, "\ngroups:\n")
	if !ok {
		return "", fmt.Errorf("the rules file has no top-level groups: line")
	}
	var b strings.Builder
	b.WriteString(`# GENERATED from deploy/prometheus/repolock-rules.yml by ` + "`make prometheus-rules`" + `:
# do not edit here (make test-deploy fails when the two differ).
# repolock's alert rules for the Prometheus Operator; the runbooks are in
# docs/operations.md (Alerting).
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: repolock
  labels:
    app.kubernetes.io/name: repolock
    app.kubernetes.io/component: api
spec:
  groups:
`)
	for _, line := range strings.SplitAfter(groups, "\n") {
		if strings.TrimSpace(line) == "" {
			b.WriteString(line)
			continue
		}
		b.WriteString("  " + line)
	}
	return b.String(), nil
}
