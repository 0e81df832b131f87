package eventhub

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/harness/dbtest"
	"github.com/arke-institute/orchestrator/problem"
	"github.com/arke-institute/orchestrator/status"
)

// watchEnv is a Hub on a database of its own with just what Watch
// needs, and a count of its feeds' reads per batch.
type watchEnv struct {
	h    *Hub
	pool *pgxpool.Pool

	mu    sync.Mutex
	reads map[string]int
}

func newWatchEnv(t *testing.T) *watchEnv {
	t.Helper()
	pool := dbtest.New(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	e := &watchEnv{h: New(pool, logger, status.New(pool, nil, 0)), pool: pool, reads: map[string]int{}}
	e.h.onRead = func(batchID string) {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.reads[batchID]++
	}
	return e
}

func (e *watchEnv) readsOf(batchID string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.reads[batchID]
}

func (e *watchEnv) resetReads() {
	e.mu.Lock()
	defer e.mu.Unlock()
	clear(e.reads)
}

func (e *watchEnv) createBatch(t *testing.T, id string) {
	t.Helper()
	_, err := e.pool.Exec(context.Background(), `INSERT INTO batches (id, uploader, queue_message) VALUES ($1, 'u', '{}')`, id)
	require.NoError(t, err)
}

// record inserts an event of the batch (its trigger notifies) and returns
// its id.
func (e *watchEnv) record(t *testing.T, batchID, typ string) int64 {
	t.Helper()
	var id int64
	require.NoError(t, e.pool.QueryRow(context.Background(),
		`INSERT INTO batch_events (batch_id, type) VALUES ($1, $2) RETURNING id`, batchID, typ).Scan(&id))
	return id
}

// finish ends the batch DONE with its batch.done event, as the fan-in
// does: in one transaction.
func (e *watchEnv) finish(t *testing.T, batchID string) int64 {
	t.Helper()
	var id int64
	require.NoError(t, e.pool.QueryRow(context.Background(), `WITH b AS (
			UPDATE batches SET status = 'DONE', completed_at = now() WHERE id = $1 RETURNING id)
		INSERT INTO batch_events (batch_id, type) SELECT id, 'batch.done' FROM b RETURNING id`, batchID).Scan(&id))
	return id
}

// listenerConnected tells whether the hub's LISTEN connection is open.
func (e *watchEnv) listenerConnected(t *testing.T) bool {
	var n int
	require.NoError(t, e.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND query = 'LISTEN batch_events'`).Scan(&n))
	return n > 0
}

// watcher runs one Watch and collects what it sends.
type watcher struct {
	t       *testing.T
	updates chan Update
	cancel  context.CancelFunc
	done    chan error
	// gate, when set, is waited on before each event is sent: a client
	// that reads slowly.
	gate chan struct{}

	events   []int64
	statuses []string
	ended    bool  // done was received
	err      error // what Watch returned, once ended
}

func (e *watchEnv) watch(t *testing.T, batchID string, after int64, gate chan struct{}) *watcher {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher{t: t, updates: make(chan Update, 1024), cancel: cancel, done: make(chan error, 1), gate: gate}
	t.Cleanup(cancel)
	go func() {
		w.done <- e.h.Watch(ctx, batchID, after, func(u Update) error {
			if u.Event != nil && w.gate != nil {
				select {
				case <-w.gate:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			w.updates <- u
			return nil
		})
	}()
	return w
}

// next returns the watch's next status or event (keep-alives are
// skipped), checking that events come in order, each once.
func (w *watcher) next() Update {
	w.t.Helper()
	for {
		var u Update
		select {
		case u = <-w.updates:
		case err := <-w.done:
			// Everything it sent is queued by now.
			w.ended, w.err = true, err
			select {
			case u = <-w.updates:
			default:
				w.t.Fatalf("the watch ended (%v); events %v, statuses %v", err, w.events, w.statuses)
			}
		case <-time.After(10 * time.Second):
			w.t.Fatalf("nothing sent within 10 s; events %v, statuses %v", w.events, w.statuses)
		}
		switch {
		case u.Status != nil:
			w.statuses = append(w.statuses, u.Status.Status)
		case u.Event != nil:
			if n := len(w.events); n > 0 {
				require.Greater(w.t, u.Event.ID, w.events[n-1], "events in order, each once: after %v", w.events)
			}
			w.events = append(w.events, u.Event.ID)
		default:
			continue
		}
		return u
	}
}

// awaitStatus waits for a status document.
func (w *watcher) awaitStatus() string {
	w.t.Helper()
	for {
		if u := w.next(); u.Status != nil {
			return u.Status.Status
		}
	}
}

// awaitEvent waits until the event with that id was sent.
func (w *watcher) awaitEvent(id int64) {
	w.t.Helper()
	for len(w.events) == 0 || w.events[len(w.events)-1] < id {
		w.next()
	}
	require.Equal(w.t, id, w.events[len(w.events)-1], "event %d was skipped", id)
}

// awaitEnd waits for the watch to return, and returns its error.
func (w *watcher) awaitEnd() error {
	w.t.Helper()
	if w.ended {
		return w.err
	}
	select {
	case err := <-w.done:
		w.ended, w.err = true, err
		return err
	case <-time.After(10 * time.Second):
		w.t.Fatal("the watch did not end")
		return nil
	}
}

// TestWatchesOfABatchShareReads: several watches of one batch make one
// read per wake-up between them, a batch's feed is apart from another
// batch's, a watch leaving does not stop the others, and once the last
// leaves the feed, its reader and the LISTEN connection are gone.
func TestWatchesOfABatchShareReads(t *testing.T) {
	t.Parallel()
	e := newWatchEnv(t)
	e.createBatch(t, "A")
	e.createBatch(t, "B")
	hub := e.h

	as := []*watcher{e.watch(t, "A", 0, nil), e.watch(t, "A", 0, nil), e.watch(t, "A", 0, nil)}
	b := e.watch(t, "B", 0, nil)
	for _, w := range append(as, b) {
		require.Equal(t, "PENDING", w.awaitStatus())
	}
	hub.mu.Lock()
	require.Len(t, hub.feeds, 2, "one feed per batch")
	feedA, feedB := hub.feeds["A"], hub.feeds["B"]
	hub.mu.Unlock()

	// Each event is recorded once the previous one has reached every
	// watch, so each is one wake-up. The listener's first wake-up (it
	// wakes every feed once it has LISTENed) may come after the reset:
	// one read more at most.
	e.resetReads()
	const k = 5
	for range k {
		id := e.record(t, "A", "task.completed")
		for _, w := range as {
			w.awaitEvent(id)
		}
	}
	reads := e.readsOf("A")
	require.GreaterOrEqual(t, reads, k, "each event needs a read")
	require.LessOrEqual(t, reads, k+1, "three watches of A, %d wake-ups: one read each, not one per watch", k)
	require.LessOrEqual(t, e.readsOf("B"), 1, "A's events do not make B's feed read")

	id := e.record(t, "B", "task.completed")
	b.awaitEvent(id)
	require.Equal(t, []int64{id}, b.events, "B's watch sees B's events only")

	// One watch of A leaves: the others still follow A.
	as[0].cancel()
	require.ErrorIs(t, as[0].awaitEnd(), context.Canceled)
	hub.mu.Lock()
	require.True(t, hub.feeds["A"] == feedA, "A's feed still runs")
	hub.mu.Unlock()
	id = e.record(t, "A", "task.completed")
	for _, w := range as[1:] {
		w.awaitEvent(id)
	}

	for _, w := range append(as[1:], b) {
		w.cancel()
		require.ErrorIs(t, w.awaitEnd(), context.Canceled)
	}
	for _, f := range []*feed{feedA, feedB} {
		select {
		case <-f.done:
		case <-time.After(10 * time.Second):
			t.Fatalf("the reader of %s still runs", f.batchID)
		}
	}
	hub.mu.Lock()
	require.Empty(t, hub.feeds)
	require.Nil(t, hub.stop, "no listener without feeds")
	hub.mu.Unlock()
	require.Eventually(t, func() bool { return !e.listenerConnected(t) }, 10*time.Second, 20*time.Millisecond,
		"the LISTEN connection is closed")

	// A new watch starts a new feed.
	w := e.watch(t, "A", 0, nil)
	require.Equal(t, "PENDING", w.awaitStatus())
	hub.mu.Lock()
	require.True(t, hub.feeds["A"] != nil && hub.feeds["A"] != feedA, "a new feed")
	hub.mu.Unlock()
}

// TestSlowWatchMissesNothing: a watch whose client reads slowly holds up
// no other watch, and once it reads again it is sent every event it has
// not had, in order, once, and the latest status, though the feed's window
// moved past it meanwhile.
func TestSlowWatchMissesNothing(t *testing.T) {
	t.Parallel()
	e := newWatchEnv(t)
	e.h.window = 2
	e.createBatch(t, "A")
	history := []int64{e.record(t, "A", "batch.created"), e.record(t, "A", "phase.started")}

	gate := make(chan struct{})
	slow := e.watch(t, "A", 0, gate)
	fast := e.watch(t, "A", 0, nil)
	resumed := e.watch(t, "A", history[0], nil) // a reconnection with Last-Event-ID
	for _, w := range []*watcher{slow, fast, resumed} {
		require.Equal(t, "PENDING", w.awaitStatus())
	}
	fast.awaitEvent(history[1])
	resumed.awaitEvent(history[1])
	require.Equal(t, history, fast.events, "the history, read for the watch")
	require.Equal(t, history[1:], resumed.events, "only what follows Last-Event-ID")
	for range history {
		gate <- struct{}{}
	}
	slow.awaitEvent(history[1])

	// The slow watch is stuck sending the first live event while more
	// come: the window (2 events) moves past it.
	var live []int64
	for range 6 {
		live = append(live, e.record(t, "A", "task.completed"))
		fast.awaitEvent(live[len(live)-1])
	}
	done := e.finish(t, "A")
	all := append(append(append([]int64{}, history...), live...), done)
	for _, w := range []*watcher{fast, resumed} {
		w.awaitEvent(done)
		require.NoError(t, w.awaitEnd(), "the watch ends after DONE")
		require.Equal(t, "DONE", w.statuses[len(w.statuses)-1])
	}
	require.Equal(t, all, fast.events)
	require.Equal(t, all[1:], resumed.events)

	close(gate) // the slow client reads again
	slow.awaitEvent(done)
	require.NoError(t, slow.awaitEnd())
	require.Equal(t, all, slow.events, "every event, in order, once")
	require.Equal(t, "DONE", slow.statuses[len(slow.statuses)-1], "and the latest status")
	e.h.mu.Lock()
	require.Empty(t, e.h.feeds, "a feed ends with its batch")
	e.h.mu.Unlock()
}

// TestWatchUnknownBatch: an unknown batch is problem.ErrNotFound before anything
// is sent, and leaves no feed behind.
func TestWatchUnknownBatch(t *testing.T) {
	t.Parallel()
	e := newWatchEnv(t)
	w := e.watch(t, "NOPE", 0, nil)
	require.ErrorIs(t, w.awaitEnd(), problem.ErrNotFound)
	require.Empty(t, w.updates)
	e.h.mu.Lock()
	require.Empty(t, e.h.feeds)
	e.h.mu.Unlock()
}
