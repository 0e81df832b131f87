package machine_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
	"github.com/arke-institute/orchestrator/internal/harness/eventually"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
)

// TestReconciliationIsFencedByAttempt: a task's first machine reports an
// error and stays "stopped" (Fly has not destroyed it yet); an admin retry
// launches the task again, and its new machine must be looked up. Both
// lookups, the launcher's after an ambiguous launch and the sweep's after a
// launcher crash, keep the new machine and destroy the old one; the first
// found the old one by task id alone, kept it and destroyed the new.
func TestReconciliationIsFencedByAttempt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		ambiguous bool // the retry's launch creates its machine but answers 500
	}{
		{"AmbiguousLaunch", true},
		{"SweepAfterLauncherCrash", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := testenv.New(t, testenv.Options{Behave: func(l fakefly.Launch) fakefly.Behavior {
				switch {
				case !strings.HasSuffix(l.Env["INPUT_R2_KEY"], "/t000.tif"):
					return fakefly.Behavior{Hang: true} // keeps the phase open
				case l.Attempt == 1:
					return fakefly.Behavior{Linger: true, Body: fmt.Sprintf(
						`{"task_id": %q, "batch_id": %q, "status": "error", "error": "unreadable TIFF"}`, l.TaskID, l.BatchID)}
				default:
					return fakefly.Behavior{Hang: true, CreateThenFail: tc.ambiguous}
				}
			}, Settings: map[string]string{"TASK_MAX_ATTEMPTS": "1"}}) // a timeout is final
			ctx := context.Background()
			id := "FENCE-" + strings.ToUpper(tc.name)
			env.Submit(t, id, testenv.Tiffs(2))
			var taskID string
			env.Fly.Await(t, 30*time.Second, "the first task's launch", func() bool {
				for _, l := range env.Fly.Launches() {
					if l.BatchID == id && strings.HasSuffix(l.Env["INPUT_R2_KEY"], "/t000.tif") {
						taskID = l.TaskID
					}
				}
				return taskID != ""
			})
			task := func() (status string, machineID *string) {
				require.NoError(t, env.Pool.QueryRow(ctx, `SELECT status, machine_id FROM tasks WHERE id = $1`, taskID).Scan(&status, &machineID))
				return status, machineID
			}
			launchOf := func(attempt int) fakefly.Launch {
				for _, l := range env.Fly.Launches() {
					if l.TaskID == taskID && l.Attempt == attempt {
						return l
					}
				}
				t.Fatalf("no launch %d of %s", attempt, taskID)
				return fakefly.Launch{}
			}
			machineState := func(machineID string) string {
				for _, m := range env.Fly.Machines(testenv.TiffApp) {
					if m.ID == machineID {
						return m.State
					}
				}
				return "" // destroyed
			}

			// The first machine called back with its error and stopped. Its
			// callback can beat the launcher's bookkeeping, and the retry
			// waits for that too: the first machine, recorded, is the one
			// the lookups must fence off. (Had the retry come first, the
			// launcher would destroy the machine unrecorded:
			// db's TestTaskSetMachinesSkipsRequeuedTasks.)
			first := launchOf(1)
			eventually.True(t, 30*time.Second, "first machine stopped and recorded, task failed", func() bool {
				status, machineID := task()
				return status == "failed" && machineID != nil && *machineID == first.MachineID && machineState(first.MachineID) == "stopped"
			})
			code, body := env.DoAuth(t, http.MethodPost, "/admin/retry/"+id, testenv.AdminToken, nil)
			require.Equal(t, http.StatusOK, code, "%s", body)

			eventually.True(t, 30*time.Second, "the retry's machine recorded", func() bool {
				status, machineID := task()
				return status == "processing" && machineID != nil
			})
			second := launchOf(2)
			require.NotEmpty(t, second.MachineID)
			require.Equal(t, tc.ambiguous, second.Rejected)
			require.Equal(t, "1", first.Metadata["attempt"])
			require.Equal(t, "2", second.Metadata["attempt"])
			require.True(t, strings.HasSuffix(first.Name, "-a1"), first.Name)
			require.True(t, strings.HasSuffix(second.Name, "-a2"), second.Name)

			if !tc.ambiguous {
				// The launcher crashed before recording the machine, and the
				// deadline has passed: the sweep looks the machine up, records
				// it, and the task times out with it.
				_, err := env.Pool.Exec(ctx, `UPDATE tasks SET machine_id = NULL, deadline = now() - make_interval(secs => 1) WHERE id = $1`, taskID)
				require.NoError(t, err)
				eventually.True(t, 30*time.Second, "the task timed out", func() bool {
					status, _ := task()
					return status == "failed"
				})
				var timedOut string
				require.NoError(t, env.Pool.QueryRow(ctx, `SELECT data->>'machine_id' FROM batch_events
					WHERE batch_id = $1 AND task_id = $2 AND type = 'task.timed_out'`, id, taskID).Scan(&timedOut))
				require.Equal(t, second.MachineID, timedOut, "the sweep recorded the retry's machine, not the first")
			}
			_, machineID := task()
			require.NotNil(t, machineID)
			require.Equal(t, second.MachineID, *machineID, "the retry's machine is the task's, not the first")
			env.Fly.Await(t, 30*time.Second, "the first machine destroyed", func() bool {
				return slices.Contains(env.Fly.Destroyed(), first.MachineID)
			})
			if tc.ambiguous {
				require.Equal(t, "started", machineState(second.MachineID), "the retry's machine runs on")
				require.Equal(t, []string{first.MachineID}, env.Fly.Destroyed())
			}
		})
	}
}
