// Package phases holds the pure logic of the preprocessing pipeline: which
// files each phase must process (Discover) and how the file list evolves once
// a phase's tasks are terminal (Transform, Apply). It imports only the
// standard library so that every rule can be covered by table tests without
// a database, a queue or a compute backend; the jobs package loads rows,
// calls these functions and writes the result in one transaction.
package phases

import (
	"encoding/json"
	"fmt"
	"slices"
)

// Name is a phase's name, also the batch status while the batch is in that
// phase, so that a batch row says which phase's tasks it is waiting on
// without a second column.
type Name string

// Names of the TIFF and image phases (each phase's file declares its own;
// registry.go orders them). They are stored as batch statuses and must not
// change.
const (
	// TIFFConversion turns TIFF scans into JPEGs that the image phase can read.
	TIFFConversion Name = "TIFF_CONVERSION"
	// ImageProcessing makes CDN variants of images and replaces each image
	// with a .ref.json pointing at them.
	ImageProcessing Name = "IMAGE_PROCESSING"
)

// Tags used in preprocessor_tags. They record what a phase did to a file so
// that later phases (and the ingest worker) can tell originals kept for the
// archive from derived files.
const (
	// TagTIFFSource marks a TIFF that has been converted: it stays in the
	// list for the archive, but no phase processes it again.
	TagTIFFSource = "TiffConverter:source"
	// TagTIFFConverter marks a JPEG produced by the TIFF conversion.
	TagTIFFConverter = "TiffConverter"
	// TagImageProcessor marks a .ref.json produced by the image phase.
	TagImageProcessor = "ImageProcessor"
)

// ProcessingConfig is the per-directory processing switches of the batch
// manifest. It travels with each file, and transform outputs inherit their
// input's, so that derived files are processed the way their source asked.
type ProcessingConfig struct {
	OCR      bool `json:"ocr"`
	Describe bool `json:"describe"`
	Pinax    bool `json:"pinax"`
}

// File is one entry of a batch's file list in one generation. Generations are
// immutable: a phase never edits a file, it produces the next generation, so
// lineage (ParentID) can always be traced back to the uploaded originals.
type File struct {
	ID               int64            // row id of this file in its generation; 0 for a file not yet stored
	ParentID         int64            // for transform output: ID of the input file it came from (lineage); set by Apply
	R2Key            string           // object key in the staging bucket
	LogicalPath      string           // e.g. "/images/photo1.tiff", leading slash, includes file name
	FileName         string           // base name, used by discovery
	FileSize         int64            // bytes
	ContentType      string           // MIME type, possibly with parameters
	CID              string           // "" when absent
	ProcessingConfig ProcessingConfig // from its manifest directory; outputs inherit the input's
	// DirectoryPath is the manifest directory group the file belongs to;
	// outputs stay in their input's group so the final manifest keeps the
	// upstream grouping and processing_config.
	DirectoryPath string
	Tags          []string // preprocessor_tags
	// DocumentID is the document the file was indexed as
	// (DOCUMENT_INDEXING), 0 for none.
	DocumentID int64
	// Kept marks a file that keeps the results of an earlier pass of its
	// batch (an admin retry of a DONE batch reruns only what failed): no
	// phase works on it again (Work). Outputs inherit their input's mark.
	Kept bool
}

// TaskStatus is the lifecycle state of one task. Only TaskCompleted tasks
// change the file list; every other state leaves the file as it was, so a
// failed conversion never loses an original.
type TaskStatus string

// Task statuses, as stored in the tasks table.
const (
	// TaskPending is a task not yet given a machine.
	TaskPending TaskStatus = "pending"
	// TaskProcessing is a task whose machine is running.
	TaskProcessing TaskStatus = "processing"
	// TaskCompleted is a task whose worker posted a success callback.
	TaskCompleted TaskStatus = "completed"
	// TaskFailed is a task that errored, timed out or ran out of retries.
	TaskFailed TaskStatus = "failed"
)

// Task is what a transform needs to know of the task that processed a file:
// transforms read only the outcome, never scheduling details, which keeps
// them independent of how tasks are stored or run.
type Task struct {
	FileID int64           // the input file's ID
	Status TaskStatus      // only TaskCompleted changes the file list
	Result json.RawMessage // the worker's success callback body, when Status == TaskCompleted
}

// Phase is one step of the pipeline. Implementations must be pure and must
// not mutate their inputs: the same generation may be discovered or
// transformed again after a crash, and must give the same answer.
type Phase interface {
	// Spec declares the phase: name, task-id prefix, executor, worker and
	// default settings. It is a constant.
	Spec() Spec
	// Discover returns the files of the list that need a task in this phase, in list order.
	Discover(files []File) []File
	// Transform maps one input file (and its task, nil when the file had none) to the files of the next generation.
	Transform(file File, task *Task) ([]File, error)
	// SampleResult is a success callback body a worker could send for
	// input in, without doing the work: fakes of the machines send it, and
	// Transform must accept it.
	SampleResult(in File) json.RawMessage
}

// Work is the files of the list that need a task of p: those p discovers,
// less the kept ones (File.Kept). Callers ask Work, not Discover, so that
// no phase needs to know of kept files.
func Work(p Phase, files []File) []File {
	work := p.Discover(files)
	kept := 0
	for _, f := range work {
		if f.Kept {
			kept++
		}
	}
	if kept == 0 {
		return work
	}
	out := make([]File, 0, len(work)-kept)
	for _, f := range work {
		if !f.Kept {
			out = append(out, f)
		}
	}
	return out
}

// Screener is a phase that can tell from a file alone that the file is
// none of its work, whichever files are beside it.
type Screener interface {
	// MayWork is false for a file that is in the phase's Work of no list.
	MayWork(f File) bool
}

// MayHaveWork names the phases from from on (inclusive, as NextWithWork
// walks them) that may have work in a list holding files: those with a
// file they may work on, and, if files is not empty, those that are not
// Screeners. A list made of parts of which MayHaveWork names no phase has
// no work for NextWithWork to find, so the parts need not be looked at
// together.
func MayHaveWork(from Name, files []File) []Name {
	i := slices.Index(names, from)
	if i < 0 || len(files) == 0 {
		return nil
	}
	var out []Name
	for _, p := range registry[i:] {
		s, ok := p.(Screener)
		if !ok || slices.ContainsFunc(files, s.MayWork) {
			out = append(out, p.Spec().Name)
		}
	}
	return out
}

// filter is the files for which keep is true, in list order.
func filter(files []File, keep func(File) bool) []File {
	var out []File
	for _, f := range files {
		if keep(f) {
			out = append(out, f)
		}
	}
	return out
}

// NextWithWork starts at phase from (inclusive; "" means phase First()) and
// walks Next until it finds a phase whose Work(files) is non-empty; it
// returns that phase and the discovered files, or (nil, nil) when no
// remaining phase has work (or from is not a phase). A phase with no tasks is
// skipped: its transform would leave every file unchanged, so no new
// generation is made for it.
func NextWithWork(from Name, files []File) (Phase, []File) {
	if from == "" {
		from = First()
	}
	i := slices.Index(names, from)
	if i < 0 {
		return nil, nil
	}
	for _, p := range registry[i:] {
		if work := Work(p, files); len(work) > 0 {
			return p, work
		}
	}
	return nil, nil
}

// TransformError reports a file whose Transform failed. Apply kept the file
// unchanged in the next generation; the error carries enough to record the
// problem against the file (R2Key, FileID) without parsing messages.
type TransformError struct {
	Phase  Name   // phase whose transform failed
	FileID int64  // the input file's ID
	R2Key  string // the input file's r2_key
	Err    error  // what Transform returned
}

// Error names the phase and the file's r2_key so a logged problem can be
// traced to its object.
func (e *TransformError) Error() string {
	return fmt.Sprintf("transforming %s in phase %s: %v", e.R2Key, e.Phase, e.Err)
}

// Unwrap exposes the transform's own error to errors.Is and errors.As.
func (e *TransformError) Unwrap() error { return e.Err }

// Apply runs p.Transform over every file in order, looking tasks up by
// FileID, and returns the next generation. Every output gets ParentID =
// input's ID, ID = 0, since each output becomes a new row of the next
// generation, and the input's Kept; its Tags are copied so the result shares no memory with files.
// A Transform error never loses the file: that file passes through unchanged
// and the error is returned in problems (a *TransformError carrying the
// file's r2_key) so the caller can record it.
func Apply(p Phase, files []File, tasks map[int64]Task) (next []File, problems []error) {
	next = make([]File, 0, len(files))
	for _, f := range files {
		var task *Task
		if t, ok := tasks[f.ID]; ok {
			task = &t
		}
		outs, err := ApplyOne(p, f, task)
		if err != nil {
			problems = append(problems, err)
		}
		next = append(next, outs...)
	}
	return next, problems
}

// ApplyOne is Apply for a single file and its task (nil when it had none):
// the same rules, so that a caller can stream a generation through the
// transform file by file instead of holding the whole input and every task
// at once. problem, when not nil, is a *TransformError and outs is then the
// file passed through unchanged.
func ApplyOne(p Phase, f File, task *Task) (outs []File, problem error) {
	got, err := p.Transform(f, task)
	if err != nil {
		problem = &TransformError{Phase: p.Spec().Name, FileID: f.ID, R2Key: f.R2Key, Err: err}
		got = []File{f}
	}
	// A fresh slice: the transform's own result is not ours to edit.
	outs = make([]File, len(got))
	for i, o := range got {
		o.ID = 0
		o.ParentID = f.ID
		o.Kept = f.Kept
		o.Tags = slices.Clone(o.Tags)
		outs[i] = o
	}
	return outs, problem
}

// hasTag reports whether f carries tag.
func hasTag(f File, tag string) bool {
	return slices.Contains(f.Tags, tag)
}

// withTag returns a copy of tags with tag appended unless already present;
// it never writes to the caller's backing array.
func withTag(tags []string, tag string) []string {
	out := slices.Clone(tags)
	if !slices.Contains(out, tag) {
		out = append(out, tag)
	}
	return out
}

// completedResult decodes a completed task's result into v. ok is false when
// the task is not completed, meaning the file must pass through unchanged.
func completedResult(task *Task, v any) (ok bool, err error) {
	if task == nil || task.Status != TaskCompleted {
		return false, nil
	}
	if len(task.Result) == 0 {
		return true, fmt.Errorf("completed task for file %d has no result", task.FileID)
	}
	if err := json.Unmarshal(task.Result, v); err != nil {
		return true, fmt.Errorf("decoding result of task for file %d: %w", task.FileID, err)
	}
	return true, nil
}

// ValidateResult checks a worker's success callback body for the named phase
// exactly as Transform will read it, by running Transform on a placeholder
// file. A body the transform could not use is thus refused when it arrives
// (400) rather than discovered when the phase ends.
func ValidateResult(name Name, result json.RawMessage) error {
	_, err := probeResult(name, result)
	return err
}

// probeResult runs the named phase's Transform of result on a placeholder
// file and returns the files it made.
func probeResult(name Name, result json.RawMessage) ([]File, error) {
	p, ok := Get(name)
	if !ok {
		return nil, fmt.Errorf("unknown phase %q", name)
	}
	if p.Spec().Worker == "" {
		return nil, fmt.Errorf("phase %s runs no worker program and takes no callbacks", name)
	}
	return p.Transform(File{FileName: "probe", LogicalPath: "/probe"}, &Task{Status: TaskCompleted, Result: result})
}

// MaxOutputsSetting names the setting that caps the output files of one
// task's result (see ValidateBatchResult).
const MaxOutputsSetting = "MAX_OUTPUTS_PER_TASK"

// DefaultMaxOutputs is MAX_OUTPUTS_PER_TASK's default: the page JPEG and
// text file of every page of a PDF of PDF_MAX_PAGES' default 2000 pages,
// plus one.
const DefaultMaxOutputs = 4001

// KeyedResult is a phase whose workers choose object keys in their
// results (the TIFF phase's JPEGs, the image phase's ref and archive
// copy): ResultKeys names them, for ValidateBatchResult to check.
type KeyedResult interface {
	ResultKeys(result json.RawMessage) ([]string, error)
}

// ValidateBatchResult is ValidateResult for a callback of batch batchID:
// on top, the result may add at most maxOutputs files to the batch
// (MAX_OUTPUTS_PER_TASK: a TIFF's JPEGs, a PDF's page JPEGs and text
// files), and every object key the worker chose must lie under the batch's
// staging prefix, "staging/{batchID}/", with no empty, "." or ".." segment
// and no control character. A result that breaks a rule is refused (and
// the worker reports the task failed), so a worker cannot point the batch
// at another batch's objects, nor swell its file list without bound.
func ValidateBatchResult(name Name, batchID string, result json.RawMessage, maxOutputs int) error {
	files, err := probeResult(name, result)
	if err != nil {
		return err
	}
	// The transform returns what the task's file becomes: itself (or what
	// replaces it) and its outputs.
	if n := len(files) - 1; n > maxOutputs {
		return fmt.Errorf("the result lists %d output files, more than %s (%d)", n, MaxOutputsSetting, maxOutputs)
	}
	p, _ := Get(name)
	k, ok := p.(KeyedResult)
	if !ok {
		return nil
	}
	keys, err := k.ResultKeys(result)
	if err != nil {
		return err
	}
	prefix := BatchPrefix(StagingBucket, batchID)
	for _, key := range keys {
		if err := CheckKey(key, prefix); err != nil {
			return err
		}
	}
	return nil
}
