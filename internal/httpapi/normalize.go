package httpapi

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/repolock/repolock"
	"github.com/repolock/repolock/internal/normalize"
)

func (s *Server) registerNormalizeRoutes() {
	s.V1.GET("/normalize", s.normalizeURL, s.requireAnyToken)
}

type normalizeResponse struct {
	// Input is the URL as given with any user info (and so any token)
	// removed: secrets are never echoed.
	Input      string `json:"input"`
	Normalized string `json:"normalized"`
	Version    int    `json:"version"`
}

// normalizeURL answers GET /v1/normalize?url=... with the lock key of a URL.
func (s *Server) normalizeURL(c echo.Context) error {
	raw, ok := c.QueryParams()["url"]
	if !ok || len(raw) != 1 {
		return repolock.Errorf(repolock.EInvalid, "exactly one url query parameter is required")
	}
	n := s.cfg.Locks.Rules()
	key, err := n.RepoURL(raw[0])
	if err != nil {
		return err
	}
	input, err := n.StripUserInfo(raw[0])
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, normalizeResponse{Input: input, Normalized: string(key), Version: normalize.Version})
}
