// Package tasks is the task table's side of the executors whose work is a
// task per file, ended by its worker's callback: the machine executor (a
// machine per task) and the pool executor (machines that lease tasks).
// Table does it for the phases of one kind: tasks written, counted, put
// back, expired, stopped and pruned, and the failed ones shown. How a
// task gets a machine is each executor's own.
package tasks

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"
	"github.com/riverqueue/river"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/fanin"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/metrics"
	"github.com/arke-institute/orchestrator/phases"
)

// Table is the tasks of the phases that run on one kind of executor.
type Table struct {
	deps jobs.Deps
	kind string
}

// New is the table of the phases of kind.
func New(deps jobs.Deps, kind string) Table { return Table{deps: deps, kind: kind} }

// phases are the names of the phases of the kind.
func (t Table) phases() []string { return t.deps.Executors.PhaseNamesOf(t.kind) }

// Insert writes a pending task of the phase for each file of its work.
// Like db.TaskInsertMany, but each row is made as COPY asks for it rather
// than all of them first.
func (t Table) Insert(ctx context.Context, tx jobs.Tx, at jobs.PhaseAt, files []phases.File) (int, error) {
	work := phases.Work(at.Phase, files)
	name, prefix := at.Name(), phases.TaskIDPrefix(at.Phase.Spec().Name)
	i := -1
	rows := pgx.CopyFromFunc(func() ([]any, error) {
		if i++; i >= len(work) {
			return nil, nil
		}
		return []any{prefix + "_" + strings.ToLower(ulid.Make().String()), at.BatchID, name, work[i].ID}, nil
	})
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"tasks"}, []string{"id", "batch_id", "phase", "file_id"}, rows); err != nil {
		return 0, fmt.Errorf("inserting %d %s tasks: %w", len(work), name, err)
	}
	return len(work), nil
}

// HasOpen asks the task counters (task_counts), which the statements that
// change tasks update in their own transaction: under the batch's
// exclusive lock they are as exact as the tasks.
func (t Table) HasOpen(ctx context.Context, q *db.Queries, at jobs.PhaseAt) (bool, error) {
	return q.TaskHasOpen(ctx, db.TaskHasOpenParams{BatchID: at.BatchID, Phase: at.Name()})
}

// OpenCount is how many tasks of the phase are open, while the batch is
// in it (0 otherwise), from the counters.
func (t Table) OpenCount(ctx context.Context, q *db.Queries, ref fanin.PhaseRef) (int64, error) {
	n, err := q.PhaseOpenCount(ctx, db.PhaseOpenCountParams{BatchID: ref.BatchID, Phase: ref.Phase})
	if err == pgx.ErrNoRows {
		return 0, nil
	}
	return n, err
}

// Outcomes joins each file's task of the phase: its status and its
// worker's success callback body. Were a file to have two tasks, the
// first by id decides. A completed task is final: no callback, retry or
// reset changes it (a failed one may yet complete: a late success).
func (t Table) Outcomes() jobs.Outcomes {
	return jobs.Outcomes{
		Join: "LEFT JOIN tasks t ON t.file_id = f.id AND t.batch_id = $1 AND t.phase = $3",
		ID:   "t.id", Status: "t.status", Result: "t.result", Order: "t.id",
		Final: "t.id IS NULL OR t.status = 'completed'",
		// By tasks_file_id_idx alone: with the batch in the condition,
		// the planner would read the batch's tasks and test each id.
		Lookup: "LEFT JOIN tasks t ON t.file_id = ANY(ARRAY(SELECT id FROM stretch)) AND t.file_id = f.id AND t.phase = $3",
	}
}

// Progress counts the batches' tasks of the kind's phases per phase and
// status, from the counters.
func (t Table) Progress(ctx context.Context, q *db.Queries, batchIDs []string) (map[string][]jobs.PhaseProgress, error) {
	rows, err := q.TaskCountByBatches(ctx, batchIDs)
	if err != nil {
		return nil, err
	}
	infra := map[[2]string]int64{}
	for _, r := range rows {
		if phases.TaskStatus(r.Status) == phases.TaskFailed {
			counts, err := q.TaskCountInfraFailed(ctx, batchIDs)
			if err != nil {
				return nil, err
			}
			for _, c := range counts {
				infra[[2]string{c.BatchID, c.Phase}] = c.N
			}
			break
		}
	}
	mine := map[string]bool{}
	for _, p := range t.phases() {
		mine[p] = true
	}
	type key struct{ batch, phase string }
	byPhase := map[key]*jobs.PhaseProgress{}
	var order []key
	for _, r := range rows {
		if !mine[r.Phase] {
			continue
		}
		k := key{r.BatchID, r.Phase}
		p := byPhase[k]
		if p == nil {
			p = &jobs.PhaseProgress{Phase: r.Phase, Executor: t.kind, Unit: "tasks"}
			byPhase[k] = p
			order = append(order, k)
		}
		p.TasksTotal += r.Count
		switch phases.TaskStatus(r.Status) {
		case phases.TaskPending:
			p.TasksPending += r.Count
		case phases.TaskProcessing:
			p.TasksProcessing += r.Count
		case phases.TaskCompleted:
			p.TasksCompleted += r.Count
		case phases.TaskFailed:
			p.TasksFailed += r.Count
			p.TasksFailedInfrastructure = infra[[2]string{r.BatchID, r.Phase}]
		}
	}
	out := map[string][]jobs.PhaseProgress{}
	for _, k := range order {
		out[k.batch] = append(out[k.batch], *byPhase[k])
	}
	return out, nil
}

// Requeue puts the phase's failed tasks back to pending, forgetting their
// last attempt (a late callback of it no longer authenticates), with
// TASK_MAX_ATTEMPTS attempts afresh. The caller sees that something takes
// them up.
func (t Table) Requeue(ctx context.Context, tx jobs.Tx, at jobs.PhaseAt, scope jobs.RetryScope) (jobs.RetryOutcome, error) {
	requeued, err := tx.Queries().TaskRequeueFailed(ctx, db.TaskRequeueFailedParams{BatchID: at.BatchID, Phase: at.Name(), InfraOnly: scope.InfraOnly})
	if err != nil {
		return jobs.RetryOutcome{}, fmt.Errorf("requeueing failed tasks of %s: %w", at.BatchID, err)
	}
	out := jobs.RetryOutcome{Count: len(requeued), Data: map[string]any{"tasks_requeued": len(requeued)}}
	for _, id := range requeued {
		out.Events = append(out.Events, db.Event{BatchID: at.BatchID, Type: db.EventTaskRequeued, Phase: at.Name(), TaskID: id}.Row())
	}
	return out, nil
}

// Rerun drops the batch's failed tasks of the kind's phases (a new pass
// makes new ones for the files they failed on).
func (t Table) Rerun(ctx context.Context, tx jobs.Tx, batchID string, scope jobs.RetryScope) (jobs.Rerun, error) {
	if len(t.phases()) == 0 {
		return jobs.Rerun{}, nil
	}
	rows, err := tx.Queries().TaskDeleteFailedByBatch(ctx, db.TaskDeleteFailedByBatchParams{BatchID: batchID, Phases: t.phases(), InfraOnly: scope.InfraOnly})
	if err != nil {
		return jobs.Rerun{}, fmt.Errorf("removing the failed tasks of batch %s: %w", batchID, err)
	}
	byPhase := map[string]int{}
	out := jobs.Rerun{Keys: make([]string, 0, len(rows))}
	for _, r := range rows {
		byPhase[r.Phase]++
		out.Keys = append(out.Keys, r.R2Key)
	}
	out.Counts = map[string]any{"tasks": byPhase}
	return out, nil
}

// End ends every open task of the batch's phases of the kind with reason
// (a reset): late callbacks for them then get 409. It returns the tasks
// it ended, with their machines, for the caller to stop.
func (t Table) End(ctx context.Context, tx jobs.Tx, batchID, reason string) ([]db.TaskFailOpenByBatchRow, error) {
	ended, err := tx.Queries().TaskFailOpenByBatch(ctx, db.TaskFailOpenByBatchParams{BatchID: batchID, Phases: t.phases(), Error: &reason})
	if err != nil {
		return nil, fmt.Errorf("ending open tasks of %s: %w", batchID, err)
	}
	return ended, nil
}

// The tables Prune removes rows from, as PruneResult.Removed names them.
const (
	TableTasks      = "tasks"
	TableTaskCounts = "task_counts"
)

// Prune removes the batch's tasks of the kind's phases, then their
// counters.
func (t Table) Prune(ctx context.Context, q *db.Queries, batchID string, rows int32) (jobs.Removal, error) {
	ps := t.phases()
	if len(ps) == 0 {
		return jobs.Removal{}, nil // none of the phases runs on this kind
	}
	n, statements, err := jobs.DeleteInSteps(rows, func() (int64, error) {
		return q.TaskDeleteByBatch(ctx, db.TaskDeleteByBatchParams{BatchID: batchID, Phases: ps, Max: rows})
	})
	out := jobs.Removal{Rows: map[string]int64{TableTasks: n}, Statements: statements}
	if err != nil {
		return out, err
	}
	counts, err := q.TaskCountDeleteByBatch(ctx, db.TaskCountDeleteByBatchParams{BatchID: batchID, Phases: ps})
	out.Rows[TableTaskCounts] = counts
	return out, err
}

// ExpiredGroups are up to jobs.SweepGroupsPerRun (batch, phase) pairs of
// the kind's phases with tasks past their deadline or lease.
func (t Table) ExpiredGroups(ctx context.Context) ([]db.TaskExpiredGroupsRow, error) {
	groups, err := db.New(t.deps.Pool).TaskExpiredGroups(ctx, db.TaskExpiredGroupsParams{Phases: t.phases(), Max: jobs.SweepGroupsPerRun})
	if err != nil {
		return nil, fmt.Errorf("finding expired tasks: %w", err)
	}
	return groups, nil
}

// Running are the (batch, phase) pairs of the kind's phases with
// processing tasks.
func (t Table) Running(ctx context.Context) ([]db.TaskCountProcessingGroupsRow, error) {
	if len(t.phases()) == 0 {
		return nil, nil
	}
	groups, err := db.New(t.deps.Pool).TaskCountProcessingGroups(ctx, t.phases())
	if err != nil {
		return nil, fmt.Errorf("finding running tasks: %w", err)
	}
	return groups, nil
}

// Expiry is how Expire ends a phase's expired tasks.
type Expiry struct {
	// LeaseSeconds is how long a lease holds without a heartbeat (the
	// message of a lost lease says how long none came); 0 for tasks
	// without leases.
	LeaseSeconds float64
	// Then runs in the transaction that ended the tasks, with them: the
	// executor stops their machines and wakes what takes the retried
	// tasks up.
	Then func(tx jobs.Tx, expired []db.TaskFailExpiredRow) error
}

// MaxExcused bounds a task's timeouts that cost no attempt because its
// attempt lived through a time in which no orchestrator could accept
// callbacks (TaskFailExpired): its worker may have given up calling back,
// which is not the machine's failure. An outage accounts for one.
const MaxExcused = 10

// Expire ends the expired tasks of one (batch, phase) with "Task timed
// out after Ns" (or, for a lease whose heartbeats stopped, "Lease lost"):
// a task with attempts left (TASK_MAX_ATTEMPTS) goes back to pending, the
// others fail; an attempt that lived through a silence of every
// orchestrator is retried without counting (MaxExcused); each gets its events, and the phase's check is made sure
// to run, as any other task end does (EndTasks).
func (t Table) Expire(ctx context.Context, client *river.Client[pgx.Tx], batchID, phase string, how Expiry) error {
	expired, retried, excused := 0, 0, 0
	err := fanin.EndTasks(ctx, t.deps.Pool, client, fanin.PhaseRef{BatchID: batchID, Phase: phase}, func(tx pgx.Tx) (bool, error) {
		q := db.New(tx)
		rows, err := q.TaskFailExpired(ctx, db.TaskFailExpiredParams{
			BatchID: batchID, Phase: phase, MaxAttempts: int32(t.deps.Settings.TaskMaxAttempts),
			RetireSeconds: t.deps.Settings.TaskRetireLimit.Seconds(), LeaseSeconds: how.LeaseSeconds, MaxExcused: MaxExcused,
		})
		if err != nil {
			return false, fmt.Errorf("failing expired tasks of %s %s: %w", batchID, phase, err)
		}
		if len(rows) == 0 {
			return false, nil
		}
		events := make([]db.BatchEventInsertManyParams, 0, len(rows))
		for _, r := range rows {
			data := map[string]any{"error": deref(r.Error), "failed_attempts": r.Failures}
			if r.MachineID != nil {
				data["machine_id"] = *r.MachineID
			}
			events = append(events, jobs.NewEvent(batchID, db.EventTaskTimedOut, phase, r.ID, data))
			if r.Retry {
				retried++
				reason := "timed out"
				if r.Excused {
					excused++
					reason = "timed out after no orchestrator could accept callbacks for a while (not counted as an attempt)"
				}
				events = append(events, jobs.NewEvent(batchID, db.EventTaskRetrying, phase, r.ID, map[string]any{
					"reason": reason, "error": deref(r.Error), "failed_attempts": r.Failures,
				}))
				continue
			}
			expired++
		}
		if _, err := q.BatchEventInsertMany(ctx, events); err != nil {
			return false, err
		}
		if how.Then != nil {
			if err := how.Then(jobs.Tx{Tx: tx, River: client}, rows); err != nil {
				return false, err
			}
		}
		return expired > 0, nil
	})
	if err == nil && expired > 0 {
		t.deps.Metrics.TasksFinished(phase, metrics.TaskTimedOut, expired)
		t.deps.Logger.Warn("tasks timed out", "batch_id", batchID, "phase", phase, "count", expired)
	}
	if err == nil && retried > 0 {
		t.deps.Metrics.TasksRetried(phase, metrics.RetryTimeout, retried)
		t.deps.Logger.Warn("timed-out tasks to be retried", "batch_id", batchID, "phase", phase, "count", retried, "not_counted", excused)
	}
	return err
}

// viewMaxFailed bounds the failed tasks the batch page lists.
const viewMaxFailed = 200

// failedTask is a failed task with its error, on the batch page.
type failedTask struct {
	TaskID      string
	Phase       string
	LogicalPath string
	Error       string
	FinishedAt  *time.Time
}

// failedTemplate renders the failed tasks' section.
const failedTemplate = `{{if .}}<ul class="failed">{{range .}}<li><div><code>{{.TaskID}}</code> <span class="phase-name">{{.Phase}}</span> {{.LogicalPath}}</div><div class="error">{{.Error}}</div></li>
{{end}}</ul>{{else}}<p class="empty">No failed task.</p>{{end}}`

// FailedView is the section of the batch's failed tasks of the kind's
// phases, oldest first, at most viewMaxFailed; none when no phase runs on
// the kind.
func (t Table) FailedView(ctx context.Context, batchID string) ([]jobs.View, error) {
	ps := t.phases()
	if len(ps) == 0 {
		return nil, nil
	}
	rows, err := db.New(t.deps.Pool).TaskListFailedByBatch(ctx, db.TaskListFailedByBatchParams{BatchID: batchID, Phases: ps, Max: viewMaxFailed})
	if err != nil {
		return nil, fmt.Errorf("reading failed tasks of batch %s: %w", batchID, err)
	}
	failed := make([]failedTask, 0, len(rows))
	for _, r := range rows {
		failed = append(failed, failedTask{TaskID: r.ID, Phase: r.Phase, LogicalPath: r.LogicalPath, Error: r.Error, FinishedAt: r.FinishedAt})
	}
	return []jobs.View{{ID: "failed-" + t.kind, Title: "Failed tasks (" + t.kind + ")", Template: failedTemplate, Data: failed}}, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
