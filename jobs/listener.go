package jobs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/arke-institute/orchestrator/db"
)

// Listener keeps the fleet's clock of the time it could accept callbacks:
// each process beats (a row of listeners) about once a second. When no
// process has been heard for a while (Postgres away or failing over, a
// partition between the orchestrators and Postgres, every process down),
// no callback could be committed meanwhile, whatever the cause: the first
// beat after such a silence moves the deadlines and leases of the running
// tasks later by the silence, plus Allowance for the workers' callbacks
// that wait out the silence in their backoff. So a task is never timed out
// for the orchestrator's own deafness, as the orchestrator measures it
// rather than as Postgres's start time suggests.
type Listener struct {
	Pool *pgxpool.Pool
	// ProcessID names this process's row (NewProcessID).
	ProcessID string
	// Allowance is added to a silence made up for (SWEEP_RESTART_GRACE):
	// workers retrying their callbacks back off up to 30 s.
	Allowance time.Duration
	Logger    *slog.Logger
}

// Listening timings.
const (
	// ListenEvery is how often a process beats.
	ListenEvery = time.Second
	// ShortestSilence is the shortest silence made up for: shorter ones are
	// slow beats (a busy pool, a pause), not outages.
	ShortestSilence = 5 * time.Second
)

// NewProcessID is a process's listener id: its host, its pid and a
// random part (a restarted process is a new one).
func NewProcessID() string {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b))
}

// Beat records that this process is heard now. When no process had been
// heard for ShortestSilence or more, it first moves the running tasks'
// deadlines and leases later by the silence plus Allowance, in the same
// transaction, serialized with the other processes' beats so that one
// silence is made up for once. It returns the silence made up for (0 when
// none).
func (l Listener) Beat(ctx context.Context) (time.Duration, error) {
	var silence time.Duration
	var extended int64
	err := pgx.BeginFunc(ctx, l.Pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		if err := q.ListenerLock(ctx); err != nil {
			return err
		}
		seconds, err := q.ListenerSilence(ctx)
		if err != nil {
			return err
		}
		silence = 0
		if s := time.Duration(seconds * float64(time.Second)); s >= ShortestSilence {
			silence = s
			if extended, err = q.TaskExtendRunning(ctx, (s + l.Allowance).Seconds()); err != nil {
				return err
			}
		}
		return q.ListenerBeat(ctx, db.ListenerBeatParams{ProcessID: l.ProcessID, SchemaVersion: &db.SchemaVersion})
	})
	if err != nil {
		return 0, fmt.Errorf("listener beat: %w", err)
	}
	if silence > 0 && l.Logger != nil {
		l.Logger.Warn("no orchestrator could accept callbacks for a while: running tasks' deadlines moved later by that time",
			"silence", silence.Round(time.Millisecond).String(), "allowance", l.Allowance.String(), "tasks", extended)
	}
	return silence, nil
}

// Run beats every ListenEvery until ctx ends, and forgets processes not
// heard for a day. A failed beat (Postgres away) is logged once, with its
// recovery.
func (l Listener) Run(ctx context.Context) {
	t := time.NewTicker(ListenEvery)
	defer t.Stop()
	failing := false
	for beats := 0; ; beats++ {
		_, err := l.Beat(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil && !failing:
			failing = true
			l.Logger.Warn("listener beats fail: callbacks cannot be accepted until Postgres answers", "error", err.Error())
		case err == nil && failing:
			failing = false
			l.Logger.Info("listener beats again")
		}
		if beats%3600 == 0 && err == nil {
			if err := db.New(l.Pool).ListenerForget(ctx); err != nil && ctx.Err() == nil {
				l.Logger.Warn("forgetting old listeners", "error", err.Error())
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
