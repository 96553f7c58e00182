// Package chaostest records what clients saw during a fault-injection run
// and checks it: a Recorder logs every request and its answer and keeps
// each operation's call and return times; a Kind turns the operations of
// one history kind (ownership of repository keys, ...) into Porcupine
// operations checked against that kind's sequential model. Answers whose
// outcome is unknown (a 503 with outcome: unknown, a lost connection) are
// pending operations: their return time is the end of time, so Porcupine
// may apply them anywhere after their call, or never.
//
// Another history kind plugs in with its own Kind (a model and a
// conversion); the Recorder, the checker, the artefacts and the report
// are shared.
package chaostest

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"sync"
	"time"
)

// Outcome classifies an answer.
type Outcome string

const (
	// OK: the operation took effect with the recorded output.
	OK Outcome = "ok"
	// Refused: a definite answer that the operation did not take effect
	// (409 repository_claimed, 404 ...); its output says which.
	Refused Outcome = "refused"
	// Failed: an error that promises nothing was applied (503 without
	// outcome unknown, 429, 400...): left out of the checked history.
	Failed Outcome = "failed"
	// Unknown: the operation may or may not have taken effect.
	Unknown Outcome = "unknown"
)

// Op is one operation of a history: what a client asked, what it was
// answered, and when (nanoseconds since the Recorder started).
type Op struct {
	ID      int     `json:"id"`
	Kind    string  `json:"kind"` // the history kind (Kind.Name)
	Client  int     `json:"client"`
	Key     string  `json:"key"` // the partition ("" = every partition of its kind)
	Call    int64   `json:"call"`
	Return  int64   `json:"return"` // math.MaxInt64 while pending / unknown
	Input   any     `json:"input"`
	Output  any     `json:"output,omitempty"`
	Outcome Outcome `json:"outcome"`
	// Status and Error are the HTTP answer, for the log and the report.
	Status int    `json:"status,omitempty"`
	Error  string `json:"error,omitempty"`
	// Fault names the fault in progress when the operation was called.
	Fault string `json:"fault,omitempty"`
}

// Recorder collects operations from many goroutines and writes each one,
// as it returns, as a JSON line to its log.
type Recorder struct {
	start time.Time
	mu    sync.Mutex
	ops   []*Op
	log   io.Writer
	fault string
}

// NewRecorder returns a Recorder whose clock starts now, logging to log
// (nil: no log).
func NewRecorder(log io.Writer) *Recorder {
	return &Recorder{start: time.Now(), log: log}
}

// Now is the Recorder's clock.
func (r *Recorder) Now() int64 { return int64(time.Since(r.start)) }

// SetFault names the fault in progress ("" for none); operations called
// from now on carry it.
func (r *Recorder) SetFault(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fault = name
}

// Call records the invocation of an operation and returns it; the caller
// finishes it with Return.
func (r *Recorder) Call(kind string, client int, key string, input any) *Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	op := &Op{ID: len(r.ops), Kind: kind, Client: client, Key: key, Input: input, Call: r.Now(), Return: math.MaxInt64, Fault: r.fault}
	r.ops = append(r.ops, op)
	return op
}

// Return records the answer of op. An Unknown outcome keeps the return
// time at the end of time (pending).
func (r *Recorder) Return(op *Op, outcome Outcome, output any, status int, errText string) {
	now := r.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	op.Outcome, op.Output, op.Status, op.Error = outcome, output, status, errText
	if outcome != Unknown {
		op.Return = now
	}
	if r.log != nil {
		b, _ := json.Marshal(struct {
			*Op
			Took float64 `json:"took_ms"`
		}{op, float64(now-op.Call) / 1e6})
		fmt.Fprintf(r.log, "%s\n", b)
	}
}

// Ops returns a copy of every operation, ordered by call time.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Op, 0, len(r.ops))
	for _, op := range r.ops {
		o := *op
		if o.Outcome == "" {
			o.Outcome = Unknown // never returned (the run ended first)
		}
		out = append(out, o)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Call < out[j].Call })
	return out
}

// WriteJSONL writes ops as JSON lines.
func WriteJSONL(w io.Writer, ops []Op) error {
	enc := json.NewEncoder(w)
	for _, op := range ops {
		if err := enc.Encode(op); err != nil {
			return err
		}
	}
	return nil
}
