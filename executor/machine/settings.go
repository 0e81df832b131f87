package machine

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/ratelimit"
	"github.com/arke-institute/orchestrator/setting"
)

// Config is the machine executor's configuration: how machines are
// launched, and each machine phase's own settings.
type Config struct {
	// Phases are the machine phases' settings by name.
	Phases map[phases.Name]Phase
	// Region is where machines are launched (FLY_REGION).
	Region string
	// LaunchRate and LaunchBurst bound machine launches per app, shared
	// by every orchestrator on the database (FLY_LAUNCH_RATE,
	// FLY_LAUNCH_BURST; Fly documents about 1/s with bursts of 3).
	LaunchRate  float64
	LaunchBurst int
	// LaunchConcurrency is how many launch requests one launcher has in
	// flight (LAUNCH_CONCURRENCY).
	LaunchConcurrency int
	// ErrorRetryCap caps the backoff of a phase's retries after launch
	// errors (ALARM_DELAY_ERROR_RETRY).
	ErrorRetryCap time.Duration
	// MaxRetryAttempts bounds the phase-level retries after permanent
	// launch errors (MAX_RETRY_ATTEMPTS); transient ones spend
	// OutageBudget.
	MaxRetryAttempts int
	// OutageBudget is how long a phase's launches may keep failing
	// transiently (Fly 5xx, timeouts, no capacity) before the batch errs
	// (LAUNCH_OUTAGE_BUDGET).
	OutageBudget time.Duration
	// CallbackRetryWindow is how long a worker keeps retrying its
	// callback while the orchestrator is unreachable or answers 5xx
	// (CALLBACK_RETRY_WINDOW; passed to the machines).
	CallbackRetryWindow time.Duration
	// CheckInterval is how often the running tasks' machines of a batch's
	// phase are checked against the Machines API (MACHINE_CHECK_INTERVAL);
	// GoneGrace how long a task whose machine ended without calling back
	// waits for a callback in flight before it is retried
	// (MACHINE_GONE_GRACE).
	CheckInterval time.Duration
	GoneGrace     time.Duration
	// ReapInterval is how often the orphan reaper (machine_reap) looks for
	// machines nothing wants (ORPHAN_REAP_INTERVAL; 0: never), and
	// OrphanGrace how old a machine must be before it may be taken for an
	// orphan (ORPHAN_GRACE), so that one between its creation and its
	// record is never taken.
	ReapInterval time.Duration
	OrphanGrace  time.Duration
	// MaxMachines bounds the machines the fleet runs at once, a machine
	// per task's and pools' (MAX_MACHINES), and MaxMachineSecondsPerHour
	// their time over the last hour (MAX_MACHINE_SECONDS_PER_HOUR): the
	// launchers launch no more while one is reached. 0: unbounded.
	MaxMachines              int
	MaxMachineSecondsPerHour int
}

// LaunchLimit is the launch rate limit of each app (FLY_LAUNCH_RATE,
// FLY_LAUNCH_BURST), which every launch of its machines takes from: a
// machine per task's, or a pool's.
func (c Config) LaunchLimit() ratelimit.Limit {
	return ratelimit.Limit{Rate: c.LaunchRate, Burst: c.LaunchBurst}
}

// LaunchKey is the limiter bucket of app's launches.
func LaunchKey(app string) string { return "fly-launch:" + app }

// Phase is a machine phase's configuration: its registered defaults
// (phases.Spec) with the environment's overrides.
type Phase struct {
	// App and Image select the Fly app and image of the phase's machines
	// (FLY_<SHORT>_APP_NAME, FLY_<SHORT>_WORKER_IMAGE).
	App   string
	Image string
	// BatchSize is how many pending tasks one launch round claims
	// (BATCH_SIZE_<PHASE>).
	BatchSize int
	// AlarmDelay is the pause between launch rounds while tasks are
	// pending (ALARM_DELAY_<PHASE>).
	AlarmDelay time.Duration
	// TaskTimeout is how long a task may stay processing before it is
	// failed (TASK_TIMEOUT_<PHASE>); TaskTimeoutPerGB is added per 10^9
	// bytes of its input (TASK_TIMEOUT_PER_GB_<PHASE>): a 5 GB TIFF needs
	// longer than a small one.
	TaskTimeout      time.Duration
	TaskTimeoutPerGB time.Duration
	// Guest sizes the phase's machines (spec 000 §4.3).
	Guest phases.Guest
	// Env holds the phase's own settings (phases.Spec.Settings) by name,
	// passed to its machines as they are.
	Env map[string]string
}

// sharedSettings are the orchestrator-wide settings a phase may pass to
// its machines (phases.Spec.SharedEnv).
var sharedSettings = []string{"ARCHIVE_BUCKET", "CDN_BUCKET", "CDN_PUBLIC_URL"}

// Settings declares the settings of machines into c: the launch
// settings, and a group per phase whose work runs on machines (a phase
// with a worker program, on this executor or a pool's, which launches
// the same machines).
func Settings(c *Config) []setting.Group {
	return settingsOf(c, specsOf(phases.All()))
}

// specsOf are the specs of the phases among ps whose work runs on
// machines: those with a worker program.
func specsOf(ps []phases.Phase) []phases.Spec {
	var out []phases.Spec
	for _, p := range ps {
		if s := p.Spec(); s.Worker != "" {
			out = append(out, s)
		}
	}
	return out
}

// settingsOf is Settings for the phases of specs.
func settingsOf(c *Config, specs []phases.Spec) []setting.Group {
	groups := []setting.Group{{
		Title: "Machines",
		Doc:   "How the phases that run a machine per task launch them (see [Launches](architecture.md#launches)).",
		Settings: []setting.Setting{
			setting.String(&c.Region, "FLY_REGION", "ord", "region of launched machines"),
			setting.PositiveFloat(&c.LaunchRate, "FLY_LAUNCH_RATE", 1, "machine launches per second per app; one bucket in Postgres shared by every orchestrator process"),
			setting.PositiveInt(&c.LaunchBurst, "FLY_LAUNCH_BURST", 3, "the launches' burst per app"),
			setting.PositiveInt(&c.LaunchConcurrency, "LAUNCH_CONCURRENCY", 32, "launch requests in flight per launcher"),
			setting.Millis(&c.ErrorRetryCap, "ALARM_DELAY_ERROR_RETRY", 30*time.Second, "cap of the backoff of a phase's retries after launch errors"),
			setting.PositiveInt(&c.MaxRetryAttempts, "MAX_RETRY_ATTEMPTS", 5, "phase-level retries after permanent launch errors (4xx but 408/409/429, bad image, unknown app) before the batch goes to ERROR"),
			setting.Millis(&c.OutageBudget, "LAUNCH_OUTAGE_BUDGET", 30*time.Minute, "how long a phase's launches may keep failing transiently (Fly 5xx, timeouts, no capacity) before the batch goes to ERROR; running tasks go on meanwhile"),
			setting.Millis(&c.CheckInterval, "MACHINE_CHECK_INTERVAL", 10*time.Second, "how often the machines of a batch's running tasks are checked, one list per app and batch: a task whose machine stopped, failed or vanished without calling back is retried soon, not at its timeout"),
			setting.Millis(&c.GoneGrace, "MACHINE_GONE_GRACE", 10*time.Second, "how long a task whose machine ended without calling back waits for a callback in flight before it is retried"),
			setting.Millis(&c.CallbackRetryWindow, "CALLBACK_RETRY_WINDOW", 15*time.Minute, "how long a worker keeps retrying its callback while the orchestrator is unreachable or answers 5xx/429 (passed to the machines)"),
		},
	}, {
		Title: "Orphans and spend",
		Doc:   "Machines nothing wants any more are destroyed, and the fleet's machines can be bounded (see [Orphans and spend](operations.md#orphans-and-spend)).",
		Settings: []setting.Setting{
			setting.MillisOrZero(&c.ReapInterval, "ORPHAN_REAP_INTERVAL", 5*time.Minute, "how often the `machine_reap` job lists the apps' machines and destroys those that no live task or pool machine wants (0: never)"),
			setting.Millis(&c.OrphanGrace, "ORPHAN_GRACE", 10*time.Minute, "how long after its creation a machine may first be taken for an orphan"),
			setting.Int(&c.MaxMachines, "MAX_MACHINES", 0, 0, 1_000_000, "machines running at once across the fleet (a machine per task's and pools'); launches wait while it is reached (0: unbounded)"),
			setting.Int(&c.MaxMachineSecondsPerHour, "MAX_MACHINE_SECONDS_PER_HOUR", 0, 0, 1_000_000_000, "machine-seconds over the last hour across the fleet, running machines counted up to now; launches wait while it is reached (0: unbounded)"),
		},
	}}
	// A phase's values are read into temporaries, which start as c's, so
	// that the declarations show c's values (the configuration's log).
	values := make([]*phaseValues, len(specs))
	for i, spec := range specs {
		values[i] = &phaseValues{spec: spec, p: c.Phases[spec.Name], env: make([]int, len(spec.Settings))}
		for j, st := range spec.Settings {
			values[i].env[j], _ = strconv.Atoi(values[i].p.Env[st.Name])
		}
		groups = append(groups, values[i].group())
	}
	groups[0].Finish = func() {
		c.Phases = make(map[phases.Name]Phase, len(specs))
		for _, v := range values {
			c.Phases[v.spec.Name] = v.phase()
		}
	}
	groups[0].Check = func() []string {
		var problems []string
		apps := make(map[string]string) // Fly app -> the Short of the phase using it
		for _, v := range values {
			spec, pc := v.spec, c.Phases[v.spec.Name]
			for _, env := range spec.SharedEnv {
				if !isShared(env) {
					problems = append(problems, fmt.Sprintf("phase %s passes %s to its machines, which is no setting", spec.Name, env))
				}
			}
			// Machines are told apart by their app (the local runner picks
			// the worker program by it), so each phase needs an app of its
			// own.
			if other, dup := apps[pc.App]; dup {
				problems = append(problems, fmt.Sprintf("FLY_%s_APP_NAME and FLY_%s_APP_NAME are both %q; each phase needs an app of its own", other, spec.Short, pc.App))
			}
			apps[pc.App] = spec.Short
		}
		return problems
	}
	return groups
}

// sharedValue is the value of the shared setting name (one of sharedSettings).
func sharedValue(s jobs.Settings, name string) string {
	switch name {
	case "ARCHIVE_BUCKET":
		return s.Buckets[phases.ArchiveBucket]
	case "CDN_BUCKET":
		return s.Buckets[phases.CDNBucket]
	case "CDN_PUBLIC_URL":
		return s.CDNPublicURL
	}
	return ""
}

// isShared reports whether name is one of sharedSettings.
func isShared(name string) bool { return slices.Contains(sharedSettings, name) }

// phaseValues are the values of one machine phase's settings as they are
// read.
type phaseValues struct {
	spec phases.Spec
	p    Phase
	env  []int // the phase's own settings, in spec.Settings' order
}

// group declares the phase's settings, with its registered defaults.
func (v *phaseValues) group() setting.Group {
	sp, d, n := v.spec, v.spec.Defaults, string(v.spec.Name)
	machines := fmt.Sprintf("The `%s` phase: %s, `worker %s` on machines of %d MB and %d %s CPUs.", n, sp.Title, sp.Worker, d.Guest.MemoryMB, d.Guest.CPUs, d.Guest.CPUKind)
	if len(sp.SharedEnv) > 0 {
		shared := make([]string, len(sp.SharedEnv))
		for i, e := range sp.SharedEnv {
			shared[i] = "`" + e + "`"
		}
		machines += " They also get " + strings.Join(shared, ", ") + "."
	}
	g := setting.Group{Title: "Phase " + n, Doc: machines, Settings: []setting.Setting{
		setting.String(&v.p.App, "FLY_"+sp.Short+"_APP_NAME", d.FlyAppName, "Fly app of its machines"),
		setting.String(&v.p.Image, "FLY_"+sp.Short+"_WORKER_IMAGE", d.WorkerImage, "image its machines run"),
		setting.PositiveInt(&v.p.BatchSize, "BATCH_SIZE_"+n, d.BatchSize, "tasks launched per round"),
		setting.Millis(&v.p.AlarmDelay, "ALARM_DELAY_"+n, d.AlarmDelay, "pause between launch rounds"),
		setting.Millis(&v.p.TaskTimeout, "TASK_TIMEOUT_"+n, d.TaskTimeout, "an attempt still processing after this, plus the per-GB part, times out"),
		setting.MillisOrZero(&v.p.TaskTimeoutPerGB, "TASK_TIMEOUT_PER_GB_"+n, d.TaskTimeoutPerGB, "added to the timeout per 10^9 bytes of the task's input"),
	}}
	for i, st := range sp.Settings {
		g.Settings = append(g.Settings, setting.Int(&v.env[i], st.Name, st.Default, st.Min, st.Max, st.Doc+" (passed to its machines)"))
	}
	return g
}

// phase is the phase's configuration as read.
func (v *phaseValues) phase() Phase {
	p := v.p
	p.Guest = v.spec.Defaults.Guest
	p.Env = make(map[string]string, len(v.env))
	for i, st := range v.spec.Settings {
		p.Env[st.Name] = strconv.Itoa(v.env[i])
	}
	return p
}
