package webhook

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/arke-institute/orchestrator/db"
)

// DispatchArgs is the dispatcher: one job, fleet-wide, that turns the
// outbox's events into deliveries and comes back after DispatchInterval
// (a snooze, which River counts as no attempt), for ever. While no
// subscription is enabled it comes back after dispatchIdle instead, and
// enabling one wakes it (wakeDispatcher). The periodic
// job Register returns inserts it again, within a minute, should it ever
// be lost (cancelled, discarded); being unique, that insert does nothing
// while it lives.
type DispatchArgs struct{}

// Kind implements river.JobArgs.
func (DispatchArgs) Kind() string { return "webhook_dispatch" }

// InsertOpts implements river.JobArgsWithInsertOpts.
func (DispatchArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: Queue, UniqueOpts: river.UniqueOpts{ByState: []rivertype.JobState{
		rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
		rivertype.JobStateRetryable, rivertype.JobStateScheduled,
	}}}
}

// DispatchWorker runs the dispatcher.
type DispatchWorker struct {
	river.WorkerDefaults[DispatchArgs]
	s *Service
}

// dispatchTimeout bounds one run of the dispatcher.
const dispatchTimeout = 30 * time.Second

// Timeout implements river.Worker.
func (w *DispatchWorker) Timeout(*river.Job[DispatchArgs]) time.Duration { return dispatchTimeout }

// dispatchEvents is how many outbox events one transaction claims;
// dispatchRounds how many transactions one run makes at most before it
// lets another job have its slot.
const (
	dispatchEvents = 500
	dispatchRounds = 20
)

// Work implements river.Worker.
func (w *DispatchWorker) Work(ctx context.Context, _ *river.Job[DispatchArgs]) error {
	if w.s.sealer == nil {
		// Nothing can be signed: the outbox waits for a process with the key.
		return river.JobSnooze(w.s.cfg.DispatchInterval)
	}
	rc := river.ClientFromContext[pgx.Tx](ctx)
	for round := range dispatchRounds {
		claimed, err := w.s.Dispatch(ctx, rc)
		if err != nil {
			return err
		}
		if claimed == 0 && round == 0 {
			// Nothing to send, and perhaps no one to send to: then only
			// a subscription enabled since (which wakes this job) can
			// fill the outbox.
			enabled, err := db.New(w.s.pool).WebhookSubscriptionAnyEnabled(ctx)
			if err != nil {
				return err
			}
			if !enabled {
				return river.JobSnooze(max(dispatchIdle, w.s.cfg.DispatchInterval))
			}
		}
		if claimed < dispatchEvents {
			return river.JobSnooze(w.s.cfg.DispatchInterval)
		}
	}
	return river.JobSnooze(0)
}

// dispatchIdle is how long the dispatcher sleeps while no subscription is
// enabled: a job run a second costs every idle fleet a few queries a
// second. Enabling a subscription wakes it; a wake lost to a race (the
// dispatcher deciding to idle as the subscription commits) delays the
// first deliveries by this much at most.
const dispatchIdle = 30 * time.Second

// wakeDispatcher makes the idling dispatcher due now, after a subscription
// was enabled. A failure only delays deliveries (by dispatchIdle at most):
// it is logged, not returned.
func (s *Service) wakeDispatcher(ctx context.Context) {
	if _, err := db.New(s.pool).RiverJobWakeKind(ctx, DispatchArgs{}.Kind()); err != nil {
		s.logger.Warn("waking the webhook dispatcher", "error", err)
	}
}

// Dispatch claims up to dispatchEvents events of the outbox and makes
// their deliveries, with a job each, in one transaction. It returns how
// many deliveries it made, or dispatchEvents when the outbox may hold
// more.
func (s *Service) Dispatch(ctx context.Context, rc *river.Client[pgx.Tx]) (int, error) {
	made := 0
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		ids, err := db.New(tx).WebhookDeliveryInsertFromOutbox(ctx, dispatchEvents)
		if err != nil {
			return fmt.Errorf("making webhook deliveries of the outbox: %w", err)
		}
		if len(ids) == 0 {
			return nil
		}
		params := make([]river.InsertManyParams, 0, len(ids))
		for _, id := range ids {
			params = append(params, river.InsertManyParams{Args: DeliveryArgs{DeliveryID: id}})
		}
		if _, err := rc.InsertManyTx(ctx, tx, params); err != nil {
			return fmt.Errorf("enqueueing %d webhook deliveries: %w", len(ids), err)
		}
		made = len(ids)
		return nil
	})
	if err != nil {
		return 0, err
	}
	if made > 0 {
		s.logger.Debug("webhook deliveries made", "deliveries", made)
	}
	return made, nil
}
