package httpapi

import (
	"errors"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/repolock/repolock/internal/apps"
)

// registerAppsRoutes registers Applications, Repository Credentials, the
// locks routes (locks.go) and the admin deletion of a tenant.
func (s *Server) registerAppsRoutes() {
	t := tenantRoutes{s}
	t.add(http.MethodPost, "/applications", s.createApplication)
	t.add(http.MethodGet, "/applications", s.listApplications)
	t.add(http.MethodGet, "/applications/:id", s.getApplication)
	t.add(http.MethodPatch, "/applications/:id", s.updateApplication)
	t.add(http.MethodDelete, "/applications/:id", s.deleteApplication)

	t.add(http.MethodPost, "/repository-credentials", s.createCredential)
	t.add(http.MethodGet, "/repository-credentials", s.listCredentials)
	t.add(http.MethodGet, "/repository-credentials/:id", s.getCredential)
	t.add(http.MethodPatch, "/repository-credentials/:id", s.updateCredential)
	t.add(http.MethodDelete, "/repository-credentials/:id", s.deleteCredential)

	s.registerLocksRoutes(t)

	s.Admin.DELETE("/users/:name", s.deleteTenant)
}

// applicationRequest is the body of POST and PATCH /v1/applications. Absent
// fields are nil: PATCH leaves them unchanged, POST treats them as empty.
type applicationRequest struct {
	Name           *string `json:"name"`
	RepoURL        *string `json:"repo_url"`
	Path           *string `json:"path"`
	TargetRevision *string `json:"target_revision"`
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func (s *Server) createApplication(c echo.Context) error {
	var req applicationRequest
	if err := DecodeJSON(c, &req); err != nil {
		return err
	}
	app, err := s.cfg.Apps.CreateApplication(c.Request().Context(), Tenant(c).ID, apps.NewApplication{
		Name: deref(req.Name), RepoURL: deref(req.RepoURL), Path: deref(req.Path), TargetRevision: deref(req.TargetRevision),
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, app)
}

func (s *Server) listApplications(c echo.Context) error {
	p, err := ParsePage(c)
	if err != nil {
		return err
	}
	items, next, err := s.cfg.Apps.ListApplications(c.Request().Context(), Tenant(c).ID, p.Size, p.Token)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ListResponse[apps.Application]{Items: items, NextPageToken: next})
}

func (s *Server) getApplication(c echo.Context) error {
	app, err := s.cfg.Apps.GetApplication(c.Request().Context(), Tenant(c).ID, c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, app)
}

func (s *Server) updateApplication(c echo.Context) error {
	var req applicationRequest
	if err := DecodeJSON(c, &req); err != nil {
		return err
	}
	app, err := s.cfg.Apps.UpdateApplication(c.Request().Context(), Tenant(c).ID, c.Param("id"), apps.ApplicationPatch{
		Name: req.Name, RepoURL: req.RepoURL, Path: req.Path, TargetRevision: req.TargetRevision,
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, app)
}

func (s *Server) deleteApplication(c echo.Context) error {
	if err := s.cfg.Apps.DeleteApplication(c.Request().Context(), Tenant(c).ID, c.Param("id")); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// credentialRequest is the body of POST and PATCH
// /v1/repository-credentials.
type credentialRequest struct {
	Name      *string `json:"name"`
	RepoURL   *string `json:"repo_url"`
	Username  *string `json:"username"`
	SecretRef *string `json:"secret_ref"`
}

// decodeCredential decodes a credential request. A request that carries a
// secret in one of the usual fields (password, ssh_private_key, token...) is
// refused with a message pointing at secret_ref rather than a generic
// "unknown field"; the value is never read into anything or echoed.
func decodeCredential(c echo.Context) (credentialRequest, error) {
	var req credentialRequest
	err := DecodeJSON(c, &req)
	if err == nil {
		return req, nil
	}
	if f, ok := unknownField(err); ok {
		for _, secret := range apps.SecretFields {
			if strings.EqualFold(f, secret) {
				return req, apps.ErrSecretField(secret)
			}
		}
	}
	return req, err
}

// unknownField returns the field named by DecodeJSON's unknown-field error.
func unknownField(err error) (string, bool) {
	const prefix = `json: unknown field "`
	for e := err; e != nil; e = errors.Unwrap(e) {
		if msg := e.Error(); strings.HasPrefix(msg, prefix) && strings.HasSuffix(msg, `"`) {
			return strings.TrimSuffix(strings.TrimPrefix(msg, prefix), `"`), true
		}
	}
	return "", false
}

func (s *Server) createCredential(c echo.Context) error {
	req, err := decodeCredential(c)
	if err != nil {
		return err
	}
	cred, err := s.cfg.Apps.CreateRepositoryCredential(c.Request().Context(), Tenant(c).ID, apps.NewRepositoryCredential{
		Name: deref(req.Name), RepoURL: deref(req.RepoURL), Username: deref(req.Username), SecretRef: deref(req.SecretRef),
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, cred)
}

func (s *Server) listCredentials(c echo.Context) error {
	p, err := ParsePage(c)
	if err != nil {
		return err
	}
	items, next, err := s.cfg.Apps.ListRepositoryCredentials(c.Request().Context(), Tenant(c).ID, p.Size, p.Token)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ListResponse[apps.RepositoryCredential]{Items: items, NextPageToken: next})
}

func (s *Server) getCredential(c echo.Context) error {
	cred, err := s.cfg.Apps.GetRepositoryCredential(c.Request().Context(), Tenant(c).ID, c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, cred)
}

func (s *Server) updateCredential(c echo.Context) error {
	req, err := decodeCredential(c)
	if err != nil {
		return err
	}
	cred, err := s.cfg.Apps.UpdateRepositoryCredential(c.Request().Context(), Tenant(c).ID, c.Param("id"), apps.RepositoryCredentialPatch{
		Name: req.Name, RepoURL: req.RepoURL, Username: req.Username, SecretRef: req.SecretRef,
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, cred)
}

func (s *Server) deleteCredential(c echo.Context) error {
	if err := s.cfg.Apps.DeleteRepositoryCredential(c.Request().Context(), Tenant(c).ID, c.Param("id")); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// deleteTenant is DELETE /v1/admin/users/:name: the tenant, its applications,
// credentials and tokens go, and its locks are released, atomically.
func (s *Server) deleteTenant(c echo.Context) error {
	d, err := s.cfg.Apps.DeleteTenant(c.Request().Context(), c.Param("name"))
	if err != nil {
		return err
	}
	s.cfg.Tenants.Flush() // at once here; other processes through the notification
	s.Logger.InfoContext(c.Request().Context(), "tenant deleted", "user", d.Tenant,
		"applications", d.Applications, "repository_credentials", d.RepositoryCredentials, "locks_released", d.LocksReleased)
	return c.JSON(http.StatusOK, d)
}
