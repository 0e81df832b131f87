// Package pause is the operators' pauses of work (POST /admin/pause): of
// the whole fleet, of a phase everywhere, or of one batch. While a pause
// covers a batch's phase nothing of it is launched, leased, sent to a
// provider or stepped; callbacks, status and the sweep go on. The
// executors ask a Gate before each of those; the admin API and the
// dashboard set and lift pauses through Controls.
package pause

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/problem"
)

// Scope is what a pause covers.
type Scope string

// The scopes of pauses.
const (
	// Global covers every batch's work, and documents posted alone.
	Global Scope = "global"
	// Phase covers one phase's work in every batch.
	Phase Scope = "phase"
	// Batch covers one batch's work, in whatever phase.
	Batch Scope = "batch"
)

// Pause is a pause in force.
type Pause struct {
	Scope Scope `json:"scope"`
	// Target is the phase's name or the batch's id; "" for Global.
	Target string    `json:"target,omitempty"`
	Reason string    `json:"reason"`
	Since  time.Time `json:"since"`
}

// Covers reports whether p covers the work of batchID ("" for a document
// posted alone) in phase.
func (p Pause) Covers(batchID, phase string) bool {
	switch p.Scope {
	case Global:
		return true
	case Phase:
		return p.Target == phase
	case Batch:
		return batchID != "" && p.Target == batchID
	}
	return false
}

// Why says what the pause is, for a log line or a status: "paused
// (phase OCR): provider bill".
func (p Pause) Why() string {
	s := "paused (" + string(p.Scope)
	if p.Target != "" {
		s += " " + p.Target
	}
	s += ")"
	if p.Reason != "" {
		s += ": " + p.Reason
	}
	return s
}

// Target names what to pause or resume: a batch, a phase, or (neither)
// everything.
type Target struct {
	BatchID string `json:"batch_id,omitempty"`
	Phase   string `json:"phase,omitempty"`
}

// scope is t's scope and target, or what is wrong with it.
func (t Target) scope() (Scope, string, error) {
	switch {
	case t.BatchID != "" && t.Phase != "":
		return "", "", &problem.InputError{Msg: "name a batch_id or a phase, not both"}
	case t.BatchID != "":
		return Batch, t.BatchID, nil
	case t.Phase != "":
		if _, ok := phases.Get(phases.Name(t.Phase)); !ok {
			var names []string
			for _, p := range phases.All() {
				names = append(names, string(p.Spec().Name))
			}
			return "", "", &problem.InputError{Msg: fmt.Sprintf("phase %q is no phase (phases: %s)", t.Phase, strings.Join(names, ", "))}
		}
		return Phase, t.Phase, nil
	}
	return Global, "", nil
}

// Recheck is how long paused work waits before it looks again. A resume
// wakes it at once (Controls.Resume), so this only bounds a wake-up lost
// to a race with the resume.
const Recheck = 30 * time.Second

// cacheFor is how long a Gate trusts the pauses it read: the delay before
// a pause takes effect in a process.
const cacheFor = time.Second

// Gate tells the executors whether work is paused. It reads the pauses at
// most once a second per process, so that asking costs no query on the
// hot paths (a launch round, a lease, a chunk's run, a document's step).
// A nil Gate pauses nothing.
type Gate struct {
	pool *pgxpool.Pool

	mu     sync.Mutex
	pauses []Pause
	read   time.Time
}

// NewGate is the gate of the pauses in pool's database.
func NewGate(pool *pgxpool.Pool) *Gate { return &Gate{pool: pool} }

// Of is the pause that covers the work of batchID ("" for a document posted
// alone) in phase, or nil (Covering).
func (g *Gate) Of(ctx context.Context, batchID, phase string) (*Pause, error) {
	if g == nil {
		return nil, nil
	}
	pauses, err := g.current(ctx)
	if err != nil {
		return nil, err
	}
	return Covering(pauses, batchID, phase), nil
}

// Covering is the narrowest of pauses that covers the work of batchID in
// phase (a batch's before its phase's before the fleet's), or nil.
func Covering(pauses []Pause, batchID, phase string) *Pause {
	var found *Pause
	for i, p := range pauses {
		if p.Covers(batchID, phase) && (found == nil || narrower(p.Scope, found.Scope)) {
			found = &pauses[i]
		}
	}
	return found
}

// narrower reports whether scope a is narrower than b.
func narrower(a, b Scope) bool {
	rank := map[Scope]int{Batch: 0, Phase: 1, Global: 2}
	return rank[a] < rank[b]
}

// current are the pauses, read again when the last reading is older than
// cacheFor. The slice is never changed once read.
func (g *Gate) current(ctx context.Context) ([]Pause, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.read.IsZero() && time.Since(g.read) < cacheFor {
		return g.pauses, nil
	}
	pauses, err := List(ctx, db.New(g.pool))
	if err != nil {
		return nil, err
	}
	g.pauses, g.read = pauses, time.Now()
	return pauses, nil
}

// forget makes the next Of read the pauses again (this process just changed
// them).
func (g *Gate) forget() {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.read = time.Time{}
	g.mu.Unlock()
}

// List reads the pauses in force, oldest first.
func List(ctx context.Context, q *db.Queries) ([]Pause, error) {
	rows, err := q.PauseList(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the pauses: %w", err)
	}
	out := make([]Pause, len(rows))
	for i, r := range rows {
		out[i] = Pause{Scope: Scope(r.Scope), Target: r.Target, Reason: r.Reason, Since: r.PausedAt}
	}
	return out, nil
}

// Controls set and lift pauses (the admin API's and the dashboard's).
type Controls struct {
	Pool *pgxpool.Pool
	// Gate is this process's, told of each change so that it takes effect
	// here at once.
	Gate   *Gate
	Logger *slog.Logger
	// Kinds are the kinds of the jobs that wait while paused (a launch, a
	// pool's scaling, a chunk, a document's step): a resume makes those
	// waiting due at once.
	Kinds []string
}

// Resumed is a pause lifted, with how long it lasted and the clocks of the
// work it covered that were moved later by that time.
type Resumed struct {
	Pause
	PausedSeconds float64 `json:"paused_seconds"`
	// Shifted counts the work whose failing clocks moved (tasks, chunk
	// items, documents, launch outages), by table.
	Shifted map[string]int64 `json:"shifted"`
	// Woken is how many waiting jobs were made due.
	Woken int64 `json:"woken"`
}

// Pause pauses t's work with reason; pausing what is paused keeps its start
// and takes the new reason. A batch's pause is an event of the batch.
func (c *Controls) Pause(ctx context.Context, t Target, reason string) (Pause, error) {
	scope, target, err := t.scope()
	if err != nil {
		return Pause{}, err
	}
	var p Pause
	err = pgx.BeginFunc(ctx, c.Pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		if scope == Batch {
			if _, err := q.BatchGetByID(ctx, target); err != nil {
				return db.NotFound(err, "batch "+target)
			}
		}
		row, err := q.PauseSet(ctx, db.PauseSetParams{Scope: string(scope), Target: target, Reason: reason})
		if err != nil {
			return err
		}
		p = Pause{Scope: Scope(row.Scope), Target: row.Target, Reason: row.Reason, Since: row.PausedAt}
		if scope == Batch {
			return q.EventRecord(ctx, db.Event{BatchID: target, Type: db.EventAdminPause, Data: map[string]any{"reason": reason}})
		}
		return nil
	})
	if err != nil {
		return Pause{}, err
	}
	c.Gate.forget()
	c.Logger.Warn("work paused", "scope", string(p.Scope), "target", p.Target, "reason", p.Reason)
	return p, nil
}

// Resume lifts t's pause: the work it covered goes on, its failing clocks
// (a transient retry window, a launch outage's budget) moved later by the
// time paused, so that the pause is not charged to it; its waiting jobs are
// made due. A scope not paused is problem.ErrNotFound.
func (c *Controls) Resume(ctx context.Context, t Target) (Resumed, error) {
	scope, target, err := t.scope()
	if err != nil {
		return Resumed{}, err
	}
	var r Resumed
	err = pgx.BeginFunc(ctx, c.Pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		row, err := q.PauseDelete(ctx, db.PauseDeleteParams{Scope: string(scope), Target: target})
		if errors.Is(err, pgx.ErrNoRows) {
			what := "the fleet"
			if scope != Global {
				what = string(scope) + " " + target
			}
			return fmt.Errorf("%s is not paused: %w", what, problem.ErrNotFound)
		}
		if err != nil {
			return err
		}
		r = Resumed{Pause: Pause{Scope: Scope(row.Scope), Target: row.Target, Reason: row.Reason, Since: row.PausedAt},
			PausedSeconds: row.PausedSeconds}
		if r.Shifted, err = shift(ctx, q, scope, target, row.PausedSeconds); err != nil {
			return err
		}
		if scope == Batch {
			return q.EventRecord(ctx, db.Event{BatchID: target, Type: db.EventAdminResume,
				Data: map[string]any{"paused_seconds": row.PausedSeconds, "reason": row.Reason}})
		}
		return nil
	})
	if err != nil {
		return Resumed{}, err
	}
	c.Gate.forget()
	// Made due after the commit, so that the jobs find the pause gone.
	batchID, phase := filter(scope, target)
	if r.Woken, err = db.New(c.Pool).PauseWake(ctx, db.PauseWakeParams{Kinds: c.Kinds, BatchID: batchID, Phase: phase}); err != nil {
		c.Logger.Warn("waking paused work (it looks again within a while)", "error", err.Error(), "within", Recheck.String())
	}
	c.Logger.Info("work resumed", "scope", string(r.Scope), "target", r.Target,
		"paused", (time.Duration(r.PausedSeconds * float64(time.Second))).Round(time.Second).String(), "woken", r.Woken)
	return r, nil
}

// shift moves the failing clocks of the work a pause of scope covered later
// by seconds, the time it was paused.
func shift(ctx context.Context, q *db.Queries, scope Scope, target string, seconds float64) (map[string]int64, error) {
	batchID, phase := filter(scope, target)
	out := map[string]int64{}
	var err error
	if out["tasks"], err = q.PauseShiftTasks(ctx, db.PauseShiftTasksParams{Seconds: seconds, BatchID: batchID, Phase: phase}); err != nil {
		return nil, err
	}
	if out["chunk_items"], err = q.PauseShiftChunkItems(ctx, db.PauseShiftChunkItemsParams{Seconds: seconds, BatchID: batchID, Phase: phase}); err != nil {
		return nil, err
	}
	if out["documents"], err = q.PauseShiftDocuments(ctx, db.PauseShiftDocumentsParams{Seconds: seconds, BatchID: batchID, Phase: phase}); err != nil {
		return nil, err
	}
	if out["launch_outages"], err = q.PauseShiftLaunchOutages(ctx, db.PauseShiftLaunchOutagesParams{Seconds: seconds, BatchID: batchID, Phase: phase}); err != nil {
		return nil, err
	}
	return out, nil
}

// filter is the batch and the phase a pause of scope covers, as the
// queries take them: "" matches any.
func filter(scope Scope, target string) (batchID, phase string) {
	switch scope {
	case Batch:
		return target, ""
	case Phase:
		return "", target
	}
	return "", ""
}
