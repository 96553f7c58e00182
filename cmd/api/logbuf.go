package main

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"time"
)

// DefaultLogBuffer is how long repolock serve keeps log lines in memory
// before it writes them (--log-buffer, LOG_BUFFER): one write system call
// per interval instead of one per request's access line. A crash loses at
// most the last interval's lines at INFO and DEBUG; lines at WARN and above
// are written at once, with everything buffered before them.
const DefaultLogBuffer = 100 * time.Millisecond

// logBufferSize is how many bytes the buffer holds before it is written
// whatever the interval (a burst of requests does not grow it unbounded).
const logBufferSize = 64 << 10

// logBuffer is the writer of repolock serve's log when --log-buffer is
// not 0: whole lines (slog's handlers write one record per Write) are kept
// in memory and written to w every interval, when over logBufferSize, on
// Flush (logFlushHandler: after a record at WARN or above) and on Close. It
// is what zap's BufferedWriteSyncer does.
type logBuffer struct {
	mu     sync.Mutex
	w      io.Writer
	buf    []byte
	size   int
	closed bool
	stop   chan struct{}
	done   chan struct{}
}

// newLogBuffer starts the buffer's flush loop; Close stops it.
func newLogBuffer(w io.Writer, interval time.Duration, size int) *logBuffer {
	b := &logBuffer{w: w, size: size, buf: make([]byte, 0, size), stop: make(chan struct{}), done: make(chan struct{})}
	go b.loop(interval)
	return b
}

func (b *logBuffer) loop(interval time.Duration) {
	defer close(b.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
			_ = b.Flush()
		}
	}
}

// Write keeps p for the next flush; after Close it writes p through.
func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return b.w.Write(p)
	}
	b.buf = append(b.buf, p...)
	if len(b.buf) >= b.size {
		if err := b.flushLocked(); err != nil {
			return len(p), err
		}
	}
	return len(p), nil
}

// Flush writes what is buffered.
func (b *logBuffer) Flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.flushLocked()
}

func (b *logBuffer) flushLocked() error {
	if len(b.buf) == 0 {
		return nil
	}
	_, err := b.w.Write(b.buf)
	b.buf = b.buf[:0]
	return err
}

// Close stops the flush loop and writes what is buffered; later writes go
// straight to the underlying writer. Safe to call more than once.
func (b *logBuffer) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	err := b.flushLocked()
	b.mu.Unlock()
	close(b.stop)
	<-b.done
	return err
}

// logFlushHandler writes the buffer out after every record at WARN or
// above, so that warnings and errors (and the lines before them) are never
// delayed by the buffer.
type logFlushHandler struct {
	slog.Handler
	buf *logBuffer
}

func (h logFlushHandler) Handle(ctx context.Context, r slog.Record) error {
	err := h.Handler.Handle(ctx, r)
	if r.Level >= slog.LevelWarn {
		if ferr := h.buf.Flush(); err == nil {
			err = ferr
		}
	}
	return err
}

func (h logFlushHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return logFlushHandler{Handler: h.Handler.WithAttrs(attrs), buf: h.buf}
}

func (h logFlushHandler) WithGroup(name string) slog.Handler {
	return logFlushHandler{Handler: h.Handler.WithGroup(name), buf: h.buf}
}

// newBufferedLogger returns serve's logger as lc describes, writing to w
// through a logBuffer flushed every interval (0: unbuffered, every record
// written at once), and the function that flushes and stops the buffer
// (call it last, after the final log line).
func newBufferedLogger(w io.Writer, lc logConfig, interval time.Duration) (*slog.Logger, func()) {
	if interval <= 0 {
		return newLogger(w, lc), func() {}
	}
	buf := newLogBuffer(w, interval, logBufferSize)
	inner := newLogger(buf, lc).Handler()
	return slog.New(logFlushHandler{Handler: inner, buf: buf}), func() { _ = buf.Close() }
}
