package machine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/arke-institute/orchestrator/compute"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/metrics"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/tasktoken"
	"github.com/arke-institute/orchestrator/tracing"
)

// launchOne launches the machine of one task. After an ambiguous failure it
// looks the task's machine up by metadata before giving up, so a launch that
// did create a machine is recorded instead of repeated: no task gets two.
// The lookup is fenced by the launch attempt: a machine left from an
// earlier attempt (before an admin retry, a reset or a relaunch) is never
// taken for this one, and is destroyed.
func (w *PhaseLaunchWorker) launchOne(ctx context.Context, batchID string, name phases.Name, pcfg Phase, row db.TaskClaimPendingRow) (id string, err error) {
	ctx, span := w.deps.Tracer.StartWork(ctx, batchID, tracing.WorkTask, row.ID, "task.launch",
		tracing.PhaseKey.String(string(name)), attribute.Int("attempt", int(row.Attempt)))
	defer func() { tracing.End(span, err) }()
	token, err := w.tokens.Seal(ctx, tasktoken.Task(batchID, row.ID), row.Token)
	if err != nil {
		return "", err
	}
	spec := w.machineSpec(batchID, name, pcfg, row, token, tracing.Traceparent(ctx))
	m, err := w.deps.Compute.Launch(ctx, spec)
	if err == nil {
		w.deps.Metrics.MachineLaunched(string(name))
		return m.ID, nil
	}
	if ctx.Err() == nil || !errors.Is(err, ctx.Err()) {
		// A launch the job itself gave up on (cancelled by a reset, say)
		// is no failure of the provider's.
		w.deps.Metrics.LaunchFailed(string(name), launchFailureReason(err))
	}
	if !errors.Is(err, compute.ErrAmbiguous) {
		return "", err
	}
	// Look even if the job was cancelled meanwhile: a machine created by
	// this launch must be known so that it can be recorded or destroyed.
	findCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	found, ferr := w.deps.Compute.FindByTask(findCtx, pcfg.App, row.ID)
	if ferr != nil {
		return "", &unresolvedLaunch{fmt.Errorf("%w (and looking for its machine failed: %v)", err, ferr)}
	}
	f := compute.Fence(found, int(row.Attempt))
	// Keep the newest of this attempt; any extra (a retried POST that
	// created two) and any earlier attempt's machine is destroyed.
	unwanted := f.Stale
	if len(f.Current) > 1 {
		unwanted = append(unwanted, f.Current[1:]...)
	}
	for _, m := range unwanted {
		if derr := w.deps.Compute.Destroy(findCtx, pcfg.App, m.ID); derr != nil {
			w.deps.Logger.Warn("destroying unwanted machine", "batch_id", batchID, "task_id", row.ID, "phase", string(name),
				"machine_id", m.ID, "machine_attempt", m.Attempt, "attempt", row.Attempt, "error", derr)
		}
	}
	if len(f.Current) == 0 {
		return "", err
	}
	w.deps.Metrics.MachineLaunched(string(name))
	return f.Current[0].ID, nil
}

// launchFailureReason sorts a failed launch for the launch failure metric
// by what the provider answered: 429, another 4xx, 5xx, or nothing at all.
func launchFailureReason(err error) string {
	var ce *compute.Error
	switch {
	case errors.Is(err, compute.ErrRateLimited):
		return metrics.LaunchRateLimited
	case !errors.As(err, &ce):
		return metrics.LaunchOther
	case ce.StatusCode >= 500:
		return metrics.Launch5xx
	case ce.StatusCode >= 400:
		return metrics.Launch4xx
	case errors.Is(err, compute.ErrAmbiguous):
		return metrics.LaunchNetwork
	default:
		return metrics.LaunchOther
	}
}

// unresolvedLaunch is an ambiguous launch whose machine could not be looked
// up: it may or may not exist.
type unresolvedLaunch struct{ err error }

func (e *unresolvedLaunch) Error() string { return e.err.Error() }
func (e *unresolvedLaunch) Unwrap() error { return e.err }

// machineSpec is the machine of spec 000 §4.3 for one task, whose callback
// token is token: its environment is the task's (TaskEnv).
func (w *PhaseLaunchWorker) machineSpec(batchID string, name phases.Name, pcfg Phase, row db.TaskClaimPendingRow, token, traceparent string) compute.MachineSpec {
	env := TaskEnv(w.deps, w.cfg, w.urls, Task{ID: row.ID, BatchID: batchID, Phase: name, R2Key: row.R2Key, FileName: row.FileName,
		ContentType: row.ContentType, CID: row.CID, Token: token, Deadline: row.Deadline, Traceparent: traceparent})
	return compute.MachineSpec{
		App: pcfg.App, Image: pcfg.Image, Region: w.cfg.Region,
		Name:   fmt.Sprintf("%s-a%d", strings.ReplaceAll(row.ID, "_", "-"), row.Attempt),
		TaskID: row.ID, BatchID: batchID, Attempt: int(row.Attempt), Phase: string(name), Env: env,
		MemoryMB: pcfg.Guest.MemoryMB, CPUs: pcfg.Guest.CPUs, CPUKind: pcfg.Guest.CPUKind,
	}
}
