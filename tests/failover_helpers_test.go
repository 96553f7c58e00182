//go:build ha || patroni

package tests

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// deleteOutcome is what a failover test knows of a DELETE it sent.
type deleteOutcome int

const (
	deleteNotSent deleteOutcome = iota // no delete was sent
	deleteApplied                      // answered 204, or 404 after an attempt whose outcome was unknown
	deleteUnknown                      // no definite answer before the load stopped, or an unexpected one
)

// deleteApplication deletes an application the way a client that follows
// the 503's advice ("the outcome is unknown; re-read before retrying")
// does: a 503 may come after the commit (the connection to a primary that
// was killed was lost while committing), so the DELETE is sent again until
// the answer is definite. 204 means this attempt deleted it; 404 after a
// 503 means an earlier attempt did. Counting such a delete as refused would
// count its application as an acknowledged create lost in the failover,
// which is what a run of make test-patroni once reported. Each answer goes
// to note (retry: whether an attempt went before it, so a 404 is expected).
// It gives up when done is closed: the outcome then stays unknown.
func deleteApplication(t *testing.T, s *server, token, id string, done <-chan struct{},
	note func(start time.Time, status int, raw []byte, retry bool)) deleteOutcome {
	t.Helper()
	for attempt := 0; ; attempt++ {
		start := time.Now()
		status, _, raw := s.doRaw(t, http.MethodDelete, "/v1/applications/"+id, token, nil, nil)
		note(start, status, raw, attempt > 0)
		switch {
		case status == http.StatusNoContent, status == http.StatusNotFound && attempt > 0:
			return deleteApplied
		case status != http.StatusServiceUnavailable:
			return deleteUnknown // note listed it as unexpected
		}
		select {
		case <-done:
			return deleteUnknown
		case <-time.After(20 * time.Millisecond): // the 503's Retry-After, shortened: the test measures the recovery
		}
	}
}

// failureRecap repeats a test's failures after everything its cleanups
// print (the server and daemon logs, hundreds of lines): CI shows the tail
// of the output, which would otherwise hold only logs. Create it before
// anything that registers cleanups, so that its own runs last.
type failureRecap struct {
	t     *testing.T
	mu    sync.Mutex
	stage string
	msgs  []string
}

func newFailureRecap(t *testing.T) *failureRecap {
	r := &failureRecap{t: t, stage: "setting up"}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		what := strings.Join(r.msgs, "; ")
		if what == "" {
			what = "see the first error above the logs"
		}
		t.Logf("%s FAILED while %s: %s", t.Name(), r.stage, what)
	})
	return r
}

// Stage names what the test is doing, for the recap of a failure a helper
// reported (waitUntil's "condition not reached").
func (r *failureRecap) Stage(s string) {
	r.mu.Lock()
	r.stage = s
	r.mu.Unlock()
}

func (r *failureRecap) record(format string, args []any) string {
	msg := fmt.Sprintf(format, args...)
	r.mu.Lock()
	r.msgs = append(r.msgs, msg)
	r.mu.Unlock()
	return msg
}

func (r *failureRecap) Errorf(format string, args ...any) {
	r.t.Helper()
	r.t.Error(r.record(format, args))
}

func (r *failureRecap) Fatalf(format string, args ...any) {
	r.t.Helper()
	r.t.Fatal(r.record(format, args))
}
