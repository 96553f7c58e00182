package leasecheck_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/repolock/repolock/internal/leases/leasecheck"
)

const ms = int64(time.Millisecond)

// op is one operation of client c on key "k" over [call, ret] ms.
func op(c int, kind leasecheck.Kind, token int64, call, ret int64, st leasecheck.Status, outTok int64) porcupine.Operation {
	in := leasecheck.Input{Kind: kind, Key: "k", Client: c, Token: token, TTL: time.Second, Call: call * ms, Return: ret * ms}
	return porcupine.Operation{ClientId: c, Input: in, Call: in.Call, Output: leasecheck.Output{Status: st, Token: outTok}, Return: in.Return}
}

func TestModel(t *testing.T) {
	t.Parallel()
	const (
		A, K, R, W = leasecheck.Acquire, leasecheck.Keepalive, leasecheck.Release, leasecheck.Write
		ok, held   = leasecheck.OK, leasecheck.Held
		lost, fen  = leasecheck.Lost, leasecheck.Fenced
		unknown    = leasecheck.Unknown
	)
	for _, tc := range []struct {
		name string
		ops  []porcupine.Operation
		want bool
	}{
		{"acquire write release acquire", []porcupine.Operation{
			op(0, A, 0, 0, 10, ok, 1), op(0, W, 1, 20, 30, ok, 0), op(0, R, 1, 40, 50, ok, 0),
			op(1, A, 0, 60, 70, ok, 2), op(1, W, 2, 80, 90, ok, 0),
		}, true},
		{"held while held", []porcupine.Operation{op(0, A, 0, 0, 10, ok, 1), op(1, A, 0, 20, 30, held, 0)}, true},
		{"held with nobody holding", []porcupine.Operation{op(1, A, 0, 20, 30, held, 0)}, false},
		{"two valid holders", []porcupine.Operation{op(0, A, 0, 0, 10, ok, 1), op(1, A, 0, 100, 110, ok, 2)}, false},
		{"takeover after expiry", []porcupine.Operation{op(0, A, 0, 0, 10, ok, 1), op(1, A, 0, 1500, 1510, ok, 2)}, true},
		{"keepalive extends", []porcupine.Operation{
			op(0, A, 0, 0, 10, ok, 1), op(0, K, 1, 600, 610, ok, 0), op(1, A, 0, 1200, 1210, ok, 2),
		}, false},
		{"token reused", []porcupine.Operation{op(0, A, 0, 0, 10, ok, 1), op(0, R, 1, 20, 30, ok, 0), op(1, A, 0, 40, 50, ok, 1)}, false},
		{"stale write accepted", []porcupine.Operation{
			op(0, A, 0, 0, 10, ok, 1), op(1, A, 0, 1500, 1510, ok, 2), op(0, W, 1, 1600, 1610, ok, 0),
		}, false},
		{"stale write fenced", []porcupine.Operation{
			op(0, A, 0, 0, 10, ok, 1), op(1, A, 0, 1500, 1510, ok, 2), op(0, W, 1, 1600, 1610, fen, 0), op(1, W, 2, 1620, 1630, ok, 0),
		}, true},
		{"current write fenced", []porcupine.Operation{op(0, A, 0, 0, 10, ok, 1), op(0, W, 1, 20, 30, fen, 0)}, false},
		{"stale write concurrent with the takeover", []porcupine.Operation{
			op(0, A, 0, 0, 10, ok, 1), op(1, A, 0, 1500, 1600, ok, 2), op(0, W, 1, 1550, 1650, ok, 0),
		}, true},
		{"lost while certainly valid", []porcupine.Operation{op(0, A, 0, 0, 10, ok, 1), op(0, K, 1, 100, 110, lost, 0)}, false},
		{"unknown acquire may fence", []porcupine.Operation{
			op(0, A, 0, 0, 10, ok, 1), op(1, A, 0, 1500, 1510, unknown, 0), op(0, W, 1, 1600, 1610, fen, 0),
		}, true},
		{"release after expiry, not superseded", []porcupine.Operation{
			op(0, A, 0, 0, 10, ok, 1), op(0, K, 1, 1500, 1510, lost, 0), op(0, R, 1, 1520, 1530, ok, 0),
		}, true},
		{"release of a superseded lease", []porcupine.Operation{
			op(0, A, 0, 0, 10, ok, 1), op(1, A, 0, 1500, 1510, ok, 2), op(0, R, 1, 1520, 1530, ok, 0),
		}, false},
		{"keepalive of a superseded lease", []porcupine.Operation{
			op(0, A, 0, 0, 10, ok, 1), op(1, A, 0, 1500, 1510, ok, 2), op(0, K, 1, 1600, 1610, ok, 0),
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := porcupine.CheckOperations(leasecheck.Model.ToModel(), tc.ops)
			if got != tc.want {
				t.Fatalf("linearizable = %t, want %t", got, tc.want)
			}
		})
	}
}

// failTB records Errorf instead of failing.
type failTB struct {
	testing.TB
	errs []string
}

func (f *failTB) Helper()                        {}
func (f *failTB) Errorf(format string, a ...any) { f.errs = append(f.errs, fmt.Sprintf(format, a...)) }

// TestCheckSavesArtefacts: a violation fails the check, and the history
// and the visualization are saved where the message says.
func TestCheckSavesArtefacts(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("ARTIFACTS", dir)
	ops := []porcupine.Operation{op(0, leasecheck.Acquire, 0, 0, 10, leasecheck.OK, 1), op(1, leasecheck.Acquire, 0, 100, 110, leasecheck.OK, 2)}
	f := &failTB{TB: t}
	if res := leasecheck.Check(f, "bad", ops, 10*time.Second); res != porcupine.Illegal {
		t.Fatalf("result %v, want illegal", res)
	}
	if len(f.errs) != 1 || !strings.Contains(f.errs[0], dir) {
		t.Fatalf("errors %q, want one naming %s", f.errs, dir)
	}
	saved, _ := filepath.Glob(filepath.Join(dir, "leasecheck-bad-*", "*"))
	var names []string
	for _, p := range saved {
		if st, err := os.Stat(p); err == nil && st.Size() > 0 {
			names = append(names, filepath.Base(p))
		}
	}
	if strings.Join(names, ",") != "history.json,visualization.html" {
		t.Fatalf("saved %v", names)
	}
}
