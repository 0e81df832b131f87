package repocheck_test

import (
	"fmt"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/arke-institute/orchestrator/config"
	"github.com/arke-institute/orchestrator/phases"
)

// composeFile is the part of docker-compose.yml the tests look at.
type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image       string            `yaml:"image"`
	Build       any               `yaml:"build"`
	DependsOn   yaml.Node         `yaml:"depends_on"`
	Environment map[string]string `yaml:"environment"`
	Healthcheck *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
	Ports []string `yaml:"ports"`
}

// dependsOn reads depends_on in either of its forms, a list of services or
// a map of service to condition; a listed service's condition is
// "service_started".
func (s composeService) dependsOn(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	switch s.DependsOn.Kind {
	case 0:
	case yaml.SequenceNode:
		var names []string
		require.NoError(t, s.DependsOn.Decode(&names))
		for _, n := range names {
			out[n] = "service_started"
		}
	case yaml.MappingNode:
		var m map[string]struct {
			Condition string `yaml:"condition"`
		}
		require.NoError(t, s.DependsOn.Decode(&m))
		for n, c := range m {
			out[n] = c.Condition
		}
	default:
		t.Fatalf("depends_on is neither a list nor a map")
	}
	return out
}

// readCompose parses docker-compose.yml at the repository's root, and
// returns its text too.
func readCompose(t *testing.T) (composeFile, string) {
	t.Helper()
	b, err := os.ReadFile("../../docker-compose.yml")
	require.NoError(t, err)
	var c composeFile
	require.NoError(t, yaml.Unmarshal(b, &c))
	return c, string(b)
}

// settingNames are the environment names config.Load reads, recorded
// through its lookup function.
func settingNames(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	_, err := config.Load(func(name string) (string, bool) {
		names[name] = true
		return "", false
	})
	require.NoError(t, err)
	require.True(t, names["DATABASE_URL"] && names["FLY_API_TOKEN"], "the recording lookup saw too little: %v", names)
	return names
}

// interpolation is one ${...} reference of a compose value: ${NAME},
// ${NAME:-default} or ${NAME:?message}.
var interpolation = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:-|:\?)([^}]*))?\}`)

// expand does compose's interpolation of a value with env, as docker compose
// would: an unset name with :? is an error carrying its message.
func expand(value string, env map[string]string) (string, error) {
	var err error
	out := interpolation.ReplaceAllStringFunc(value, func(ref string) string {
		m := interpolation.FindStringSubmatch(ref)
		v, ok := env[m[1]]
		switch {
		case ok && v != "":
			return v
		case m[2] == ":-":
			return m[3]
		case m[2] == ":?":
			err = fmt.Errorf("required variable %s is missing a value: %s", m[1], m[3])
		}
		return ""
	})
	return strings.ReplaceAll(out, "$$", "$"), err
}

// TestComposeServices: the four services are there, started in order, and
// those that serve say when they are ready.
func TestComposeServices(t *testing.T) {
	t.Parallel()
	c, _ := readCompose(t)
	for _, name := range []string{"postgres", "s3", "buckets", "orchestrator"} {
		require.Contains(t, c.Services, name)
	}
	require.Equal(t, ".", c.Services["orchestrator"].Build, "the orchestrator is built from the Dockerfile")

	require.Equal(t, map[string]string{"s3": "service_started"}, c.Services["buckets"].dependsOn(t))
	require.Equal(t, map[string]string{
		"postgres": "service_healthy",
		"buckets":  "service_completed_successfully",
	}, c.Services["orchestrator"].dependsOn(t))

	pg := c.Services["postgres"].Healthcheck
	require.NotNil(t, pg)
	require.Contains(t, pg.Test, "pg_isready")

	orch := c.Services["orchestrator"]
	require.NotNil(t, orch.Healthcheck, "the orchestrator needs a health check")
	port := strings.TrimPrefix(orch.Environment["LISTEN_ADDR"], ":")
	require.Contains(t, orch.Healthcheck.Test, "http://127.0.0.1:"+port+"/healthz")
	require.Equal(t, "CMD", orch.Healthcheck.Test[0])
	require.Contains(t, orch.Ports, port+":"+port)

	for name, s := range c.Services {
		for _, p := range s.Ports {
			if p != "8080:8080" {
				require.True(t, strings.HasPrefix(p, "127.0.0.1:"), "%s publishes %s beyond this machine", name, p)
			}
		}
	}
	require.Contains(t, c.Volumes, "pgdata")
	require.Contains(t, c.Volumes, "s3data")
}

// TestComposeEnvironment: every setting compose gives the orchestrator,
// and every one its commented Fly.io block names, is one config.Load
// reads; with them serve starts on the local machine runner and the S3
// server; the admin token has no default.
func TestComposeEnvironment(t *testing.T) {
	t.Parallel()
	c, text := readCompose(t)
	names := settingNames(t)
	env := c.Services["orchestrator"].Environment

	for name := range env {
		require.True(t, names[name], "compose sets %s, which the orchestrator does not read", name)
	}
	for _, name := range []string{"DATABASE_URL", "ADMIN_TOKEN", "READ_TOKEN", "INGEST_TOKEN", "R2_ENDPOINT", "R2_ACCESS_KEY_ID", "R2_SECRET_ACCESS_KEY",
		"LOCAL_WORKER_BIN", "ORCHESTRATOR_URL", "CDN_PUBLIC_URL", "LISTEN_ADDR"} {
		require.Contains(t, env, name)
	}
	require.NotContains(t, env, "FLY_API_TOKEN", "compose runs the local machine runner; the Fly settings stay commented")

	// No secret ships with a default.
	require.NotContains(t, text, "change-me")
	var err error
	for _, name := range []string{"ADMIN_TOKEN", "READ_TOKEN", "INGEST_TOKEN"} {
		require.Regexp(t, `^\$\{`+name+`:\?[^}]+\}$`, env[name])
		_, err = expand(env[name], nil)
		require.ErrorContains(t, err, "set "+name)
	}

	// The commented production block: FLY_API_TOKEN and each machine
	// phase's app and image, all names the orchestrator reads.
	commented := regexp.MustCompile(`(?m)^\s*#\s*([A-Z][A-Z0-9_]*):\s`).FindAllStringSubmatch(text, -1)
	var fly []string
	for _, m := range commented {
		require.True(t, names[m[1]], "the commented setting %s is not one the orchestrator reads", m[1])
		fly = append(fly, m[1])
	}
	require.Contains(t, fly, "FLY_API_TOKEN")
	for _, p := range phases.All() {
		if spec := p.Spec(); spec.Worker != "" {
			require.Contains(t, fly, "FLY_"+spec.Short+"_APP_NAME")
			require.Contains(t, fly, "FLY_"+spec.Short+"_WORKER_IMAGE")
		}
	}

	// What serve would load in the container.
	expanded := map[string]string{}
	for name, v := range env {
		expanded[name], err = expand(v, map[string]string{"ADMIN_TOKEN": "admin-secret-0123456789", "READ_TOKEN": "read-secret-0123456789", "INGEST_TOKEN": "ingest-secret-0123456789"})
		require.NoError(t, err, name)
	}
	cfg, err := config.Load(func(name string) (string, bool) {
		v, ok := expanded[name]
		return v, ok
	})
	require.NoError(t, err)
	require.NoError(t, cfg.CheckServe())
	require.Equal(t, "admin-secret-0123456789", cfg.AdminToken)
	require.Equal(t, "read-secret-0123456789", cfg.ReadToken)
	require.Equal(t, "ingest-secret-0123456789", cfg.IngestToken)
	require.Empty(t, cfg.FlyAPIToken, "the local machine runner")
	require.False(t, cfg.LocalStorage(), "the compose S3 server, not the embedded one")
	require.Equal(t, "http://s3:7070", cfg.R2Endpoint)

	// The worker program is where the image puts it, and the image has the
	// libraries it runs with.
	dockerfile, err := os.ReadFile("../../Dockerfile")
	require.NoError(t, err)
	df := string(dockerfile)
	require.Regexp(t, `(?m)^RUN CGO_ENABLED=1 go build .*-o /out/worker \./cmd/worker$`, df)
	require.Regexp(t, `(?m)^COPY --from=build .*/out/worker .*`+regexp.QuoteMeta(path.Dir(cfg.LocalWorkerBin))+`/$`, df)
	// The build context leaves out make run's data (a Postgres cluster
	// the build could not read) and local binaries.
	ignore, err := os.ReadFile("../../.dockerignore")
	require.NoError(t, err)
	for _, p := range []string{".data", "bin"} {
		require.Contains(t, strings.Fields(string(ignore)), p)
	}
	runtime := df[strings.LastIndex(df, "\nFROM "):]
	for _, pkg := range []string{"libvips42", "poppler-utils", "curl"} {
		require.True(t, slices.Contains(strings.Fields(runtime), pkg), "the runtime stage installs %s", pkg)
	}
}
