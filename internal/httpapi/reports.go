package httpapi

import (
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/reports"
)

// registerReportRoutes registers the SQL reporting views as admin routes:
//
//	GET /v1/admin/reports          the reports and what each shows
//	GET /v1/admin/reports/:name    one report (?format=json|csv, ?limit=N)
//	GET /v1/admin/reports/ownership/verify   the ownership figures recounted
func (s *Server) registerReportRoutes() {
	s.Admin.GET("/reports", s.listReports)
	s.Admin.GET("/reports/:name", s.getReport)
	s.Admin.GET("/reports/ownership/verify", s.verifyOwnership)
}

// verifyOwnership recounts the ownership figures from the base tables
// (reports.Service.Verify): 200 with ok false and the drift per tenant when
// they differ (drift is an answer, not an error; api report verify exits 1
// on it). It reads every lock: bounded by REQUEST_TIMEOUT.
func (s *Server) verifyOwnership(c echo.Context) error {
	v, err := s.cfg.Reports.Verify(c.Request().Context())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ownershipVerification{
		Tenants: v.Tenants, OK: len(v.Drift) == 0, Drift: v.Drift, TookMS: v.Took.Milliseconds(),
	})
}

// ownershipVerification is GET /v1/admin/reports/ownership/verify's answer.
type ownershipVerification struct {
	OK      bool            `json:"ok"`
	Tenants int64           `json:"tenants"`
	TookMS  int64           `json:"took_ms"`
	Drift   []reports.Drift `json:"drift"`
}

func (s *Server) listReports(c echo.Context) error {
	return c.JSON(http.StatusOK, ListResponse[reports.Report]{Items: reports.All()})
}

// getReport streams the report's rows, so a report of a million locks is
// never held in memory. An unknown name is 404 with the valid names in
// "valid_names".
func (s *Server) getReport(c echo.Context) error {
	format := reports.FormatJSON
	if v := c.QueryParam("format"); v != "" {
		f, err := reports.ParseFormat(v, reports.FormatJSON, reports.FormatCSV)
		if err != nil {
			return err
		}
		format = f
	}
	limit := 0
	if v := c.QueryParam("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return repolock.Errorf(repolock.EInvalid, "limit must be a positive integer")
		}
		limit = n
	}
	ctx := c.Request().Context()
	rows, err := s.cfg.Reports.Open(ctx, c.Param("name"), limit)
	if err != nil {
		return err
	}
	defer rows.Close()
	h := c.Response().Header()
	switch format {
	case reports.FormatCSV:
		h.Set(echo.HeaderContentType, "text/csv; charset=utf-8")
		h.Set(echo.HeaderContentDisposition, `attachment; filename="`+rows.Report.Name+`.csv"`)
	default:
		h.Set(echo.HeaderContentType, mimeJSONUTF8)
	}
	c.Response().WriteHeader(http.StatusOK)
	if err := rows.Write(c.Response(), format); err != nil {
		// The status is sent, so no error answer is possible. A body that
		// simply ended here would look complete (CSV has no end marker):
		// abort the response instead, so the client gets a transport error
		// (an unterminated chunked body) and never a short report with 200.
		s.Logger.ErrorContext(ctx, "report: streaming failed; response aborted", "report", rows.Report.Name, "error", err.Error(), "request_id", requestID(c))
		panic(http.ErrAbortHandler)
	}
	return nil
}

// mimeJSONUTF8 is the Content-Type the report route has always answered with
// (echo deprecated its constant of the same value).
const mimeJSONUTF8 = "application/json; charset=UTF-8"
