package chaostest

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// RepositoryKind is the history of repositories (repostate): whether a
// name exists, per tenant and name.
const RepositoryKind = "repository"

// Operations of an existence history (ExistenceInput.Op).
const (
	// Create: OK iff absent (then present); Refused (409) iff present.
	Create = "create"
	// Delete: OK iff present (then absent: a delete the Cleaner completes
	// counts as done); Refused (404) iff absent.
	Delete = "delete"
	// Exists: a read; OK with ExistenceOutput.Present.
	Exists = "exists"
)

// ExistenceInput is the Input of an existence operation.
type ExistenceInput struct {
	Op string `json:"op"`
}

// ExistenceOutput is the Output of a read.
type ExistenceOutput struct {
	Present bool `json:"present"`
}

// Existence is the Kind of a history of things created and deleted by
// name (repositories): a set-membership register per key. name is its
// Op.Kind (RepositoryKind for repositories).
type Existence struct{ Kind string }

type existenceOp struct {
	in      ExistenceInput
	out     ExistenceOutput
	outcome Outcome
}

// Name implements Kind.
func (e Existence) Name() string { return e.Kind }

// Input implements Kind.
func (Existence) Input(op Op) any {
	in, _ := op.Input.(ExistenceInput)
	out, _ := op.Output.(ExistenceOutput)
	return existenceOp{in: in, out: out, outcome: op.Outcome}
}

// Output implements Kind.
func (Existence) Output(op Op) any { return op.Outcome }

func existenceStep(state, input any) (bool, any) {
	present := state.(bool)
	op := input.(existenceOp)
	switch op.in.Op {
	case Create, Delete:
		can := present == (op.in.Op == Delete)
		switch op.outcome {
		case OK:
			return can, !present
		case Refused:
			return !can, present
		default: // pending
			if can {
				return true, !present
			}
			return true, present
		}
	case Exists:
		if op.outcome != OK {
			return true, present
		}
		return op.out.Present == present, present
	}
	return false, present
}

// Model implements Kind.
func (Existence) Model() porcupine.Model {
	return porcupine.Model{
		Init: func() any { return false },
		Step: func(state, input, _ any) (bool, any) { return existenceStep(state, input) },
		DescribeOperation: func(input, _ any) string {
			op := input.(existenceOp)
			if op.in.Op == Exists {
				return fmt.Sprintf("exists -> %v", op.out.Present)
			}
			return fmt.Sprintf("%s -> %s", op.in.Op, op.outcome)
		},
		DescribeState: func(state any) string {
			if state.(bool) {
				return "present"
			}
			return "absent"
		},
	}
}
