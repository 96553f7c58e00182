package syncstate

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/repolock/repolock/internal/dbtest"
)

// TestBatchMatchesOneByOne drives two tenants with the same random
// operations: one applies events with the set-based ApplyEvents, the other
// with one UPDATE per event, and a plain Go model of the rule runs alongside.
// After every operation all three must agree on every indicator, the
// needs-index reason and the applied/ignored counts. Operations cover
// replays, out-of-order revs, too_big, resets with and without a first
// cursor, strict mode, moves between hosts, listings and index results.
func TestBatchMatchesOneByOne(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	oneByOneTenant := dbtest.NewTenant(t, f.db, "").ID
	for seed := uint64(1); seed <= 8; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			runDifferential(t, f, oneByOneTenant, seed, 150)
		})
	}
}

var diffHosts = []string{"h1.example", "h2.example", "h3.example"}

func runDifferential(t *testing.T, f *fixture, oneByOneTenant string, seed uint64, steps int) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	// Each seed uses its own repositories and hosts so the runs of one
	// database do not see each other.
	prefix := fmt.Sprintf("s%d-", seed)
	hosts := make([]string, len(diffHosts))
	for i, h := range diffHosts {
		hosts[i] = prefix + h
	}
	tenants := []string{f.tenant, oneByOneTenant}
	m := newModel()
	for _, h := range hosts {
		strict := rng.IntN(2) == 0
		m.putHost(h, strict)
		for _, tn := range tenants {
			if _, _, err := f.store.PutHost(ctx, tn, h, ptr(strict)); err != nil {
				t.Fatal(err)
			}
		}
	}
	repos := make([]string, 24)
	for i := range repos {
		repos[i] = fmt.Sprintf("%sdid:plc:%02d", prefix, i)
	}
	head := map[string]int{} // newest rev index per repo on "the network"
	nextCursor := map[string]int64{}
	var sent []struct {
		host   string
		events []Event
	}

	for step := 0; step < steps; step++ {
		var desc string
		switch op := rng.IntN(100); {
		case op < 55: // a batch of events
			h := hosts[rng.IntN(len(hosts))]
			var events []Event
			if len(sent) > 0 && rng.IntN(8) == 0 { // resend an earlier batch
				b := sent[rng.IntN(len(sent))]
				h, events = b.host, b.events
			} else {
				n := 1 + rng.IntN(12)
				for range n {
					nextCursor[h] += int64(1 + rng.IntN(2))
					r := repos[rng.IntN(len(repos))]
					var rv int
					switch k := rng.IntN(10); {
					case k < 7:
						head[r]++
						rv = head[r]
					case k < 9:
						rv = rng.IntN(head[r] + 1) // replay or out of order
					default:
						head[r] += 1 + rng.IntN(3)
						rv = head[r]
					}
					events = append(events, Event{Cursor: nextCursor[h], Repo: r, Rev: rev(rv), TooBig: rng.IntN(8) == 0})
				}
				sent = append(sent, struct {
					host   string
					events []Event
				}{h, events})
			}
			desc = fmt.Sprintf("events %s %+v", h, events)
			want := m.applyEvents(h, events)
			got, err := f.store.ApplyEvents(ctx, tenants[0], h, events)
			if err != nil {
				t.Fatalf("step %d %s: batch: %v", step, desc, err)
			}
			got1, err := f.store.applyEventsOneByOne(ctx, tenants[1], h, events)
			if err != nil {
				t.Fatalf("step %d %s: one by one: %v", step, desc, err)
			}
			for name, g := range map[string]EventsResult{"batch": got, "one-by-one": got1} {
				if g.Applied != want.Applied || g.Ignored != want.Ignored || g.Reset != want.Reset {
					t.Fatalf("step %d %s: %s result applied %d ignored %d reset %v; model %+v",
						step, desc, name, g.Applied, g.Ignored, g.Reset, want)
				}
			}
		case op < 65: // (re)connection
			h := hosts[rng.IntN(len(hosts))]
			c := Connection{OutdatedCursor: rng.IntN(2) == 0}
			if rng.IntN(2) == 0 {
				nextCursor[h] += int64(rng.IntN(30))
				c.FirstCursor = ptr(nextCursor[h] + 1)
			} else if rng.IntN(3) == 0 {
				nextCursor[h] += int64(rng.IntN(30)) // the next batch skips ahead
			}
			desc = fmt.Sprintf("connect %s outdated=%v first=%v", h, c.OutdatedCursor, c.FirstCursor)
			wantReset := m.connect(h, c)
			for _, tn := range tenants {
				res, err := f.store.Connect(ctx, tn, h, c)
				if err != nil {
					t.Fatalf("step %d %s: %v", step, desc, err)
				}
				if res.Reset != wantReset {
					t.Fatalf("step %d %s: reset %v, model %v", step, desc, res.Reset, wantReset)
				}
			}
		case op < 88: // an index result
			r := repos[rng.IntN(len(repos))]
			h := hosts[rng.IntN(len(hosts))]
			if mr, ok := m.repos[r]; ok && rng.IntN(4) != 0 {
				h = mr.host // mostly from the recorded host
			}
			rv := head[r]
			if rng.IntN(4) == 0 {
				rv = rng.IntN(head[r] + 1)
			}
			cb := m.hosts[h].fcsr
			if rng.IntN(3) == 0 {
				cb = rng.Int64N(m.hosts[h].highest() + 1)
			}
			ir := IndexResult{Host: h, Rev: rev(rv), CursorBefore: cb}
			desc = fmt.Sprintf("indexed %s %+v", r, ir)
			m.indexed(r, ir)
			for _, tn := range tenants {
				if _, err := f.store.RecordIndexed(ctx, tn, r, ir); err != nil {
					t.Fatalf("step %d %s: %v", step, desc, err)
				}
			}
		default: // a listing
			h := hosts[rng.IntN(len(hosts))]
			var listed []ListedRepo
			for _, i := range rng.Perm(len(repos))[:rng.IntN(8)] {
				listed = append(listed, ListedRepo{Repo: repos[i], Rev: rev(head[repos[i]])})
			}
			cb := m.hosts[h].fcsr
			desc = fmt.Sprintf("listing %s cb=%d %+v", h, cb, listed)
			want := m.listing(h, cb, listed)
			for _, tn := range tenants {
				got, err := f.store.RecordListing(ctx, tn, h, cb, listed)
				if err != nil {
					t.Fatalf("step %d %s: %v", step, desc, err)
				}
				if got != want {
					t.Fatalf("step %d %s: result %+v, model %+v", step, desc, got, want)
				}
			}
		}
		for i, tn := range tenants {
			got := f.allRepos(t, tn, prefix)
			want := m.snapshot()
			if !slices.Equal(got, want) {
				t.Fatalf("seed %d step %d after %s\ntenant %d (%s):\n got  %+v\n want %+v",
					seed, step, desc, i, []string{"batch", "one-by-one"}[i], got, want)
			}
		}
	}
	// The paginated needs-index query returns the model's set, with small
	// pages crossing both phases.
	for _, h := range hosts {
		want := m.needsIndex(h)
		got := (&fixture{db: f.db, store: f.store, tenant: f.tenant}).needsIndex(t, h, 1+rng.IntN(4))
		sort.Strings(got)
		if !slices.Equal(got, want) {
			t.Fatalf("needs index on %s: %v, model %v", h, got, want)
		}
	}
}

// allRepos returns the tenant's repositories whose id starts with prefix.
func (f *fixture) allRepos(t *testing.T, tenant, prefix string) []ind {
	t.Helper()
	var out []ind
	token := ""
	for {
		page, next, err := f.store.ListRepositories(context.Background(), tenant, ListOptions{PageSize: MaxPageSize, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page {
			if len(r.Repo) >= len(prefix) && r.Repo[:len(prefix)] == prefix {
				out = append(out, indOf(r))
			}
		}
		if next == "" {
			return out
		}
		token = next
	}
}

// model is the rule in plain Go, written from the issue and the design
// (with docs/syncstate.md's corrections), independently of the SQL.
type model struct {
	hosts map[string]*modelHost
	repos map[string]*modelRepo
}

type modelHost struct {
	cursor                    *int64
	fcsr                      int64
	strict, awaiting, pending bool
}

func (h *modelHost) highest() int64 {
	if h.cursor != nil && *h.cursor > h.fcsr {
		return *h.cursor
	}
	return h.fcsr
}

type modelRepo struct {
	host           string
	lir, frsr, lfr string
	fcsr           int64
}

func newModel() *model {
	return &model{hosts: map[string]*modelHost{}, repos: map[string]*modelRepo{}}
}

func (m *model) putHost(name string, strict bool) { m.hosts[name] = &modelHost{strict: strict} }

func (m *model) firstEvent(h *modelHost, c int64) bool {
	if !h.awaiting {
		return false
	}
	pending := h.pending
	h.awaiting, h.pending = false, false
	if pending || (h.strict && h.cursor != nil && c > *h.cursor+1) {
		if c > h.fcsr {
			h.fcsr = c
			return true
		}
	}
	return false
}

func (m *model) connect(name string, c Connection) bool {
	h := m.hosts[name]
	h.awaiting = true
	h.pending = h.pending || c.OutdatedCursor
	if c.FirstCursor != nil {
		return m.firstEvent(h, *c.FirstCursor)
	}
	return false
}

func maxRev(revs ...string) string {
	out := ""
	for _, r := range revs {
		if r > out {
			out = r
		}
	}
	return out
}

func (m *model) applyEvents(hostName string, events []Event) EventsResult {
	h := m.hosts[hostName]
	reset := m.firstEvent(h, events[0].Cursor)
	applied := 0
	lastInBatch := map[string]string{}
	for _, e := range events {
		if prev, ok := lastInBatch[e.Repo]; ok && e.Rev <= prev {
			continue // replay within the batch
		}
		lastInBatch[e.Repo] = e.Rev
		r, ok := m.repos[e.Repo]
		if !ok {
			m.repos[e.Repo] = &modelRepo{host: hostName, frsr: e.Rev, fcsr: h.fcsr}
			applied++
			continue
		}
		seen := maxRev(r.lir, r.frsr, r.lfr)
		switch {
		case e.Rev <= seen:
			// replay
		case r.host != hostName:
			r.host, r.frsr, r.fcsr = hostName, e.Rev, h.fcsr
			applied++
		case r.fcsr < h.fcsr || e.TooBig || seen == "":
			r.frsr, r.fcsr = e.Rev, max(r.fcsr, h.fcsr)
			applied++
		case r.frsr != "" && maxRev(r.lir, r.lfr) < r.frsr:
			// in a gap
		default:
			r.lfr = e.Rev
			applied++
		}
	}
	last := events[len(events)-1].Cursor
	if h.cursor == nil || last > *h.cursor {
		h.cursor = &last
	}
	return EventsResult{Applied: applied, Ignored: len(events) - applied, Reset: reset}
}

func (m *model) indexed(repo string, ir IndexResult) {
	r, ok := m.repos[repo]
	if !ok {
		m.repos[repo] = &modelRepo{host: ir.Host, lir: ir.Rev, fcsr: ir.CursorBefore}
		return
	}
	r.lir = maxRev(r.lir, ir.Rev)
	if r.host == ir.Host {
		r.fcsr = max(r.fcsr, ir.CursorBefore)
	} else {
		r.host, r.fcsr, r.frsr = ir.Host, ir.CursorBefore, ""
	}
}

func (m *model) listing(host string, cb int64, listed []ListedRepo) ListingResult {
	var res ListingResult
	for _, l := range listed {
		r, ok := m.repos[l.Repo]
		switch {
		case !ok:
			m.repos[l.Repo] = &modelRepo{host: host, frsr: l.Rev, fcsr: cb}
			res.Created++
		case r.frsr == "" && r.host == host:
			r.frsr, r.fcsr = l.Rev, max(r.fcsr, cb)
			res.Initialized++
		default:
			res.Unchanged++
		}
	}
	return res
}

func (m *model) reason(r *modelRepo) Reason {
	switch {
	case r.lir == "":
		return ReasonNeverIndexed
	case r.frsr != "" && maxRev(r.lir, r.lfr) < r.frsr:
		return ReasonRevisionGap
	case r.fcsr < m.hosts[r.host].fcsr:
		return ReasonCursorReset
	}
	return ReasonNone
}

func (m *model) snapshot() []ind {
	names := make([]string, 0, len(m.repos))
	for n := range m.repos {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]ind, 0, len(names))
	for _, n := range names {
		r := m.repos[n]
		reason := m.reason(r)
		out = append(out, ind{Host: r.host, LIR: r.lir, FRSR: r.frsr, FCSR: r.fcsr, LFR: r.lfr,
			HostFCSR: m.hosts[r.host].fcsr, NeedsIndex: reason != ReasonNone, Reason: reason})
	}
	return out
}

func (m *model) needsIndex(host string) []string {
	var out []string
	for n, r := range m.repos {
		if r.host == host && m.reason(r) != ReasonNone {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}
