package eventhub

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/problem"
	"github.com/arke-institute/orchestrator/status"
)

// notifyChannel is the channel the batch_events trigger notifies, with the
// batch id as payload (migration 00003).
const notifyChannel = "batch_events"

// Pacing of a watch.
const (
	// watchMinInterval is the least time between two reads of a watched
	// batch (by its feed). Under load a batch's events arrive in bursts (one
	// notification per callback group); a feed that wakes at most this
	// often reads them in pages instead of one query per notification.
	watchMinInterval = 100 * time.Millisecond
	// watchIdle is how long a feed waits without a notification before it
	// reads anyway, which bounds the delay should a notification ever be
	// missed, and how long a watch sends nothing before it sends a
	// keep-alive: it keeps proxies from closing an idle stream and notices
	// a client that went away.
	watchIdle = 15 * time.Second
	// watchPage is how many events one query takes.
	watchPage = 500
)

// Update is one thing a watch sends: the status document, an event, or
// neither (a keep-alive while nothing happens).
type Update struct {
	Status *status.Status
	Event  *status.Event
}

// Watch follows a batch: it sends the status document first and again
// whenever it changes, and every event with an id greater than after as it
// is recorded, in order, once. It returns nil once the batch is DONE or
// ERROR and every event up to then was sent, the error of send if it
// fails, or ctx's error. An unknown batch is ErrNotFound before anything
// is sent.
//
// The watches of one batch share its feed (see eventHub): a wake-up makes
// one read of the batch, whatever the number of watches. A watch reads the
// database itself only for the events before the feed's window: the
// history it asks for, or what it missed while its client read slowly.
func (h *Hub) Watch(ctx context.Context, batchID string, after int64, send func(Update) error) error {
	if after < 0 {
		return &problem.InputError{Msg: fmt.Sprintf("the last event id must be a non-negative integer, got %d", after)}
	}
	sub := h.subscribe(batchID, after)
	defer h.unsubscribe(sub)

	var lastStatus []byte
	idle := time.NewTimer(watchIdle)
	defer idle.Stop()
	for {
		v := sub.take(after)
		if v.err != nil {
			return v.err
		}
		if v.ready {
			sent := false
			// Status first, then events: a feed reads the status before the
			// events, and a status read as DONE or ERROR was committed
			// together with its batch.done or batch.error event, so the
			// events up to v.head include that one.
			if !bytes.Equal(v.doc, lastStatus) {
				if err := send(Update{Status: &v.status}); err != nil {
					return err
				}
				lastStatus, sent = v.doc, true
			}
			behind := after < v.base
			if behind {
				n, err := h.sendEventsUpTo(ctx, batchID, after, v.base, send)
				if err != nil {
					return err
				}
				after, sent = v.base, sent || n > 0
			}
			for i := range v.events {
				if err := send(Update{Event: &v.events[i]}); err != nil {
					return err
				}
				after, sent = v.events[i].ID, true
			}
			if sent {
				idle.Reset(watchIdle)
			}
			if behind {
				continue // the window may have moved on meanwhile
			}
			after = max(after, v.head)
			if v.terminal {
				return nil
			}
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
	}
}

// sendEventsUpTo reads the batch's events with ids in (after, upTo] from
// the database and sends them, returning how many it sent.
func (h *Hub) sendEventsUpTo(ctx context.Context, batchID string, after, upTo int64, send func(Update) error) (int, error) {
	n := 0
	for after < upTo {
		events, err := h.reader.EventsAfter(ctx, batchID, after, watchPage)
		if err != nil {
			return n, err
		}
		for i := range events {
			if events[i].ID > upTo {
				return n, nil
			}
			if err := send(Update{Event: &events[i]}); err != nil {
				return n, err
			}
			after = events[i].ID
			n++
		}
		if len(events) < watchPage {
			break
		}
	}
	return n, nil
}

// readRound is a feed's read (readFunc): the batch's status, then every
// event after the cursor, or for the first round (after < 0) the id of
// its latest event.
func (h *Hub) readRound(ctx context.Context, batchID string, after int64) (round, error) {
	st, err := h.reader.Status(ctx, batchID)
	if err != nil {
		return round{}, err
	}
	r := round{status: st, head: after}
	if after < 0 {
		if r.head, err = db.New(h.pool).BatchEventLastID(ctx, batchID); err != nil {
			return round{}, fmt.Errorf("reading the last event of batch %s: %w", batchID, err)
		}
		return r, nil
	}
	for {
		events, err := h.reader.EventsAfter(ctx, batchID, r.head, watchPage)
		if err != nil {
			return round{}, err
		}
		r.events = append(r.events, events...)
		if len(events) > 0 {
			r.head = events[len(events)-1].ID
		}
		if len(events) < watchPage {
			return r, nil
		}
	}
}
