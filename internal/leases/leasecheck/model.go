// Package leasecheck checks histories of lease clients for
// linearizability with Porcupine (github.com/anishathalye/porcupine),
// against a sequential model of one lease per key and the fenced register
// it guards (docs/leases.md):
//
//   - at most one holder of a valid lease per key at any moment: an
//     acquisition that returned while the previous holder's lease was
//     certainly still valid is a violation;
//   - fencing tokens strictly increase per key;
//   - no write with a stale token is accepted: an admitted write carries
//     the last token issued for its key, and a refusal (fenced) means a
//     newer one was issued.
//
// The package is used by tests only (internal/leases' history test, the
// end-to-end test of tests/, and a chaos suite): a Recorder records the
// operations of concurrent clients, Check checks them and, on failure,
// saves the history and Porcupine's HTML visualization.
//
// Time: a lease is certainly valid from its acquisition or keepalive until
// the call time of that request plus its TTL, less Slack: the database
// starts the TTL when it runs the statement, after the call, and judges
// expiry by its own clock, which on one machine runs at the rate of the
// recorder's. Outcomes the client could not learn (an error, a timeout,
// a dropped connection) are Unknown: the model lets them have happened or
// not.
package leasecheck

import (
	"fmt"
	"time"

	"github.com/anishathalye/porcupine"
)

// Kind is an operation of a lease client.
type Kind int

// The operations.
const (
	Acquire Kind = iota
	Keepalive
	Release
	Write
)

func (k Kind) String() string {
	return [...]string{"acquire", "keepalive", "release", "write"}[k]
}

// Status is what the client learnt.
type Status int

// The outcomes.
const (
	// OK: acquired, kept alive, released, written.
	OK Status = iota
	// Held: the acquisition was refused, the key being held.
	Held
	// Lost: keepalive or release answered that the lease is gone.
	Lost
	// Fenced: the write was refused for a stale token.
	Fenced
	// Conflict: the write lost an optimistic-concurrency race (its
	// predicate failed): nothing was written.
	Conflict
	// Unknown: an error; the operation may or may not have happened.
	Unknown
	// Failed: an error that promises nothing happened (a 503 without
	// "outcome": "unknown", a connection refused): the Recorder leaves it
	// out of the history and only counts it.
	Failed
)

func (s Status) String() string {
	return [...]string{"ok", "held", "lost", "fenced", "conflict", "unknown", "failed"}[s]
}

// Input is one operation: its key, the token of the lease it acts with
// (keepalive, release, write), the lease's TTL (acquire, keepalive), and
// its call and return times (nanoseconds on the recorder's clock; Return
// is filled in when it returns).
type Input struct {
	Kind   Kind
	Key    string
	Client int
	Token  int64
	TTL    time.Duration
	Call   int64
	Return int64
}

// Output is the outcome; Token is the acquired lease's token.
type Output struct {
	Status Status
	Token  int64
}

// State is the model's state for one key.
type State struct {
	// Issued is the highest token known to have been issued.
	Issued int64
	// Holder is the token of the lease known to be held (0: none);
	// ValidUntil is when it is certainly still valid until.
	Holder     int64
	ValidUntil int64
	// Written is the highest token of an admitted write.
	Written int64
	// Pending: an acquisition of unknown outcome may have issued a token
	// (unknown to the model, greater than Issued).
	Pending bool
}

// Slack is taken off a lease's certain validity for each TTL: 50ms plus 2%
// of the TTL, for clock-rate differences and scheduling.
func Slack(ttl time.Duration) time.Duration { return 50*time.Millisecond + ttl/50 }

func validUntil(in Input) int64 { return in.Call + int64(in.TTL-Slack(in.TTL)) }

// certainlyValid: the holder's lease was valid for the whole of the
// operation (its return came before the certain validity ended).
func certainlyValid(s State, in Input) bool { return s.Holder != 0 && in.Return < s.ValidUntil }

func step(s State, in Input, out Output) []State {
	one := func(st State) []State { return []State{st} }
	if out.Status == Failed {
		return one(s) // nothing happened
	}
	switch in.Kind {
	case Acquire:
		switch out.Status {
		case OK:
			if out.Token <= s.Issued || certainlyValid(s, in) {
				return nil // tokens must increase; one valid holder
			}
			n := s
			n.Issued, n.Holder, n.ValidUntil = out.Token, out.Token, validUntil(in)
			return one(n)
		case Held:
			if s.Holder == 0 && !s.Pending {
				return nil // nobody could hold it
			}
			return one(s)
		case Unknown:
			n := s
			n.Pending = true
			return one(n)
		}
	case Keepalive:
		switch out.Status {
		case OK:
			if s.Holder != in.Token {
				return nil // a lease superseded or released was kept alive
			}
			n := s
			n.ValidUntil = max(s.ValidUntil, validUntil(in))
			return one(n)
		case Lost:
			if s.Holder == in.Token && certainlyValid(s, in) {
				return nil // lost while certainly valid
			}
			n := s
			if s.Holder == in.Token {
				n.Holder, n.ValidUntil = 0, 0
			}
			return one(n)
		case Unknown:
			return one(s)
		}
	case Release:
		released := s
		if s.Holder == in.Token {
			released.Holder, released.ValidUntil = 0, 0
		}
		switch out.Status {
		case OK:
			// A lease that expired is still released while no newer
			// one was granted (its row is still there).
			if in.Token < s.Issued {
				return nil // released a lease already superseded
			}
			return one(released)
		case Lost:
			if s.Holder == in.Token && certainlyValid(s, in) {
				return nil
			}
			return one(released)
		case Unknown:
			return []State{s, released}
		}
	case Write:
		// Admissible: the token is the last one known issued (or newer,
		// from an acquisition of unknown outcome) and not older than an
		// admitted write's.
		admitted := in.Token >= s.Issued && in.Token >= s.Written
		written := s
		written.Written = in.Token
		switch out.Status {
		case OK:
			if !admitted {
				return nil // a stale token was accepted
			}
			return one(written)
		case Fenced:
			if in.Token >= s.Issued && !s.Pending {
				return nil // refused although no newer token was issued
			}
			return one(s)
		case Conflict:
			return one(s)
		case Unknown:
			if admitted {
				return []State{s, written}
			}
			return one(s)
		}
	}
	return nil
}

// Model is the Porcupine model, partitioned by key.
var Model = porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(Input).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() []any { return []any{State{}} },
	Step: func(state, input, output any) []any {
		next := step(state.(State), input.(Input), output.(Output))
		out := make([]any, len(next))
		for i, n := range next {
			out[i] = n
		}
		return out
	},
	Equal: func(a, b any) bool { return a.(State) == b.(State) },
	DescribeOperation: func(input, output any) string {
		in, out := input.(Input), output.(Output)
		switch in.Kind {
		case Acquire:
			if out.Status == OK {
				return fmt.Sprintf("c%d acquire %s ttl=%s -> token %d", in.Client, in.Key, in.TTL, out.Token)
			}
			return fmt.Sprintf("c%d acquire %s -> %s", in.Client, in.Key, out.Status)
		default:
			return fmt.Sprintf("c%d %s %s token=%d -> %s", in.Client, in.Kind, in.Key, in.Token, out.Status)
		}
	},
	DescribeState: func(state any) string {
		s := state.(State)
		return fmt.Sprintf("issued=%d holder=%d written=%d pending=%t", s.Issued, s.Holder, s.Written, s.Pending)
	},
}
