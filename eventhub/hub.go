// Package eventhub streams batches as they change: each batch watched in
// a process has one feed that reads it once per wake-up (the batch_events
// notifications of one LISTEN connection) and hands every watch of it the
// latest status and the events it has not sent (Watch, the API's event
// stream).
package eventhub

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/status"
)

// feedWindow is how many recent events a feed keeps for its watches. A
// watch that falls further behind (its client reads slowly) reads what it
// missed from the database itself, so the window bounds a feed's memory,
// never what a watch is sent.
const feedWindow = 4 * watchPage

// round is what one read of a feed finds: the batch's status, then the
// events after the feed's head, and the new head.
type round struct {
	status status.Status
	events []status.Event
	head   int64
}

// readFunc reads one round of a batch for a feed. after < 0 is the feed's
// first round: it reads the status and the id of the latest event, and no
// events (watches read the history they ask for themselves).
type readFunc func(ctx context.Context, batchID string, after int64) (round, error)

// Hub shares the reads of live streams (Watch). Each batch watched in this
// process has one feed, started by its first watch and stopped when the
// last one leaves, which reads the batch once per wake-up and publishes
// what it read to every watch of that batch. Feeds wake on the
// batch_events notifications of one LISTEN connection, outside the pool,
// held while any feed runs: a connection per client would exhaust the
// database's connections long before the HTTP server's.
type Hub struct {
	pool   *pgxpool.Pool
	logger *slog.Logger
	reader *status.Reader
	read   readFunc
	// window is feedWindow, smaller in tests.
	window int
	// onRead, when set, is called before each read of a feed (a test hook).
	onRead func(batchID string)

	mu    sync.Mutex
	feeds map[string]*feed   // the running feed of each watched batch
	stop  context.CancelFunc // stops the listener; nil when none runs
}

// New returns a Hub that reads batches with reader.
func New(pool *pgxpool.Pool, logger *slog.Logger, reader *status.Reader) *Hub {
	h := newHub(pool, logger, nil)
	h.reader = reader
	h.read = h.readRound
	return h
}

// newHub returns a Hub whose feeds read with read (tests give their own).
func newHub(pool *pgxpool.Pool, logger *slog.Logger, read readFunc) *Hub {
	return &Hub{pool: pool, logger: logger, read: read, window: feedWindow, feeds: map[string]*feed{}}
}

// feed reads one batch for all its watches. It never waits for a watch:
// it keeps the latest status and a window of recent events, and a
// one-slot signal tells each watch there is something new, which the
// watch takes at its own pace. So a watch writing to a slow client
// delays no other, and whenever it takes, it takes the latest status and
// every event it has not sent.
type feed struct {
	batchID string
	wake    chan struct{}      // one slot: a notification came
	stop    context.CancelFunc // ends the reader
	done    chan struct{}      // closed once the reader has returned

	mu    sync.Mutex
	subs  map[*subscription]struct{}
	ready bool // a round was published
	err   error
	// status, doc (its JSON) and terminal are the latest round's.
	status   status.Status
	doc      []byte
	terminal bool
	// log holds the events with ids in (base, head], oldest first; head is
	// where the next round reads from.
	log        []status.Event
	base, head int64
}

// subscription is one watch of a feed.
type subscription struct {
	feed *feed
	c    chan struct{} // one slot: the feed published a round
	// after is the watch's cursor as of its last take (under feed.mu):
	// events up to it need not be kept for it.
	after int64
}

// view is what a watch takes from its feed: the latest round and the
// events of the window after the watch's cursor.
type view struct {
	ready    bool
	err      error
	status   status.Status
	doc      []byte
	terminal bool
	// base and head bound the window. A cursor before base must read the
	// events up to base from the database; events is empty then.
	base, head int64
	events     []status.Event
}

// subscribe adds a watch of batchID whose cursor is after, starting the
// batch's feed (and the listener) if none runs.
func (h *Hub) subscribe(batchID string, after int64) *subscription {
	h.mu.Lock()
	defer h.mu.Unlock()
	f := h.feeds[batchID]
	if f == nil || f.ended() {
		ctx, cancel := context.WithCancel(context.Background())
		f = &feed{batchID: batchID, wake: make(chan struct{}, 1), stop: cancel, done: make(chan struct{}),
			subs: map[*subscription]struct{}{}}
		h.feeds[batchID] = f
		go h.run(ctx, f)
		if h.stop == nil {
			lctx, lcancel := context.WithCancel(context.Background())
			h.stop = lcancel
			go h.listen(lctx)
		}
	}
	s := &subscription{feed: f, c: make(chan struct{}, 1), after: after}
	f.mu.Lock()
	f.subs[s] = struct{}{}
	f.mu.Unlock()
	return s
}

// unsubscribe removes a watch. The last watch of a feed stops it, and
// the last feed stops the listener.
func (h *Hub) unsubscribe(s *subscription) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f := s.feed
	f.mu.Lock()
	delete(f.subs, s)
	left := len(f.subs)
	f.mu.Unlock()
	if left == 0 && h.feeds[f.batchID] == f {
		h.detachLocked(f)
	}
}

// detach removes a feed that has ended on its own (its batch ended, or a
// read failed): its watches finish with what it published, and a new
// watch starts a new feed.
func (h *Hub) detach(f *feed) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.feeds[f.batchID] == f {
		h.detachLocked(f)
	}
}

func (h *Hub) detachLocked(f *feed) {
	delete(h.feeds, f.batchID)
	f.stop()
	if len(h.feeds) == 0 && h.stop != nil {
		h.stop()
		h.stop = nil
	}
}

// ended tells whether the feed has read for the last time (its batch
// ended, or a read failed) and is about to detach: a new watch starts a
// new feed, which reads the batch as it is now.
func (f *feed) ended() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.terminal || f.err != nil
}

// take records the watch's cursor and returns what it has not sent.
func (s *subscription) take(after int64) view {
	f := s.feed
	f.mu.Lock()
	defer f.mu.Unlock()
	s.after = after
	v := view{ready: f.ready, err: f.err, status: f.status, doc: f.doc, terminal: f.terminal, base: f.base, head: f.head}
	if after >= f.base {
		i := sort.Search(len(f.log), func(i int) bool { return f.log[i].ID > after })
		// Events are never changed once in the log, and appends land past
		// its end: the view can share its array.
		v.events = f.log[i:len(f.log):len(f.log)]
	}
	return v
}

// run is a feed's reader: one read per wake-up (paced by
// watchMinInterval), and one every watchIdle without any, which bounds
// the delay should a notification be lost. It returns when its batch is
// DONE or ERROR, when a read fails, or when ctx ends (its last watch
// left).
func (h *Hub) run(ctx context.Context, f *feed) {
	defer close(f.done)
	idle := time.NewTimer(watchIdle)
	defer idle.Stop()
	head := int64(-1) // the first round finds it
	for {
		start := time.Now()
		if h.onRead != nil {
			h.onRead(f.batchID)
		}
		r, err := h.read(ctx, f.batchID, head)
		if ctx.Err() != nil {
			return
		}
		var doc []byte
		if err == nil {
			doc, err = json.Marshal(r.status)
		}
		f.publish(r, doc, err, h.window)
		if err != nil || phases.BatchStatus(r.status.Status).Terminal() {
			h.detach(f)
			return
		}
		head = r.head
		select {
		case <-ctx.Done():
			return
		case <-f.wake:
		case <-idle.C:
		}
		idle.Reset(watchIdle)
		if wait := watchMinInterval - time.Since(start); wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
	}
}

// publish makes a round the feed's latest and signals every watch. The
// window keeps the events some watch has yet to take, at most window of
// them.
func (f *feed) publish(r round, doc []byte, err error, window int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		f.err = err
	} else {
		if !f.ready {
			f.base, f.head = r.head, r.head
		}
		f.ready = true
		f.status, f.doc, f.terminal = r.status, doc, phases.BatchStatus(r.status.Status).Terminal()
		f.log = append(f.log, r.events...)
		f.head = max(f.head, r.head)
		taken := f.head
		for s := range f.subs {
			taken = min(taken, s.after)
		}
		drop := sort.Search(len(f.log), func(i int) bool { return f.log[i].ID > taken })
		drop = max(drop, len(f.log)-window)
		if drop > 0 {
			f.base = f.log[drop-1].ID
			f.log = f.log[drop:]
		}
	}
	for s := range f.subs {
		select {
		case s.c <- struct{}{}:
		default: // a signal is already pending
		}
	}
}

// wake signals the feed of one batch, or every feed when batchID is "".
// A send never blocks: a feed busy reading keeps one pending wake-up, and
// its next read sees everything committed up to then.
func (h *Hub) wake(batchID string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	signal := func(f *feed) {
		select {
		case f.wake <- struct{}{}:
		default:
		}
	}
	if batchID != "" {
		if f := h.feeds[batchID]; f != nil {
			signal(f)
		}
		return
	}
	for _, f := range h.feeds {
		signal(f)
	}
}

// listen keeps a LISTEN connection until ctx ends, reconnecting with
// backoff when it fails. After each (re)connection it wakes every feed,
// since notifications sent while it was not listening are lost.
func (h *Hub) listen(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for {
		err := h.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		h.logger.Warn("event listener failed; reconnecting", "error", err, "backoff_ms", backoff.Milliseconds())
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// listenOnce connects, LISTENs and dispatches notifications until the
// connection fails or ctx ends.
func (h *Hub) listenOnce(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, h.pool.Config().ConnConfig)
	if err != nil {
		return fmt.Errorf("connecting: %w", err)
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
		return fmt.Errorf("listening: %w", err)
	}
	h.wake("")
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		h.wake(n.Payload)
	}
}
