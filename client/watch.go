package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Event is one lock event of the watch (GET /v1/events).
type Event struct {
	// Cursor is the position just after this event: WatchOptions.After
	// resumes from it.
	Cursor string `json:"cursor"`
	ID     int64  `json:"id"`
	// Kind: acquired, denied, released, collected, rekeyed, transferred,
	// handover_*, application_created, application_deleted,
	// credential_created, credential_deleted (docs/watch.md).
	Kind          string `json:"kind"`
	LockID        string `json:"lock_id,omitempty"`
	NormalizedURL string `json:"normalized_url"`
	Actor         string `json:"actor,omitempty"`
	Owner         string `json:"owner,omitempty"`
	RekeyedFrom   string `json:"rekeyed_from,omitempty"`
	// ApplicationID and Application name the Application the event is
	// about: application_created/application_deleted, and the acquired
	// (released) event of a lock its create made (its delete freed), which
	// stands for its application_created (application_deleted).
	// CredentialID and Credential: the same for a Repository Credential.
	ApplicationID string    `json:"application_id,omitempty"`
	Application   string    `json:"application,omitempty"`
	CredentialID  string    `json:"credential_id,omitempty"`
	Credential    string    `json:"credential,omitempty"`
	Count         int       `json:"count"`
	At            time.Time `json:"at"`
}

// EventPage is one answer of Events.
type EventPage struct {
	Events []Event `json:"events"`
	// Cursor is where to resume from (unchanged when no event came).
	Cursor string `json:"cursor"`
}

// WatchOptions select the events of Events and Watch.
type WatchOptions struct {
	// After is the cursor to resume from; empty starts at the current end
	// of the stream.
	After string
	// Kinds filters by kind (empty: all).
	Kinds []string
	// Wait makes Events a long poll: an empty page is answered after Wait
	// at the latest (the server allows up to 60s). Watch ignores it.
	Wait time.Duration
	// PageSize caps a page (1..500; 0: the server's default, 100).
	PageSize int
}

func (o WatchOptions) query() url.Values {
	q := url.Values{}
	if o.After != "" {
		q.Set("after", o.After)
	}
	if len(o.Kinds) > 0 {
		q.Set("kinds", strings.Join(o.Kinds, ","))
	}
	if o.Wait > 0 {
		q.Set("wait", o.Wait.String())
	}
	if o.PageSize > 0 {
		q.Set("page_size", strconv.Itoa(o.PageSize))
	}
	return q
}

// Events reads one page of events after opts.After (GET /v1/events), as a
// long poll when opts.Wait is set. Without After, the page is empty and
// its Cursor is the current end of the stream: take it before listing,
// then watch from it (docs/watch.md). A cursor older than the server's
// retention is cursor_expired (IsCursorExpired).
func (c *Client) Events(ctx context.Context, opts WatchOptions) (EventPage, error) {
	var out EventPage
	err := c.do(ctx, call{method: http.MethodGet, path: "/v1/events", query: opts.query(), out: &out})
	return out, err
}

// Watch streams the events after opts.After as they are committed (GET
// /v1/events as Server-Sent Events). A lost connection, a 429 or a 503 is
// retried, honouring Retry-After, and resumes from the last cursor
// received (an event's or a bookmark's), so no event is lost or repeated.
// The sequence yields an error only when it ends: cursor_expired
// (IsCursorExpired: list again and watch from a new cursor), another
// refusal (*Error), or ctx's error when ctx ends. Breaking out of the loop
// closes the stream.
//
// The stream does not use the Client's http.Client timeout (a stream
// outlives any request timeout); cancel ctx to stop it.
func (c *Client) Watch(ctx context.Context, opts WatchOptions) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		hc := *c.hc
		hc.Timeout = 0
		cursor := opts.After
		failures := 0
		for {
			connected, err := c.stream(ctx, &hc, opts, &cursor, yield)
			if connected {
				failures = 0
			}
			var stop *stopped
			if errors.As(err, &stop) {
				return
			}
			if ctx.Err() != nil {
				yield(Event{}, ctx.Err())
				return
			}
			var retryAfter time.Duration
			if e, ok := err.(*Error); ok {
				if e.StatusCode != http.StatusTooManyRequests && e.StatusCode != http.StatusServiceUnavailable {
					yield(Event{}, err)
					return
				}
				retryAfter = e.RetryAfter
			}
			failures++
			p := c.retry
			if p.BaseDelay <= 0 {
				p = DefaultRetryPolicy
			}
			if err := sleep(ctx, p.delay(min(failures, 16), retryAfter)); err != nil {
				yield(Event{}, err)
				return
			}
		}
	}
}

// stopped is the consumer breaking out of the loop.
type stopped struct{}

func (*stopped) Error() string { return "stopped" }

// stream runs one connection: it reads events until the connection ends
// and reports whether it got as far as the stream.
func (c *Client) stream(ctx context.Context, hc *http.Client, opts WatchOptions, cursor *string, yield func(Event, error) bool) (bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	o := opts
	o.Wait, o.After = 0, ""
	u, err := url.Parse(c.base.String() + "/v1/events")
	if err != nil {
		return false, err
	}
	q := o.query()
	if *cursor != "" {
		q.Set("after", *cursor)
	}
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return false, fmt.Errorf("repolock: %w", err)
	}
	req.Header.Set("Accept", "text/event-stream")
	if *cursor != "" {
		req.Header.Set("Last-Event-ID", *cursor)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.userAgent != "" {
		req.Header.Set("User-Agent", c.userAgent)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false, fmt.Errorf("repolock: GET /v1/events: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		b := make([]byte, 64<<10)
		n, _ := resp.Body.Read(b)
		return false, newError(resp, b[:n])
	}
	r := bufio.NewReaderSize(resp.Body, 64<<10)
	var name, data, id string
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return true, fmt.Errorf("repolock: GET /v1/events: stream: %w", err)
		}
		line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		if line != "" {
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "id":
				id = value
			case "event":
				name = value
			case "data":
				data = value
			}
			continue
		}
		switch name {
		case "":
		case "bookmark":
			if id != "" {
				*cursor = id
			}
		case "error":
			resp.Header.Del("Retry-After")
			e := newError(&http.Response{StatusCode: http.StatusBadRequest, Header: resp.Header}, []byte(data))
			if e.Code == CodeCursorExpired {
				e.StatusCode = http.StatusGone
			}
			yield(Event{}, e)
			return true, &stopped{}
		default:
			var ev Event
			if err := json.Unmarshal([]byte(data), &ev); err != nil {
				return true, fmt.Errorf("repolock: GET /v1/events: decode event: %w", err)
			}
			*cursor = ev.Cursor
			if !yield(ev, nil) {
				return true, &stopped{}
			}
		}
		name, data, id = "", "", ""
	}
}
