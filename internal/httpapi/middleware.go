package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/repolock/repolock"
)

type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
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
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("httpapi: register the HTTP metrics: %w", err)
		}
	}
	return m, nil
}

const headerRequestID = echo.HeaderXRequestID

func requestID(c echo.Context) string { return c.Response().Header().Get(headerRequestID) }

// middlewares returns the chain every request passes through, outermost
// first: request ID, access log + metrics, recover, body limit, timeout.
func (s *Server) middlewares() []echo.MiddlewareFunc {
	return []echo.MiddlewareFunc{
		middleware.RequestIDWithConfig(middleware.RequestIDConfig{
			// Accept a caller's ID only when it is short and printable.
			Generator: func() string { return newRequestID() },
			RequestIDHandler: func(c echo.Context, id string) {
				if len(id) > 128 {
					c.Response().Header().Set(headerRequestID, newRequestID())
				}
			},
		}),
		s.accessLog,
		s.recoverPanic,
		s.limitBody,
		s.timeout,
		s.withNormalizer,
	}
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
		elapsed := time.Since(start)
		status := c.Response().Status
		route := c.Path()
		if route == "" {
			route = "unmatched"
		}
		method := c.Request().Method
		s.metrics.requests.WithLabelValues(method, route, strconv.Itoa(status)).Inc()
		s.metrics.duration.WithLabelValues(method, route, strconv.Itoa(status)).Observe(elapsed.Seconds())
		attrs := []any{
			"method", method,
			"route", route,
			"path", c.Request().URL.Path,
			"status", status,
			"duration_ms", float64(elapsed.Microseconds()) / 1000,
			"bytes_out", c.Response().Size,
			"request_id", requestID(c),
		}
		if u, ok := c.Get(ctxKeyTenant).(tenantValue); ok {
			attrs = append(attrs, "tenant", u.Name)
		}
		if route == "/healthz" || route == "/readyz" || route == "/metrics" {
			s.Logger.Debug("request", attrs...)
		} else {
			s.Logger.Info("request", attrs...)
		}
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
// when it expires.
func (s *Server) timeout(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx, cancel := context.WithTimeout(c.Request().Context(), s.cfg.RequestTimeout)
		defer cancel()
		c.SetRequest(c.Request().WithContext(ctx))
		return next(c)
	}
}
