package pool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/executor/machine"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/problem"
	"github.com/arke-institute/orchestrator/tasktoken"
	"github.com/arke-institute/orchestrator/tracing"
)

// Lease answers a pool machine's request for work (POST
// /pools/:poolId/lease, with its POOL_TOKEN): one of
//   - a task: its worker's environment (the same as a machine of its own
//     gets: ids, input, presigned URLs, callback URL and token) and how
//     often to heartbeat while working on it;
//   - done: the pool has no pending task left (or closed): the machine
//     exits at once, and its credential leases nothing more; a task
//     whose lease is taken back later gets a new machine from the
//     pool's manager;
//   - neither (an empty answer after LeasePoll): pending tasks were all
//     taken by other machines meanwhile; lease again.
type Lease struct {
	Task *LeasedTask `json:"task,omitempty"`
	Done bool        `json:"done,omitempty"`
}

// LeasedTask is a task leased to a pool machine.
type LeasedTask struct {
	// Env is the task's worker environment (machine.TaskEnv).
	Env map[string]string `json:"env"`
	// HeartbeatMS is how often the worker heartbeats while it works
	// (POST CALLBACK_URL/heartbeat); a lease without one for three times
	// as long is taken back.
	HeartbeatMS int64 `json:"heartbeat_ms"`
}

// LeaseRequest is what a pool machine may say of itself when it asks for
// work.
type LeaseRequest struct {
	// MachineID is the provider's id of the machine (FLY_MACHINE_ID).
	MachineID string `json:"machine_id"`
}

// LeasePoll is how long a lease request waits for a task before it is
// answered empty.
const LeasePoll = 20 * time.Second

// leaseRetry is how often a waiting lease request looks again.
const leaseRetry = 250 * time.Millisecond

// batchesPerLease bounds the batches one lease attempt tries, fairest
// first.
const batchesPerLease = 8

// Refusals of the lease and heartbeat routes.
var (
	errUnknownPool = problem.ErrNotFound
	errPoolToken   = fmt.Errorf("%w: missing, wrong or ended pool credential (POOL_TOKEN)", problem.ErrUnauthorized)
)

// Lease leases the next task of a pool to the machine whose credential is
// token, waiting up to LeasePoll for one (see Lease).
func (e *Executor) Lease(ctx context.Context, poolID int64, token string, body []byte) (Lease, error) {
	record, err := e.tokens.Open(ctx, tasktoken.PoolMachine(poolID), token)
	if err != nil {
		return Lease{}, err
	}
	var req LeaseRequest
	if len(body) > 0 {
		if err := json.Unmarshal(body, &req); err != nil {
			return Lease{}, &problem.InputError{Msg: "invalid lease request: " + err.Error()}
		}
	}
	q := db.New(e.deps.Pool)
	m, err := q.PoolMachineByToken(ctx, record)
	switch {
	case errors.Is(err, pgx.ErrNoRows), err == nil && m.PoolID != poolID:
		return Lease{}, errPoolToken
	case err != nil:
		return Lease{}, err
	}
	if err := q.PoolMachineIdle(ctx, db.PoolMachineIdleParams{ID: m.ID, MachineID: nonEmpty(req.MachineID)}); err != nil {
		return Lease{}, err
	}
	if m.MachineID == nil {
		m.MachineID = nonEmpty(req.MachineID)
	}
	if m.ClosedAt != nil {
		return e.done(ctx, q, m.ID, "its pool closed")
	}
	phase := phases.Name(m.Phase)
	deadline := time.Now().Add(LeasePoll)
	for {
		task, err := e.leaseOne(ctx, m, phase)
		if err != nil || task != nil {
			return Lease{Task: task}, err
		}
		st, err := q.PoolState(ctx, m.PoolID)
		if err != nil {
			return Lease{}, err
		}
		if st.ClosedAt != nil || st.Pending == 0 {
			// A task whose lease is taken back later is pending again,
			// and the pool's manager launches a machine for it.
			return e.done(ctx, q, m.ID, "its pool had no pending task left")
		}
		if time.Now().Add(leaseRetry).After(deadline) {
			return Lease{}, nil
		}
		select {
		case <-ctx.Done():
			return Lease{}, ctx.Err()
		case <-time.After(leaseRetry):
		}
	}
}

// done ends the machine and tells it so.
func (e *Executor) done(ctx context.Context, q *db.Queries, id int64, reason string) (Lease, error) {
	if err := q.PoolMachineEnd(ctx, db.PoolMachineEndParams{ID: id, Reason: reason}); err != nil {
		return Lease{}, err
	}
	return Lease{Done: true}, nil
}

// leaseOne leases a task of the fairest batch that has one, or none.
func (e *Executor) leaseOne(ctx context.Context, m db.PoolMachineByTokenRow, phase phases.Name) (*LeasedTask, error) {
	q := db.New(e.deps.Pool)
	batches, err := q.PoolBatches(ctx, db.PoolBatchesParams{Phase: string(phase), BatchID: m.BatchID, Max: batchesPerLease,
		ByPriority: byPriority(m.Tasks, e.deps.Settings.Priorities.Share)})
	if err != nil {
		return nil, err
	}
	pcfg := e.machines.Phases[phase]
	for _, b := range batches {
		if p, err := e.deps.Pauses.Of(ctx, b.ID, string(phase)); err != nil || p != nil {
			if p != nil {
				continue // no lease of paused work
			}
			return nil, err
		}
		var row db.PoolLeaseRow
		err := pgx.BeginFunc(ctx, e.deps.Pool, func(tx pgx.Tx) error {
			var err error
			row, err = db.New(tx).PoolLease(ctx, db.PoolLeaseParams{
				BatchID: b.ID, Phase: string(phase), MachineID: m.MachineID, PoolMachineID: &m.ID,
				TimeoutSeconds: pcfg.TaskTimeout.Seconds(), SecondsPerGb: pcfg.TaskTimeoutPerGB.Seconds(),
				LeaseSeconds: leaseFor(pcfg.TaskTimeout).Seconds(), Guest: pcfg.Guest.Name(),
			})
			if err != nil {
				return err
			}
			return db.New(tx).PoolMachineBusy(ctx, m.ID)
		})
		if errors.Is(err, pgx.ErrNoRows) {
			continue // taken meanwhile by another machine
		}
		if err != nil {
			return nil, fmt.Errorf("leasing a %s task of %s: %w", phase, b.ID, err)
		}
		e.deps.Metrics.PoolLeased(string(phase))
		token, err := e.tokens.Seal(ctx, tasktoken.Task(b.ID, row.ID), row.Token)
		if err != nil {
			return nil, err
		}
		// The lease is a span of the task's trace; the worker's callbacks
		// join it (TRACEPARENT).
		leaseCtx, span := e.deps.Tracer.StartWork(ctx, b.ID, tracing.WorkTask, row.ID, "task.lease", tracing.PhaseKey.String(string(phase)))
		env := machine.TaskEnv(e.deps, e.machines, e.urls, machine.Task{ID: row.ID, BatchID: b.ID, Phase: phase, R2Key: row.R2Key,
			FileName: row.FileName, ContentType: row.ContentType, CID: row.CID, Token: token, Deadline: row.Deadline,
			Traceparent: tracing.Traceparent(leaseCtx)})
		span.End()
		return &LeasedTask{Env: env, HeartbeatMS: heartbeatEvery(pcfg.TaskTimeout).Milliseconds()}, nil
	}
	return nil, nil
}

// byPriority tells whether a pool machine's next lease, after the leased
// it had, goes to the batches of the highest priority first: all but one
// in every 100/share (the minimum share of lower priorities, which that
// one serves in turn with the others).
func byPriority(leased int32, share int) bool {
	every := int32(100 / min(max(share, 1), 100))
	return every > 1 && (leased+1)%every != 0
}

// HeartbeatAnswer is the answer to a heartbeat: until when the lease
// holds.
type HeartbeatAnswer struct {
	LeaseUntil time.Time `json:"lease_until"`
}

// Heartbeat extends the lease of a task a pool machine works on (POST
// CALLBACK_URL/heartbeat, with the task's callback token). 409 when the
// task is no longer leased under that token (it ended, or its lease was
// taken back: the worker's result is not wanted).
func (e *Executor) Heartbeat(ctx context.Context, batchID, taskID, token string) (HeartbeatAnswer, error) {
	record, err := e.tokens.Open(ctx, tasktoken.Task(batchID, taskID), token)
	if err != nil {
		return HeartbeatAnswer{}, err
	}
	phase := phases.OfTask(taskID)
	until, err := db.New(e.deps.Pool).PoolHeartbeat(ctx, db.PoolHeartbeatParams{ID: taskID, BatchID: batchID, TokenHash: record,
		LeaseSeconds: leaseFor(e.machines.Phases[phase].TaskTimeout).Seconds()})
	if errors.Is(err, pgx.ErrNoRows) {
		return HeartbeatAnswer{}, fmt.Errorf("%w: task %s is not leased under this token", problem.ErrConflict, taskID)
	}
	if err != nil || until == nil {
		return HeartbeatAnswer{}, err
	}
	return HeartbeatAnswer{LeaseUntil: *until}, nil
}

// nonEmpty is s, or nil when it is empty.
func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
