package repostate_test

import (
	"fmt"
	"testing"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/repostate"
	"github.com/repolock/repolock/internal/repostate/kv/kvtest"
)

// A flow's stored state as a fault-free reader sees it: the state before
// the flow, after it, or something else (half applied).
const (
	stateBefore = "before"
	stateAfter  = "after"
)

// honestFlow is one multi-step flow of the Service: setup prepares a
// tenant's repository "repo" without faults, run runs the flow through the
// fault store, observe classifies what is stored (through a fault-free
// Service) as stateBefore, stateAfter or a description of anything else.
type honestFlow struct {
	name    string
	setup   func(t *testing.T, e *env, clean *repostate.Service, tenant string) string // returns a value run and observe share (a commit id)
	run     func(e *env, tenant, arg string) error
	observe func(t *testing.T, e *env, clean *repostate.Service, tenant, arg string) string
}

func present(err error) (bool, error) {
	switch {
	case err == nil:
		return true, nil
	case repolock.IsCode(err, repolock.ENotFound):
		return false, nil
	}
	return false, err
}

func honestFlows() []honestFlow {
	withRepo := func(t *testing.T, e *env, clean *repostate.Service, tenant string) string {
		t.Helper()
		if _, err := clean.Create(e.ctx, tenant, repostate.CreateParams{Name: "repo", StorageNamespace: "s3://b/repo"}); err != nil {
			t.Fatal(err)
		}
		b, err := clean.GetBranch(e.ctx, tenant, "repo", "main")
		if err != nil {
			t.Fatal(err)
		}
		return b.CommitID
	}
	// repoState: after = active, listed, with its default branch at a
	// readable commit; before = absent (404, or 410 while the Cleaner has
	// not finished a delete or an abandoned create; never listed).
	repoState := func(t *testing.T, e *env, clean *repostate.Service, tenant string) (active bool, desc string) {
		t.Helper()
		list, _, err := clean.List(e.ctx, tenant, "", 10)
		if err != nil {
			t.Fatal(err)
		}
		r, err := clean.Get(e.ctx, tenant, "repo")
		switch {
		case err == nil:
			if len(list) != 1 {
				return false, fmt.Sprintf("active but listed as %+v", list)
			}
			b, err := clean.GetBranch(e.ctx, tenant, "repo", r.DefaultBranch)
			if err != nil {
				return false, "active without its default branch: " + err.Error()
			}
			if _, err := clean.GetCommit(e.ctx, tenant, "repo", b.CommitID); err != nil {
				return false, "default branch at a missing commit: " + err.Error()
			}
			return true, ""
		case repolock.IsCode(err, repolock.ENotFound), repolock.IsCode(err, repolock.EGone):
			if len(list) != 0 {
				return false, fmt.Sprintf("absent but listed as %+v", list)
			}
			return false, ""
		}
		t.Fatal(err)
		return false, ""
	}
	return []honestFlow{
		{
			name:  "Create",
			setup: func(t *testing.T, e *env, clean *repostate.Service, tenant string) string { return "" },
			run: func(e *env, tenant, _ string) error {
				_, err := e.svc.Create(e.ctx, tenant, repostate.CreateParams{Name: "repo", StorageNamespace: "s3://b/repo"})
				return err
			},
			observe: func(t *testing.T, e *env, clean *repostate.Service, tenant, _ string) string {
				active, desc := repoState(t, e, clean, tenant)
				switch {
				case desc != "":
					return desc
				case active:
					return stateAfter
				}
				return stateBefore
			},
		},
		{
			name:  "Delete",
			setup: withRepo,
			run:   func(e *env, tenant, _ string) error { return e.svc.Delete(e.ctx, tenant, "repo") },
			observe: func(t *testing.T, e *env, clean *repostate.Service, tenant, _ string) string {
				active, desc := repoState(t, e, clean, tenant)
				switch {
				case desc != "":
					return desc
				case active:
					return stateBefore
				}
				return stateAfter
			},
		},
		{
			name:  "Commit",
			setup: withRepo,
			run: func(e *env, tenant, _ string) error {
				_, err := e.svc.Commit(e.ctx, tenant, "repo", "main", repostate.CommitParams{Committer: "c", Message: "second"})
				return err
			},
			observe: func(t *testing.T, e *env, clean *repostate.Service, tenant, first string) string {
				b, err := clean.GetBranch(e.ctx, tenant, "repo", "main")
				if err != nil {
					t.Fatal(err)
				}
				if b.CommitID == first {
					return stateBefore
				}
				c, err := clean.GetCommit(e.ctx, tenant, "repo", b.CommitID)
				if err != nil || c.Message != "second" || len(c.Parents) != 1 || c.Parents[0] != first {
					return fmt.Sprintf("branch at %s: %+v, %v", b.CommitID, c, err)
				}
				return stateAfter
			},
		},
		{
			name:  "CreateBranch",
			setup: withRepo,
			run: func(e *env, tenant, _ string) error {
				_, err := e.svc.CreateBranch(e.ctx, tenant, "repo", "dev", "main")
				return err
			},
			observe: func(t *testing.T, e *env, clean *repostate.Service, tenant, first string) string {
				b, err := clean.GetBranch(e.ctx, tenant, "repo", "dev")
				ok, err := present(err)
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					return stateBefore
				}
				if b.CommitID != first {
					return "dev at " + b.CommitID
				}
				return stateAfter
			},
		},
		{
			name: "DeleteBranch",
			setup: func(t *testing.T, e *env, clean *repostate.Service, tenant string) string {
				first := withRepo(t, e, clean, tenant)
				if _, err := clean.CreateBranch(e.ctx, tenant, "repo", "dev", "main"); err != nil {
					t.Fatal(err)
				}
				if err := clean.StageObject(e.ctx, tenant, "repo", "dev", "f", []byte("x")); err != nil {
					t.Fatal(err)
				}
				return first
			},
			run: func(e *env, tenant, _ string) error { return e.svc.DeleteBranch(e.ctx, tenant, "repo", "dev") },
			observe: func(t *testing.T, e *env, clean *repostate.Service, tenant, _ string) string {
				_, err := clean.GetBranch(e.ctx, tenant, "repo", "dev")
				ok, err := present(err)
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					if staged, _, err := clean.ListStaged(e.ctx, tenant, "repo", "dev", "", 10); err != nil || len(staged) != 1 {
						return fmt.Sprintf("branch there but staged = %+v, %v", staged, err)
					}
					return stateBefore
				}
				return stateAfter
			},
		},
		{
			name:  "CreateTag",
			setup: withRepo,
			run: func(e *env, tenant, first string) error {
				_, err := e.svc.CreateTag(e.ctx, tenant, "repo", "v1", first)
				return err
			},
			observe: func(t *testing.T, e *env, clean *repostate.Service, tenant, _ string) string {
				ok, err := present(func() error { _, err := clean.GetTag(e.ctx, tenant, "repo", "v1"); return err }())
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					return stateAfter
				}
				return stateBefore
			},
		},
		{
			name: "DeleteTag",
			setup: func(t *testing.T, e *env, clean *repostate.Service, tenant string) string {
				first := withRepo(t, e, clean, tenant)
				if _, err := clean.CreateTag(e.ctx, tenant, "repo", "v1", first); err != nil {
					t.Fatal(err)
				}
				return first
			},
			run: func(e *env, tenant, _ string) error { return e.svc.DeleteTag(e.ctx, tenant, "repo", "v1") },
			observe: func(t *testing.T, e *env, clean *repostate.Service, tenant, _ string) string {
				ok, err := present(func() error { _, err := clean.GetTag(e.ctx, tenant, "repo", "v1"); return err }())
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					return stateBefore
				}
				return stateAfter
			},
		},
		{
			name:  "StageObject",
			setup: withRepo,
			run: func(e *env, tenant, _ string) error {
				return e.svc.StageObject(e.ctx, tenant, "repo", "main", "f", []byte("x"))
			},
			observe: func(t *testing.T, e *env, clean *repostate.Service, tenant, _ string) string {
				staged, _, err := clean.ListStaged(e.ctx, tenant, "repo", "main", "", 10)
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case len(staged) == 0:
					return stateBefore
				case len(staged) == 1 && string(staged[0].Data) == "x":
					return stateAfter
				}
				return fmt.Sprintf("staged = %+v", staged)
			},
		},
	}
}

// TestEveryWriteOfEveryFlowAnswersHonestly fails every write of every
// multi-step flow in turn (write 1, 2, ... until the flow completes
// without reaching the fault), once or as an outage from then on, before
// the write or after it landed (a lost reply), with reads failing too in a
// full outage (so a lost reply cannot be read back), and checks the answer
// against what is stored:
//
//   - success: the flow's final state is stored (a delete that stopped
//     after its mark answers success and is completed by the Cleaner);
//   - outcome unknown (503 with outcome: unknown): either state, never a
//     half-applied one;
//   - any other error ("nothing applied"): the state before the flow.
//
// After healing and a Cleaner run the state is still whole, and a delete
// that answered success is complete.
func TestEveryWriteOfEveryFlowAnswersHonestly(t *testing.T) {
	t.Parallel()
	for _, flow := range honestFlows() {
		t.Run(flow.name, func(t *testing.T) {
			t.Parallel()
			// One database per flow: the Cleaner of one case scans only
			// that flow's tenants; the cases run one after another.
			db := dbtest.New(t)
			tally := map[string]int{}
			for _, mode := range []kvtest.FaultMode{kvtest.FailBefore, kvtest.FailAfter} {
				for _, outage := range []string{"one", "writes", "all"} {
					for n := 1; ; n++ {
						e := newEnvWithDB(t, db)
						clean := e.service(e.raw, repostate.RetryPolicy{})
						tenant := newTenant()
						arg := flow.setup(t, e, clean, tenant)
						switch outage {
						case "one":
							e.faults.FailNthWrite(n, mode)
						case "writes":
							e.faults.FailWritesFrom(n, mode)
						default:
							e.faults.FailAllFrom(n, mode)
						}
						err := flow.run(e, tenant, arg)
						injected := e.faults.Injected()
						e.faults.Heal()
						if injected == 0 {
							if err != nil {
								t.Fatalf("write %d never reached, yet the flow failed: %v", n, err)
							}
							if got := flow.observe(t, e, clean, tenant, arg); got != stateAfter {
								t.Fatalf("fault-free run stored %q", got)
							}
							break
						}
						c := fmt.Sprintf("write %d %s, failing %s", n, mode, outage)
						got := flow.observe(t, e, clean, tenant, arg)
						answer := "nothing applied"
						switch {
						case err == nil:
							answer = "success"
							if got != stateAfter {
								t.Fatalf("%s: answered success, stored %q", c, got)
							}
						case repostate.IsUnknownOutcome(err):
							answer = "outcome unknown"
							if got != stateAfter && got != stateBefore {
								t.Fatalf("%s: answered outcome unknown, stored a half-applied %q", c, got)
							}
						default:
							if got != stateBefore {
								t.Fatalf("%s: answered %v (nothing applied), stored %q", c, err, got)
							}
							if code := repolock.ErrorCode(err); code != repolock.EUnavailable {
								t.Fatalf("%s: a store failure answered %q (%v), want unavailable", c, code, err)
							}
						}
						tally[answer]++
						// The Cleaner completes what the flow left and keeps
						// the stored state whole.
						if _, err := e.cleaner.Run(e.ctx); err != nil {
							t.Fatalf("%s: Cleaner: %v", c, err)
						}
						after := flow.observe(t, e, clean, tenant, arg)
						if after != got && !(answer == "success" && flow.name == "Delete") && !(answer != "success" && flow.name == "Create" && after == stateBefore) {
							t.Fatalf("%s: the Cleaner changed %q into %q", c, got, after)
						}
						if flow.name == "Delete" && err == nil {
							_, gerr := clean.Get(e.ctx, tenant, "repo")
							wantCode(t, c+": Get after a successful delete and a Cleaner run", gerr, repolock.ENotFound)
						}
						if n > 20 {
							t.Fatalf("%s: the flow keeps writing", c)
						}
					}
				}
			}
			t.Logf("%s: answers under injected faults: %v", flow.name, tally)
		})
	}
}
