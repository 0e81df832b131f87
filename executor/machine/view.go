package machine

import (
	"context"
	"fmt"
	"time"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/jobs"
)

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

// Views is the batch's failed tasks, oldest first, at most viewMaxFailed.
func (e *Executor) Views(ctx context.Context, batchID string) ([]jobs.View, error) {
	rows, err := db.New(e.deps.Pool).TaskListFailedByBatch(ctx, db.TaskListFailedByBatchParams{BatchID: batchID, Max: viewMaxFailed})
	if err != nil {
		return nil, fmt.Errorf("reading failed tasks of batch %s: %w", batchID, err)
	}
	failed := make([]failedTask, 0, len(rows))
	for _, t := range rows {
		failed = append(failed, failedTask{TaskID: t.ID, Phase: t.Phase, LogicalPath: t.LogicalPath, Error: t.Error, FinishedAt: t.FinishedAt})
	}
	return []jobs.View{{ID: "failed", Title: "Failed tasks", Template: failedTemplate, Data: failed}}, nil
}
