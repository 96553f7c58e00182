package chaostest

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// Kind is one history kind: its sequential model and how its recorded
// operations become Porcupine operations. Partition is by Op.Key; an
// operation with an empty key (a global GC) belongs to every partition.
type Kind interface {
	// Name is the Op.Kind of the operations this Kind checks.
	Name() string
	// Model is the sequential specification (Partition is set by Check).
	Model() porcupine.Model
	// Input and Output are what the model's Step receives for op (op's
	// Input and Output are the values the load generator recorded).
	Input(op Op) any
	Output(op Op) any
}

// Pruner is a Kind that can tell, from the rest of the history (a final
// read), that some operations of unknown outcome had no effect; Check
// leaves those out, which is what Porcupine would conclude from placing
// them after the end of the history, at a fraction of the search.
type Pruner interface {
	// Unapplied returns the IDs of unknown operations among ops that
	// provably took no effect.
	Unapplied(ops []Op) map[int]bool
}

// Result is the verdict on one kind's history.
type Result struct {
	Kind       string
	Ops        int // operations checked (Failed ones are left out)
	Pending    int // unknown outcomes, checked as pending operations
	Unapplied  int // unknown outcomes left out: provably without effect (Pruner)
	Partitions int
	Verdict    porcupine.CheckResult
	info       porcupine.LinearizationInfo
	model      porcupine.Model
	ops        []Op
}

// OK reports a linearizable history (a timeout is not OK).
func (r Result) OK() bool { return r.Verdict == porcupine.Ok }

func (r Result) String() string {
	verdict := string(r.Verdict)
	if r.Verdict == porcupine.Unknown {
		verdict = "unknown (the check timed out)"
	}
	return fmt.Sprintf("%s: %s (%d operations, %d pending, %d unknown ones left out as provably unapplied, %d keys)",
		r.Kind, verdict, r.Ops, r.Pending, r.Unapplied, r.Partitions)
}

// Check checks the operations of kind among ops with Porcupine, each key
// separately, within timeout.
func Check(kind Kind, ops []Op, timeout time.Duration) Result {
	res := Result{Kind: kind.Name(), model: kind.Model()}
	var global []porcupine.Operation
	byKey := map[string][]porcupine.Operation{}
	var unapplied map[int]bool
	if p, ok := kind.(Pruner); ok {
		unapplied = p.Unapplied(ops)
	}
	for _, op := range ops {
		if op.Kind != kind.Name() || op.Outcome == Failed {
			continue
		}
		if unapplied[op.ID] {
			res.Unapplied++
			continue
		}
		res.ops = append(res.ops, op)
		res.Ops++
		ret := op.Return
		if op.Outcome == Unknown {
			res.Pending++
			ret = math.MaxInt64
		}
		po := porcupine.Operation{ClientId: op.Client, Input: kind.Input(op), Output: kind.Output(op), Call: op.Call, Return: ret, Metadata: op.ID}
		if op.Key == "" {
			global = append(global, po)
			continue
		}
		byKey[op.Key] = append(byKey[op.Key], po)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([][]porcupine.Operation, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, append(byKey[k], global...))
	}
	res.Partitions = len(parts)
	res.model.Partition = func([]porcupine.Operation) [][]porcupine.Operation { return parts }
	var all []porcupine.Operation
	for _, p := range parts {
		all = append(all, p...)
	}
	res.Verdict, res.info = porcupine.CheckOperationsVerbose(res.model, all, timeout)
	return res
}

// SaveArtefacts writes the checked history (JSON lines) and Porcupine's
// HTML visualization of it into dir and returns their paths.
func (r Result) SaveArtefacts(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	hist := filepath.Join(dir, r.Kind+"-history.jsonl")
	f, err := os.Create(hist)
	if err != nil {
		return nil, err
	}
	if err := WriteJSONL(f, r.ops); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	html := filepath.Join(dir, r.Kind+"-linearizability.html")
	if err := porcupine.VisualizePath(r.model, r.info, html); err != nil {
		return []string{hist}, err
	}
	return []string{hist, html}, nil
}
