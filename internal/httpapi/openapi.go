package httpapi

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/repolock/repolock/api"
)

// registerOpenAPIRoutes serves the API contract (api/openapi.yaml) without a
// token: GET /openapi.yaml as written and GET /openapi.json, both embedded
// bytes (the JSON is generated at build time: go generate ./api/).
func (s *Server) registerOpenAPIRoutes() {
	s.Echo.GET("/openapi.yaml", func(c echo.Context) error {
		return c.Blob(http.StatusOK, "application/yaml", api.YAML())
	})
	s.Echo.GET("/openapi.json", func(c echo.Context) error {
		return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, api.JSON())
	})
}
