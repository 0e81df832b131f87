package db

import "github.com/jackc/pgx/v5"

// QueueTaskCompleteMany queues TaskCompleteMany on b, so that the callback
// path can send it with other statements in one round trip; ScanTaskCompleteMany
// reads its rows from the batch's results.
func QueueTaskCompleteMany(b *pgx.Batch, arg TaskCompleteManyParams) {
	b.Queue(taskCompleteMany, arg.IDs, arg.BatchIDs, arg.Statuses, arg.Results, arg.Errors, arg.TokenHashes)
}

// ScanTaskCompleteMany reads the rows of a queued TaskCompleteMany.
func ScanTaskCompleteMany(br pgx.BatchResults) ([]TaskCompleteManyRow, error) {
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[TaskCompleteManyRow])
}
