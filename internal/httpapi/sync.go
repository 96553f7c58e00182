package httpapi

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/syncstate"
)

// registerSyncRoutes registers the sync state routes (internal/syncstate):
// host cursors, repository rev indicators and the needs-index query.
// Repository ids containing '/' are sent percent-encoded (%2F).
func (s *Server) registerSyncRoutes() {
	h := syncHandlers{store: s.cfg.Sync, chargeRows: s.chargeRows}
	t := tenantRoutes{s}
	t.add(http.MethodPut, "/sync/hosts/:host", h.putHost)
	t.add(http.MethodGet, "/sync/hosts", h.listHosts)
	t.add(http.MethodGet, "/sync/hosts/:host", h.getHost)
	t.add(http.MethodPost, "/sync/hosts/:host/connect", h.connect)
	t.add(http.MethodPost, "/sync/hosts/:host/events", h.events)
	t.add(http.MethodPost, "/sync/hosts/:host/listing", h.listing)
	t.add(http.MethodGet, "/sync/repos", h.listRepos)
	t.add(http.MethodGet, "/sync/repos/:repo", h.getRepo)
	t.add(http.MethodPost, "/sync/repos/:repo/indexed", h.indexed)
}

type syncHandlers struct {
	store *syncstate.Store
	// chargeRows charges a batch by its rows (Server.chargeRows).
	chargeRows func(c echo.Context, rows int)
}

type putHostRequest struct {
	StrictCursor *bool `json:"strict_cursor"`
}

// putHost registers a host (201) or updates its settings (200). The body is
// optional.
func (h syncHandlers) putHost(c echo.Context) error {
	name, err := pathParam(c, "host")
	if err != nil {
		return err
	}
	var req putHostRequest
	if c.Request().ContentLength != 0 {
		if err := DecodeJSON(c, &req); err != nil {
			return err
		}
	}
	host, created, err := h.store.PutHost(c.Request().Context(), Tenant(c).ID, name, req.StrictCursor)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return c.JSON(status, host)
}

func (h syncHandlers) getHost(c echo.Context) error {
	name, err := pathParam(c, "host")
	if err != nil {
		return err
	}
	host, err := h.store.GetHost(c.Request().Context(), Tenant(c).ID, name)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, host)
}

func (h syncHandlers) listHosts(c echo.Context) error {
	p, err := ParsePage(c)
	if err != nil {
		return err
	}
	hosts, next, err := h.store.ListHosts(c.Request().Context(), Tenant(c).ID, p.Size, p.Token)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ListResponse[syncstate.Host]{Items: hosts, NextPageToken: next})
}

type connectRequest struct {
	OutdatedCursor bool   `json:"outdated_cursor"`
	FirstCursor    *int64 `json:"first_cursor"`
	FencingToken   *int64 `json:"fencing_token"`
}

func (h syncHandlers) connect(c echo.Context) error {
	name, err := pathParam(c, "host")
	if err != nil {
		return err
	}
	var req connectRequest
	if err := DecodeJSON(c, &req); err != nil {
		return err
	}
	token, err := fencingToken(c, req.FencingToken)
	if err != nil {
		return err
	}
	res, err := h.store.ConnectFenced(c.Request().Context(), Tenant(c).ID, name,
		syncstate.Connection{OutdatedCursor: req.OutdatedCursor, FirstCursor: req.FirstCursor}, token)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, res)
}

type eventRequest struct {
	Cursor *int64  `json:"cursor"`
	Repo   *string `json:"repo"`
	Rev    *string `json:"rev"`
	TooBig bool    `json:"too_big"`
}

type eventsRequest struct {
	Events       []eventRequest `json:"events"`
	FencingToken *int64         `json:"fencing_token"`
}

func (h syncHandlers) events(c echo.Context) error {
	name, err := pathParam(c, "host")
	if err != nil {
		return err
	}
	var req eventsRequest
	if err := DecodeJSON(c, &req); err != nil {
		return err
	}
	h.chargeRows(c, len(req.Events))
	events := make([]syncstate.Event, len(req.Events))
	for i, e := range req.Events {
		if e.Cursor == nil || e.Repo == nil || e.Rev == nil {
			return repolock.Errorf(repolock.EInvalid, "events[%d]: cursor, repo and rev are required", i)
		}
		events[i] = syncstate.Event{Cursor: *e.Cursor, Repo: *e.Repo, Rev: *e.Rev, TooBig: e.TooBig}
	}
	token, err := fencingToken(c, req.FencingToken)
	if err != nil {
		return err
	}
	res, err := h.store.ApplyEventsFenced(c.Request().Context(), Tenant(c).ID, name, events, token)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, res)
}

type listingRequest struct {
	CursorBefore *int64                 `json:"cursor_before"`
	Repos        []syncstate.ListedRepo `json:"repos"`
}

func (h syncHandlers) listing(c echo.Context) error {
	name, err := pathParam(c, "host")
	if err != nil {
		return err
	}
	var req listingRequest
	if err := DecodeJSON(c, &req); err != nil {
		return err
	}
	h.chargeRows(c, len(req.Repos))
	if req.CursorBefore == nil {
		return repolock.Errorf(repolock.EInvalid, "cursor_before is required: the host's first_cursor_since_reset read before the listing call")
	}
	res, err := h.store.RecordListing(c.Request().Context(), Tenant(c).ID, name, *req.CursorBefore, req.Repos)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, res)
}

type indexedRequest struct {
	Host         string `json:"host"`
	Rev          string `json:"rev"`
	CursorBefore *int64 `json:"cursor_before"`
}

func (h syncHandlers) indexed(c echo.Context) error {
	repo, err := pathParam(c, "repo")
	if err != nil {
		return err
	}
	var req indexedRequest
	if err := DecodeJSON(c, &req); err != nil {
		return err
	}
	if req.CursorBefore == nil {
		return repolock.Errorf(repolock.EInvalid, "cursor_before is required: the host's first_cursor_since_reset read before the fetch")
	}
	r, err := h.store.RecordIndexed(c.Request().Context(), Tenant(c).ID, repo,
		syncstate.IndexResult{Host: req.Host, Rev: req.Rev, CursorBefore: *req.CursorBefore})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, r)
}

func (h syncHandlers) getRepo(c echo.Context) error {
	repo, err := pathParam(c, "repo")
	if err != nil {
		return err
	}
	r, err := h.store.GetRepository(c.Request().Context(), Tenant(c).ID, repo)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, r)
}

// listRepos: GET /v1/sync/repos?host=&needs_index=true&page_size=&page_token=
func (h syncHandlers) listRepos(c echo.Context) error {
	p, err := ParsePage(c)
	if err != nil {
		return err
	}
	needsIndex, err := ParseBool(c, "needs_index")
	if err != nil {
		return err
	}
	repos, next, err := h.store.ListRepositories(c.Request().Context(), Tenant(c).ID, syncstate.ListOptions{
		Host: c.QueryParam("host"), NeedsIndex: needsIndex, PageSize: p.Size, PageToken: p.Token,
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ListResponse[syncstate.Repository]{Items: repos, NextPageToken: next})
}
