package authguard

import (
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestPerAddressBudget(t *testing.T) {
	t.Parallel()
	g := New(Config{PerAddressRate: 0.5, PerAddressBurst: 3, GlobalRate: 100, GlobalBurst: 100, MaxAddresses: 10})
	if _, blocked := g.Blocked("a", t0); blocked {
		t.Fatal("a fresh address is blocked")
	}
	for i := range 3 {
		if wait := g.Failed("a", t0); wait != 0 {
			t.Fatalf("failure %d within the budget: wait %v", i+1, wait)
		}
	}
	wait, blocked := g.Blocked("a", t0)
	if !blocked || wait != 2*time.Second {
		t.Fatalf("after 3 failures: blocked %v, wait %v; want true, 2s (one failure at 0.5/s)", blocked, wait)
	}
	if wait := g.Failed("a", t0); wait != 2*time.Second {
		t.Fatalf("a 4th failure: wait %v, want 2s", wait)
	}
	if _, blocked := g.Blocked("b", t0); blocked {
		t.Fatal("another address is blocked by a's failures")
	}
	if _, blocked := g.Blocked("a", t0.Add(2*time.Second)); blocked {
		t.Fatal("still blocked after the refill")
	}
	// 4 failures (the 4th refused) and one refusal by Blocked.
	if st := g.Stats(); st != (Stats{Failures: 4, Refused: 2}) {
		t.Fatalf("Stats %+v, want 4 failures and 2 refused", st)
	}
}

func TestGlobalBudget(t *testing.T) {
	t.Parallel()
	g := New(Config{PerAddressRate: 1, PerAddressBurst: 100, GlobalRate: 0.1, GlobalBurst: 5, MaxAddresses: 1000})
	var wg sync.WaitGroup
	var mu sync.Mutex
	over := 0
	for i := range 50 {
		wg.Go(func() {
			if g.Failed(string(rune('A'+i)), t0) > 0 {
				mu.Lock()
				over++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if over != 45 {
		t.Fatalf("%d of 50 concurrent failures over the global budget of 5, want 45", over)
	}
	// The global budget blocks no address before it tries.
	if _, blocked := g.Blocked("fresh", t0); blocked {
		t.Fatal("the global budget blocked an address with no failures")
	}
	if wait := g.Failed("fresh", t0); wait != 10*time.Second {
		t.Fatalf("wait %v, want 10s (one failure at 0.1/s)", wait)
	}
}

// TestAddressesBounded: beyond MaxAddresses, new addresses share one
// budget; full buckets are dropped to make room.
func TestAddressesBounded(t *testing.T) {
	t.Parallel()
	g := New(Config{PerAddressRate: 1, PerAddressBurst: 1, GlobalRate: 1000, GlobalBurst: 1000, MaxAddresses: 2})
	g.Failed("a", t0)
	g.Failed("b", t0)
	if wait := g.Failed("c", t0); wait != 0 {
		t.Fatalf("the overflow budget's first failure: %v", wait)
	}
	if _, blocked := g.Blocked("d", t0); !blocked {
		t.Fatal("a 4th address does not share the spent overflow budget")
	}
	if len(g.addrs) != 2 {
		t.Fatalf("%d addresses tracked, want 2", len(g.addrs))
	}
	// A second later a and b are full again and make room.
	if wait := g.Failed("e", t0.Add(time.Second)); wait != 0 || len(g.addrs) != 1 {
		t.Fatalf("after the refill: wait %v, %d tracked", wait, len(g.addrs))
	}
}

func TestClientAddr(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		remote, xff string
		trust       bool
		want        string
	}{
		{"192.0.2.1:1234", "", false, "192.0.2.1"},
		{"192.0.2.1:1234", "198.51.100.7", false, "192.0.2.1"},
		{"192.0.2.1:1234", "198.51.100.7", true, "198.51.100.7"},
		{"192.0.2.1:1234", "203.0.113.1, 198.51.100.7", true, "198.51.100.7"},
		{"[2001:db8:1:2:3:4:5:6]:1234", "", false, "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:ffff::1]:1234", "", false, "2001:db8:1:2::/64"},
		{"192.0.2.1:1234", "", true, "192.0.2.1"},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tc.remote
		if tc.xff != "" {
			r.Header.Set("X-Forwarded-For", tc.xff)
		}
		if got := ClientAddr(r, tc.trust); got != tc.want {
			t.Errorf("ClientAddr(%q, XFF %q, trust %v) = %q, want %q", tc.remote, tc.xff, tc.trust, got, tc.want)
		}
	}
}
