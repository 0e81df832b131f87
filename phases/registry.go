package phases

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

// registry is every phase, in pipeline order: the one list a new phase is
// added to. A phase's Next is the phase after it here.
//
// PDF_PAGES and TIFF_CONVERSION feed only IMAGE_PROCESSING, not each other,
// so either order gives the same files. PDF_PAGES goes first so that
// IMAGE_PROCESSING stays TIFF_CONVERSION's next phase: a transition can
// write the next generation in chunks, launching as it goes, only when the
// phase right after it has work in the first files (jobs' phase_check), and
// TIFF_CONVERSION -> IMAGE_PROCESSING is the large transition.
var registry = []Phase{
	pdfPages{},
	tiffConversion{},
	imageProcessing{},
	ocr{},
	documentIndexing{},
}

// Chunker is a phase whose work is done in chunks: it packs the files its
// Discover finds into chunks of at most size, whose items are then
// processed one by one.
type Chunker interface {
	Phase
	Chunks(files []File, size ChunkSize) []Chunk
}

// ChunkSize bounds a chunk: at most Groups directory groups and Refs
// refs, each at least 1. A directory of more refs is split across chunks.
type ChunkSize struct {
	Groups int
	Refs   int
}

// Guest sizes a phase's machines (spec 000 §4.3).
type Guest struct {
	MemoryMB int
	CPUs     int
	CPUKind  string
}

// Name is the guest's size as machine prices name it (PRICE_MACHINE_SECOND,
// the usage table): Fly's preset name for its CPUs (shared-cpu-2x,
// performance-4x) and its memory, e.g. "shared-cpu-2x-2048mb".
func (g Guest) Name() string {
	kind := g.CPUKind
	if kind == "" || kind == "shared" {
		kind = "shared-cpu"
	}
	return fmt.Sprintf("%s-%dx-%dmb", kind, max(g.CPUs, 1), g.MemoryMB)
}

// Defaults are a phase's settings unless the environment overrides them.
type Defaults struct {
	FlyAppName  string        // FLY_<SHORT>_APP_NAME
	WorkerImage string        // FLY_<SHORT>_WORKER_IMAGE
	BatchSize   int           // BATCH_SIZE_<PHASE>: tasks one launch round claims
	ChunkSize   ChunkSize     // chunked phases: a chunk's bounds
	AlarmDelay  time.Duration // ALARM_DELAY_<PHASE>: pause between launch rounds
	TaskTimeout time.Duration // TASK_TIMEOUT_<PHASE>: how long a task may run
	// TaskTimeoutPerGB (TASK_TIMEOUT_PER_GB_<PHASE>) is added to TaskTimeout
	// per 10^9 bytes of the task's input.
	TaskTimeoutPerGB time.Duration
	Guest            Guest
}

// Setting is an orchestrator setting that a phase owns and passes to its
// machines' environment under the same name: a whole number in [Min, Max].
type Setting struct {
	Name    string
	Default int
	Min     int
	Max     int
	Doc     string
}

// Spec is what the rest of the system needs to know of a phase: config,
// the launcher, cmd/worker, the local machine runner, the OpenAPI status
// enum and docs/configuration.md's settings table are all derived from it.
type Spec struct {
	// Name is the phase's name, also the batch status during the phase.
	Name Name
	// TaskPrefix starts the ids of the phase's tasks ("tiff_01j..."), so a
	// task id alone names its phase. Lower-case letters and digits, unique.
	TaskPrefix string
	// Short names the phase in its Fly settings (FLY_<Short>_APP_NAME) and
	// starts the names of its own Settings: one upper-case word, not one
	// of reservedShort.
	Short string
	// Title says in a few words what the phase's machines do, for docs.
	Title string
	// Executor names the kind of executor that runs the phase's work: one
	// machine per task, chunks processed in-process, documents indexed
	// step by step... (the packages under executor/; each checks the
	// phases given to it).
	Executor string
	// Engine names the engine a phase's items are processed by, for an
	// executor that processes items in-process (e.g. "ocr").
	Engine string
	// Worker is the worker program's kind: the cmd/worker subcommand and
	// the package worker/<Worker>worker. Empty for a phase whose work runs
	// in-process.
	Worker   string
	Defaults Defaults
	// Settings are the phase's own settings, passed to its machines.
	Settings []Setting
	// StagesOutputs is set for a phase whose worker writes objects that
	// replace (blob.MethodPut): each attempt stages them (AttemptKey), and
	// the attempt whose success is applied has them promoted before the
	// phase ends.
	StagesOutputs bool
	// SharedEnv names orchestrator-wide settings its machines also get
	// (e.g. ARCHIVE_BUCKET), resolved by the machine executor at launch.
	SharedEnv []string
}

// All returns the registered phases in pipeline order. The slice is fresh
// on every call: callers may not alter the registry.
func All() []Phase {
	return append([]Phase(nil), registry...)
}

// Get returns the phase with that name, false if none. Callers use it to
// turn a stored batch status back into behaviour; false means the status is
// not a phase (e.g. a terminal batch status).
func Get(name Name) (Phase, bool) {
	if i := slices.Index(names, name); i >= 0 {
		return registry[i], true
	}
	return nil, false
}

// First returns the name of the first phase of the pipeline, where a newly
// finalized batch starts looking for work.
func First() Name {
	return names[0]
}

// Next is the phase after name in the pipeline, or "" when name is the
// last (the batch is then done) or not a phase.
func Next(name Name) Name {
	if i := slices.Index(names, name); i >= 0 && i+1 < len(names) {
		return names[i+1]
	}
	return ""
}

// OfTask names the phase a task id was made for (task ids start with their
// phase's TaskPrefix and "_"), or "" for an id no phase makes. Logs use it
// to name the phase of a task seen only by its id, as in a callback's URL.
func OfTask(taskID string) Name {
	prefix, _, ok := strings.Cut(taskID, "_")
	if !ok {
		return ""
	}
	if i := slices.Index(prefixes, prefix); i >= 0 {
		return names[i]
	}
	return ""
}

// TaskIDPrefix is the prefix of phase name's task ids, "" for no phase.
func TaskIDPrefix(name Name) string {
	if i := slices.Index(names, name); i >= 0 {
		return prefixes[i]
	}
	return ""
}

// BatchStatus is a batch's status: PENDING until its first phase starts,
// then the name of the phase it is in, then DONE or ERROR.
type BatchStatus string

// The batch statuses that are not phases.
const (
	// BatchPending is a batch whose start (manifest, first phase) has not
	// finished.
	BatchPending BatchStatus = "PENDING"
	// BatchDone is a batch every phase has finished; ingest is called back.
	BatchDone BatchStatus = "DONE"
	// BatchError is a batch that gave up; an admin may retry it.
	BatchError BatchStatus = "ERROR"
)

// Status is the batch status while a batch is in phase n.
func (n Name) Status() BatchStatus { return BatchStatus(n) }

// Terminal reports whether a batch in status s is finished (DONE or ERROR).
func (s BatchStatus) Terminal() bool { return s == BatchDone || s == BatchError }

// Phase is the phase a batch in status s is in, false for PENDING, DONE,
// ERROR or an unknown status.
func (s BatchStatus) Phase() (Phase, bool) { return Get(Name(s)) }

// Statuses lists every batch status in pipeline order: PENDING, each
// phase, DONE, ERROR.
func Statuses() []BatchStatus {
	out := []BatchStatus{BatchPending}
	for _, p := range registry {
		out = append(out, p.Spec().Name.Status())
	}
	return append(out, BatchDone, BatchError)
}

// taskPrefix is what a TaskPrefix may be: OfTask cuts ids at the first "_".
var taskPrefix = regexp.MustCompile(`^[a-z][a-z0-9]*$`)

// reservedShort are the first words of settings and machine variables that
// are not a phase's own: a phase's Short may be none of them, so that its
// settings (named Short_...) reach its machines without shadowing the
// worker contract (TASK_ID, R2_*, CALLBACK_URL...) or an orchestrator
// setting.
var reservedShort = []string{
	"ADMIN", "ALARM", "ARCHIVE", "BATCH", "CALLBACK", "CDN", "CPU", "DATABASE", "FLY", "INPUT", "JPEG",
	"LAUNCH", "LISTEN", "LOCAL", "LOG", "MAX", "METRICS", "ORCHESTRATOR", "PPROF", "R2", "SWEEP", "TASK",
	"TMPDIR", "VARIANT", "VIPS", "WORKER",
}

// checkRegistry refuses a registry that would mix phases up: duplicate
// names, task-id prefixes, short names or worker kinds, or a spec missing
// its name or executor. (Whether the executor can run the phase, its
// executor checks.)
func checkRegistry(ps []Phase) error {
	var problems []string
	seen := map[string]Name{}
	unique := func(what, v string, n Name) {
		key := what + ":" + v
		if prev, dup := seen[key]; dup {
			problems = append(problems, fmt.Sprintf("%s %q of %s is also %s's", what, v, n, prev))
		}
		seen[key] = n
	}
	for _, p := range ps {
		s := p.Spec()
		if s.Name == "" || strings.ToUpper(string(s.Name)) != string(s.Name) || BatchStatus(s.Name).builtin() {
			problems = append(problems, fmt.Sprintf("phase name %q must be upper case and not a batch status", s.Name))
		}
		if !taskPrefix.MatchString(s.TaskPrefix) {
			problems = append(problems, fmt.Sprintf("task prefix %q of %s must be lower-case letters and digits", s.TaskPrefix, s.Name))
		}
		if s.Executor == "" {
			problems = append(problems, fmt.Sprintf("%s names no executor", s.Name))
		}
		if slices.Contains(reservedShort, s.Short) || strings.ToUpper(s.Short) != s.Short || strings.Contains(s.Short, "_") {
			problems = append(problems, fmt.Sprintf("short name %q of %s is reserved or not one upper-case word", s.Short, s.Name))
		}
		if s.Short == "" {
			problems = append(problems, fmt.Sprintf("%s lacks a short name", s.Name))
		}
		unique("name", string(s.Name), s.Name)
		unique("task prefix", s.TaskPrefix, s.Name)
		unique("short name", s.Short, s.Name)
		if s.Worker != "" {
			unique("worker", s.Worker, s.Name)
		}
		for _, st := range s.Settings {
			unique("setting", st.Name, s.Name)
			if !strings.HasPrefix(st.Name, s.Short+"_") {
				problems = append(problems, fmt.Sprintf("setting %s of %s must start with %s_", st.Name, s.Name, s.Short))
			}
			if st.Min > st.Default || st.Default > st.Max {
				problems = append(problems, fmt.Sprintf("setting %s of %s: default %d outside [%d, %d]", st.Name, s.Name, st.Default, st.Min, st.Max))
			}
		}
	}
	if len(problems) > 0 {
		return errors.New("phase registry: " + strings.Join(problems, "; "))
	}
	return nil
}

// builtin reports whether s is one of the statuses that are not phases.
func (s BatchStatus) builtin() bool {
	return s == BatchPending || s == BatchDone || s == BatchError
}

// names and prefixes are the registered phases' names and task-id
// prefixes, in registry order: the lookups by name and by task id (the
// callback path makes one per callback) read them instead of building
// every phase's Spec each time.
var names, prefixes = func() ([]Name, []string) {
	var n []Name
	var p []string
	for _, ph := range registry {
		s := ph.Spec()
		n, p = append(n, s.Name), append(p, s.TaskPrefix)
	}
	return n, p
}()

func init() {
	// A registry that mixes phases up would corrupt task ids and settings:
	// refuse to start rather than run with it.
	if err := checkRegistry(registry); err != nil {
		panic(err)
	}
}

// Setting is the phase's own setting called name, false if it has none.
func (s Spec) Setting(name string) (Setting, bool) {
	for _, st := range s.Settings {
		if st.Name == name {
			return st, true
		}
	}
	return Setting{}, false
}
