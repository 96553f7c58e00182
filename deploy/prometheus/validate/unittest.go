package validate

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
	"go.yaml.in/yaml/v2"
)

// RuleTests is a rules unit test file in promtool's format (`promtool test
// rules`): series in, the alerts firing at each eval_time out. Run
// implements the part of it these rules use: input_series, alert_rule_test
// with exp_labels and exp_annotations (compared exactly, as promtool
// does), one evaluation every evaluation_interval from Unix time 0.
type RuleTests struct {
	RuleFiles          []string       `yaml:"rule_files"`
	EvaluationInterval model.Duration `yaml:"evaluation_interval"`
	Tests              []TestGroup    `yaml:"tests"`
}

// TestGroup is one set of input series and the alerts expected from them.
type TestGroup struct {
	Name        string         `yaml:"name"`
	Interval    model.Duration `yaml:"interval"`
	InputSeries []struct {
		Series string `yaml:"series"`
		Values string `yaml:"values"`
	} `yaml:"input_series"`
	AlertRuleTests []AlertTest `yaml:"alert_rule_test"`
}

// AlertTest is the alerts named Alertname expected firing at EvalTime.
type AlertTest struct {
	EvalTime  model.Duration `yaml:"eval_time"`
	Alertname string         `yaml:"alertname"`
	ExpAlerts []struct {
		ExpLabels      map[string]string `yaml:"exp_labels"`
		ExpAnnotations map[string]string `yaml:"exp_annotations"`
	} `yaml:"exp_alerts"`
}

// LoadRuleTests reads a test file strictly.
func LoadRuleTests(path string) (*RuleTests, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rt RuleTests
	if err := yaml.UnmarshalStrict(b, &rt); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if rt.EvaluationInterval == 0 {
		rt.EvaluationInterval = model.Duration(time.Minute)
	}
	return &rt, nil
}

// Run runs one test group against the rules files and returns its
// failures.
func (rt *RuleTests) Run(tg TestGroup, ruleFiles ...string) []error {
	interval := tg.Interval
	if interval == 0 {
		interval = model.Duration(time.Minute)
	}
	var load strings.Builder
	fmt.Fprintf(&load, "load %s\n", interval)
	for _, s := range tg.InputSeries {
		fmt.Fprintf(&load, "  %s %s\n", s.Series, s.Values)
	}
	suite, err := promqltest.NewLazyLoader(load.String(), promqltest.LazyLoaderOpts{EnableAtModifier: true, EnableNegativeOffset: true, Parser: Parser})
	if err != nil {
		return []error{err}
	}
	defer suite.Close()
	evalInterval := time.Duration(rt.EvaluationInterval)
	suite.SubqueryInterval = evalInterval

	m := rules.NewManager(&rules.ManagerOptions{
		QueryFunc:    rules.EngineQueryFunc(suite.QueryEngine(), suite.Storage()),
		AppendableV2: suite.Storage(),
		Context:      context.Background(),
		NotifyFunc:   func(context.Context, string, ...*rules.Alert) {},
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		Parser:       Parser,
	})
	groups, errs := m.LoadGroups(evalInterval, labels.EmptyLabels(), "", nil, false, ruleFiles...)
	if len(errs) > 0 {
		return errs
	}
	for _, g := range groups {
		for _, r := range g.Rules() {
			if ar, ok := r.(*rules.AlertingRule); ok {
				ar.SetRestored(true)
			}
		}
	}
	var maxt model.Duration
	for _, at := range tg.AlertRuleTests {
		maxt = max(maxt, at.EvalTime)
	}
	mint := time.Unix(0, 0).UTC()
	var failures []error
	for ts := mint; !ts.After(mint.Add(time.Duration(maxt))); ts = ts.Add(evalInterval) {
		var evalErrs []error
		suite.WithSamplesTill(ts, func(err error) {
			if err != nil {
				evalErrs = append(evalErrs, err)
				return
			}
			for _, g := range groups {
				g.Eval(suite.Context(), ts)
				for _, r := range g.Rules() {
					if r.LastError() != nil {
						evalErrs = append(evalErrs, fmt.Errorf("rule %s at %s: %w", r.Name(), ts.Sub(mint), r.LastError()))
					}
				}
			}
		})
		if len(evalErrs) > 0 {
			return append(failures, evalErrs...)
		}
		for _, at := range tg.AlertRuleTests {
			// As promtool: the evaluation at ts answers for the eval_times
			// in [ts, ts+interval).
			if d := time.Duration(at.EvalTime); d < ts.Sub(mint) || d >= ts.Sub(mint)+evalInterval {
				continue
			}
			failures = append(failures, check(groups, at)...)
		}
	}
	return failures
}

func check(groups map[string]*rules.Group, at AlertTest) []error {
	var got []labels.Labels
	var gotAnn []labels.Labels
	found := false
	for _, g := range groups {
		for _, r := range g.Rules() {
			ar, ok := r.(*rules.AlertingRule)
			if !ok || ar.Name() != at.Alertname {
				continue
			}
			found = true
			for _, a := range ar.ActiveAlerts() {
				if a.State == rules.StateFiring {
					got = append(got, a.Labels.Copy())
					gotAnn = append(gotAnn, a.Annotations.Copy())
				}
			}
		}
	}
	if !found {
		return []error{fmt.Errorf("eval_time %s: no alerting rule %s", at.EvalTime, at.Alertname)}
	}
	var want []string
	for _, e := range at.ExpAlerts {
		l := map[string]string{labels.AlertName: at.Alertname}
		for k, v := range e.ExpLabels {
			l[k] = v
		}
		want = append(want, labels.FromMap(l).String())
	}
	var have []string
	for _, l := range got {
		have = append(have, l.String())
	}
	slices.Sort(want)
	slices.Sort(have)
	if !slices.Equal(want, have) {
		return []error{fmt.Errorf("eval_time %s, alert %s firing:\n  got  %v\n  want %v", at.EvalTime, at.Alertname, have, want)}
	}
	// Annotations, as promtool compares them: exactly those given (none
	// given: none expected), after templating.
	var errs []error
	for _, e := range at.ExpAlerts {
		l := map[string]string{labels.AlertName: at.Alertname}
		for k, v := range e.ExpLabels {
			l[k] = v
		}
		key := labels.FromMap(l)
		want := labels.FromMap(e.ExpAnnotations)
		for i, g := range got {
			if labels.Equal(g, key) && !labels.Equal(gotAnn[i], want) {
				errs = append(errs, fmt.Errorf("eval_time %s, alert %s %s: annotations\n  got  %s\n  want %s", at.EvalTime, at.Alertname, key, gotAnn[i], want))
			}
		}
	}
	return errs
}
