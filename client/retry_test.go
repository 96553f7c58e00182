package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/repolock/repolock/client"
)

// flaky answers the first len(statuses) requests with those statuses (an
// error body, the Retry-After given) and 200 {} afterwards, counting
// attempts.
type flaky struct {
	statuses   []int
	retryAfter string
	attempts   atomic.Int32
	seen       chan struct{}
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := int(f.attempts.Add(1))
	if f.seen != nil {
		select {
		case f.seen <- struct{}{}:
		default:
		}
	}
	w.Header().Set("Content-Type", "application/json")
	if n <= len(f.statuses) {
		if f.retryAfter != "" {
			w.Header().Set("Retry-After", f.retryAfter)
		}
		w.WriteHeader(f.statuses[n-1])
		w.Write([]byte(`{"error":{"code":"unavailable","message":"try later"}}`))
		return
	}
	w.Write([]byte(`{"name":"h","first_cursor_since_reset":0}`))
}

var fast = client.RetryPolicy{MaxAttempts: 4, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond}

func TestRetries(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		statuses     []int
		retryAfter   string
		call         func(context.Context, *client.Client) error
		wantAttempts int32
		wantErr      bool
	}{
		{"GET retried on 503 then 429", []int{503, 429}, "0", getHost, 3, false},
		{"Retry-After in seconds, capped by MaxDelay", []int{503}, "3600", getHost, 2, false},
		{"Retry-After as an HTTP date", []int{429}, time.Now().Add(time.Hour).UTC().Format(http.TimeFormat), getHost, 2, false},
		{"PUT retried", []int{503}, "", putHost, 2, false},
		{"DELETE retried", []int{503}, "", deleteTag, 2, false},
		{"gives up after MaxAttempts", []int{503, 503, 503, 503, 503}, "", getHost, 4, true},
		{"POST never retried", []int{503}, "0", createApp, 1, true},
		{"POST /v1/admin/gc never retried", []int{429}, "0", runGC, 1, true},
		{"PATCH never retried", []int{503}, "0", updateApp, 1, true},
		{"other statuses not retried", []int{500}, "0", getHost, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := &flaky{statuses: tc.statuses, retryAfter: tc.retryAfter}
			ts := httptest.NewServer(f)
			t.Cleanup(ts.Close)
			c := client.New(ts.URL, client.WithToken("t"), client.WithRetryPolicy(fast))
			err := tc.call(t.Context(), c)
			if got := f.attempts.Load(); got != tc.wantAttempts {
				t.Errorf("attempts = %d, want %d", got, tc.wantAttempts)
			}
			if tc.wantErr != (err != nil) {
				t.Errorf("err = %v, want error %v", err, tc.wantErr)
			}
			if tc.wantErr && tc.statuses[0] != 500 && !client.IsUnavailable(err) {
				t.Errorf("err = %v, want IsUnavailable", err)
			}
		})
	}
}

// TestRetryWaitEndsWithContext: a long Retry-After wait ends when the
// context is cancelled, with the last response's error.
func TestRetryWaitEndsWithContext(t *testing.T) {
	t.Parallel()
	f := &flaky{statuses: []int{503, 503}, retryAfter: "3600", seen: make(chan struct{}, 1)}
	ts := httptest.NewServer(f)
	t.Cleanup(ts.Close)
	c := client.New(ts.URL, client.WithRetryPolicy(client.RetryPolicy{MaxAttempts: 3, MaxDelay: time.Hour}))
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		<-f.seen
		cancel()
	}()
	// The cancel lands during the wait (the error is then also the 503) or,
	// rarely, while the first response is still being read.
	err := getHost(ctx, c)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
	var ce *client.Error
	if errors.As(err, &ce) && (ce.StatusCode != 503 || ce.RetryAfter != time.Hour) {
		t.Errorf("err = %#v, want the 503 with RetryAfter 1h", err)
	}
	if got := f.attempts.Load(); got != 1 {
		t.Errorf("attempts = %d, want 1", got)
	}
}

// TestNoRetryPolicy: MaxAttempts 1 disables retries.
func TestNoRetryPolicy(t *testing.T) {
	t.Parallel()
	f := &flaky{statuses: []int{503}}
	ts := httptest.NewServer(f)
	t.Cleanup(ts.Close)
	c := client.New(ts.URL, client.WithRetryPolicy(client.RetryPolicy{MaxAttempts: 1}))
	if err := getHost(t.Context(), c); !client.IsUnavailable(err) || f.attempts.Load() != 1 {
		t.Errorf("err = %v after %d attempts, want unavailable after 1", err, f.attempts.Load())
	}
}

func getHost(ctx context.Context, c *client.Client) error {
	_, err := c.GetSyncHost(ctx, "h")
	return err
}

func putHost(ctx context.Context, c *client.Client) error {
	_, _, err := c.PutSyncHost(ctx, "h", nil)
	return err
}

func deleteTag(ctx context.Context, c *client.Client) error { return c.DeleteTag(ctx, "r", "t") }

func createApp(ctx context.Context, c *client.Client) error {
	_, err := c.CreateApplication(ctx, client.CreateApplicationRequest{Name: "a", RepoURL: "u"})
	return err
}

func updateApp(ctx context.Context, c *client.Client) error {
	_, err := c.UpdateApplication(ctx, "id", client.UpdateApplicationRequest{})
	return err
}

func runGC(ctx context.Context, c *client.Client) error {
	_, err := c.RunGC(ctx, client.GCOptions{})
	return err
}

// TestOutcomeUnknown: a 503 whose commit outcome is unknown is reported as
// such and, being a POST, never retried.
func TestOutcomeUnknown(t *testing.T) {
	t.Parallel()
	var attempts atomic.Int32
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		attempts.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"error":{"code":"unavailable","message":"the database connection was lost while committing: the outcome is unknown; re-read before retrying","outcome":"unknown"}}`))
	}))
	t.Cleanup(ts.Close)
	c := client.New(ts.URL, client.WithRetryPolicy(fast))
	err := createApp(t.Context(), c)
	var ce *client.Error
	if !client.IsOutcomeUnknown(err) || !client.IsUnavailable(err) || !errors.As(err, &ce) || ce.RetryAfter != time.Second || attempts.Load() != 1 {
		t.Fatalf("err = %v (attempts %d), want one 503 with an unknown outcome", err, attempts.Load())
	}
	if client.IsOutcomeUnknown(&client.Error{StatusCode: 503, Code: client.CodeUnavailable}) {
		t.Fatal("a plain 503 reported an unknown outcome")
	}
}
