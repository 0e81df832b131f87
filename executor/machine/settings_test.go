package machine

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/setting"
)

// TestSettingsOnlyMachinePhases: only the phases with a worker program get
// Fly and launch settings: a chunked phase runs no machines, so none is
// read for it, and it never shares an app.
func TestSettingsOnlyMachinePhases(t *testing.T) {
	t.Parallel()
	var c Config
	names := setting.Names(Settings(&c))
	for _, p := range phases.All() {
		s := p.Spec()
		require.Equal(t, s.Worker != "", contains(names, "FLY_"+s.Short+"_APP_NAME"), s.Name)
		require.Equal(t, s.Worker != "", contains(names, "BATCH_SIZE_"+string(s.Name)), s.Name)
	}
	require.NoError(t, setting.Load(func(k string) (string, bool) { return "", false }, Settings(&c)))
	require.Len(t, c.Phases, len(specsOf(phases.All())))
}

// TestSharedEnvMustBeASetting: a phase passing its machines a name that
// is no shared setting is refused at load.
func TestSharedEnvMustBeASetting(t *testing.T) {
	t.Parallel()
	spec := specsOf(phases.All())[0]
	spec.SharedEnv = []string{"NO_SUCH_SETTING"}
	var c Config
	err := setting.Load(func(k string) (string, bool) { return "", false }, settingsOf(&c, []phases.Spec{spec}))
	require.ErrorContains(t, err, "passes NO_SUCH_SETTING to its machines, which is no setting")
}

func contains(names []string, name string) bool {
	for _, n := range names {
		if n == name {
			return true
		}
	}
	return false
}
