package machine

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/compute"
	"github.com/arke-institute/orchestrator/db"
)

// TestOrphanReasons: which machines a task or a pool machine still wants.
func TestOrphanReasons(t *testing.T) {
	t.Parallel()
	m := compute.Machine{ID: "m1", TaskID: "tiff_1", Attempt: 2}
	id := func(s string) *string { return &s }
	for name, c := range map[string]struct {
		task  db.MachineTaskOwnersRow
		found bool
		want  string
	}{
		"Gone":               {want: "its task is gone"},
		"Ended":              {task: db.MachineTaskOwnersRow{Status: "completed", Attempt: 2, MachineID: id("m1")}, found: true, want: "its task is completed"},
		"WaitingForRetry":    {task: db.MachineTaskOwnersRow{Status: "pending", Attempt: 2, MachineID: id("m1")}, found: true, want: "its task is pending"},
		"EarlierAttempt":     {task: db.MachineTaskOwnersRow{Status: "processing", Attempt: 3, MachineID: id("m2")}, found: true, want: "its task is in attempt 3, the machine was launched for attempt 2"},
		"Duplicate":          {task: db.MachineTaskOwnersRow{Status: "processing", Attempt: 2, MachineID: id("m2")}, found: true, want: "its task's attempt runs on machine m2"},
		"Live":               {task: db.MachineTaskOwnersRow{Status: "processing", Attempt: 2, MachineID: id("m1")}, found: true},
		"LiveNotRecordedYet": {task: db.MachineTaskOwnersRow{Status: "processing", Attempt: 2}, found: true},
	} {
		t.Run(name, func(t *testing.T) {
			require.Equal(t, c.want, taskOrphanReason(m, c.task, c.found))
		})
	}
	for name, c := range map[string]struct {
		row   db.MachinePoolOwnersRow
		found bool
		want  string
	}{
		"Gone":      {want: "its pool machine is gone"},
		"Ended":     {row: db.MachinePoolOwnersRow{MachineID: id("m1")}, found: true, want: "its pool machine ended"},
		"Other":     {row: db.MachinePoolOwnersRow{MachineID: id("m2"), Live: true}, found: true, want: "its pool machine is machine m2"},
		"Live":      {row: db.MachinePoolOwnersRow{MachineID: id("m1"), Live: true}, found: true},
		"Launching": {row: db.MachinePoolOwnersRow{Live: true}, found: true},
	} {
		t.Run("Pool"+name, func(t *testing.T) {
			require.Equal(t, c.want, poolOrphanReason(m, c.row, c.found))
		})
	}
	key, ok := poolMachineOf(PoolMachineKey(42))
	require.True(t, ok)
	require.EqualValues(t, 42, key)
	_, ok = poolMachineOf("tiff_01ABC")
	require.False(t, ok)
}
