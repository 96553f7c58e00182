package httpapi

import (
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/gc"
)

// registerGCRoutes registers the admin routes of the global GC:
//
//	POST /v1/admin/gc            run one collection (?dry_run=true, ?full=true, ?batch_size=N, ?min_age=1m)
//	GET  /v1/admin/gc/runs       recorded runs, newest first (page_size, page_token)
//	GET  /v1/admin/gc/runs/:id   one recorded run
func (s *Server) registerGCRoutes() {
	h := &gcHandlers{collector: s.cfg.GC, s: s}
	s.Admin.POST("/gc", h.run)
	s.Admin.GET("/gc/runs", h.listRuns)
	s.Admin.GET("/gc/runs/:id", h.getRun)
}

type gcHandlers struct {
	s         *Server
	collector *gc.Collector
}

// run answers 200 with the run, whether it collected or was skipped
// (status "skipped", reason "another collection is running"). The run is
// bounded by the request timeout; what it collected before a timeout stays
// collected and the run is recorded as failed.
func (h *gcHandlers) run(c echo.Context) error {
	opts := gc.DefaultOptions(gc.TriggerAPI)
	var err error
	if opts.DryRun, err = ParseBool(c, "dry_run"); err != nil {
		return err
	}
	if opts.Full, err = ParseBool(c, "full"); err != nil {
		return err
	}
	if v := c.QueryParam("batch_size"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > gc.MaxBatchSize {
			return repolock.Errorf(repolock.EInvalid, "batch_size must be an integer from 1 to %d", gc.MaxBatchSize)
		}
		opts.BatchSize = n
	}
	if v := c.QueryParam("min_age"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return repolock.Errorf(repolock.EInvalid, "min_age must be a non-negative duration such as 90s or 5m")
		}
		opts.MinAge = d
	}
	run, err := h.collector.Collect(c.Request().Context(), opts)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, run)
}

func (h *gcHandlers) listRuns(c echo.Context) error {
	p, err := ParsePage(c)
	if err != nil {
		return err
	}
	runs, next, err := h.s.cfg.GC.ListRuns(c.Request().Context(), p.Size, p.Token)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ListResponse[gc.Run]{Items: runs, NextPageToken: next})
}

func (h *gcHandlers) getRun(c echo.Context) error {
	run, err := h.s.cfg.GC.GetRun(c.Request().Context(), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, run)
}
