package console

import (
	"fmt"
	"net/http"
	"time"

	"github.com/repolock/repolock/internal/watch"
)

// eventsURL is the event stream the live pages follow, "" without a watch.
func (c *Console) eventsURL() string {
	if c.cfg.Watch == nil {
		return ""
	}
	return Prefix + "/events"
}

// Settings of the console's event stream.
const (
	eventsHeartbeat    = 15 * time.Second
	eventsWriteTimeout = 10 * time.Second
)

// events serves GET /ui/events: every lock event from now on (or after
// Last-Event-ID, which EventSource sends when it reconnects) as a
// Server-Sent Event "change" whose data is the event's JSON, with a
// heartbeat comment every 15 s. The same watch as GET /v1/events, in the
// admin's view, behind the console's session instead of a bearer token
// (EventSource cannot send one). It holds no database connection while
// idle.
func (c *Console) events(w http.ResponseWriter, r *http.Request, _ *session) {
	ctx := r.Context()
	ws := c.cfg.Watch
	after := r.Header.Get("Last-Event-ID")
	if after == "" {
		head, err := ws.Head(ctx, watch.Admin)
		if err != nil {
			http.Error(w, "the database is not reachable", http.StatusServiceUnavailable)
			return
		}
		after = head
	}
	cursor, err := ws.Decode(watch.Admin, after)
	if err != nil {
		// An old or foreign Last-Event-ID: start from now.
		head, herr := ws.Head(ctx, watch.Admin)
		if herr != nil {
			http.Error(w, "the database is not reachable", http.StatusServiceUnavailable)
			return
		}
		if cursor, err = ws.Decode(watch.Admin, head); err != nil {
			http.Error(w, "the database is not reachable", http.StatusServiceUnavailable)
			return
		}
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	write := func(format string, args ...any) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(eventsWriteTimeout))
		if _, err := fmt.Fprintf(w, format, args...); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !write("retry: 2000\n: connected\n\n") {
		return
	}
	heartbeat := time.NewTicker(eventsHeartbeat)
	defer heartbeat.Stop()
	for {
		changed := ws.Changed()
		events, next, err := ws.Next(ctx, cursor, nil, watch.MaxPageSize)
		if err == nil {
			for _, e := range events {
				b, err := e.JSON()
				if err != nil || !write("id: %s\nevent: change\ndata: %s\n\n", e.Cursor, b) {
					return
				}
			}
			cursor = next
			if len(events) == watch.MaxPageSize {
				continue
			}
		} else {
			changed = nil // retried at the next heartbeat
		}
		select {
		case <-changed:
		case <-heartbeat.C:
			if !write(": heartbeat\n\n") {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}
