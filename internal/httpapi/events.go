package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/watch"
)

// Defaults of the watch route's settings (Config.EventsHeartbeat,
// Config.EventsWriteTimeout) and its bounds.
const (
	DefaultEventsHeartbeat    = 15 * time.Second
	DefaultEventsWriteTimeout = 10 * time.Second
	DefaultEventsPageSize     = 100
	MaxEventsWait             = 60 * time.Second
	eventsPath                = "/v1/events"
	consoleEventsPath         = "/ui/events" // internal/console's stream (console.Prefix + "/events")
)

// eventsResponse is the long poll's answer.
type eventsResponse struct {
	Events []watch.Event `json:"events"`
	Cursor string        `json:"cursor"`
}

func (s *Server) registerEventRoutes() {
	s.V1.GET("/events", s.events, s.requireAnyToken)
}

// wantsStream reports whether the request asks for Server-Sent Events.
func wantsStream(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get(echo.HeaderAccept), ",") {
		mt, _, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(mt), "text/event-stream") {
			return true
		}
	}
	return false
}

// events serves GET /v1/events: a page of events after the cursor, as JSON
// (with wait: a long poll) or, with Accept: text/event-stream, as a
// stream of Server-Sent Events. The route is exempt from the request
// timeout (it bounds itself); the rate limit counts the request once, when
// it arrives; the per-tenant watcher cap counts it while it runs.
func (s *Server) events(c echo.Context) error {
	sc := watch.Admin
	if u, ok := c.Get(ctxKeyTenant).(tenantValue); ok {
		sc = watch.Scope{TenantID: u.ID}
	}
	q := c.QueryParams()
	var kinds []string
	if k := q.Get("kinds"); k != "" {
		for _, part := range strings.Split(k, ",") {
			if part = strings.TrimSpace(part); part != "" {
				kinds = append(kinds, part)
			}
		}
		if err := watch.ValidateKinds(kinds); err != nil {
			return err
		}
	}
	size := DefaultEventsPageSize
	if v := q.Get("page_size"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > watch.MaxPageSize {
			return repolock.Errorf(repolock.EInvalid, "page_size must be an integer between 1 and %d", watch.MaxPageSize)
		}
		size = n
	}
	var wait time.Duration
	if v := q.Get("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > MaxEventsWait {
			return repolock.Errorf(repolock.EInvalid, "wait must be a duration between 0s and %s, such as 30s", MaxEventsWait)
		}
		wait = d
	}
	after := q.Get("after")
	stream := wantsStream(c.Request())
	if id := c.Request().Header.Get("Last-Event-ID"); stream && id != "" {
		after = id
	}
	if len(after) > 2048 {
		return repolock.Errorf(repolock.EInvalid, "the cursor is not valid for this caller")
	}
	leave, err := s.cfg.Watch.Enter(sc)
	if err != nil {
		c.Response().Header().Set("Retry-After", "5")
		return err
	}
	defer leave()
	// A watcher holds no database connection while it waits, and its
	// reads come from the watch's buffer (a cursor older than the buffer
	// reads the database, briefly): it gives its tenant's share of the
	// pool back, or a tenant's watchers (up to the watcher cap, above the
	// share) would hold every slot and refuse its other requests with 429.
	// The watcher cap bounds them instead.
	releaseShare(c)
	if stream {
		return s.streamEvents(c, sc, after, kinds, size)
	}
	return s.pollEvents(c, sc, after, kinds, size, wait)
}

// pollEvents answers one page: at once when there are events after the
// cursor (or wait is 0), else as soon as some come, or at the deadline
// with no events and the cursor unchanged.
func (s *Server) pollEvents(c echo.Context, sc watch.Scope, after string, kinds []string, size int, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), wait+s.cfg.RequestTimeout)
	defer cancel()
	// The server's read and write timeouts are for ordinary requests; a
	// long poll extends them to its own bound.
	rc := http.NewResponseController(c.Response())
	_ = rc.SetReadDeadline(time.Now().Add(wait + s.cfg.RequestTimeout + 5*time.Second))
	_ = rc.SetWriteDeadline(time.Now().Add(wait + s.cfg.RequestTimeout + 10*time.Second))
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		changed := s.cfg.Watch.Changed()
		p, err := s.cfg.Watch.Read(ctx, sc, after, kinds, size)
		if err != nil {
			return err
		}
		if len(p.Events) > 0 || wait == 0 {
			return c.JSON(http.StatusOK, eventsResponse{Events: p.Events, Cursor: p.Cursor})
		}
		if after == "" {
			after = p.Cursor // from now on, wait past the head it started at
		}
		select {
		case <-changed:
		case <-deadline.C:
			return c.JSON(http.StatusOK, eventsResponse{Events: []watch.Event{}, Cursor: after})
		case <-ctx.Done():
			return nil // the client left (the bound, wait + RequestTimeout, is past the deadline above)
		case <-s.stopping:
			return c.JSON(http.StatusOK, eventsResponse{Events: []watch.Event{}, Cursor: after})
		}
	}
}

// sseWriter writes Server-Sent Events, each with a write deadline: a client
// that does not read within EventsWriteTimeout is disconnected (the slow
// consumer), without holding anything the other watchers need.
type sseWriter struct {
	w         http.ResponseWriter
	rc        *http.ResponseController
	timeout   time.Duration
	log       *slog.Logger
	requestID string
}

func (w *sseWriter) write(format string, args ...any) error {
	if err := w.rc.SetWriteDeadline(time.Now().Add(w.timeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return w.gone(err)
	}
	if _, err := fmt.Fprintf(w.w, format, args...); err != nil {
		return w.gone(err)
	}
	if err := w.rc.Flush(); err != nil {
		return w.gone(err)
	}
	return nil
}

// gone logs the end of a stream whose client stopped reading or left.
func (w *sseWriter) gone(err error) error {
	w.log.Info("events stream: the client is gone or too slow; disconnected", "error", err.Error(), "request_id", w.requestID)
	return err
}

// streamEvents serves the Server-Sent Events stream: first a bookmark with
// the starting cursor, then every event (id: its cursor, event: its kind,
// data: its JSON), a comment every EventsHeartbeat and then a bookmark when
// the cursor moved without an event, so that a client resumes cheaply
// (EventSource sends the last id as Last-Event-ID). A refused cursor ends
// the stream with an "error" event carrying the error body.
func (s *Server) streamEvents(c echo.Context, sc watch.Scope, after string, kinds []string, size int) error {
	ctx := c.Request().Context()
	if after == "" {
		head, err := s.cfg.Watch.Head(ctx, sc)
		if err != nil {
			return err
		}
		after = head
	}
	cursor, err := s.cfg.Watch.Decode(sc, after)
	if err != nil {
		return err // a refused cursor is an HTTP error while nothing is sent
	}
	res := c.Response()
	h := res.Header()
	h.Set(echo.HeaderContentType, "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	res.WriteHeader(http.StatusOK)
	w := &sseWriter{w: res, rc: http.NewResponseController(res), timeout: s.cfg.EventsWriteTimeout, log: s.Logger, requestID: requestID(c)}
	// No read deadline on a stream: net/http would cancel the request when
	// the server's ReadTimeout passes. Each write has its own deadline.
	_ = w.rc.SetReadDeadline(time.Time{})

	if err := w.write("retry: 1000\nid: %s\nevent: bookmark\ndata: {\"cursor\":%q}\n\n", after, after); err != nil {
		return nil
	}
	// moved: the cursor advanced past what was last sent (an event's id
	// or a bookmark): the next heartbeat sends a bookmark. The cursor is
	// encoded only then.
	moved := false
	heartbeat := time.NewTicker(s.cfg.EventsHeartbeat)
	defer heartbeat.Stop()
	retry := time.NewTimer(0)
	<-retry.C
	for {
		changed := s.cfg.Watch.Changed()
		events, next, err := s.cfg.Watch.Next(ctx, cursor, kinds, size)
		if err != nil {
			if code := repolock.ErrorCode(err); code == repolock.ECursorExpired || code == repolock.EInvalid {
				b, _ := json.Marshal(errorBody(err))
				_ = w.write("event: error\ndata: %s\n\n", b)
				return nil
			}
			if ctx.Err() != nil {
				return nil
			}
			s.Logger.Warn("events stream: read failed; retrying", "error", err.Error())
			changed = nil
			retry.Reset(time.Second)
		} else {
			for _, e := range events {
				b, err := e.JSON()
				if err != nil {
					return err
				}
				if err := w.write("id: %s\nevent: %s\ndata: %s\n\n", e.Cursor, e.Kind, b); err != nil {
					return nil
				}
			}
			moved = moved || next.Position() != cursor.Position()
			if len(events) > 0 {
				moved = next.Position() != events[len(events)-1].Position()
			}
			cursor = next
			if len(events) == size {
				continue // more pages are ready
			}
		}
		select {
		case <-changed:
		case <-retry.C:
		case <-heartbeat.C:
			if moved {
				id := cursor.String()
				if err := w.write("id: %s\nevent: bookmark\ndata: {\"cursor\":%q}\n\n", id, id); err != nil {
					return nil
				}
				moved = false
			}
			if err := w.write(": heartbeat\n\n"); err != nil {
				return nil
			}
		case <-ctx.Done():
			return nil
		case <-s.stopping:
			return nil
		}
	}
}

// errorBody is the JSON error body of err, as handleError writes it.
func errorBody(err error) ErrorBody {
	return ErrorBody{Error: map[string]any{"code": string(repolock.ErrorCode(err)), "message": repolock.ErrorMessage(err)}}
}
