package jobs

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/phases"
)

// generationTasksSQL reads a file generation in list order (without the
// columns nobody reads), the files with ordinals in ($4, $5], and beside
// each file the task of the phase that processed it (NULLs when it had none).
// Joining in the database lets the transform stream: neither the input
// generation nor the tasks' results are ever all in memory. (It is not a
// sqlc query because sqlc's :many collects every row before returning.)
// Were a file to have two tasks, ordering by task id makes the choice of the
// first stable. (A range of ordinals, not a LIMIT: with a LIMIT the
// planner joined and sorted the whole generation first, 146 ms at 100,000
// files for the first 2,000.)
const generationTasksSQL = `SELECT f.ordinal, f.id, f.parent_id, f.directory_path, f.r2_key, f.logical_path, f.file_name, f.file_size,
	f.content_type, f.cid, f.processing_config, f.preprocessor_tags, t.id, t.status, t.result
FROM files f
LEFT JOIN tasks t ON t.file_id = f.id AND t.batch_id = $1 AND t.phase = $3
WHERE f.batch_id = $1 AND f.generation = $2 AND f.ordinal > $4 AND f.ordinal <= $5
ORDER BY f.ordinal, t.id`

// transformProblem is a file whose transform failed, with the task it
// failed on ("" if none), for the transform_failed event.
type transformProblem struct {
	taskID string
	err    error
}

// generationReader streams a generation with its tasks through the
// transform of the phase that processed it, one input file at a time, in
// list order (phases.ApplyOne). Next moves to the next input file; Outputs,
// Ordinal and Problem describe it.
type generationReader struct {
	tx      pgx.Tx
	rows    pgx.Rows
	p       phases.Phase
	configs map[string]phases.ProcessingConfig
	lastID  int64

	ordinal int32
	outs    []phases.File
	problem *transformProblem
	err     error
}

// readGeneration starts reading generation gen of the batch, transformed by
// phase p (whose tasks it joins): the files after ordinal after (-1: from
// the start) up to ordinal upTo (math.MaxInt32: to the end). tx must be a
// transaction: the query needs a setting of its own (see below).
func readGeneration(ctx context.Context, tx pgx.Tx, p phases.Phase, batchID string, gen, after, upTo int32) (*generationReader, error) {
	// tasks has no index on file_id, and right after a phase its statistics
	// are stale: the planner then likes a nested loop that scans the tasks
	// once per file, quadratic in the batch (11 s at 10,000 files). A hash
	// join reads each table once; Close sets it back, as the transaction's
	// other queries are none of this one's business.
	if _, err := tx.Exec(ctx, "SET LOCAL enable_nestloop = off"); err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, generationTasksSQL, batchID, gen, string(p.Spec().Name), after, upTo)
	if err != nil {
		return nil, fmt.Errorf("reading generation %d of batch %s: %w", gen, batchID, err)
	}
	return &generationReader{tx: tx, rows: rows, p: p, configs: map[string]phases.ProcessingConfig{}, lastID: -1}, nil
}

// Next reads the next input file and applies the transform to it. It
// returns false at the end of the rows or on an error (Err).
func (g *generationReader) Next() bool {
	var (
		r              db.File
		ordinal        int32
		taskID, status *string
		// processing_config is read as plain bytes: into the model's
		// json.RawMessage, pgx runs encoding/json over every one of them
		// (a tenth of a 100,000-file transform's CPU).
		cfg, result []byte
	)
	for g.err == nil && g.rows.Next() {
		r, taskID, status, cfg, result = db.File{}, nil, nil, nil, nil
		if err := g.rows.Scan(&ordinal, &r.ID, &r.ParentID, &r.DirectoryPath, &r.R2Key, &r.LogicalPath, &r.FileName, &r.FileSize,
			&r.ContentType, &r.CID, &cfg, &r.PreprocessorTags, &taskID, &status, &result); err != nil {
			g.err = err
			return false
		}
		r.ProcessingConfig = cfg
		if r.ID == g.lastID {
			continue // a second task for the same file: the first one decides
		}
		g.lastID = r.ID
		f, err := fileFromRow(r, g.configs)
		if err != nil {
			g.err = err
			return false
		}
		var task *phases.Task
		if taskID != nil {
			task = &phases.Task{FileID: f.ID, Status: phases.TaskStatus(*status), Result: result}
		}
		g.ordinal = ordinal
		g.problem = nil
		outs, perr := phases.ApplyOne(g.p, f, task)
		g.outs = outs
		if perr != nil {
			id := ""
			if taskID != nil {
				id = *taskID
			}
			g.problem = &transformProblem{taskID: id, err: perr}
		}
		return true
	}
	return false
}

// Err is the error that ended the reading, if any.
func (g *generationReader) Err() error {
	if g.err == nil {
		g.err = g.rows.Err()
	}
	return g.err
}

// Close ends the query (reading what is left of it) and sets the planner
// back.
func (g *generationReader) Close(ctx context.Context) error {
	g.rows.Close()
	_, err := g.tx.Exec(ctx, "RESET enable_nestloop")
	return err
}
