package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/repolock/repolock/internal/cputime"
)

// signalWriter records what was written to it and signals every write.
type signalWriter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	writes int
	wrote  chan struct{}
}

func newSignalWriter() *signalWriter { return &signalWriter{wrote: make(chan struct{}, 100)} }

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes++
	w.buf.Write(p)
	select {
	case w.wrote <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (w *signalWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

func (w *signalWriter) Writes() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writes
}

// jsonLog is a buffered JSON logger on w whose interval never elapses
// within a test (flushes are the ones the test causes).
func jsonLog(t *testing.T, w *signalWriter, interval time.Duration) (*slog.Logger, func()) {
	t.Helper()
	logger, closeLog := newBufferedLogger(w, logConfig{Level: slog.LevelDebug, JSON: true}, interval)
	t.Cleanup(closeLog)
	return logger, closeLog
}

// TestLogBufferClose: INFO and DEBUG lines wait in memory; Close writes
// them, in one write, and lines logged after Close go through at once.
func TestLogBufferClose(t *testing.T) {
	t.Parallel()
	w := newSignalWriter()
	logger, closeLog := jsonLog(t, w, time.Hour)
	logger.Info("request", "n", 1)
	logger.Debug("request", "n", 2)
	if got := w.String(); got != "" {
		t.Fatalf("written before any flush: %q", got)
	}
	closeLog()
	if got := w.String(); strings.Count(got, "\n") != 2 || !strings.Contains(got, `"n":1`) || !strings.Contains(got, `"n":2`) || w.Writes() != 1 {
		t.Fatalf("after Close, %d writes: %q", w.Writes(), got)
	}
	closeLog() // twice is harmless
	logger.Info("stopped")
	if got := w.String(); !strings.Contains(got, `"msg":"stopped"`) {
		t.Fatalf("a line after Close was not written through: %q", got)
	}
}

// TestLogBufferInterval: buffered lines are written by the flush loop
// without anything else happening.
func TestLogBufferInterval(t *testing.T) {
	t.Parallel()
	w := newSignalWriter()
	logger, _ := jsonLog(t, w, time.Millisecond)
	logger.Info("request", "n", 1)
	<-w.wrote // the test's own timeout bounds the wait
	if got := w.String(); !strings.Contains(got, `"n":1`) {
		t.Fatalf("flushed: %q", got)
	}
}

// TestLogBufferWarnNotDelayed: a record at WARN or above is written at
// once, after the lines buffered before it (order kept), also through a
// logger derived with With and WithGroup.
func TestLogBufferWarnNotDelayed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		log  func(l *slog.Logger)
	}{
		{"warn", func(l *slog.Logger) { l.Warn("slow", "n", 2) }},
		{"error", func(l *slog.Logger) { l.Error("failed", "n", 2) }},
		{"with", func(l *slog.Logger) { l.With("k", "v").Warn("slow", "n", 2) }},
		{"group", func(l *slog.Logger) { l.WithGroup("g").Error("failed", "n", 2) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newSignalWriter()
			logger, _ := jsonLog(t, w, time.Hour)
			logger.Info("request", "n", 1)
			tc.log(logger)
			lines := strings.Split(strings.TrimSpace(w.String()), "\n")
			if len(lines) != 2 || !strings.Contains(lines[0], `"n":1`) || !strings.Contains(lines[1], `"n":2`) {
				t.Fatalf("after a %s record: %q", tc.name, lines)
			}
		})
	}
}

// TestLogBufferFull: a buffer over its size is written without waiting
// for the interval.
func TestLogBufferFull(t *testing.T) {
	t.Parallel()
	w := newSignalWriter()
	b := newLogBuffer(w, time.Hour, 100)
	defer b.Close()
	line := strings.Repeat("x", 60) + "\n"
	b.Write([]byte(line))
	if w.Writes() != 0 {
		t.Fatal("written below the size")
	}
	b.Write([]byte(line))
	if w.Writes() != 1 || w.String() != line+line {
		t.Fatalf("over the size: %d writes, %q", w.Writes(), w.String())
	}
}

// TestLogBufferOff: 0 writes every line at once.
func TestLogBufferOff(t *testing.T) {
	t.Parallel()
	w := newSignalWriter()
	logger, _ := jsonLog(t, w, 0)
	logger.Info("request", "n", 1)
	if !strings.Contains(w.String(), `"n":1`) {
		t.Fatalf("LOG_BUFFER=0 buffered: %q", w.String())
	}
}

// TestLogBufferConcurrent: concurrent loggers and flushes lose and split
// no line.
func TestLogBufferConcurrent(t *testing.T) {
	t.Parallel()
	w := newSignalWriter()
	logger, closeLog := jsonLog(t, w, time.Millisecond)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				if i%50 == 0 {
					logger.Warn("w", "g", g, "i", i)
				} else {
					logger.Info("r", "g", g, "i", i)
				}
			}
		}()
	}
	wg.Wait()
	closeLog()
	lines := strings.Split(strings.TrimSpace(w.String()), "\n")
	if len(lines) != 8*200 {
		t.Fatalf("%d lines, want %d", len(lines), 8*200)
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "{") || !strings.HasSuffix(l, "}") {
			t.Fatalf("split line %q", l)
		}
	}
}

// BenchmarkAccessLogLine: one access line (the fields httpapi logs per
// request), written at once (LOG_BUFFER=0, one write system call per line)
// and through the buffer, into a file (serve's stderr redirected) and into
// a pipe whose reader is in the process (a container runtime's or
// journald's, whose CPU per read the machine pays too). cpu-ns/op is the
// process's CPU time per line.
func BenchmarkAccessLogLine(b *testing.B) {
	for _, sink := range []string{"file", "pipe"} {
		for _, interval := range []time.Duration{0, DefaultLogBuffer} {
			b.Run(sink+"/buffer="+interval.String(), func(b *testing.B) {
				var w *os.File
				if sink == "file" {
					f, err := os.CreateTemp(b.TempDir(), "log")
					if err != nil {
						b.Fatal(err)
					}
					w = f
				} else {
					r, pw, err := os.Pipe()
					if err != nil {
						b.Fatal(err)
					}
					done := make(chan struct{})
					go func() { defer close(done); _, _ = io.Copy(io.Discard, r) }()
					defer func() { <-done; r.Close() }()
					w = pw
				}
				defer w.Close()
				logger, closeLog := newBufferedLogger(w, logConfig{Level: slog.LevelInfo, JSON: true}, interval)
				defer closeLog()
				ctx := context.Background()
				b.ReportAllocs()
				defer cputime.Report(b)()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						logger.LogAttrs(ctx, slog.LevelInfo, "request",
							slog.String("method", "POST"), slog.String("route", "/v1/locks/acquire"),
							slog.String("path", "/v1/locks/acquire"), slog.Int("status", 200),
							slog.Float64("duration_ms", 3.217), slog.Int64("bytes_out", 161),
							slog.String("request_id", "8f0a3c2e6b1d4f5a9c7e2b3d4a5f6e7d"), slog.String("tenant", "bench-17"))
					}
				})
			})
		}
	}
}
