package fairshare

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestShareOf(t *testing.T) {
	for _, tc := range []struct {
		pool     int
		fraction float64
		want     int
	}{
		{20, 0.5, 10},
		{21, 0.5, 10},
		{20, 1, 19}, // always one left for the others
		{20, 0.99, 19},
		{20, 0.01, 1}, // never 0
		{2, 0.5, 1},
		{3, 0.5, 1},
		{1, 0.5, 1}, // one connection cannot be shared
		{100, 0.25, 25},
	} {
		if got := ShareOf(tc.pool, tc.fraction); got != tc.want {
			t.Errorf("ShareOf(%d, %g) = %d, want %d", tc.pool, tc.fraction, got, tc.want)
		}
	}
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	for _, cfg := range []Config{{Share: 0}, {Share: -1}, {Share: 1, Wait: -time.Second}} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) = nil error", cfg)
		}
	}
}

func newLimiter(t *testing.T, share int, wait time.Duration) (*Limiter, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	l, err := New(Config{Share: share, Wait: wait, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	return l, reg
}

func mustAcquire(t *testing.T, l *Limiter, key string) func() {
	t.Helper()
	return mustAcquireN(t, l, key, 1)
}

func mustAcquireN(t *testing.T, l *Limiter, key string, n int) func() {
	t.Helper()
	got, err := l.Acquire(context.Background(), key, n)
	if err != nil {
		t.Fatalf("Acquire(%s, %d): %v", key, n, err)
	}
	return func() { l.Release(key, got) }
}

// A key holding its whole share is refused after the wait; another key is
// not affected; a released slot can be taken again; unused keys are
// dropped.
func TestShareIsPerKey(t *testing.T) {
	l, _ := newLimiter(t, 2, time.Millisecond)
	a1, a2 := mustAcquire(t, l, "a"), mustAcquire(t, l, "a")
	if _, err := l.Acquire(context.Background(), "a", 1); !errors.Is(err, ErrOverShare) {
		t.Fatalf("third request of a: %v, want ErrOverShare", err)
	}
	b1, b2 := mustAcquire(t, l, "b"), mustAcquire(t, l, "b")
	if got := l.InFlight("a"); got != 2 {
		t.Fatalf("InFlight(a) = %d, want 2", got)
	}
	a1()
	a3 := mustAcquire(t, l, "a")
	for _, r := range []func(){a2, a3, b1, b2} {
		r()
	}
	l.mu.Lock()
	n := len(l.keys)
	l.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d keys left after every slot was released", n)
	}
}

// A request beyond the share waits: it gets the slot a finishing request
// gives back.
func TestWaitingRequestGetsReleasedSlot(t *testing.T) {
	l, reg := newLimiter(t, 1, time.Hour)
	held := mustAcquire(t, l, "a")
	got := make(chan error, 1)
	go func() {
		n, err := l.Acquire(context.Background(), "a", 1)
		if err == nil {
			l.Release("a", n)
		}
		got <- err
	}()
	// Wait until it waits (the waits counter says so), then free the slot.
	for value(l.waits) < 1 {
		time.Sleep(time.Millisecond)
	}
	held()
	if err := <-got; err != nil {
		t.Fatalf("waiting request: %v", err)
	}
	if mfs, err := reg.Gather(); err != nil || len(mfs) != 2 {
		t.Fatalf("registry: %d metric families, %v; want the two counters", len(mfs), err)
	}
	if r := value(l.rejections); r != 0 {
		t.Fatalf("rejections = %g, want 0", r)
	}
}

// A waiting request whose context ends gets the context's error at once,
// and does not keep its key alive.
func TestWaitEndsWithContext(t *testing.T) {
	l, _ := newLimiter(t, 1, time.Hour)
	held := mustAcquire(t, l, "a")
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() {
		_, err := l.Acquire(ctx, "a", 1)
		got <- err
	}()
	for value(l.waits) < 1 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v, want context.Canceled", err)
	}
	held()
	if n := l.InFlight("a"); n != 0 {
		t.Fatalf("InFlight = %d after release", n)
	}
}

// Many goroutines of a few keys, with requests of every weight, hammer the
// limiter: no key ever holds more than its share, and every refusal is
// ErrOverShare.
func TestConcurrentRequestsNeverExceedShare(t *testing.T) {
	const share = 3
	l, _ := newLimiter(t, share, 50*time.Microsecond)
	var (
		inFlight  [4]atomic.Int32
		worst     atomic.Int32
		admitted  atomic.Int64
		refused   atomic.Int64
		wg        sync.WaitGroup
		otherErrs = make(chan error, 1)
	)
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := g % len(inFlight)
			key := fmt.Sprint("tenant-", k)
			for range 300 {
				w := 1 + g%share // weights 1..share
				got, err := l.Acquire(context.Background(), key, w)
				if errors.Is(err, ErrOverShare) {
					refused.Add(1)
					continue
				}
				if err != nil {
					select {
					case otherErrs <- err:
					default:
					}
					return
				}
				if got != w {
					select {
					case otherErrs <- fmt.Errorf("Acquire(%d) took %d", w, got):
					default:
					}
					return
				}
				n := inFlight[k].Add(int32(got))
				for {
					w := worst.Load()
					if n <= w || worst.CompareAndSwap(w, n) {
						break
					}
				}
				admitted.Add(1)
				time.Sleep(10 * time.Microsecond)
				inFlight[k].Add(-int32(got))
				l.Release(key, got)
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-otherErrs:
		t.Fatal(err)
	default:
	}
	if w := worst.Load(); w > share {
		t.Fatalf("a key had %d requests in flight, share %d", w, share)
	}
	if admitted.Load() == 0 {
		t.Fatal("nothing was admitted")
	}
	t.Logf("admitted %d, refused %d, worst in flight %d", admitted.Load(), refused.Load(), worst.Load())
}

// value reads a counter through a registry of its own (no import of the
// client_model types).
func value(c prometheus.Counter) float64 {
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 {
		panic(fmt.Sprint("gather: ", err))
	}
	return mfs[0].GetMetric()[0].GetCounter().GetValue()
}

// Requests weigh: a request of weight n takes n slots (cut to the share),
// and the waiters are served first come first served: a light request does
// not overtake a heavy one waiting before it.
func TestWeightedFirstComeFirstServed(t *testing.T) {
	l, _ := newLimiter(t, 3, time.Hour)
	if n, err := l.Acquire(context.Background(), "a", 99); err != nil || n != 3 {
		t.Fatalf("Acquire(99) = %d, %v; want the whole share, 3", n, err)
	}
	l.Release("a", 3)
	held := mustAcquireN(t, l, "a", 2)
	heavy, light := make(chan error, 1), make(chan error, 1)
	go func() { _, err := l.Acquire(context.Background(), "a", 2); heavy <- err }()
	for value(l.waits) < 1 {
		time.Sleep(time.Millisecond)
	}
	// One slot is free, but the heavy request waits first.
	go func() { _, err := l.Acquire(context.Background(), "a", 1); light <- err }()
	for value(l.waits) < 2 {
		select {
		case err := <-light:
			t.Fatalf("the light request overtook the heavy one: %v", err)
		default:
		}
		time.Sleep(time.Millisecond)
	}
	held() // 0 held: the heavy one gets 2, then the light one 1.
	if err := <-heavy; err != nil {
		t.Fatal(err)
	}
	if err := <-light; err != nil {
		t.Fatal(err)
	}
	if n := l.InFlight("a"); n != 3 {
		t.Fatalf("InFlight = %d, want 3", n)
	}
	l.Release("a", 3)
	if n := l.InFlight("a"); n != 0 {
		t.Fatalf("InFlight = %d after release", n)
	}
}
