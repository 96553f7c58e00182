package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/repolock/repolock/client"
	"github.com/repolock/repolock/internal/contracttest"
	"github.com/repolock/repolock/internal/dbtest"
	"github.com/repolock/repolock/internal/httpapi/httpapitest"
	"github.com/repolock/repolock/internal/pagetoken"
)

// cutWriter ends the connection (http.ErrAbortHandler) after the stream
// delivered `after` lock events.
type cutWriter struct {
	http.ResponseWriter
	left int
}

func (w *cutWriter) Write(p []byte) (int, error) {
	if strings.Contains(string(p), "event: acquired") {
		if w.left == 0 {
			panic(http.ErrAbortHandler)
		}
		w.left--
	}
	return w.ResponseWriter.Write(p)
}

func (w *cutWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// TestWatch: Watch delivers a tenant's events in order; when the
// connection is cut, and when the server answers 503 with Retry-After, it
// resumes from the last cursor: every event exactly once. A cursor older
// than the retention ends the sequence with cursor_expired.
func TestWatch(t *testing.T) {
	t.Parallel()
	srv := httpapitest.New(t, dbtest.New(t), adminToken)
	var streams, refused atomic.Int32
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/events" && r.Header.Get("Accept") == "text/event-stream" {
			switch streams.Add(1) {
			case 1: // the first stream is cut after one event
				w = &cutWriter{ResponseWriter: w, left: 1}
			case 2: // the first reconnection is refused for a second
				refused.Add(1)
				w.Header().Set("Retry-After", "1")
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = w.Write([]byte(`{"error":{"code":"unavailable","message":"try again"}}`))
				return
			}
		}
		srv.ServeHTTP(w, r)
	}))
	defer ts.Close()
	hc := &http.Client{Transport: contracttest.New(t).Transport(t, nil)}
	admin := client.New(ts.URL, client.WithToken(adminToken), client.WithHTTPClient(hc))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	mk := func(name string) *client.Client {
		u, err := admin.CreateUser(ctx, client.CreateUserRequest{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		return client.New(ts.URL, client.WithToken(u.Token), client.WithHTTPClient(hc))
	}
	alice, bob := mk("alice"), mk("bob")

	head, err := alice.Events(ctx, client.WatchOptions{})
	if err != nil || head.Cursor == "" || len(head.Events) != 0 {
		t.Fatalf("head: %+v %v", head, err)
	}
	want := []string{"github.com/acme/a", "github.com/acme/b", "github.com/acme/c"}
	for _, u := range want {
		if _, err := alice.AcquireLock(ctx, "https://"+u); err != nil {
			t.Fatal(err)
		}
		if _, err := bob.AcquireLock(ctx, "https://"+u+"-bob"); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	var last string
	for ev, err := range alice.Watch(ctx, client.WatchOptions{After: head.Cursor}) {
		if err != nil {
			t.Fatalf("watch: %v (got %v)", err, got)
		}
		got = append(got, ev.NormalizedURL)
		last = ev.Cursor
		if len(got) == len(want) {
			break
		}
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("watched %v, want %v", got, want)
	}
	if streams.Load() < 3 || refused.Load() != 1 {
		t.Fatalf("%d streams, %d refused: the cut and the 503 were not both retried", streams.Load(), refused.Load())
	}
	// Nothing more after the last cursor: a long poll with a short wait
	// answers empty with the same position.
	p, err := alice.Events(ctx, client.WatchOptions{After: last, Wait: 100 * time.Millisecond})
	if err != nil || len(p.Events) != 0 {
		t.Fatalf("after the last: %+v %v", p, err)
	}

	old := pagetoken.Encode(pagetoken.KindEvents, "admin", map[string]int64{"x": 1000, "i": 0, "t": time.Now().Add(-100 * 24 * time.Hour).Unix()})
	for _, err := range admin.Watch(ctx, client.WatchOptions{After: old}) {
		var e *client.Error
		if !client.IsCursorExpired(err) || !errors.As(err, &e) || e.StatusCode != http.StatusGone {
			t.Fatalf("expired cursor: %v; want cursor_expired 410", err)
		}
	}
	if _, err := admin.Events(ctx, client.WatchOptions{After: old}); !client.IsCursorExpired(err) {
		t.Fatalf("Events with an expired cursor: %v", err)
	}
}
