package chaostest_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/repolock/repolock/internal/chaostest"
)

// step is one operation of a hand-written history: [call, ret] in ticks,
// ret < 0 for an unknown outcome (pending).
type step struct {
	client    int
	key       string
	in        chaostest.OwnershipInput
	outcome   chaostest.Outcome
	out       chaostest.OwnershipOutput
	call, ret int64
}

func history(steps ...step) []chaostest.Op {
	ops := make([]chaostest.Op, 0, len(steps))
	for i, s := range steps {
		op := chaostest.Op{ID: i, Kind: chaostest.OwnershipKind, Client: s.client, Key: s.key, Call: s.call, Return: s.ret,
			Input: s.in, Output: s.out, Outcome: s.outcome}
		ops = append(ops, op)
	}
	return ops
}

func claim(client int, tenant, ref string, outcome chaostest.Outcome, owner string, call, ret int64) step {
	return step{client: client, key: "k", in: chaostest.OwnershipInput{Op: chaostest.Claim, Tenant: tenant, Ref: ref},
		outcome: outcome, out: chaostest.OwnershipOutput{Owner: owner}, call: call, ret: ret}
}

func unclaim(client int, ref string, outcome chaostest.Outcome, call, ret int64) step {
	return step{client: client, key: "k", in: chaostest.OwnershipInput{Op: chaostest.Unclaim, Ref: ref}, outcome: outcome, call: call, ret: ret}
}

func read(owner string, refs []string, call, ret int64) step {
	return step{client: 9, key: "k", in: chaostest.OwnershipInput{Op: chaostest.Read}, outcome: chaostest.OK,
		out: chaostest.OwnershipOutput{Owner: owner, Refs: refs}, call: call, ret: ret}
}

func gc(call, ret int64) step {
	return step{client: 8, key: "", in: chaostest.OwnershipInput{Op: chaostest.GC}, outcome: chaostest.OK, call: call, ret: ret}
}

// TestOwnershipModel: the checker accepts the histories the model allows
// (concurrent claims decided either way, pending claims applied or not)
// and refuses double owners, lost acknowledgements and phantoms.
func TestOwnershipModel(t *testing.T) {
	const ok, refused, unknown, failed = chaostest.OK, chaostest.Refused, chaostest.Unknown, chaostest.Failed
	tests := []struct {
		name  string
		steps []step
		want  porcupine.CheckResult
	}{
		{"concurrent claims, one wins", []step{
			claim(0, "A", "a1", ok, "", 0, 10),
			claim(1, "B", "b1", refused, "A", 1, 11),
			unclaim(0, "a1", ok, 20, 30),
			claim(1, "B", "b2", ok, "", 31, 40),
			read("B", []string{"b2"}, 50, 60),
		}, porcupine.Ok},
		{"the refusal may come first when they overlap", []step{
			claim(1, "B", "b1", ok, "", 0, 10),
			claim(0, "A", "a1", refused, "B", 1, 11),
			read("B", []string{"b1"}, 50, 60),
		}, porcupine.Ok},
		{"same tenant shares the key", []step{
			claim(0, "A", "a1", ok, "", 0, 10),
			claim(1, "A", "a2", ok, "", 11, 20),
			unclaim(0, "a1", ok, 21, 30),
			claim(2, "B", "b1", refused, "A", 31, 40),
			read("A", []string{"a2"}, 50, 60),
		}, porcupine.Ok},
		{"double owner", []step{
			claim(0, "A", "a1", ok, "", 0, 10),
			claim(1, "B", "b1", ok, "", 20, 30),
		}, porcupine.Illegal},
		{"refused by a tenant that does not own it", []step{
			claim(0, "A", "a1", ok, "", 0, 10),
			claim(1, "B", "b1", refused, "C", 20, 30),
		}, porcupine.Illegal},
		{"lost acknowledged claim", []step{
			claim(0, "A", "a1", ok, "", 0, 10),
			read("", nil, 20, 30),
		}, porcupine.Illegal},
		{"phantom: a failed (nothing applied) claim is stored", []step{
			claim(0, "A", "a1", failed, "", 0, 10),
			read("A", []string{"a1"}, 20, 30),
		}, porcupine.Illegal},
		{"pending claim applied", []step{
			claim(0, "A", "a1", unknown, "", 0, -1),
			claim(1, "B", "b1", refused, "A", 20, 30),
			read("A", []string{"a1"}, 40, 50),
		}, porcupine.Ok},
		{"pending claim never applied", []step{
			claim(0, "A", "a1", unknown, "", 0, -1),
			claim(1, "B", "b1", ok, "", 20, 30),
			read("B", []string{"b1"}, 40, 50),
		}, porcupine.Ok},
		{"pending claim cannot apply before its call", []step{
			claim(1, "B", "b1", refused, "A", 0, 10),
			claim(0, "A", "a1", unknown, "", 20, -1),
		}, porcupine.Illegal},
		{"pending unclaim frees the key", []step{
			claim(0, "A", "a1", ok, "", 0, 10),
			unclaim(0, "a1", unknown, 20, -1),
			claim(1, "B", "b1", ok, "", 30, 40),
		}, porcupine.Ok},
		{"unclaim of a missing reference", []step{
			claim(0, "A", "a1", ok, "", 0, 10),
			unclaim(1, "a1", refused, 20, 30),
		}, porcupine.Illegal},
		{"GC keeps a referenced lock", []step{
			claim(0, "A", "a1", ok, "", 0, 10),
			gc(20, 30),
			read("A", []string{"a1"}, 40, 50),
		}, porcupine.Ok},
		{"GC does not free a referenced lock", []step{
			claim(0, "A", "a1", ok, "", 0, 10),
			gc(20, 30),
			claim(1, "B", "b1", ok, "", 40, 50),
		}, porcupine.Illegal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			steps := tt.steps
			for i := range steps {
				if steps[i].ret < 0 {
					steps[i].ret = 1 << 62
				}
			}
			res := chaostest.Check(chaostest.Ownership{}, history(steps...), 10*time.Second)
			if res.Verdict != tt.want {
				t.Fatalf("verdict %s, want %s (%s)", res.Verdict, tt.want, res)
			}
		})
	}
}

// TestRecorderAndArtefacts: the Recorder logs every answer as a JSON line,
// keeps unknown outcomes pending, and a failed check saves the history and
// Porcupine's visualization.
func TestRecorderAndArtefacts(t *testing.T) {
	var log strings.Builder
	r := chaostest.NewRecorder(&log)
	r.SetFault("kill-replica")
	a := r.Call(chaostest.OwnershipKind, 0, "k", chaostest.OwnershipInput{Op: chaostest.Claim, Tenant: "A", Ref: "a1"})
	r.Return(a, chaostest.OK, chaostest.OwnershipOutput{}, 201, "")
	b := r.Call(chaostest.OwnershipKind, 1, "k", chaostest.OwnershipInput{Op: chaostest.Claim, Tenant: "B", Ref: "b1"})
	r.Return(b, chaostest.Unknown, chaostest.OwnershipOutput{}, 503, "outcome unknown")
	c := r.Call(chaostest.OwnershipKind, 2, "k", chaostest.OwnershipInput{Op: chaostest.Read})
	r.Return(c, chaostest.OK, chaostest.OwnershipOutput{Owner: "B", Refs: []string{"b1"}}, 200, "")
	ops := r.Ops()
	if len(ops) != 3 || ops[1].Return != 1<<63-1 || ops[0].Fault != "kill-replica" {
		t.Fatalf("ops = %+v", ops)
	}
	if n := strings.Count(log.String(), "\n"); n != 3 || !strings.Contains(log.String(), `"outcome":"unknown"`) {
		t.Fatalf("log:\n%s", log.String())
	}
	res := chaostest.Check(chaostest.Ownership{}, ops, 10*time.Second)
	if res.OK() || res.Pending != 1 {
		t.Fatalf("A's acknowledged claim lost to B's pending one: %s", res)
	}
	dir := t.TempDir()
	paths, err := res.SaveArtefacts(dir)
	if err != nil || len(paths) != 2 {
		t.Fatalf("SaveArtefacts = %v, %v", paths, err)
	}
	html, err := os.ReadFile(filepath.Join(dir, "ownership-linearizability.html"))
	if err != nil || !strings.Contains(string(html), "claim b1 by B") {
		t.Fatalf("visualization: %v\n%.300s", err, html)
	}
}

// TestOwnershipPruning: unknown operations that the final read proves
// unapplied are left out, and the verdict is the one Porcupine gives
// with them in.
func TestOwnershipPruning(t *testing.T) {
	const ok, unknown = chaostest.OK, chaostest.Unknown
	end := int64(1 << 62)
	steps := []step{
		claim(0, "A", "a1", ok, "", 0, 10),
		claim(1, "B", "b1", unknown, "", 5, end),  // never applied: b1 is not stored
		claim(0, "A", "a2", unknown, "", 20, end), // applied: a2 is stored
		unclaim(0, "a1", unknown, 30, end),        // applied: a1 is gone
		read("A", []string{"a2"}, 100, 110),
	}
	res := chaostest.Check(chaostest.Ownership{}, history(steps...), 10*time.Second)
	if !res.OK() || res.Unapplied != 1 || res.Pending != 2 {
		t.Fatalf("%s: want Ok with 1 left out and 2 pending", res)
	}
	// The same unknown claim stored while B's acknowledged claim stands
	// is a double owner, pruning or not.
	bad := []step{
		claim(1, "B", "b1", ok, "", 0, 10),
		claim(0, "A", "a1", unknown, "", 5, end),
		read("B", []string{"a1", "b1"}, 100, 110),
	}
	if res := chaostest.Check(chaostest.Ownership{}, history(bad...), 10*time.Second); res.Verdict != porcupine.Illegal {
		t.Fatalf("%s: want Illegal", res)
	}
}

// TestExistenceModel: repositories created and deleted by name.
func TestExistenceModel(t *testing.T) {
	const ok, refused, unknown = chaostest.OK, chaostest.Refused, chaostest.Unknown
	kind := chaostest.Existence{Kind: chaostest.RepositoryKind}
	op := func(id int, in string, outcome chaostest.Outcome, present bool, call, ret int64) chaostest.Op {
		return chaostest.Op{ID: id, Kind: chaostest.RepositoryKind, Key: "t/r", Input: chaostest.ExistenceInput{Op: in},
			Output: chaostest.ExistenceOutput{Present: present}, Outcome: outcome, Call: call, Return: ret}
	}
	end := int64(1 << 62)
	tests := []struct {
		name string
		ops  []chaostest.Op
		want porcupine.CheckResult
	}{
		{"create, delete, gone", []chaostest.Op{op(0, chaostest.Create, ok, false, 0, 10), op(1, chaostest.Delete, ok, false, 20, 30), op(2, chaostest.Exists, ok, false, 40, 50)}, porcupine.Ok},
		{"acknowledged delete still there", []chaostest.Op{op(0, chaostest.Create, ok, false, 0, 10), op(1, chaostest.Delete, ok, false, 20, 30), op(2, chaostest.Exists, ok, true, 40, 50)}, porcupine.Illegal},
		{"nothing applied, yet deleted", []chaostest.Op{op(0, chaostest.Create, ok, false, 0, 10), op(1, chaostest.Delete, chaostest.Failed, false, 20, 30), op(2, chaostest.Exists, ok, false, 40, 50)}, porcupine.Illegal},
		{"unknown delete, deleted", []chaostest.Op{op(0, chaostest.Create, ok, false, 0, 10), op(1, chaostest.Delete, unknown, false, 20, end), op(2, chaostest.Exists, ok, false, 40, 50)}, porcupine.Ok},
		{"delete of a missing one refused", []chaostest.Op{op(0, chaostest.Create, unknown, false, 0, end), op(1, chaostest.Delete, refused, false, 20, 30), op(2, chaostest.Exists, ok, false, 40, 50)}, porcupine.Ok},
	}
	for _, tt := range tests {
		if res := chaostest.Check(kind, tt.ops, 10*time.Second); res.Verdict != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, res, tt.want)
		}
	}
}
