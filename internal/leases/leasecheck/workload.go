package leasecheck

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// Target is what a workload drives: the leases and the fenced register of
// a deployment (in process, or the real binary through the client). Each
// method reports what the client learnt; an error whose outcome the client
// cannot know is Unknown.
type Target interface {
	Acquire(ctx context.Context, key string, ttl, wait time.Duration) (id string, token int64, st Status)
	Keepalive(ctx context.Context, key, id string) Status
	Release(ctx context.Context, key, id string) Status
	// Write writes the register guarded by key with token: OK, Fenced,
	// Conflict (an optimistic write lost a race) or Unknown. Any method
	// may answer Failed for an error that promises nothing happened.
	Write(ctx context.Context, key string, token int64) Status
}

// Workload is a run of concurrent clients over Keys for Duration: each
// acquires a key (waiting up to Wait), writes and keeps alive a few
// times, then releases. Pausers are clients that, once in a while, stop
// sending keepalives while holding (as a process stopped by SIGSTOP, or in
// a long GC pause) until TTL plus Pause passed, then write with their
// stale token, keep alive and release as if nothing happened.
type Workload struct {
	Keys     []string
	Clients  int
	Pausers  int
	TTL      time.Duration
	Wait     time.Duration
	Pause    time.Duration
	Duration time.Duration
}

// Run runs w against t, recording every operation in rec, until
// w.Duration passed or ctx ends.
func Run(ctx context.Context, rec *Recorder, t Target, w Workload) {
	ctx, cancel := context.WithTimeout(ctx, w.Duration)
	defer cancel()
	var wg sync.WaitGroup
	for c := range w.Clients + w.Pausers {
		pauser := c >= w.Clients
		wg.Go(func() { runClient(ctx, rec, t, w, c, pauser) })
	}
	wg.Wait()
}

func runClient(ctx context.Context, rec *Recorder, t Target, w Workload, c int, pauser bool) {
	rnd := rand.New(rand.NewPCG(uint64(c), uint64(time.Now().UnixNano())))
	// Every operation, even the last ones, runs to its end on its own
	// context: an operation cut by the end of the run would be Unknown.
	opCtx := context.WithoutCancel(ctx)
	for first := true; ctx.Err() == nil; first = false {
		key := w.Keys[rnd.IntN(len(w.Keys))]
		done := rec.Begin(Input{Kind: Acquire, Key: key, Client: c, TTL: w.TTL})
		id, token, st := t.Acquire(opCtx, key, w.TTL, w.Wait)
		done(Output{Status: st, Token: token})
		if st == Unknown || st == Failed {
			// The deployment is in trouble (a fault): come back a
			// little later, as a client honouring Retry-After would.
			time.Sleep(time.Duration(50+rnd.IntN(200)) * time.Millisecond)
		}
		if st != OK {
			continue
		}
		lost := false
		pause := pauser && (first || rnd.IntN(2) == 0)
		for i := 0; i < 1+rnd.IntN(4) && !lost; i++ {
			done := rec.Begin(Input{Kind: Write, Key: key, Client: c, Token: token})
			done(Output{Status: t.Write(opCtx, key, token)})
			if pause && i == 0 {
				time.Sleep(w.TTL + w.Pause)
			} else {
				time.Sleep(time.Duration(rnd.Int64N(int64(w.TTL / 4))))
			}
			done = rec.Begin(Input{Kind: Keepalive, Key: key, Client: c, Token: token, TTL: w.TTL})
			st := t.Keepalive(opCtx, key, id)
			done(Output{Status: st})
			lost = st == Lost
		}
		if pause {
			// The stale holder writes once more, as a process woken
			// from SIGSTOP would.
			done := rec.Begin(Input{Kind: Write, Key: key, Client: c, Token: token})
			done(Output{Status: t.Write(opCtx, key, token)})
		}
		done = rec.Begin(Input{Kind: Release, Key: key, Client: c, Token: token})
		done(Output{Status: t.Release(opCtx, key, id)})
	}
}
