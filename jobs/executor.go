package jobs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/fanin"
	"github.com/arke-institute/orchestrator/phases"
)

// Executor runs the work of the phases of one kind (phases.Spec.Executor
// names it): one machine per task, chunks processed in-process, documents
// indexed step by step... The pipeline core (batch start, fan-in check,
// transition, generation, build, sweep, retry, reset, retention, status)
// knows phases and generations, and asks the phase's executor whatever
// depends on how its work runs. Each kind is a package of its own that
// registers itself once (package executor); none of the core switches on
// a kind.
//
// The work of a phase ends under the batch's shared fan-in lock with a
// phase_check made sure of (EndTasks), so that the check, counting under
// the exclusive lock (HasOpen), never misses the phase's end.
type Executor interface {
	// Kind is the name phases.Spec.Executor selects the executor by.
	Kind() string
	// Check refuses a phase the executor cannot run: a spec without what
	// it needs, or a phase without the behaviour it calls (e.g. a chunked
	// phase that is no phases.Chunker).
	Check(p phases.Phase) error
	// Jobs registers the executor's River workers and says which queues,
	// periodic jobs and job timeouts they need.
	Jobs(w *river.Workers) Jobs

	// Enter writes the work of phase at for files, the stored generation
	// the batch enters it with (phases.Work(at.Phase, files) is what needs
	// doing), and enqueues what starts it, in tx. The core has moved the
	// batch into the phase in tx; Enter returns what the phase.started
	// event says of the work (e.g. {"tasks": 12}).
	Enter(ctx context.Context, tx Tx, at PhaseAt, files []phases.File) (map[string]any, error)
	// HasOpen reports whether phase at has work not yet ended. The fan-in
	// check asks it under the batch's exclusive lock: it must count every
	// end committed before.
	HasOpen(ctx context.Context, q *db.Queries, at PhaseAt) (bool, error)
	// Outcomes is how the transform finds each file's outcome in the
	// phase (readGeneration).
	Outcomes() Outcomes
	// Progress reports the batch's work in each phase of this kind that
	// it has any in, for status, the dashboard and the command line.
	// It reads several batches at once (a page of the dashboard's
	// listing); a batch without work of this kind is left out.
	Progress(ctx context.Context, q *db.Queries, batchIDs []string) (map[string][]PhaseProgress, error)

	// Retry puts phase at's failed work back to be done again, for an
	// admin retry of a batch in it (scope: all of it or only what
	// infrastructure failed, and whether the batch was in ERROR and
	// resumes in this phase). The caller holds the batch's exclusive lock
	// and makes sure of the phase's check afterwards.
	Retry(ctx context.Context, tx Tx, at PhaseAt, scope RetryScope) (RetryOutcome, error)
	// Rerun prepares a DONE batch's new pass (ResumeBatch): it drops the
	// batch's failed work of this kind in scope (a later Enter makes it
	// anew) and names the files it failed on. The caller holds the
	// exclusive lock.
	Rerun(ctx context.Context, tx Tx, batchID string, scope RetryScope) (Rerun, error)
	// Backstop makes sure that the work of phase at, whose batch has not
	// moved for a while, has the jobs it needs (a lost wake-up, a job
	// River gave up on). The jobs it enqueues are unique: nothing is
	// added when nothing was lost. The core then makes sure of the
	// phase's check when nothing is open.
	Backstop(ctx context.Context, at PhaseAt) error
	// Stop ends a batch's open work of this kind with reason (a reset,
	// the batch failed) and whatever still runs for it, in tx, which holds
	// the batch's exclusive lock. It returns how much work it ended.
	Stop(ctx context.Context, tx Tx, batchID, reason string) (int, error)
	// Prune removes a finished batch's rows of this kind, each statement
	// at most rows rows (retention; DeleteInSteps), and says what it
	// removed.
	Prune(ctx context.Context, q *db.Queries, batchID string, rows int32) (Removal, error)
}

// Tx is a transaction of the pipeline: the database's, and the River
// client that enqueues jobs in it.
type Tx struct {
	pgx.Tx
	River *river.Client[pgx.Tx]
}

// Queries is the database's queries in tx.
func (tx Tx) Queries() *db.Queries { return db.New(tx.Tx) }

// PhaseAt names the phase a batch is in, with the generation of its files
// that the batch entered it with.
type PhaseAt struct {
	BatchID    string
	Phase      phases.Phase
	Generation int32
}

// Name is the phase's name, as batches and tasks store it.
func (a PhaseAt) Name() string { return string(a.Phase.Spec().Name) }

// Ref is the phase as the fan-in names it.
func (a PhaseAt) Ref() fanin.PhaseRef { return fanin.PhaseRef{BatchID: a.BatchID, Phase: a.Name()} }

// Jobs is what an executor's River workers need of the client.
type Jobs struct {
	// Queues are the queues its jobs go to besides River's default one,
	// with their workers per process.
	Queues map[string]river.QueueConfig
	// Periodic are its periodic jobs.
	Periodic []*river.PeriodicJob
	// Timeout is the longest run of its jobs: River rescues a running
	// job of a process that died no sooner than the shortest of every
	// executor's, and refuses a job timeout above it.
	Timeout time.Duration
}

// Outcomes is the SQL that puts, beside each file of a generation, the
// outcome of its work in a phase, for the transform (phases.Task). Join
// is a join (or LEFT JOIN) from files f, with $1 the batch's id and $3 the
// phase's name; ID, Status and Result are expressions for the work's id
// (text, NULL when the file had none), its status as a phases.TaskStatus
// (only "completed" changes the file) and its result (jsonb); Order
// orders the rows of one file, the first deciding. Final, if not empty,
// is true where the file's outcome can no longer change while the batch
// is in the phase (no work, or work completed): the next generation of
// such files can be written before the phase ends (writeAhead). Lookup,
// if not empty, is Join for a stretch of a few thousand files: it finds
// their outcomes by an index from their ids, ARRAY(SELECT id FROM
// stretch), rather than reading all of the phase's.
type Outcomes struct {
	Join, ID, Status, Result, Order, Final, Lookup string
}

// PhaseProgress is one phase of a batch at a glance, as its executor
// counts its work: tasks, refs, documents... (Unit). Its JSON keeps spec
// 000's tasks_* names for the counts of whatever the unit is.
type PhaseProgress struct {
	Phase    string `json:"phase"`
	Executor string `json:"executor"`
	// Unit is what the counts count, plural ("tasks", "refs",
	// "documents").
	Unit            string `json:"unit"`
	TasksTotal      int64  `json:"tasks_total"`
	TasksPending    int64  `json:"tasks_pending"`
	TasksProcessing int64  `json:"tasks_processing"`
	TasksCompleted  int64  `json:"tasks_completed"`
	TasksFailed     int64  `json:"tasks_failed"`
	// TasksFailedInfrastructure are the failed ones whose attempts or
	// retries infrastructure spent (timeouts, dead machines, outages, a
	// spent quota); the others failed because their file is bad.
	TasksFailedInfrastructure int64 `json:"tasks_failed_infrastructure"`
	// TasksSkipped is work that needed nothing (e.g. a PDF page whose
	// text layer makes OCR needless); it counts as completed too.
	TasksSkipped int64 `json:"tasks_skipped,omitempty"`
	// Detail is the executor's own counts, named (e.g. chunks_total).
	Detail map[string]int64 `json:"detail,omitempty"`
}

// Open is the work not yet ended.
func (p PhaseProgress) Open() int64 { return p.TasksPending + p.TasksProcessing }

// RetryScope says which failed work an admin retry puts back.
type RetryScope struct {
	// Stopped: the batch was in ERROR, and resumes in the phase.
	Stopped bool
	// InfraOnly puts back only the work whose attempts or retries
	// infrastructure spent (failure 'infrastructure': timeouts, dead
	// machines, outages, a spent quota), not the files that are bad.
	InfraOnly bool
}

// RetryOutcome is what an executor's Retry put back.
type RetryOutcome struct {
	// Count is the work put back; 0 is nothing to retry.
	Count int
	// Data goes into the admin.retry event (e.g. {"tasks_requeued": 3}).
	Data map[string]any
	// Events are the retry's own events (e.g. a task.requeued per task).
	Events []db.BatchEventInsertManyParams
}

// Rerun is what an executor's Rerun dropped of a DONE batch's failed work.
type Rerun struct {
	// Keys are the keys of the files whose work failed: the batch's final
	// generation still has them (a file whose work failed passes through
	// its phase unchanged), and the new pass works on them again.
	Keys []string
	// Counts say what is rerun, for the batch.resumed event (e.g.
	// {"tasks": {"TIFF_CONVERSION": 2}}).
	Counts map[string]any
}

// Removal is what an executor's Prune removed: rows by table, and the
// delete statements it took.
type Removal struct {
	Rows       map[string]int64
	Statements int
}

// Executors is the registry of executor kinds: each phase's executor.
type Executors struct {
	byKind map[string]Executor
	kinds  []string // in registration order
	// chosen are the phases whose executor is not their spec's (Choose).
	chosen map[phases.Name]string
}

// Choose runs each phase of kinds on the kind given instead of its spec's
// Executor (e.g. EXECUTOR_TIFF_CONVERSION=pool). It is called before the
// executors are made, which ask PhasesOf.
func (x *Executors) Choose(kinds map[phases.Name]string) { x.chosen = kinds }

// KindOf is the kind of executor phase p runs on: the one chosen for it,
// else its spec's.
func (x *Executors) KindOf(p phases.Phase) string {
	if x != nil {
		if k, ok := x.chosen[p.Spec().Name]; ok {
			return k
		}
	}
	return p.Spec().Executor
}

// Register registers the executor kinds (package executor does, once).
// Every registered phase's executor must be among them and accept the
// phase (Check): a batch would otherwise enter a phase nothing advances.
// The zero Executors is empty and ready; Deps.Executors points to it
// before the executors are made, so that they share it.
func (x *Executors) Register(es ...Executor) error {
	if x.byKind == nil {
		x.byKind = map[string]Executor{}
	}
	var problems []string
	for _, e := range es {
		if _, dup := x.byKind[e.Kind()]; dup {
			problems = append(problems, fmt.Sprintf("executor %q is registered twice", e.Kind()))
		}
		x.byKind[e.Kind()] = e
		x.kinds = append(x.kinds, e.Kind())
	}
	for _, p := range phases.All() {
		s := p.Spec()
		e, ok := x.byKind[x.KindOf(p)]
		if !ok {
			problems = append(problems, fmt.Sprintf("phase %s runs on executor %q, which is not registered (registered: %s)", s.Name, x.KindOf(p), strings.Join(x.kinds, ", ")))
			continue
		}
		if err := e.Check(p); err != nil {
			problems = append(problems, fmt.Sprintf("phase %s: %v", s.Name, err))
		}
	}
	if len(problems) > 0 {
		return errors.New("executors: " + strings.Join(problems, "; "))
	}
	return nil
}

// All are the registered executors, in registration order (none for a
// nil Executors).
func (x *Executors) All() []Executor {
	if x == nil {
		return nil
	}
	out := make([]Executor, len(x.kinds))
	for i, k := range x.kinds {
		out[i] = x.byKind[k]
	}
	return out
}

// Of is the executor of the phase called name, with the phase; false for
// a name that is no phase (or whose executor is not registered).
func (x *Executors) Of(name string) (Executor, phases.Phase, bool) {
	p, ok := phases.Get(phases.Name(name))
	if !ok || x == nil {
		return nil, nil, false
	}
	e, ok := x.byKind[x.KindOf(p)]
	return e, p, ok
}

// Progress is every phase's progress for each of the batches, in
// pipeline order, as the executors count their work now. (A batch whose
// processing state retention removed keeps a snapshot of it instead:
// batches.pruned_counts.)
func (x *Executors) Progress(ctx context.Context, q *db.Queries, batchIDs []string) (map[string][]PhaseProgress, error) {
	out := map[string][]PhaseProgress{}
	for _, e := range x.All() {
		byBatch, err := e.Progress(ctx, q, batchIDs)
		if err != nil {
			return nil, fmt.Errorf("reading the %s work of batches: %w", e.Kind(), err)
		}
		for id, ps := range byBatch {
			out[id] = append(out[id], ps...)
		}
	}
	for id, ps := range out {
		out[id] = SortProgress(ps)
	}
	return out, nil
}

// SortProgress orders phases' progress in pipeline order; a phase no
// longer registered comes last.
func SortProgress(ps []PhaseProgress) []PhaseProgress {
	order := func(name string) int {
		for i, p := range phases.All() {
			if string(p.Spec().Name) == name {
				return i
			}
		}
		return len(phases.All())
	}
	slices.SortStableFunc(ps, func(a, b PhaseProgress) int { return order(a.Phase) - order(b.Phase) })
	return ps
}

// Stop ends the open work of every kind for a batch (StopBatchWork).
func (x *Executors) Stop(ctx context.Context, tx Tx, batchID, reason string) (int, error) {
	ended := 0
	for _, e := range x.All() {
		n, err := e.Stop(ctx, tx, batchID, reason)
		if err != nil {
			return 0, fmt.Errorf("stopping the %s work of batch %s: %w", e.Kind(), batchID, err)
		}
		ended += n
	}
	return ended, nil
}

// PhasesOf are the registered phases that run on kind.
func (x *Executors) PhasesOf(kind string) []phases.Phase {
	var out []phases.Phase
	for _, p := range phases.All() {
		if x.KindOf(p) == kind {
			out = append(out, p)
		}
	}
	return out
}

// PhaseNamesOf are the names of PhasesOf(kind), as the tasks' rows store
// them.
func (x *Executors) PhaseNamesOf(kind string) []string {
	var out []string
	for _, p := range x.PhasesOf(kind) {
		out = append(out, string(p.Spec().Name))
	}
	return out
}

// executor is phase p's executor.
func (x *Executors) executor(p phases.Phase) Executor { return x.byKind[x.KindOf(p)] }

// OpenCounter is an executor that can count a phase's open work cheaply
// and without a lock, so that a fan-in check can wait out a phase far from
// its end instead of checking under the lock at every end (waitOut).
type OpenCounter interface {
	OpenCount(ctx context.Context, q *db.Queries, ref fanin.PhaseRef) (int64, error)
}

// Extender is an executor whose phases can start before the generation
// they are entered with is whole: the transition gives Enter the first
// part of a large generation, and phase_build gives Extend each part it
// writes after that, in the part's transaction, so that the phase's work
// starts while the rest is written. It returns how much work the part
// added.
type Extender interface {
	Extend(ctx context.Context, tx Tx, at PhaseAt, files []phases.File) (int, error)
}

// Requeuer is an executor that must hear of work that a callback of its
// phase put back to be done again (a retryable failure), e.g. to launch
// it again. It is told in the callbacks' transaction.
type Requeuer interface {
	Requeued(ctx context.Context, tx Tx, refs []fanin.PhaseRef) error
}

// Requeued tells the phases' executors of work put back by callbacks
// (Requeuer), in the callbacks' transaction: the fan-in's committer hears
// of it through this (fanin.Requeuer).
func (x *Executors) Requeued(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], refs []fanin.PhaseRef) error {
	return tellKinds(x, refs, func(r fanin.PhaseRef) string { return r.Phase }, func(ex Executor, rs []fanin.PhaseRef) error {
		if rq, ok := ex.(Requeuer); ok {
			return rq.Requeued(ctx, Tx{Tx: tx, River: client}, rs)
		}
		return nil
	})
}

// tellKinds groups items by the kind of executor of their phase and
// tells each kind's executor of its items.
func tellKinds[T any](x *Executors, items []T, phase func(T) string, tell func(Executor, []T) error) error {
	byKind := map[string][]T{}
	for _, it := range items {
		if ex, _, ok := x.Of(phase(it)); ok {
			byKind[ex.Kind()] = append(byKind[ex.Kind()], it)
		}
	}
	for kind, its := range byKind {
		if err := tell(x.byKind[kind], its); err != nil {
			return err
		}
	}
	return nil
}

// Failures are a batch's failed work by cause (PhaseProgress's
// TasksFailed and TasksFailedInfrastructure summed over its phases).
type Failures struct {
	Permanent      int64 `json:"permanent"`
	Infrastructure int64 `json:"infrastructure"`
}

// Failures sums the batch's failed work over every executor's phases.
func (x *Executors) Failures(ctx context.Context, q *db.Queries, batchID string) (Failures, error) {
	var f Failures
	for _, e := range x.All() {
		progress, err := e.Progress(ctx, q, []string{batchID})
		if err != nil {
			return f, err
		}
		g := FailuresOf(progress[batchID])
		f.Permanent += g.Permanent
		f.Infrastructure += g.Infrastructure
	}
	return f, nil
}

// FailuresOf sums the phases' failures by cause.
func FailuresOf(ps []PhaseProgress) Failures {
	var f Failures
	for _, p := range ps {
		f.Infrastructure += p.TasksFailedInfrastructure
		f.Permanent += p.TasksFailed - p.TasksFailedInfrastructure
	}
	return f
}

// Pausable is an executor whose jobs wait while their work is paused
// (Deps.Pauses): a resume makes the jobs of these kinds that wait due at
// once (pause.Controls).
type Pausable interface {
	PausedKinds() []string
}

// PausedKinds are the kinds of the jobs of every Pausable executor.
func (x *Executors) PausedKinds() []string {
	var out []string
	for _, e := range x.All() {
		if p, ok := e.(Pausable); ok {
			out = append(out, p.PausedKinds()...)
		}
	}
	return out
}

// Overtaker is an executor that must hear of tasks that a success of an
// earlier attempt completed after they were launched again, to stop the
// machine each had (fanin.Overtaken). It is told in the callbacks'
// transaction.
type Overtaker interface {
	Overtaken(ctx context.Context, tx Tx, tasks []fanin.Overtaken) error
}

// Overtaken tells the phases' executors of tasks an earlier attempt
// completed (Overtaker), in the callbacks' transaction.
func (x *Executors) Overtaken(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], tasks []fanin.Overtaken) error {
	return tellKinds(x, tasks, func(t fanin.Overtaken) string { return t.Phase }, func(ex Executor, ts []fanin.Overtaken) error {
		if o, ok := ex.(Overtaker); ok {
			return o.Overtaken(ctx, Tx{Tx: tx, River: client}, ts)
		}
		return nil
	})
}

// Sweeper is an executor with work for the periodic sweep (every
// SWEEP_INTERVAL), e.g. timing out tasks past their deadline. grace is
// set within SWEEP_RESTART_GRACE of a start of Postgres or of this
// process: nothing is to be timed out then, since results that waited out
// the outage are on their way.
type Sweeper interface {
	Sweep(ctx context.Context, client *river.Client[pgx.Tx], grace bool) error
}

// Settler is an executor whose ended work may leave more to do before its
// phase ends, outside the database: promoting the outputs that the
// attempts whose successes were applied staged (phases.AttemptKey).
//
// The fan-in check calls Settle before it takes the batch's lock, on
// every run. Settle returns again, a test that the check runs under the
// lock when nothing of the phase is open: true when work ended since
// Settle began, which it may not have settled; the phase is then not over,
// and the check runs again soon. Settled is called once the phase has
// ended, when no success of it can be applied any more (best effort:
// retention deletes what it leaves).
type Settler interface {
	Settle(ctx context.Context, at PhaseAt) (again func(context.Context, *db.Queries) (bool, error), err error)
	Settled(ctx context.Context, at PhaseAt) error
}

// Router is an executor with HTTP routes of its own (a chunk's status, a
// pool's leases...). The API mounts them behind the credential each asks
// for.
type Router interface {
	Routes() []Route
}

// Access is the credential a Route asks for.
type Access int

// The credentials of routes.
const (
	// AccessStatus is a status read: the read or admin token, or anyone
	// when STATUS_PUBLIC is set.
	AccessStatus Access = iota + 1
	// AccessRead is any other read: the read or admin token.
	AccessRead
	// AccessAdmin is the admin token.
	AccessAdmin
	// AccessTask is no credential of the API's: the handler checks the
	// task's own token (Request.Token), as the callback route does.
	AccessTask
)

// Route is one of an executor's HTTP routes.
type Route struct {
	Method string
	// Path is in Echo's syntax, e.g. /status/:batchId/:chunkId.
	Path   string
	Access Access
	// Handle answers a request: its value is sent as JSON with 200, its
	// error as the API answers errors (db.ErrNotFound is 404...).
	Handle func(ctx context.Context, r Request) (any, error)
}

// Request is what a Route's handler gets of its request.
type Request struct {
	// Params are the path's parameters by name ("batchId").
	Params map[string]string
	Query  map[string][]string
	Body   []byte
	// Token is the request's bearer token, for an AccessTask route.
	Token string
}

// Routes are every executor's routes.
func (x *Executors) Routes() []Route {
	var out []Route
	for _, e := range x.All() {
		if r, ok := e.(Router); ok {
			out = append(out, r.Routes()...)
		}
	}
	return out
}

// Viewer is an executor with sections of its own on the dashboard's batch
// page (a chunked phase's chunks and rate limiter, the failed tasks...).
type Viewer interface {
	// Views are the batch's sections of this kind, in page order.
	Views(ctx context.Context, batchID string) ([]View, error)
}

// View is one section of the dashboard's batch page.
type View struct {
	// ID is the section's anchor; Title its heading.
	ID, Title string
	// Template is html/template text that renders the section from Data.
	// The dashboard parses it with its own templates and functions, so it
	// may use them ({{template "bar" .}}, pct, time...). Elements with a
	// data-live-phase attribute (the phase's name) are kept up to date
	// from the batch's stream: their descendants with data-count="k" show
	// the phase's progress field k (e.g. tasks_completed) or its Detail's.
	Template string
	Data     any
}

// Views are every executor's sections for a batch.
func (x *Executors) Views(ctx context.Context, batchID string) ([]View, error) {
	var out []View
	for _, e := range x.All() {
		if v, ok := e.(Viewer); ok {
			vs, err := v.Views(ctx, batchID)
			if err != nil {
				return nil, fmt.Errorf("the %s sections of batch %s: %w", e.Kind(), batchID, err)
			}
			out = append(out, vs...)
		}
	}
	return out, nil
}
