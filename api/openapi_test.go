package api_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/arke-institute/orchestrator/api"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
)

// TestOpenAPIMatchesRoutes holds the OpenAPI document to the server: the
// (method, path) pairs Echo registers are exactly the document's, and the
// document is served at /openapi.yaml. River UI is mounted for every
// method (its own API is River's); the document describes its GET.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{NoWorkers: true})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	e := api.New(api.Config{Pool: env.Pool, Logger: slog.New(slog.DiscardHandler), Credentials: api.Credentials{AdminToken: "x"}, River: env.River, Context: ctx,
		Executors: env.Deps.Executors})

	param := regexp.MustCompile(`:([A-Za-z]+)`)
	registered := map[string]bool{}
	for _, r := range e.Routes() {
		if r.Method == echo.RouteNotFound {
			continue // Echo's own catch-all of the /admin group
		}
		path := param.ReplaceAllString(r.Path, "{$1}")
		path = strings.Replace(path, "/*", "/{path}", 1)
		if strings.HasPrefix(path, "/riverui") && r.Method != http.MethodGet {
			continue
		}
		registered[r.Method+" "+path] = true
	}

	var doc struct {
		OpenAPI string                               `yaml:"openapi"`
		Paths   map[string]map[string]map[string]any `yaml:"paths"`
	}
	require.NoError(t, yaml.Unmarshal(api.OpenAPI, &doc))
	require.True(t, strings.HasPrefix(doc.OpenAPI, "3."), "an OpenAPI 3 document")
	documented := map[string]bool{}
	for path, ops := range doc.Paths {
		for method, op := range ops {
			switch method {
			case "get", "put", "post", "delete", "options", "head", "patch", "trace":
				documented[strings.ToUpper(method)+" "+path] = true
				require.NotEmpty(t, op["responses"], "%s %s has responses", method, path)
			}
		}
	}
	require.Equal(t, sortedKeys(registered), sortedKeys(documented))

	resp, err := getAsReader(env.Server.URL + "/openapi.yaml")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "application/yaml", resp.Header.Get("Content-Type"))
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, api.OpenAPI, body)
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
