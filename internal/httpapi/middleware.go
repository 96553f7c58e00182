package httpapi

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/repolock/repolock"
)

type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	// The rate limit's decisions by tenant ID, for the tenants it has
	// refused at least once since the process started (limited): one
	// series per tenant that has hit its limit, not one per tenant.
	rateChecked  *prometheus.CounterVec
	rateRejected *prometheus.CounterVec
	limited      sync.Map // tenant ID -> struct{}
	// rateLimited counts every refusal of the rate limit, whatever the
	// tenant: present at 0 from start-up, one atomic add per refusal.
	rateLimited prometheus.Counter
	// series holds the requests counter and the duration histogram of
	// each (method, route, status) seen, resolved once: WithLabelValues
	// hashes the labels and looks the series up on every call. Bounded as
	// the series are (method labels, route templates, statuses).
	seriesMu sync.RWMutex
	series   map[requestSeries]requestObservers
}

type requestSeries struct {
	method, route string
	status        int
}

type requestObservers struct {
	count    prometheus.Counter
	duration prometheus.Observer
}

// observeRequest counts one request and its duration.
func (m *httpMetrics) observeRequest(method, route string, status int, elapsed time.Duration) {
	k := requestSeries{method, route, status}
	m.seriesMu.RLock()
	ro, ok := m.series[k]
	m.seriesMu.RUnlock()
	if !ok {
		code := strconv.Itoa(status)
		ro = requestObservers{
			count:    m.requests.WithLabelValues(method, route, code),
			duration: m.duration.WithLabelValues(method, route, code),
		}
		m.seriesMu.Lock()
		if m.series == nil {
			m.series = make(map[requestSeries]requestObservers)
		}
		m.series[k] = ro
		m.seriesMu.Unlock()
	}
	ro.count.Inc()
	ro.duration.Observe(elapsed.Seconds())
}

func newHTTPMetrics(reg prometheus.Registerer) (*httpMetrics, error) {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "repolock_http_requests_total",
			Help: "HTTP requests by method, route template and status.",
		}, []string{"method", "route", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "repolock_http_request_duration_seconds",
			Help:    "HTTP request latency by method, route template and status.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"method", "route", "status"}),
		rateChecked: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "repolock_rate_limit_checked_requests_total",
			Help: "Requests the per-tenant rate limit checked, by tenant ID; counted from the tenant's first refusal in this process (tenants never refused have no series).",
		}, []string{"tenant"}),
		rateRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "repolock_rate_limit_rejected_requests_total",
			Help: "Requests the per-tenant rate limit refused (429), by tenant ID.",
		}, []string{"tenant"}),
		rateLimited: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "repolock_rate_limited_total",
			Help: "Requests the per-tenant rate limit refused (429), all tenants: present at 0 from start-up.",
		}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.rateChecked, m.rateRejected, m.rateLimited} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("httpapi: register the HTTP metrics: %w", err)
		}
	}
	return m, nil
}

// observeRateLimit counts one decision of the rate limit for tenantID.
func (m *httpMetrics) observeRateLimit(tenantID string, refused bool) {
	if refused {
		m.rateLimited.Inc()
		m.limited.LoadOrStore(tenantID, struct{}{})
		m.rateRejected.WithLabelValues(tenantID).Inc()
	} else if _, ok := m.limited.Load(tenantID); !ok {
		return
	}
	m.rateChecked.WithLabelValues(tenantID).Inc()
}

const headerRequestID = echo.HeaderXRequestID

func requestID(c echo.Context) string { return c.Response().Header().Get(headerRequestID) }

// middlewares returns the chain every request passes through, outermost
// first: request ID, access log + metrics, recover, body limit, timeout,
// text check of the path and query parameters.
func (s *Server) middlewares() []echo.MiddlewareFunc {
	return []echo.MiddlewareFunc{
		s.requestID,
		s.strictTransport,
		s.accessLog,
		s.recoverPanic,
		s.announceWrites,
		s.limitBody,
		s.timeout,
		s.checkParams,
	}
}

// announceWrites tells the watch (Config.Watch) after every request that
// may have written events (every method but GET, HEAD and OPTIONS,
// whatever its status: a refused claim records a denial), once the
// handler has returned and its transaction has committed. Written only
// wakes the watch's loops; the NOTIFY to the other replicas goes out of
// the request's path (internal/watch, "Who notifies").
func (s *Server) announceWrites(next echo.HandlerFunc) echo.HandlerFunc {
	if s.cfg.Watch == nil {
		return next
	}
	return func(c echo.Context) error {
		err := next(c)
		switch c.Request().Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
		default:
			s.cfg.Watch.Written()
		}
		return err
	}
}

// HSTS is the Strict-Transport-Security of every response over TLS.
const HSTS = "max-age=31536000"

// strictTransport adds HSTS to responses over TLS: the server's own
// listener (TLS_CERT_FILE), or a proxy's when Config.TrustForwardedProto.
// Browsers ignore it over plain HTTP, where it is not sent.
func (s *Server) strictTransport(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if r.TLS != nil || (s.cfg.TrustForwardedProto && strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")) {
			c.Response().Header().Set("Strict-Transport-Security", HSTS)
		}
		return next(c)
	}
}

// MaxRequestIDLen bounds a caller's X-Request-ID.
const MaxRequestIDLen = 128

// validRequestID reports whether a caller's X-Request-ID may be echoed:
// 1..MaxRequestIDLen characters of letters, digits and "-_.:".
func validRequestID(id string) bool {
	if id == "" || len(id) > MaxRequestIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		switch b := id[i]; {
		case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9', b == '-', b == '_', b == '.', b == ':':
		default:
			return false
		}
	}
	return true
}

// requestID echoes the caller's X-Request-ID when it is made of the safe
// set (validRequestID) and generates one otherwise.
func (s *Server) requestID(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		id := c.Request().Header.Get(headerRequestID)
		if !validRequestID(id) {
			id = newRequestID()
		}
		c.Response().Header().Set(headerRequestID, id)
		return next(c)
	}
}

// checkParams refuses, with 400 invalid_argument, a path or query parameter
// that is not text (repolock.ValidateText: NUL, invalid UTF-8 or control
// characters), once for every route, before authentication and handlers.
// The wildcard of the console's mount (/ui/*) is a path value like any
// other (the console checks its own too); a group's catch-all only ever
// answers 404 or 405. It also answers OPTIONS, which
// no route serves, as a wrong method (405 with Allow, or 404), in the one
// error shape: Echo's router would answer it 204 itself.
func (s *Server) checkParams(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		for _, name := range c.ParamNames() {
			if name == "*" && !isConsolePath(c.Path()) {
				continue
			}
			v, err := pathParam(c, name)
			if err != nil {
				return err
			}
			label := "path parameter " + name
			if name == "*" {
				label = "the path"
			}
			if err := repolock.ValidateText(label, v, repolock.SingleLine); err != nil {
				return err
			}
		}
		if c.Request().Method == http.MethodOptions && !isConsolePath(c.Path()) {
			if len(s.allowedMethods(c)) > 0 {
				return echo.ErrMethodNotAllowed
			}
			return echo.ErrNotFound
		}
		if c.Request().URL.RawQuery != "" {
			q, err := url.ParseQuery(c.Request().URL.RawQuery)
			if err != nil {
				return repolock.Errorf(repolock.EInvalid, "the query string is not validly escaped")
			}
			for name, vs := range q {
				if err := repolock.ValidateText("a query parameter name", name, repolock.SingleLine); err != nil {
					return err
				}
				for _, v := range vs {
					if err := repolock.ValidateText("query parameter "+name, v, repolock.SingleLine); err != nil {
						return err
					}
				}
			}
		}
		return next(c)
	}
}

// isConsolePath reports whether route is the console's mount (/ui, /ui/*),
// which answers its own methods.
func isConsolePath(route string) bool {
	return route == "/ui" || strings.HasPrefix(route, "/ui/")
}

// knownMethods are the values the method label of the HTTP metrics takes;
// anything else is counted as OTHER (a caller must not create series).
var knownMethods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodOptions: true,
}

func methodLabel(m string) string {
	if knownMethods[m] {
		return m
	}
	return "OTHER"
}

// accessLog logs one structured line per request and records its metrics.
// It runs the error handler itself so the logged status is the one sent.
func (s *Server) accessLog(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		if err != nil {
			c.Error(err)
		}
		end := time.Now()
		elapsed := end.Sub(start)
		status := c.Response().Status
		route := c.Path()
		if route == "" {
			route = "unmatched"
		}
		label := methodLabel(c.Request().Method)
		s.metrics.observeRequest(label, route, status, elapsed)
		level := slog.LevelInfo
		if route == "/healthz" || route == "/readyz" || route == "/metrics" {
			level = slog.LevelDebug
		}
		ctx := c.Request().Context()
		h := s.Logger.Handler()
		if !h.Enabled(ctx, level) {
			return nil
		}
		// The record is handed to the handler directly: the same line as
		// Logger.Info("request", "method", label, ...), without boxing
		// each value into an any, and without the caller's program
		// counter Logger.Info takes with runtime.Callers for every line
		// (a handler uses it only with AddSource, which serve never sets).
		r := slog.NewRecord(end, level, "request", 0)
		r.AddAttrs(
			slog.String("method", label),
			slog.String("route", route),
			slog.String("path", c.Request().URL.Path),
			slog.Int("status", status),
			slog.Float64("duration_ms", float64(elapsed.Microseconds())/1000),
			slog.Int64("bytes_out", c.Response().Size),
			slog.String("request_id", requestID(c)),
		)
		if u, ok := c.Get(ctxKeyTenant).(tenantValue); ok {
			r.AddAttrs(slog.String("tenant", u.Name))
		}
		_ = h.Handle(ctx, r)
		return nil
	}
}

// recoverPanic turns a panicking handler into a 500 and logs the stack.
func (s *Server) recoverPanic(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			if r := recover(); r != nil {
				if r == http.ErrAbortHandler {
					panic(r)
				}
				s.Logger.Error("panic in handler", "panic", fmt.Sprint(r), "stack", string(debug.Stack()), "request_id", requestID(c))
				err = repolock.Errorf(repolock.EInternal, "internal error")
			}
		}()
		return next(c)
	}
}

// limitBody answers 413 when the declared length is over the limit and caps
// what can be read otherwise (decodeJSON turns the overrun into 413).
func (s *Server) limitBody(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		if req.ContentLength > s.cfg.BodyLimit {
			return repolock.Errorf(repolock.EPayloadTooLarge, "request body is larger than %d bytes", s.cfg.BodyLimit)
		}
		if req.Body != nil {
			req.Body = http.MaxBytesReader(c.Response(), req.Body, s.cfg.BodyLimit)
		}
		return next(c)
	}
}

// timeout bounds the request's context; queries made with it are cancelled
// when it expires. GET /v1/events is exempt: a stream lasts as long as its
// client stays, and a long poll bounds itself (wait + RequestTimeout); so
// is the console's stream of the same events (consoleEventsPath), mounted
// on the same Echo.
func (s *Server) timeout(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if c.Path() == eventsPath || c.Request().URL.Path == consoleEventsPath {
			return next(c)
		}
		// The client's own context, which only the client's going away
		// cancels (handleError tells that from a failure by it).
		c.Set(ctxKeyClient, c.Request().Context())
		ctx, cancel := context.WithTimeout(c.Request().Context(), s.cfg.RequestTimeout)
		defer cancel()
		c.SetRequest(c.Request().WithContext(ctx))
		return next(c)
	}
}
