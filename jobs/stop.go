package jobs

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/arke-institute/orchestrator/db"
)

// StopBatchWork ends every open task of a batch that has stopped (reset by
// an admin, or failed) with reason, and queues its machines still running
// for destruction, in the caller's transaction. Late callbacks for those
// tasks then get 409. appOf names the app of a phase's machines.
func StopBatchWork(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], appOf func(phase string) string, batchID, reason string) (tasksEnded, machines int, err error) {
	q := db.New(tx)
	ended, err := q.TaskFailOpenByBatch(ctx, db.TaskFailOpenByBatchParams{BatchID: batchID, Error: &reason})
	if err != nil {
		return 0, 0, fmt.Errorf("ending open tasks of %s: %w", batchID, err)
	}
	byApp := map[string][]string{}
	for _, t := range ended {
		if t.MachineID != nil {
			app := appOf(t.Phase)
			byApp[app] = append(byApp[app], *t.MachineID)
		}
	}
	for app, ids := range byApp {
		machines += len(ids)
		if _, err := client.InsertTx(ctx, tx, MachineDestroyArgs{App: app, MachineIDs: ids}, nil); err != nil {
			return 0, 0, err
		}
	}
	return len(ended), machines, nil
}
