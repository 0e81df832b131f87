package repocheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// alertRules is the shape of deploy/prometheus/alerts.yml.
type alertRules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// metricName is a metric of ours in an expression.
var metricName = regexp.MustCompile(`\borchestrator_[a-z_]+\b`)

// TestAlertRules: every alerting rule shipped has a severity, a summary and
// a runbook that is a section of docs/operations.md, and watches metrics
// the orchestrator serves (documented in its Metrics table). Where promtool
// is installed (.ci/run installs it) it checks the rules and runs their
// unit tests (deploy/prometheus/alerts_test.yml).
func TestAlertRules(t *testing.T) {
	t.Parallel()
	root := "../.."
	data, err := os.ReadFile(filepath.Join(root, "deploy/prometheus/alerts.yml"))
	require.NoError(t, err)
	var rules alertRules
	require.NoError(t, yaml.Unmarshal(data, &rules))
	ops, err := os.ReadFile(filepath.Join(root, "docs/operations.md"))
	require.NoError(t, err)
	metricsTable := string(ops[strings.Index(string(ops), "\n## Metrics"):])
	headings := map[string]bool{}
	for line := range strings.SplitSeq(string(ops), "\n") {
		if h, ok := strings.CutPrefix(line, "#### "); ok {
			headings[strings.ToLower(strings.TrimSpace(h))] = true
		}
	}
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			n++
			require.NotEmpty(t, r.Alert, "a rule of group %s has no name", g.Name)
			require.Contains(t, []string{"critical", "warning", "info"}, r.Labels["severity"], r.Alert)
			require.NotEmpty(t, r.Annotations["summary"], r.Alert)
			want := "docs/operations.md#" + strings.ToLower(r.Alert)
			require.Equal(t, want, r.Annotations["runbook"], r.Alert)
			require.True(t, headings[strings.ToLower(r.Alert)], "docs/operations.md has no runbook section #### %s", r.Alert)
			names := metricName.FindAllString(r.Expr, -1)
			require.NotEmpty(t, names, "%s watches no metric of ours", r.Alert)
			for _, m := range names {
				require.Contains(t, metricsTable, "`"+m+"`", "%s watches %s, which the Metrics table of docs/operations.md does not list", r.Alert, m)
			}
		}
	}
	require.Positive(t, n)

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool is not installed: the rules' syntax and unit tests were not checked here (.ci/run installs it)")
		return
	}
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = filepath.Join(root, "deploy/prometheus")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
	}
}
