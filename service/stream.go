package service

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/arke-institute/orchestrator/phases"
)

// notifyChannel is the channel the batch_events trigger notifies, with the
// batch id as payload (migration 00003).
const notifyChannel = "batch_events"

// Pacing of a watch.
const (
	// watchMinInterval is the least time between two reads of a watched
	// batch. Under load a batch's events arrive in bursts (one notification
	// per callback group); a watcher that wakes at most this often reads them
	// in pages instead of one query per notification.
	watchMinInterval = 100 * time.Millisecond
	// watchIdle is how long a watch waits without a notification before it
	// reads anyway and sends a keep-alive: it keeps proxies from closing an
	// idle stream, notices a client that went away, and bounds the delay
	// should a notification ever be missed.
	watchIdle = 15 * time.Second
	// watchPage is how many events one read takes.
	watchPage = 500
)

// Update is one thing a watch sends: the status document, an event, or
// neither (a keep-alive while nothing happens).
type Update struct {
	Status *Status
	Event  *Event
}

// Watch follows a batch: it sends the status document first and again
// whenever it changes, and every event with an id greater than after as it
// is recorded. It returns nil once the batch is DONE or ERROR and every
// event up to then was sent, the error of send if it fails, or ctx's error.
// An unknown batch is ErrNotFound before anything is sent.
//
// It wakes on the batch_events notifications of the process's one listener
// connection (see eventHub), never on a timer of its own, and re-reads from
// its cursor each time, so a notification is only a hint: a missed or
// coalesced one loses nothing.
func (s *Service) Watch(ctx context.Context, batchID string, after int64, send func(Update) error) error {
	if after < 0 {
		return &InputError{Msg: fmt.Sprintf("the last event id must be a non-negative integer, got %d", after)}
	}
	// Subscribe before the first read: any event committed after that read
	// then wakes this watch.
	sub := s.hub.subscribe(batchID)
	defer s.hub.unsubscribe(sub)

	var lastStatus []byte
	idle := time.NewTimer(watchIdle)
	defer idle.Stop()
	for {
		round := time.Now()
		sent := false
		// Status first, then events: a status read as DONE or ERROR was
		// committed together with its batch.done or batch.error event, so the
		// events read after it include that one.
		st, err := s.Status(ctx, batchID)
		if err != nil {
			return err
		}
		doc, err := json.Marshal(st)
		if err != nil {
			return err
		}
		if !bytes.Equal(doc, lastStatus) {
			if err := send(Update{Status: &st}); err != nil {
				return err
			}
			lastStatus, sent = doc, true
		}
		for {
			events, err := s.eventsAfter(ctx, batchID, after, watchPage)
			if err != nil {
				return err
			}
			for i := range events {
				if err := send(Update{Event: &events[i]}); err != nil {
					return err
				}
				after, sent = events[i].ID, true
			}
			if len(events) < watchPage {
				break
			}
		}
		if phases.BatchStatus(st.Status).Terminal() {
			return nil
		}

		if sent {
			idle.Reset(watchIdle)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-sub.c:
		case <-idle.C:
			idle.Reset(watchIdle)
			if err := send(Update{}); err != nil {
				return err
			}
		}
		if wait := watchMinInterval - time.Since(round); wait > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(wait):
			}
		}
	}
}

// eventHub fans batch_events notifications out to the watches of this
// process. It holds one LISTEN connection, outside the pool, while at least
// one watch exists, however many watch: a connection per client would
// exhaust the database's connections long before the HTTP server's.
//
// A wake-up is a send on a one-slot channel that never blocks: a watch busy
// writing to a slow client keeps at most one pending wake-up and misses
// nothing (it re-reads from its cursor), and it never delays the others.
type eventHub struct {
	pool   *pgxpool.Pool
	logger *slog.Logger

	mu   sync.Mutex
	subs map[string]map[*subscription]struct{}
	n    int                // subscriptions in all
	stop context.CancelFunc // stops the running listener; nil when none runs
}

// subscription is one watch's interest in a batch.
type subscription struct {
	batchID string
	c       chan struct{}
}

func newEventHub(pool *pgxpool.Pool, logger *slog.Logger) *eventHub {
	return &eventHub{pool: pool, logger: logger, subs: map[string]map[*subscription]struct{}{}}
}

// subscribe registers interest in a batch, starting the listener if none
// runs. Until the listener has LISTENed, nothing wakes the subscription;
// the listener wakes every subscription once it has, so events committed
// in between are not missed.
func (h *eventHub) subscribe(batchID string) *subscription {
	s := &subscription{batchID: batchID, c: make(chan struct{}, 1)}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.subs[batchID] == nil {
		h.subs[batchID] = map[*subscription]struct{}{}
	}
	h.subs[batchID][s] = struct{}{}
	h.n++
	if h.stop == nil {
		ctx, cancel := context.WithCancel(context.Background())
		h.stop = cancel
		go h.listen(ctx)
	}
	return s
}

// unsubscribe drops a subscription, and stops the listener with the last.
func (h *eventHub) unsubscribe(s *subscription) {
	h.mu.Lock()
	defer h.mu.Unlock()
	set := h.subs[s.batchID]
	if _, ok := set[s]; !ok {
		return
	}
	delete(set, s)
	if len(set) == 0 {
		delete(h.subs, s.batchID)
	}
	h.n--
	if h.n == 0 && h.stop != nil {
		h.stop()
		h.stop = nil
	}
}

// wake signals the subscriptions of one batch, or of every batch when
// batchID is "".
func (h *eventHub) wake(batchID string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	signal := func(set map[*subscription]struct{}) {
		for s := range set {
			select {
			case s.c <- struct{}{}:
			default: // a wake-up is already pending
			}
		}
	}
	if batchID != "" {
		signal(h.subs[batchID])
		return
	}
	for _, set := range h.subs {
		signal(set)
	}
}

// listen keeps a LISTEN connection until ctx ends, reconnecting with
// backoff when it fails. After each (re)connection it wakes everyone, since
// notifications sent while it was not listening are lost.
func (h *eventHub) listen(ctx context.Context) {
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
func (h *eventHub) listenOnce(ctx context.Context) error {
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
