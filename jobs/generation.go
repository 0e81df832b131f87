package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"unique"

	"github.com/jackc/pgx/v5"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/phases"
)

// generationSQL reads a file generation in list order (without the
// columns nobody reads), the files with ordinals in ($4, $5], and beside
// each file the outcome of its work in the phase $3 whose transform
// applies, as the phase's executor finds it (Outcomes: NULLs when the file
// had none). Joining in the database lets the transform stream: neither
// the input generation nor the outcomes are ever all in memory. (It is not
// a sqlc query because sqlc's :many collects every row before returning.)
// Were a file to have two outcomes, the executor's order makes the choice
// of the first stable. (A range of ordinals, not a LIMIT: with a LIMIT the
// planner joined and sorted the whole generation first.)
func generationSQL(o Outcomes, join joinBy) string {
	final := o.Final
	if final == "" {
		final = "false"
	}
	with, outcomes := "", o.Join
	if join == lookupJoin {
		with = `WITH stretch AS MATERIALIZED (
	SELECT id FROM files WHERE batch_id = $1 AND generation = $2 AND ordinal > $4 AND ordinal <= $5)
`
		outcomes = o.Lookup
	}
	return with + `SELECT f.ordinal, f.id, f.parent_id, f.directory_path, f.r2_key, f.logical_path, f.file_name, f.file_size,
	f.content_type, f.cid, f.processing_config, f.preprocessor_tags, f.document_id, f.kept, ` + o.ID + `, ` + o.Status + `, ` + o.Result + `,
	` + final + `
FROM files f
` + outcomes + `
WHERE f.batch_id = $1 AND f.generation = $2 AND f.ordinal > $4 AND f.ordinal <= $5
ORDER BY f.ordinal, ` + o.Order
}

// transformProblem is a file whose transform failed, with the task it
// failed on ("" if none), for the transform_failed event.
type transformProblem struct {
	taskID string
	err    error
}

// generationReader streams a generation with its tasks through the
// transform of the phase that processed it, one input file at a time, in
// list order (phases.ApplyOne). Next moves to the next input file; Outputs,
// Ordinal and Problem describe it. With finalOnly set, it stops before the
// first file whose outcome may still change (Outcomes.Final), and says so
// (open).
type generationReader struct {
	tx        pgx.Tx
	rows      pgx.Rows
	p         phases.Phase
	configs   map[string]phases.ProcessingConfig
	lastID    int64
	finalOnly bool
	open      bool

	ordinal int32
	outs    []phases.File
	problem *transformProblem
	err     error
}

// joinBy is how readGeneration joins files with their outcomes.
type joinBy int

const (
	// hashJoin reads each table once: for a whole generation, or most of
	// one.
	hashJoin joinBy = iota
	// lookupJoin looks the files' outcomes up by an index
	// (Outcomes.Lookup): for a stretch of a generation, where a plain join
	// would read every outcome of the batch's phase.
	lookupJoin
)

// lookupJoinMax is the most input files read with a lookupJoin.
const lookupJoinMax = 20000

// joinFor is the join for reading n input files with outcomes o.
func joinFor(o Outcomes, n int64) joinBy {
	if o.Lookup != "" && n <= lookupJoinMax {
		return lookupJoin
	}
	return hashJoin
}

// readGeneration starts reading generation gen of the batch, transformed by
// phase p (whose work's outcomes its executor ex finds): the files after
// ordinal after (-1: from the start) up to ordinal upTo (math.MaxInt32: to
// the end), joined as join says. tx must be a transaction: the query needs
// settings of its own (see below).
func readGeneration(ctx context.Context, tx pgx.Tx, ex Executor, p phases.Phase, batchID string, gen, after, upTo int32, join joinBy) (*generationReader, error) {
	// Right after a phase the statistics are stale, and a new batch's rows
	// look rare to the planner: it then likes a nested loop that scans the
	// outcomes once per file, quadratic in the batch. A hash join reads
	// each side once; Close sets it back, as the transaction's other
	// queries are none of this one's business. (So a lookupJoin's stretch
	// of outcomes is found by the ids of its files, an array that no
	// estimate of the batch's rows enters into, not by a join.)
	if _, err := tx.Exec(ctx, "SET LOCAL enable_nestloop = off"); err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, generationSQL(ex.Outcomes(), join), batchID, gen, string(p.Spec().Name), after, upTo)
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
		// json.RawMessage, pgx runs encoding/json over every one of them.
		cfg, result []byte
		final       bool
	)
	for g.err == nil && !g.open && g.rows.Next() {
		r, taskID, status, cfg, result = db.File{}, nil, nil, nil, nil
		if err := g.rows.Scan(&ordinal, &r.ID, &r.ParentID, &r.DirectoryPath, &r.R2Key, &r.LogicalPath, &r.FileName, &r.FileSize,
			&r.ContentType, &r.CID, &cfg, &r.PreprocessorTags, &r.DocumentID, &r.Kept, &taskID, &status, &result, &final); err != nil {
			g.err = err
			return false
		}
		r.ProcessingConfig = cfg
		if r.ID == g.lastID {
			continue // a second task for the same file: the first one decides
		}
		g.lastID = r.ID
		if g.finalOnly && !final {
			g.open = true
			return false
		}
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

// insertGeneration writes a file generation, or a stretch of one whose
// first file is at ordinal first, with COPY and returns it as stored: with
// the row IDs that tasks and the next generation refer to, and the
// defaults the rows got. Only the IDs are read back (whole rows are
// costly to read back at 100,000 files). files is modified in place.
func insertGeneration(ctx context.Context, tx pgx.Tx, batchID string, generation int32, phase phases.Name, first int32, files []phases.File) ([]phases.File, error) {
	if err := copyGeneration(ctx, tx, batchID, generation, phase, first, files); err != nil {
		return nil, err
	}
	ids, err := db.New(tx).FileListIDsByBatchGeneration(ctx, db.FileListIDsByBatchGenerationParams{BatchID: batchID, Generation: generation, MinOrdinal: first})
	if err != nil {
		return nil, fmt.Errorf("reading the IDs of generation %d of batch %s: %w", generation, batchID, err)
	}
	if len(ids) != len(files) {
		return nil, fmt.Errorf("generation %d of batch %s: wrote %d files, found %d", generation, batchID, len(files), len(ids))
	}
	for i, id := range ids {
		files[i].ID = id
	}
	return files, nil
}

// copyGeneration is insertGeneration without reading the IDs back: files
// get their defaults, not their IDs.
func copyGeneration(ctx context.Context, tx pgx.Tx, batchID string, generation int32, phase phases.Name, first int32, files []phases.File) error {
	src := &generationSource{batchID: batchID, generation: generation, first: first, files: files, i: -1,
		configs: map[phases.ProcessingConfig][]byte{}}
	if phase != "" {
		s := string(phase)
		src.phase = &s
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"files"}, fileColumns, src); err != nil {
		return fmt.Errorf("writing generation %d of batch %s: %w", generation, batchID, err)
	}
	return nil
}

// fileColumns are db.FileInsertMany's columns, document_id and kept, in the order
// generationSource.Values gives them.
var fileColumns = []string{"batch_id", "generation", "ordinal", "parent_id", "phase", "directory_path", "r2_key",
	"logical_path", "file_name", "file_size", "content_type", "cid", "processing_config", "preprocessor_tags", "document_id", "kept"}

// generationSource feeds a generation to COPY one file at a time. It does
// what db.FileInsertMany does without first converting the whole generation
// into parameter rows: at 100,000 files those rows were a second copy of the
// generation, alive together with it, and the largest part of the peak.
type generationSource struct {
	batchID    string
	generation int32
	first      int32   // the ordinal of files[0]
	phase      *string // nil for generation 0
	files      []phases.File
	i          int
	configs    map[phases.ProcessingConfig][]byte // a batch has few distinct ones
	err        error
}

var _ pgx.CopyFromSource = (*generationSource)(nil)

// Next moves to the next file.
func (s *generationSource) Next() bool {
	s.i++
	return s.err == nil && s.i < len(s.files)
}

// Values fills in the file's defaults (directory from its logical path, no
// tags as an empty array), which insertGeneration's callers rely on, and
// returns its row.
func (s *generationSource) Values() ([]any, error) {
	f := &s.files[s.i]
	cfg, ok := s.configs[f.ProcessingConfig]
	if !ok {
		var err error
		if cfg, err = json.Marshal(f.ProcessingConfig); err != nil {
			s.err = err
			return nil, err
		}
		s.configs[f.ProcessingConfig] = cfg
	}
	if f.DirectoryPath == "" {
		f.DirectoryPath = path.Dir(f.LogicalPath)
	}
	var parent *int64
	if f.ParentID != 0 {
		parent = &f.ParentID
	}
	var cid *string
	if f.CID != "" {
		cid = &f.CID
	}
	if f.Tags == nil {
		f.Tags = []string{}
	}
	var doc *int64
	if f.DocumentID != 0 {
		doc = &f.DocumentID
	}
	return []any{s.batchID, s.generation, s.first + int32(s.i), parent, s.phase, f.DirectoryPath, f.R2Key,
		f.LogicalPath, f.FileName, f.FileSize, f.ContentType, cid, cfg, f.Tags, doc, f.Kept}, nil
}

// Err reports an error that ended the rows early.
func (s *generationSource) Err() error { return s.err }

// fileFromRow converts a files row into the value phases work with. configs
// caches decoded processing configs by their JSON.
func fileFromRow(r db.File, configs map[string]phases.ProcessingConfig) (phases.File, error) {
	cfg, ok := configs[string(r.ProcessingConfig)]
	if !ok {
		if err := json.Unmarshal(r.ProcessingConfig, &cfg); err != nil {
			return phases.File{}, fmt.Errorf("file %d: reading processing_config: %w", r.ID, err)
		}
		configs[string(r.ProcessingConfig)] = cfg
	}
	// Content types and directories repeat across a whole generation:
	// interned, 100,000 files share a handful of strings instead of holding
	// one copy each.
	f := phases.File{
		ID: r.ID, R2Key: r.R2Key, LogicalPath: r.LogicalPath, FileName: r.FileName, FileSize: r.FileSize,
		ContentType: unique.Make(r.ContentType).Value(), ProcessingConfig: cfg, Tags: r.PreprocessorTags,
		DirectoryPath: unique.Make(r.DirectoryPath).Value(), Kept: r.Kept,
	}
	if r.ParentID != nil {
		f.ParentID = *r.ParentID
	}
	if r.CID != nil {
		f.CID = *r.CID
	}
	if r.DocumentID != nil {
		f.DocumentID = *r.DocumentID
	}
	return f, nil
}

// storedGeneration reads back the files of a generation with ordinals
// below upTo (math.MaxInt32: all of them), in list order, as they were
// written, into a slice of capacity size (0: as it grows). Rows are read
// one at a time, not collected first as sqlc's :many would.
func storedGeneration(ctx context.Context, tx pgx.Tx, batchID string, gen, upTo int32, size int) ([]phases.File, error) {
	rows, err := tx.Query(ctx, `SELECT f.id, f.parent_id, f.directory_path, f.r2_key, f.logical_path, f.file_name, f.file_size,
	f.content_type, f.cid, f.processing_config, f.preprocessor_tags, f.document_id, f.kept
FROM files f WHERE f.batch_id = $1 AND f.generation = $2 AND f.ordinal < $3 ORDER BY f.ordinal`, batchID, gen, upTo)
	if err != nil {
		return nil, fmt.Errorf("reading generation %d of batch %s back: %w", gen, batchID, err)
	}
	defer rows.Close()
	files := make([]phases.File, 0, size)
	configs := map[string]phases.ProcessingConfig{}
	for rows.Next() {
		var (
			r   db.File
			cfg []byte
		)
		if err := rows.Scan(&r.ID, &r.ParentID, &r.DirectoryPath, &r.R2Key, &r.LogicalPath, &r.FileName, &r.FileSize,
			&r.ContentType, &r.CID, &cfg, &r.PreprocessorTags, &r.DocumentID, &r.Kept); err != nil {
			return nil, err
		}
		r.ProcessingConfig = cfg
		f, err := fileFromRow(r, configs)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading generation %d of batch %s back: %w", gen, batchID, err)
	}
	return files, nil
}
