package pool

import (
	"fmt"
	"time"

	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/setting"
)

// Scopes of a pool (POOL_SCOPE).
const (
	// ScopeBatch gives each batch's phase a pool of its own: a worker
	// holds nothing of another batch.
	ScopeBatch = "batch"
	// ScopePhase shares one pool among the batches of a phase, served in
	// turn: fewer machine starts, at the cost of that isolation.
	ScopePhase = "phase"
)

// Config is the pool executor's configuration; the machines' own (app,
// image, guest, task timeout) are the machine executor's (machine.Config).
type Config struct {
	// Size is how many machines a pool keeps while it has work
	// (POOL_SIZE_<PHASE>); MaxMachines bounds the live machines of a
	// phase's app across all its pools (POOL_MAX_MACHINES_<PHASE>).
	Size        map[phases.Name]int
	MaxMachines map[phases.Name]int
	// Idle is how long a pool machine waits for work before it exits
	// (POOL_IDLE_SECONDS).
	Idle time.Duration
	// Scope is ScopeBatch or ScopePhase (POOL_SCOPE).
	Scope string
}

// Defaults of the settings.
const (
	DefaultSize        = 20
	DefaultMaxMachines = 100
	DefaultIdle        = 30 * time.Second
)

// Settings declares the pools' settings into c: the shared ones, and a
// pool size and cap for each phase whose work runs on machines (a phase
// with a worker program: EXECUTOR_<PHASE> chooses pool or machine).
func Settings(c *Config) []setting.Group {
	idleSeconds := int(c.Idle / time.Second) // the declaration shows c's value
	g := setting.Group{
		Title: "Pools",
		Doc: "A phase on the pool executor keeps a few machines that lease its tasks one after another, instead of a machine per task " +
			"(see [Pools](architecture.md#pools)). The machines are the phase's (its app, image, guest and task timeout).",
		Settings: []setting.Setting{
			setting.OneOf(&c.Scope, "POOL_SCOPE", ScopeBatch, []string{ScopeBatch, ScopePhase},
				"`batch`: a pool per batch and phase, whose machines can reach only that batch's files; `phase`: one pool per phase, shared by its batches in turn (fewer machine starts; a worker may then see every batch of the phase)"),
			setting.Int(&idleSeconds, "POOL_IDLE_SECONDS", int(DefaultIdle/time.Second), 1, 3600, "a pool machine that finds no task for this long exits (one whose pool has no work left exits at once)"),
		},
	}
	sizes, caps := map[phases.Name]*int{}, map[phases.Name]*int{}
	for _, p := range phases.All() {
		s := p.Spec()
		if s.Worker == "" {
			continue
		}
		sizes[s.Name], caps[s.Name] = new(int), new(int)
		*sizes[s.Name], *caps[s.Name] = c.Size[s.Name], c.MaxMachines[s.Name] // the declaration shows c's values
		g.Settings = append(g.Settings,
			setting.Int(sizes[s.Name], "POOL_SIZE_"+string(s.Name), DefaultSize, 1, 1000, fmt.Sprintf("machines a pool of the `%s` phase keeps while it has work", s.Name)),
			setting.Int(caps[s.Name], "POOL_MAX_MACHINES_"+string(s.Name), DefaultMaxMachines, 1, 10000, fmt.Sprintf("live pool machines of the `%s` phase's app, across all its pools", s.Name)))
	}
	g.Finish = func() {
		c.Idle = time.Duration(idleSeconds) * time.Second
		c.Size, c.MaxMachines = make(map[phases.Name]int, len(sizes)), make(map[phases.Name]int, len(caps))
		for name := range sizes {
			c.Size[name], c.MaxMachines[name] = *sizes[name], *caps[name]
		}
	}
	return []setting.Group{g}
}
