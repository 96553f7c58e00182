package leasecheck

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// Recorder records the operations of concurrent clients. Safe for
// concurrent use.
type Recorder struct {
	start  time.Time
	mu     sync.Mutex
	ops    []porcupine.Operation
	failed map[string]int
}

// NewRecorder starts a recorder's clock.
func NewRecorder() *Recorder { return &Recorder{start: time.Now()} }

// Now is the recorder's clock (monotonic nanoseconds since it started).
func (r *Recorder) Now() int64 { return int64(time.Since(r.start)) }

// Begin records the call of in (its Call set now) and returns the function
// that records its return with out. An operation that Failed (nothing
// happened) is only counted (Failed), not kept in the history.
func (r *Recorder) Begin(in Input) func(Output) {
	in.Call = r.Now()
	return func(out Output) {
		in.Return = r.Now()
		r.mu.Lock()
		defer r.mu.Unlock()
		if out.Status == Failed {
			if r.failed == nil {
				r.failed = map[string]int{}
			}
			r.failed[in.Kind.String()+"/"+out.Status.String()]++
			return
		}
		r.ops = append(r.ops, porcupine.Operation{ClientId: in.Client, Input: in, Call: in.Call, Output: out, Return: in.Return})
	}
}

// Failed is how many operations of each kind failed ("acquire/failed": 3):
// left out of the history, nothing having happened.
func (r *Recorder) Failed() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := map[string]int{}
	for k, n := range r.failed {
		c[k] = n
	}
	return c
}

// Operations returns the history so far.
func (r *Recorder) Operations() []porcupine.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]porcupine.Operation(nil), r.ops...)
}

// Counts is how many operations of each kind and outcome the history
// holds ("acquire/ok": 12, ...).
func Counts(ops []porcupine.Operation) map[string]int {
	c := map[string]int{}
	for _, op := range ops {
		c[op.Input.(Input).Kind.String()+"/"+op.Output.(Output).Status.String()]++
	}
	return c
}

// Check checks ops against Model within timeout. On a violation (or a
// check that did not finish) it fails tb, after saving the history as
// JSON and Porcupine's HTML visualization in a new directory under
// $ARTIFACTS (or the system's temporary directory), whose path it logs.
func Check(tb testing.TB, name string, ops []porcupine.Operation, timeout time.Duration) porcupine.CheckResult {
	tb.Helper()
	return CheckInto(tb, os.Getenv("ARTIFACTS"), name, ops, timeout)
}

// CheckInto is Check saving the artefacts of a failure under base (the
// system's temporary directory if empty) instead of $ARTIFACTS.
func CheckInto(tb testing.TB, base, name string, ops []porcupine.Operation, timeout time.Duration) porcupine.CheckResult {
	tb.Helper()
	model := Model.ToModel()
	res, info := porcupine.CheckOperationsVerbose(model, ops, timeout)
	if res == porcupine.Ok {
		return res
	}
	dir, err := saveArtefacts(base, name, model, info, ops)
	if err != nil {
		tb.Errorf("leasecheck: saving the artefacts: %v", err)
	}
	tb.Errorf("leasecheck: the history of %d operations is %s against the lease model; history and visualization in %s", len(ops), describe(res), dir)
	return res
}

func describe(res porcupine.CheckResult) string {
	if res == porcupine.Illegal {
		return "NOT linearizable"
	}
	return "unknown (the check timed out)"
}

func saveArtefacts(base, name string, model porcupine.Model, info porcupine.LinearizationInfo, ops []porcupine.Operation) (string, error) {
	if base == "" {
		base = os.TempDir()
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp(base, "leasecheck-"+name+"-")
	if err != nil {
		return "", err
	}
	type record struct {
		Client int    `json:"client"`
		Input  Input  `json:"input"`
		Output Output `json:"output"`
		Call   int64  `json:"call"`
		Return int64  `json:"return"`
	}
	recs := make([]record, len(ops))
	for i, op := range ops {
		recs[i] = record{Client: op.ClientId, Input: op.Input.(Input), Output: op.Output.(Output), Call: op.Call, Return: op.Return}
	}
	b, err := json.MarshalIndent(recs, "", "  ")
	if err != nil {
		return dir, err
	}
	if err := os.WriteFile(filepath.Join(dir, "history.json"), b, 0o644); err != nil {
		return dir, err
	}
	return dir, porcupine.VisualizePath(model, info, filepath.Join(dir, "visualization.html"))
}
