package main

import (
	"context"
	"math"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

// TestMemoryLimitFollowsLiveHeap: the default soft limit is raised above
// twice a live heap that outgrows it, so the collector never runs more
// often than at GOGC=100. (Not parallel: it sets the process's limit.)
func TestMemoryLimitFollowsLiveHeap(t *testing.T) {
	defer debug.SetMemoryLimit(math.MaxInt64)
	debug.SetMemoryLimit(serveMemoryLimit)
	live := make([][]byte, 100)
	for i := range live {
		live[i] = make([]byte, 1<<20)
		live[i][0] = 1
	}
	runtime.GC()
	floor := memoryLimitFloor()
	if floor < 2*100<<20 {
		t.Fatalf("memoryLimitFloor with 100 MiB live = %d, want at least 200 MiB", floor)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); followMemoryLimit(ctx, 10*time.Millisecond) }()
	for debug.SetMemoryLimit(-1) < 2*100<<20 {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	runtime.KeepAlive(live)
}
