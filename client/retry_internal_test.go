package client

import (
	"net/http"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 24, 2, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"0", 0},
		{"7", 7 * time.Second},
		{"-3", 0},
		{"soon", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
	} {
		if got := parseRetryAfter(tc.in, now); got != tc.want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestRetryDelay(t *testing.T) {
	p := RetryPolicy{MaxAttempts: 5, BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second}
	for _, tc := range []struct {
		attempt    int
		retryAfter time.Duration
		max        time.Duration
		exact      bool
	}{
		{1, 0, 100 * time.Millisecond, false},
		{3, 0, 400 * time.Millisecond, false},
		{10, 0, time.Second, false},
		{1, 300 * time.Millisecond, 300 * time.Millisecond, true}, // Retry-After wins
		{1, time.Hour, time.Second, true},                         // and is capped
	} {
		for range 50 {
			d := p.delay(tc.attempt, tc.retryAfter)
			if d <= 0 || d > tc.max || (tc.exact && d != tc.max) {
				t.Fatalf("delay(%d, %v) = %v, want (0, %v] (exact %v)", tc.attempt, tc.retryAfter, d, tc.max, tc.exact)
			}
		}
	}
}
