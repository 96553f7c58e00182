package httpapi

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/repolock/repolock/internal/repostate"
)

// registerRepositoryRoutes registers the graveler repository state routes
// (internal/repostate). Branch and tag names may contain '/': clients send
// it percent-encoded (%2F) inside a path segment.
func (s *Server) registerRepositoryRoutes() {
	h := repoHandlers{svc: s.cfg.Repositories}
	t := tenantRoutes{s}
	t.add(http.MethodPost, "/repositories", h.create)
	t.add(http.MethodGet, "/repositories", h.list)
	t.add(http.MethodGet, "/repositories/:name", h.get)
	t.add(http.MethodDelete, "/repositories/:name", h.delete)

	t.add(http.MethodPost, "/repositories/:name/branches", h.createBranch)
	t.add(http.MethodGet, "/repositories/:name/branches", h.listBranches)
	t.add(http.MethodGet, "/repositories/:name/branches/:branch", h.getBranch)
	t.add(http.MethodPut, "/repositories/:name/branches/:branch", h.updateBranch)
	t.add(http.MethodDelete, "/repositories/:name/branches/:branch", h.deleteBranch)
	t.add(http.MethodPost, "/repositories/:name/branches/:branch/commits", h.commit)
	t.add(http.MethodGet, "/repositories/:name/branches/:branch/log", h.log)

	t.add(http.MethodGet, "/repositories/:name/commits/:id", h.getCommit)

	t.add(http.MethodPost, "/repositories/:name/tags", h.createTag)
	t.add(http.MethodGet, "/repositories/:name/tags", h.listTags)
	t.add(http.MethodGet, "/repositories/:name/tags/:tag", h.getTag)
	t.add(http.MethodDelete, "/repositories/:name/tags/:tag", h.deleteTag)
}

type repoHandlers struct {
	svc *repostate.Service
}

type createRepositoryRequest struct {
	Name             string `json:"name"`
	StorageNamespace string `json:"storage_namespace"`
	DefaultBranch    string `json:"default_branch"`
	Bare             bool   `json:"bare"`
}

func (h repoHandlers) create(c echo.Context) error {
	var req createRepositoryRequest
	if err := DecodeJSON(c, &req); err != nil {
		return err
	}
	r, err := h.svc.Create(c.Request().Context(), Tenant(c).ID, repostate.CreateParams{
		Name: req.Name, StorageNamespace: req.StorageNamespace, DefaultBranch: req.DefaultBranch, Bare: req.Bare,
	})
	if err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderLocation, "/v1/repositories/"+r.Name)
	return c.JSON(http.StatusCreated, r)
}

func (h repoHandlers) list(c echo.Context) error {
	p, err := ParsePage(c)
	if err != nil {
		return err
	}
	items, next, err := h.svc.ListPage(c.Request().Context(), Tenant(c).ID, p.Size, p.Token)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ListResponse[repostate.Repository]{Items: items, NextPageToken: next})
}

func (h repoHandlers) get(c echo.Context) error {
	r, err := h.svc.Get(c.Request().Context(), Tenant(c).ID, c.Param("name"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, r)
}

func (h repoHandlers) delete(c echo.Context) error {
	if err := h.svc.Delete(c.Request().Context(), Tenant(c).ID, c.Param("name")); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

type createBranchRequest struct {
	Name string `json:"name"`
	// Source is a branch name or a commit id.
	Source string `json:"source"`
}

func (h repoHandlers) createBranch(c echo.Context) error {
	var req createBranchRequest
	if err := DecodeJSON(c, &req); err != nil {
		return err
	}
	b, err := h.svc.CreateBranch(c.Request().Context(), Tenant(c).ID, c.Param("name"), req.Name, req.Source)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, b)
}

func (h repoHandlers) listBranches(c echo.Context) error {
	p, err := ParsePage(c)
	if err != nil {
		return err
	}
	items, next, err := h.svc.ListBranchesPage(c.Request().Context(), Tenant(c).ID, c.Param("name"), p.Size, p.Token)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ListResponse[repostate.Branch]{Items: items, NextPageToken: next})
}

func (h repoHandlers) getBranch(c echo.Context) error {
	branch, err := pathParam(c, "branch")
	if err != nil {
		return err
	}
	b, err := h.svc.GetBranch(c.Request().Context(), Tenant(c).ID, c.Param("name"), branch)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, b)
}

type updateBranchRequest struct {
	CommitID string `json:"commit_id"`
	// ExpectedCommitID, when set, must be the branch's current commit
	// (else 412).
	ExpectedCommitID string `json:"expected_commit_id"`
	// FencingToken guards the write (docs/leases.md); the header may
	// carry it instead.
	FencingToken *int64 `json:"fencing_token"`
}

func (h repoHandlers) updateBranch(c echo.Context) error {
	branch, err := pathParam(c, "branch")
	if err != nil {
		return err
	}
	var req updateBranchRequest
	if err := DecodeJSON(c, &req); err != nil {
		return err
	}
	token, err := fencingToken(c, req.FencingToken)
	if err != nil {
		return err
	}
	b, err := h.svc.UpdateBranchFenced(c.Request().Context(), Tenant(c).ID, c.Param("name"), branch, req.CommitID, req.ExpectedCommitID, token)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, b)
}

func (h repoHandlers) deleteBranch(c echo.Context) error {
	branch, err := pathParam(c, "branch")
	if err != nil {
		return err
	}
	if err := h.svc.DeleteBranch(c.Request().Context(), Tenant(c).ID, c.Param("name"), branch); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

type commitRequest struct {
	Message string `json:"message" text:"multiline"`
	// Committer defaults to the tenant's name.
	Committer    string            `json:"committer"`
	MetaRangeID  string            `json:"meta_range_id"`
	Metadata     map[string]string `json:"metadata" text:"multiline"`
	FencingToken *int64            `json:"fencing_token"`
}

func (h repoHandlers) commit(c echo.Context) error {
	branch, err := pathParam(c, "branch")
	if err != nil {
		return err
	}
	var req commitRequest
	if err := DecodeJSON(c, &req); err != nil {
		return err
	}
	if req.Committer == "" {
		req.Committer = Tenant(c).Name
	}
	token, err := fencingToken(c, req.FencingToken)
	if err != nil {
		return err
	}
	cm, err := h.svc.Commit(c.Request().Context(), Tenant(c).ID, c.Param("name"), branch, repostate.CommitParams{
		Committer: req.Committer, Message: req.Message, MetaRangeID: req.MetaRangeID, Metadata: req.Metadata,
		FencingToken: token,
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, cm)
}

func (h repoHandlers) log(c echo.Context) error {
	branch, err := pathParam(c, "branch")
	if err != nil {
		return err
	}
	p, err := ParsePage(c)
	if err != nil {
		return err
	}
	items, next, err := h.svc.LogPage(c.Request().Context(), Tenant(c).ID, c.Param("name"), branch, p.Size, p.Token)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ListResponse[repostate.Commit]{Items: items, NextPageToken: next})
}

func (h repoHandlers) getCommit(c echo.Context) error {
	cm, err := h.svc.GetCommit(c.Request().Context(), Tenant(c).ID, c.Param("name"), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, cm)
}

type createTagRequest struct {
	Name         string `json:"name"`
	CommitID     string `json:"commit_id"`
	FencingToken *int64 `json:"fencing_token"`
}

func (h repoHandlers) createTag(c echo.Context) error {
	var req createTagRequest
	if err := DecodeJSON(c, &req); err != nil {
		return err
	}
	token, err := fencingToken(c, req.FencingToken)
	if err != nil {
		return err
	}
	t, err := h.svc.CreateTagFenced(c.Request().Context(), Tenant(c).ID, c.Param("name"), req.Name, req.CommitID, token)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, t)
}

func (h repoHandlers) listTags(c echo.Context) error {
	p, err := ParsePage(c)
	if err != nil {
		return err
	}
	items, next, err := h.svc.ListTagsPage(c.Request().Context(), Tenant(c).ID, c.Param("name"), p.Size, p.Token)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ListResponse[repostate.Tag]{Items: items, NextPageToken: next})
}

func (h repoHandlers) getTag(c echo.Context) error {
	tag, err := pathParam(c, "tag")
	if err != nil {
		return err
	}
	t, err := h.svc.GetTag(c.Request().Context(), Tenant(c).ID, c.Param("name"), tag)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, t)
}

func (h repoHandlers) deleteTag(c echo.Context) error {
	tag, err := pathParam(c, "tag")
	if err != nil {
		return err
	}
	token, err := fencingToken(c, nil)
	if err != nil {
		return err
	}
	if err := h.svc.DeleteTagFenced(c.Request().Context(), Tenant(c).ID, c.Param("name"), tag, token); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}
