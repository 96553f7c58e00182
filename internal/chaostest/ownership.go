package chaostest

import (
	"fmt"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"
)

// The ownership history: who owns a repository key. Every reference (an
// Application or a Repository Credential, named uniquely by the load
// generator) claims its key for its tenant; the lock goes with the last
// reference; a GC frees only a lock that nothing references.
const OwnershipKind = "ownership"

// Operations of the ownership history (OwnershipInput.Op).
const (
	// Claim: create a reference on the key as Tenant. OK iff the key is
	// free or already Tenant's; Refused (409 repository_claimed) names
	// the owner.
	Claim = "claim"
	// Unclaim: delete the reference Ref. OK iff it exists; Refused (404)
	// iff it does not. The last reference frees the key.
	Unclaim = "unclaim"
	// GC: a global GC (Key ""): frees a key only when nothing references
	// it.
	GC = "gc"
	// Read: the owner and references as stored (the verifier's final
	// read, or a client's read); OK with OwnershipOutput.Owner and Refs.
	Read = "read"
)

// OwnershipInput is the Input of an ownership operation.
type OwnershipInput struct {
	Op     string `json:"op"`
	Tenant string `json:"tenant,omitempty"`
	Ref    string `json:"ref,omitempty"` // unique per reference (kind/tenant/name)
}

// OwnershipOutput is the Output of an ownership operation: the owner named
// by a refusal, or what a read saw.
type OwnershipOutput struct {
	Owner string   `json:"owner,omitempty"`
	Refs  []string `json:"refs,omitempty"`
}

// ownershipState is immutable: owner ("" = free) and sorted references.
type ownershipState struct {
	owner string
	refs  string // sorted, joined by "\n"
}

func (s ownershipState) list() []string {
	if s.refs == "" {
		return nil
	}
	return strings.Split(s.refs, "\n")
}

func withRefs(owner string, refs []string) ownershipState {
	refs = slices.Clone(refs)
	slices.Sort(refs)
	return ownershipState{owner: owner, refs: strings.Join(refs, "\n")}
}

// ownershipStep is the sequential specification.
func ownershipStep(state, input, output any) (bool, any) {
	s := state.(ownershipState)
	op := input.(ownershipOp)
	refs := s.list()
	switch op.in.Op {
	case Claim:
		free := s.owner == "" || s.owner == op.in.Tenant
		switch op.outcome {
		case OK:
			if !free {
				return false, s
			}
			return true, withRefs(op.in.Tenant, append(refs, op.in.Ref))
		case Refused:
			return !free && s.owner == op.out.Owner, s
		default: // pending: takes effect if it can
			if !free {
				return true, s
			}
			return true, withRefs(op.in.Tenant, append(refs, op.in.Ref))
		}
	case Unclaim:
		i := slices.Index(refs, op.in.Ref)
		apply := func() ownershipState {
			rest := slices.Delete(slices.Clone(refs), i, i+1)
			owner := s.owner
			if len(rest) == 0 {
				owner = "" // the lock goes with its last reference
			}
			return withRefs(owner, rest)
		}
		switch op.outcome {
		case OK:
			if i < 0 {
				return false, s
			}
			return true, apply()
		case Refused:
			return i < 0, s
		default:
			if i < 0 {
				return true, s
			}
			return true, apply()
		}
	case GC:
		if len(refs) == 0 {
			return true, ownershipState{}
		}
		return true, s
	case Read:
		if op.outcome != OK {
			return true, s
		}
		want := withRefs(op.out.Owner, op.out.Refs)
		return want == s, s
	}
	return false, s
}

// ownershipOp is what Step sees: the input with the outcome and output.
type ownershipOp struct {
	in      OwnershipInput
	out     OwnershipOutput
	outcome Outcome
}

// Ownership is the Kind of the ownership history.
type Ownership struct{}

// Name implements Kind.
func (Ownership) Name() string { return OwnershipKind }

// Input implements Kind: the model needs the outcome with the input.
func (Ownership) Input(op Op) any {
	in, _ := op.Input.(OwnershipInput)
	out, _ := op.Output.(OwnershipOutput)
	return ownershipOp{in: in, out: out, outcome: op.Outcome}
}

// Output implements Kind (everything the step needs is in Input).
func (Ownership) Output(op Op) any { return op.Outcome }

// Unapplied implements Pruner. A reference is added only by its claim and
// removed only by its unclaim (the load never unclaims a reference whose
// claim had no answer), so the final read of its key (the last OK Read)
// tells: an unknown claim whose reference is not stored had no effect,
// nor had an unknown unclaim whose reference still is. Without a final
// read of the key nothing is pruned.
func (Ownership) Unapplied(ops []Op) map[int]bool {
	final := map[string]map[string]bool{} // key -> stored refs
	for _, op := range ops {
		in, _ := op.Input.(OwnershipInput)
		if op.Kind == OwnershipKind && in.Op == Read && op.Outcome == OK {
			out, _ := op.Output.(OwnershipOutput)
			refs := map[string]bool{}
			for _, r := range out.Refs {
				refs[r] = true
			}
			final[op.Key] = refs
		}
	}
	drop := map[int]bool{}
	for _, op := range ops {
		if op.Kind != OwnershipKind || op.Outcome != Unknown {
			continue
		}
		stored, ok := final[op.Key]
		if !ok {
			continue
		}
		in, _ := op.Input.(OwnershipInput)
		switch {
		case in.Op == Claim && !stored[in.Ref], in.Op == Unclaim && stored[in.Ref]:
			drop[op.ID] = true
		}
	}
	return drop
}

// Model implements Kind.
func (Ownership) Model() porcupine.Model {
	return porcupine.Model{
		Init: func() any { return ownershipState{} },
		Step: func(state, input, output any) (bool, any) { return ownershipStep(state, input, output) },
		Equal: func(a, b any) bool {
			return a.(ownershipState) == b.(ownershipState)
		},
		DescribeOperation: func(input, output any) string {
			op := input.(ownershipOp)
			switch op.in.Op {
			case Claim:
				return fmt.Sprintf("claim %s by %s -> %s %s", op.in.Ref, op.in.Tenant, op.outcome, op.out.Owner)
			case Unclaim:
				return fmt.Sprintf("unclaim %s -> %s", op.in.Ref, op.outcome)
			case Read:
				return fmt.Sprintf("read -> owner %q refs %v", op.out.Owner, op.out.Refs)
			}
			return fmt.Sprintf("%s -> %s", op.in.Op, op.outcome)
		},
		DescribeState: func(state any) string {
			s := state.(ownershipState)
			if s.owner == "" {
				return "free"
			}
			return fmt.Sprintf("%s %v", s.owner, s.list())
		},
	}
}
