package syncstate

import (
	"context"
	"testing"
	"time"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/database"
	"github.com/repolock/repolock/internal/dbtest"
)

// testNow is the clock of test stores; revs are TIDs dated before it.
var testNow = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// rev returns the i-th rev of the tests: a TID i seconds after 2025-01-01,
// so rev(i) < rev(j) byte-wise when i < j.
func rev(i int) string {
	return NewTID(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i)*time.Second), 0)
}

type fixture struct {
	db     *database.DB
	store  *Store
	tenant string
}

func newFixture(t testing.TB, opts ...dbtest.Option) *fixture {
	t.Helper()
	db := dbtest.New(t, opts...)
	return &fixture{db: db, store: New(db, Options{Now: func() time.Time { return testNow }}), tenant: dbtest.NewTenant(t, db, "").ID}
}

func (f *fixture) putHost(t testing.TB, name string) Host {
	t.Helper()
	h, _, err := f.store.PutHost(context.Background(), f.tenant, name, nil)
	if err != nil {
		t.Fatalf("PutHost(%s): %v", name, err)
	}
	return h
}

func (f *fixture) events(t testing.TB, host string, events ...Event) EventsResult {
	t.Helper()
	res, err := f.store.ApplyEvents(context.Background(), f.tenant, host, events)
	if err != nil {
		t.Fatalf("ApplyEvents(%s): %v", host, err)
	}
	return res
}

func (f *fixture) indexed(t testing.TB, repo, host, rev string, cursorBefore int64) Repository {
	t.Helper()
	r, err := f.store.RecordIndexed(context.Background(), f.tenant, repo, IndexResult{Host: host, Rev: rev, CursorBefore: cursorBefore})
	if err != nil {
		t.Fatalf("RecordIndexed(%s): %v", repo, err)
	}
	return r
}

func (f *fixture) connect(t testing.TB, host string, outdated bool, first *int64) ConnectResult {
	t.Helper()
	res, err := f.store.Connect(context.Background(), f.tenant, host, Connection{OutdatedCursor: outdated, FirstCursor: first})
	if err != nil {
		t.Fatalf("Connect(%s): %v", host, err)
	}
	return res
}

func (f *fixture) repo(t testing.TB, repo string) Repository {
	t.Helper()
	r, err := f.store.GetRepository(context.Background(), f.tenant, repo)
	if err != nil {
		t.Fatalf("GetRepository(%s): %v", repo, err)
	}
	return r
}

func (f *fixture) host(t testing.TB, name string) Host {
	t.Helper()
	h, err := f.store.GetHost(context.Background(), f.tenant, name)
	if err != nil {
		t.Fatalf("GetHost(%s): %v", name, err)
	}
	return h
}

// needsIndex lists every repository of host that needs a re-index, reading
// all pages of the given size.
func (f *fixture) needsIndex(t testing.TB, host string, pageSize int) []string {
	t.Helper()
	var out []string
	token := ""
	for range 100000 {
		page, next, err := f.store.ListRepositories(context.Background(), f.tenant,
			ListOptions{Host: host, NeedsIndex: true, PageSize: pageSize, PageToken: token})
		if err != nil {
			t.Fatalf("ListRepositories: %v", err)
		}
		for _, r := range page {
			if !r.NeedsIndex {
				t.Fatalf("needs-index list returned %s with needs_index=false", r.Repo)
			}
			out = append(out, r.Repo)
		}
		if next == "" {
			return out
		}
		token = next
	}
	t.Fatal("needs-index listing does not end")
	return nil
}

// ind is the comparable part of a Repository.
type ind struct {
	Host       string
	LIR        string // last_indexed_rev
	FRSR       string // first_rev_since_reset
	FCSR       int64  // first_cursor_since_reset
	LFR        string // last_firehose_rev
	HostFCSR   int64
	NeedsIndex bool
	Reason     Reason
}

func indOf(r Repository) ind {
	return ind{r.Host, r.LastIndexedRev, r.FirstRevSinceReset, r.FirstCursorSinceReset, r.LastFirehoseRev,
		r.HostFirstCursorSinceReset, r.NeedsIndex, r.Reason}
}

func (f *fixture) assertRepo(t testing.TB, repo string, want ind) Repository {
	t.Helper()
	r := f.repo(t, repo)
	if got := indOf(r); got != want {
		t.Fatalf("repository %s:\n got  %+v\n want %+v", repo, got, want)
	}
	return r
}

func assertCode(t testing.TB, err error, code repolock.Code) {
	t.Helper()
	if got := repolock.ErrorCode(err); got != code {
		t.Fatalf("error code = %q, want %q (err: %v)", got, code, err)
	}
}

func ptr[T any](v T) *T { return &v }
