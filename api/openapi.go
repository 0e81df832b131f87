package api

import (
	_ "embed"
	"net/http"

	"github.com/labstack/echo/v4"
)

// OpenAPI is the OpenAPI 3 document of every route, served at
// /openapi.yaml. A test holds it to the routes the server registers.
//
//go:embed openapi.yaml
var OpenAPI []byte

// openAPI is GET /openapi.yaml.
func (h *handlers) openAPI(c echo.Context) error {
	return c.Blob(http.StatusOK, "application/yaml", OpenAPI)
}
