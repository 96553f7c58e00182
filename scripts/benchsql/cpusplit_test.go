package main

import (
	"math"
	"strings"
	"testing"
)

// TestCPUSplit: each sample goes to the category of the frame nearest its
// leaf (a system call to the code that made it), a background loop's
// anywhere in the stack, net/http's own work and the runtime last.
func TestCPUSplit(t *testing.T) {
	const traces = `File: repolock
Type: cpu
-----------+-------------------------------------------------------
      20ms   internal/runtime/syscall/linux.Syscall6
             os.(*File).Write
             log/slog.(*commonHandler).handle
             github.com/repolock/repolock/internal/httpapi.(*Server).accessLog-fm.(*Server).accessLog.func1
             net/http.(*conn).serve
-----------+-------------------------------------------------------
      10ms   internal/runtime/syscall/linux.Syscall6
             github.com/lib/pq.(*conn).send
             github.com/repolock/repolock/internal/database.(*DB).SelectPrepared
             github.com/repolock/repolock/internal/watch.(*Service).loop
-----------+-------------------------------------------------------
      1.5s   runtime.mallocgc
             encoding/json.(*Decoder).Decode (inline)
             github.com/repolock/repolock/internal/httpapi.(*Server).acquireLock
             github.com/repolock/repolock/internal/httpapi.(*Server).accessLog-fm.(*Server).accessLog.func1
-----------+-------------------------------------------------------
      30ms   internal/runtime/syscall/linux.Syscall6
             bufio.(*Writer).Flush
             net/http.(*response).finishRequest
             net/http.(*conn).serve
-----------+-------------------------------------------------------
      40ms   runtime.gcDrain
             runtime.gcBgMarkWorker
-----------+-------------------------------------------------------
`
	split, total, err := cpuSplit(traces)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		"logging (the access log: slog, the buffer, its write)":     0.020,
		"watch (background reads and NOTIFY)":                       0.010,
		"JSON (decode and encode)":                                  1.5,
		"net/http (read the request, write and flush the response)": 0.030,
		goRuntime: 0.040,
	}
	if math.Abs(total-1.6) > 1e-9 || len(split) != len(want) {
		t.Fatalf("total %v, split %v", total, split)
	}
	for k, v := range want {
		if math.Abs(split[k]-v) > 1e-9 {
			t.Errorf("%s: %v, want %v", k, split[k], v)
		}
	}
	var b strings.Builder
	writeCPUSplit(&b, split, total, 100)
	if !strings.Contains(b.String(), "| JSON (decode and encode) | 93.8 | 93.8% |") {
		t.Errorf("table:\n%s", b.String())
	}
	if _, err := parseSampleValue("12"); err == nil {
		t.Error("a value without a unit accepted")
	}
}
