package repocheck_test

import (
	"bufio"
	"bytes"
	"os/exec"
	"path"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// module is the module path the packages below are relative to.
const module = "github.com/arke-institute/orchestrator"

// layers are the packages in layer order, lowest first: a package may
// import packages of its own layer or of one below, never of one above
// (Go already refuses a circle). A pattern ending in "/..." names the
// packages under a folder, that folder's own included; a package named
// outright is in that layer, else in the layer of the closest pattern
// (compute is a foundation, the machine backends under it are drivers;
// a new executor's package under executor/ needs no line). Every package of
// the module must be in one layer: a new package is placed here, where
// docs/architecture.md's layout describes it.
var layers = []struct {
	name     string
	packages []string
}{
	{"foundation: pure logic and the contracts, no database or network", []string{
		"phases", "manifest", "textchunk", "words", "logcoalesce", "provider", "intakesig", "problem",
		"sql", "blob", "compute", "worker/vips", "worker/protocol", "setting", "cost", "gcgoal",
	}},
	{"drivers: the database, storage, machines, providers, metrics, the API's client", []string{
		"db", "locals3", "compute/...", "ocr", "embedding", "tagging", "metrics", "ratelimit", "client", "tasktoken",
		"reports", "batchurls", "worker/...", "tracing",
	}},
	{"the operators' pauses of work", []string{"pause"}},
	{"outbound webhooks: subscriptions, their deliveries and the jobs that send them", []string{"webhook"}},
	{"the fan-in protocol", []string{"fanin"}},
	{"the pipeline's core", []string{"jobs"}},
	{"the executors and the work they run", []string{"executor/...", "docindex", "search"}},
	{"the executors' registry", []string{"executor"}},
	{"reads and commands of batches", []string{"status", "eventhub", "batches"}},
	{"HTTP", []string{"api/..."}},
	{"configuration: reads the environment into each package's settings; only commands and the harness that runs them import it", []string{"config"}},
	{"test support", []string{"internal/..."}},
	{"commands", []string{"cmd/...", "e2e", "examples/..."}},
}

// layerOf is the index in layers of the package at rel (module-relative),
// or -1: the layer that names it, else the one whose folder pattern
// holds it most closely (executor/pool is an executor's package wherever
// executor, the registry, is).
func layerOf(rel string) int {
	best, depth := -1, -1
	for i, l := range layers {
		for _, p := range l.packages {
			dir, tree := strings.CutSuffix(p, "/...")
			switch {
			case rel == p:
				return i
			case tree && (rel == dir || strings.HasPrefix(rel, dir+"/")) && len(dir) > depth:
				best, depth = i, len(dir)
			}
		}
	}
	return best
}

// TestLayers checks the packages' imports (not their tests') against the
// layer order.
func TestLayers(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, module+"/...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	require.NoError(t, err, "go list")
	var problems []string
	packages := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		pkg := relative(fields[0])
		packages++
		from := layerOf(pkg)
		if from < 0 {
			problems = append(problems, pkg+" is in no layer: place it in layers")
			continue
		}
		for _, imp := range fields[1:] {
			if imp != module && !strings.HasPrefix(imp, module+"/") {
				continue
			}
			dep := relative(imp)
			if to := layerOf(dep); to > from {
				problems = append(problems, pkg+" ("+layers[from].name+") imports "+dep+", a layer above ("+layers[to].name+")")
			}
		}
	}
	require.NoError(t, sc.Err())
	require.Greater(t, packages, 40, "go list listed the module's packages")
	require.Empty(t, problems)
}

// relative is a package path relative to the module ("." for its root).
func relative(pkg string) string {
	if pkg == module {
		return "."
	}
	return path.Clean(strings.TrimPrefix(pkg, module+"/"))
}

// TestLayerOf checks the matching of the layer table's patterns.
func TestLayerOf(t *testing.T) {
	t.Parallel()
	require.Equal(t, 0, layerOf("compute"), "a package named outright is in that layer")
	require.Equal(t, 1, layerOf("compute/flycompute"))
	require.Equal(t, layerOf("executor/machine"), layerOf("executor/pool"), "a new executor needs no line")
	require.Greater(t, layerOf("executor"), layerOf("executor/pool"), "the registry is above the executors")
	require.Equal(t, layerOf("api"), layerOf("api/ui"))
	require.Equal(t, -1, layerOf("apis"), "a pattern matches whole path elements")
	require.Equal(t, -1, layerOf("nosuch"))
}
