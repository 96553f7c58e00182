// Package client is the Go client of the repolock HTTP API: every tenant
// and admin operation of the contract (api/openapi.yaml) as a typed method,
// errors as *Error (errors.As, IsClaimed, IsNotFound...), pagination as
// iter.Seq2 iterators, and retries of idempotent calls on 429/503 that
// honour Retry-After.
//
//	c := client.New("http://127.0.0.1:8080", client.WithToken(token))
//	app, err := c.CreateApplication(ctx, client.CreateApplicationRequest{
//		Name: "guestbook", RepoURL: "git@github.com:argoproj/argocd-example-apps.git", Path: "guestbook"})
//	if owner, ok := client.ClaimedBy(err); ok { ... another tenant owns the repository ... }
//	for lock, err := range c.ListLocks(ctx, client.ListOptions{}) { ... }
//
// A Client holds one token: a tenant token for tenant routes, the admin
// token for admin routes (use two Clients to act as both).
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// DefaultUserAgent is sent unless WithUserAgent says otherwise.
const DefaultUserAgent = "repolock-go-client/1"

// Client calls one repolock server. It is safe for concurrent use.
type Client struct {
	base      *url.URL
	token     string
	hc        *http.Client
	userAgent string
	retry     RetryPolicy
	// fencingToken is sent on every request when positive
	// (WithFencingToken).
	fencingToken int64
}

// Option configures a Client.
type Option func(*Client)

// WithToken sets the bearer token: a tenant token (rlt_...) or the admin
// token.
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithHTTPClient sets the *http.Client (transport, timeouts, proxies,
// TLS). The default is a client with a 60 s timeout.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithUserAgent sets the User-Agent header.
func WithUserAgent(ua string) Option { return func(c *Client) { c.userAgent = ua } }

// WithRetryPolicy sets how idempotent calls are retried.
// RetryPolicy{MaxAttempts: 1} disables retries.
func WithRetryPolicy(p RetryPolicy) Option { return func(c *Client) { c.retry = p } }

// RetryPolicy says how idempotent calls (GET, HEAD, PUT, DELETE) are retried
// when the server answers 429 too_many_requests or 503 unavailable. POST and
// PATCH are never retried. The wait is the response's Retry-After (seconds
// or an HTTP date) when it has one, else an exponential backoff with full
// jitter from BaseDelay; either is capped at MaxDelay. Waiting ends early
// when the context is done, with an error that is both the context's error
// (errors.Is) and the last *Error (errors.As).
type RetryPolicy struct {
	// MaxAttempts counts the first attempt; 1 or less means no retry.
	MaxAttempts int
	BaseDelay   time.Duration
	MaxDelay    time.Duration
}

// DefaultRetryPolicy: 4 attempts, backoff from 200ms, waits capped at 10s.
var DefaultRetryPolicy = RetryPolicy{MaxAttempts: 4, BaseDelay: 200 * time.Millisecond, MaxDelay: 10 * time.Second}

// New returns a Client of the server at baseURL (for example
// "http://127.0.0.1:8080"). It panics on a baseURL that does not parse as
// an absolute http(s) URL: that is a programming error.
func New(baseURL string, opts ...Option) *Client {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		panic(fmt.Sprintf("client.New: base URL %q is not an absolute http(s) URL", baseURL))
	}
	c := &Client{base: u, hc: &http.Client{Timeout: 60 * time.Second}, userAgent: DefaultUserAgent, retry: DefaultRetryPolicy}
	for _, o := range opts {
		o(c)
	}
	return c
}

// call is one operation.
type call struct {
	method string
	path   string // already escaped (see p)
	query  url.Values
	in     any // JSON body, nil for none
	out    any // decoded from a 2xx JSON body when not nil
	raw    *[]byte
	status *int
}

// p builds a path from a format and path parameters, escaping each
// parameter as one segment ('/' becomes %2F).
func p(format string, params ...string) string {
	args := make([]any, len(params))
	for i, s := range params {
		args[i] = url.PathEscape(s)
	}
	return fmt.Sprintf(format, args...)
}

func idempotent(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

func (c *Client) do(ctx context.Context, k call) error {
	var body []byte
	if k.in != nil {
		b, err := json.Marshal(k.in)
		if err != nil {
			return fmt.Errorf("repolock: encode request: %w", err)
		}
		body = b
	}
	u, err := url.Parse(c.base.String() + k.path)
	if err != nil {
		return fmt.Errorf("repolock: bad path %q: %w", k.path, err)
	}
	if len(k.query) > 0 {
		u.RawQuery = k.query.Encode()
	}
	attempts := c.retry.MaxAttempts
	if attempts < 1 || !idempotent(k.method) {
		attempts = 1
	}
	for attempt := 1; ; attempt++ {
		err := c.once(ctx, k, u, body)
		e, ok := err.(*Error)
		if !ok || attempt >= attempts || (e.StatusCode != http.StatusTooManyRequests && e.StatusCode != http.StatusServiceUnavailable) {
			return err
		}
		if werr := sleep(ctx, c.retry.delay(attempt, e.RetryAfter)); werr != nil {
			return errors.Join(werr, err)
		}
	}
}

// delay is the wait before attempt+1.
func (p RetryPolicy) delay(attempt int, retryAfter time.Duration) time.Duration {
	d := retryAfter
	if d <= 0 {
		backoff := p.BaseDelay << (attempt - 1)
		if backoff <= 0 || (p.MaxDelay > 0 && backoff > p.MaxDelay) {
			backoff = p.MaxDelay
		}
		if backoff > 0 {
			d = rand.N(backoff) + 1
		}
	}
	if p.MaxDelay > 0 && d > p.MaxDelay {
		d = p.MaxDelay
	}
	return d
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (c *Client) once(ctx context.Context, k call, u *url.URL, body []byte) error {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, k.method, u.String(), r)
	if err != nil {
		return fmt.Errorf("repolock: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.userAgent != "" {
		req.Header.Set("User-Agent", c.userAgent)
	}
	if c.fencingToken > 0 {
		req.Header.Set(FencingTokenHeader, strconv.FormatInt(c.fencingToken, 10))
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("repolock: %s %s: %w", k.method, k.path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("repolock: %s %s: read response: %w", k.method, k.path, err)
	}
	if resp.StatusCode >= 400 {
		return newError(resp, b)
	}
	if k.status != nil {
		*k.status = resp.StatusCode
	}
	if k.raw != nil {
		*k.raw = b
	}
	if k.out != nil && resp.StatusCode != http.StatusNoContent {
		if err := json.Unmarshal(b, k.out); err != nil {
			return fmt.Errorf("repolock: %s %s: decode response: %w", k.method, k.path, err)
		}
	}
	return nil
}

// parseRetryAfter reads Retry-After: delay-seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil {
		if n < 0 {
			return 0
		}
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}
