package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/repolock/repolock/internal/pagetoken"
)

type eventPage struct {
	Events []struct {
		Cursor        string `json:"cursor"`
		ID            int64  `json:"id"`
		Kind          string `json:"kind"`
		NormalizedURL string `json:"normalized_url"`
		Actor         string `json:"actor"`
		Owner         string `json:"owner"`
	} `json:"events"`
	Cursor string `json:"cursor"`
}

func (e *apiEnv) events(token, query string) eventPage {
	e.t.Helper()
	status, _, out := e.send(http.MethodGet, "/v1/events?"+query, token, nil, nil)
	if status != http.StatusOK {
		e.t.Fatalf("GET /v1/events?%s: %d %s", query, status, out)
	}
	var p eventPage
	if err := json.Unmarshal(out, &p); err != nil {
		e.t.Fatal(err)
	}
	return p
}

func (e *apiEnv) acquire(token, repo string) {
	e.t.Helper()
	e.must(http.StatusOK, http.MethodPost, "/v1/locks/acquire", token, map[string]any{"repo_url": repo})
}

// TestEventsLongPoll: a tenant's page has its acquire and the denial of
// another tenant on its lock, not the other tenant's own events; the
// admin sees all; a long poll answers when an event comes.
func TestEventsLongPoll(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	alice, bob := e.tenant("alice"), e.tenant("bob")
	ha, hb, hadm := e.events(alice, "").Cursor, e.events(bob, "").Cursor, e.events(adminToken, "").Cursor

	e.acquire(alice, "https://github.com/acme/api")
	e.acquire(bob, "https://github.com/bob/own")
	if st, _ := e.call(http.MethodPost, "/v1/locks/acquire", bob, map[string]any{"repo_url": "git@github.com:acme/api.git"}); st != http.StatusConflict {
		t.Fatalf("bob's claim of alice's repository: %d, want 409", st)
	}
	kinds := func(token, cursor string, n int) []string {
		var got []string
		for len(got) < n {
			p := e.events(token, "wait=10s&after="+url.QueryEscape(cursor))
			for _, ev := range p.Events {
				got = append(got, ev.Kind+" "+ev.NormalizedURL+" "+ev.Actor+">"+ev.Owner)
			}
			cursor = p.Cursor
		}
		if p := e.events(token, "after="+url.QueryEscape(cursor)); len(p.Events) != 0 || p.Cursor == "" {
			t.Fatalf("after the last event: %+v", p)
		}
		return got
	}
	want := map[string][]string{
		"alice": {"acquired github.com/acme/api alice>alice", "denied github.com/acme/api bob>alice"},
		"bob":   {"acquired github.com/bob/own bob>bob", "denied github.com/acme/api bob>alice"},
		"admin": {"acquired github.com/acme/api alice>alice", "acquired github.com/bob/own bob>bob", "denied github.com/acme/api bob>alice"},
	}
	for who, c := range map[string][2]string{"alice": {alice, ha}, "bob": {bob, hb}, "admin": {adminToken, hadm}} {
		if got := kinds(c[0], c[1], len(want[who])); strings.Join(got, "|") != strings.Join(want[who], "|") {
			t.Errorf("%s: %q\nwant %q", who, got, want[who])
		}
	}
	// kinds filter
	p := e.events(alice, "wait=30s&kinds=denied&after="+url.QueryEscape(ha))
	if len(p.Events) != 1 || p.Events[0].Kind != "denied" {
		t.Fatalf("kinds=denied: %+v", p)
	}

	// A long poll that is waiting answers when the event comes.
	head := e.events(alice, "").Cursor
	done := make(chan eventPage, 1)
	go func() {
		defer close(done)
		var p eventPage
		for p.Cursor == "" || len(p.Events) == 0 { // an answer at the deadline has none: ask again
			if p.Cursor != "" {
				head = p.Cursor
			}
			p = e.events(alice, "wait=60s&after="+url.QueryEscape(head))
		}
		done <- p
	}()
	e.acquire(alice, "https://github.com/acme/web")
	if p := <-done; len(p.Events) != 1 || p.Events[0].NormalizedURL != "github.com/acme/web" {
		t.Fatalf("long poll: %+v", p)
	}
}

// TestEventsRefused: bad parameters are 400, another tenant's cursor 400, a
// cursor older than the retention 410 cursor_expired.
func TestEventsRefused(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t)
	alice, bob := e.tenant("alice"), e.tenant("bob")
	ca := e.events(alice, "").Cursor
	for _, q := range []string{"kinds=exploded", "wait=1h", "wait=soon", "page_size=0", "page_size=501", "after=garbage", "after=" + url.QueryEscape(ca)} {
		e.wantErr(http.StatusBadRequest, "invalid_argument", http.MethodGet, "/v1/events?"+q, bob, nil)
	}
	old := pagetoken.Encode(pagetoken.KindEvents, "admin", map[string]int64{"x": 1000, "i": 0, "t": time.Now().Add(-91 * 24 * time.Hour).Unix()})
	e.wantErr(http.StatusGone, "cursor_expired", http.MethodGet, "/v1/events?after="+url.QueryEscape(old), adminToken, nil)
	e.wantErr(http.StatusUnauthorized, "unauthenticated", http.MethodGet, "/v1/events", "", nil)
}

// sseEvent is one Server-Sent Event.
type sseEvent struct{ id, event, data string }

type sseStream struct {
	t    *testing.T
	res  *http.Response
	r    *bufio.Reader
	stop context.CancelFunc
}

// openStream opens GET /v1/events as Server-Sent Events (raw HTTP: the
// body is a stream, not a document the validator could read to its end).
func (e *apiEnv) openStream(t *testing.T, token, query, lastID string) (*sseStream, int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.ts.URL+"/v1/events?"+query, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	res, err := e.ts.Client().Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		res.Body.Close()
		cancel()
		return nil, res.StatusCode
	}
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	s := &sseStream{t: t, res: res, r: bufio.NewReader(res.Body), stop: cancel}
	t.Cleanup(s.close)
	return s, res.StatusCode
}

func (s *sseStream) close() { s.stop(); s.res.Body.Close() }

// next reads the next event; comments are counted in heartbeats.
func (s *sseStream) next(heartbeats *int) sseEvent {
	s.t.Helper()
	var ev sseEvent
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			s.t.Fatalf("reading the stream: %v", err)
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "":
			if ev.event != "" || ev.data != "" {
				return ev
			}
		case strings.HasPrefix(line, ":"):
			if heartbeats != nil {
				*heartbeats++
			}
		case strings.HasPrefix(line, "id: "):
			ev.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			ev.event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			ev.data = strings.TrimPrefix(line, "data: ")
		}
	}
}

// nextEvent skips bookmarks.
func (s *sseStream) nextEvent() sseEvent {
	s.t.Helper()
	for {
		if ev := s.next(nil); ev.event != "bookmark" {
			return ev
		}
	}
}

// TestEventsStream: the stream starts with a bookmark, delivers each event
// with its cursor as id, resumes after Last-Event-ID, outlives the request
// timeout with heartbeats and bookmarks, and caps a tenant's watchers.
func TestEventsStream(t *testing.T) {
	t.Parallel()
	// A request timeout a loaded CI machine's acquires fit in (300 ms did
	// not always); the stream must outlive it (30 heartbeats: 1.5 s).
	e := newAPIEnv(t, withRequestTimeout(time.Second), withEventStreams(50*time.Millisecond, 5*time.Second))
	alice, bob := e.tenant("alice"), e.tenant("bob")
	s, _ := e.openStream(t, alice, "", "")
	first := s.next(nil)
	if first.event != "bookmark" || first.id == "" || !strings.Contains(first.data, first.id) {
		t.Fatalf("first event: %+v; want a bookmark with the cursor", first)
	}
	e.acquire(alice, "https://github.com/acme/one")
	e.acquire(bob, "https://github.com/bob/one") // not alice's
	e.acquire(alice, "https://github.com/acme/two")
	one, two := s.nextEvent(), s.nextEvent()
	for i, ev := range []sseEvent{one, two} {
		var m map[string]any
		if err := json.Unmarshal([]byte(ev.data), &m); err != nil {
			t.Fatal(err)
		}
		wantURL := []string{"github.com/acme/one", "github.com/acme/two"}[i]
		if ev.event != "acquired" || m["normalized_url"] != wantURL || m["cursor"] != ev.id {
			t.Fatalf("event %d: %+v; want acquired %s with id = cursor", i, ev, wantURL)
		}
	}

	// Resume after the first: the second comes again, nothing of bob's.
	r, _ := e.openStream(t, alice, "", one.id)
	if ev := r.nextEvent(); ev.id != two.id {
		t.Fatalf("resumed after %s: %+v, want the event %s", one.id, ev, two.id)
	}

	// The stream lives past the request timeout (1s): heartbeats keep
	// coming, and then an event still arrives.
	beats := 0
	for beats < 30 {
		s.next(&beats)
	}
	e.acquire(alice, "https://github.com/acme/three")
	if ev := s.nextEvent(); !strings.Contains(ev.data, "acme/three") {
		t.Fatalf("after the heartbeats: %+v", ev)
	}

	// The watcher cap: alice holds 2; 18 more fill it; one more is 429.
	for range 18 {
		if _, st := e.openStream(t, alice, "", ""); st != http.StatusOK {
			t.Fatalf("watcher within the cap: %d", st)
		}
	}
	if _, st := e.openStream(t, alice, "", ""); st != http.StatusTooManyRequests {
		t.Fatalf("21st watcher: %d, want 429", st)
	}
	if _, st := e.openStream(t, bob, "", ""); st != http.StatusOK {
		t.Fatalf("another tenant's watcher: %d", st)
	}
	// A refused cursor is an HTTP error before the stream starts.
	if _, st := e.openStream(t, bob, "", one.id); st != http.StatusBadRequest {
		t.Fatalf("alice's cursor on bob's stream: %d, want 400", st)
	}
}

// TestEventsRateLimit: a stream counts against the tenant's rate limit
// once, when it connects, however long it runs: with a bucket of 3 that
// never refills in the test's time, a stream that lives through many
// heartbeats leaves 2 requests, then 429.
func TestEventsRateLimit(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t, withRateLimit(0.0001, 3), withEventStreams(20*time.Millisecond, 5*time.Second))
	alice := e.tenant("alice")
	s, st := e.openStream(t, alice, "", "")
	if st != http.StatusOK {
		t.Fatalf("stream: %d", st)
	}
	beats := 0
	for beats < 10 {
		s.next(&beats)
	}
	for i := range 2 {
		if st, _ := e.call(http.MethodGet, "/v1/me", alice, nil); st != http.StatusOK {
			t.Fatalf("request %d after the stream: %d, want 200", i+1, st)
		}
	}
	if st, _ := e.call(http.MethodGet, "/v1/me", alice, nil); st != http.StatusTooManyRequests {
		t.Fatalf("4th request: %d, want 429", st)
	}
}

// A watcher gives its tenant's share of the pool back while it waits: with
// a share of one request in flight, a tenant with an open stream and a
// long poll in progress is still served (make bench-watch's 10 watchers
// per tenant held the whole share, and every acquire of the tenant got
// 429).
func TestEventsHoldNoShare(t *testing.T) {
	t.Parallel()
	// A request waits up to 5 s for the slot: the long poll's setup may
	// hold it for a moment, a waiting watcher must not.
	e := newAPIEnv(t, withShare(1, 5*time.Second), withEventStreams(20*time.Millisecond, 5*time.Second))
	alice := e.tenant("alice")
	s, st := e.openStream(t, alice, "", "")
	if st != http.StatusOK {
		t.Fatalf("stream: %d", st)
	}
	beats := 0
	for beats < 2 {
		s.next(&beats)
	}
	polled := make(chan int, 1)
	go func() {
		st, _ := e.call(http.MethodGet, "/v1/events?wait=60s", alice, nil)
		polled <- st
	}()
	for i := range 3 {
		if st, _ := e.call(http.MethodGet, "/v1/me", alice, nil); st != http.StatusOK {
			t.Fatalf("request %d beside the watchers: %d, want 200", i+1, st)
		}
	}
	e.must(http.StatusCreated, http.MethodPost, "/v1/applications", alice, map[string]any{"name": "woken", "repo_url": "https://github.com/acme/woken"})
	if st := <-polled; st != http.StatusOK {
		t.Fatalf("long poll: %d", st)
	}
}
