package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/arke-institute/orchestrator/eventhub"
	"github.com/arke-institute/orchestrator/problem"
	"github.com/labstack/echo/v4"
)

// streamWriteTimeout bounds one write to a stream's client. A client that
// stops reading is dropped after it, instead of holding its goroutine (and
// its subscription) forever; other streams are never held up by it.
const streamWriteTimeout = 30 * time.Second

// listEvents is GET /batches/:batchId/events?after=ID&limit=N: the batch's
// events oldest first, after the event id `after` (0 or absent: from the
// start).
func (h *handlers) listEvents(c echo.Context) error {
	after, err := intParam(c.QueryParam("after"), "after")
	if err != nil {
		return err
	}
	limit, err := intParam(c.QueryParam("limit"), "limit")
	if err != nil {
		return err
	}
	page, err := h.status.Events(c.Request().Context(), c.Param("batchId"), after, int(limit))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, page)
}

// streamBatch is GET /batches/:batchId/stream, a Server-Sent Events stream:
// `event: status` messages carry the status document (no id, so they do not
// move the client's Last-Event-ID), and each event of the batch is a message
// with `id:` its event id, `event:` its type and `data:` the event as JSON.
// Comments (`: keep-alive`) are sent while nothing happens. Once the batch
// is DONE or ERROR and its events are sent, an `event: end` message is
// sent and the stream closes; EventSource clients should close on it
// rather than reconnect. A reconnecting client's Last-Event-ID header (or
// the `last_event_id` query parameter) resumes after that event.
func (h *handlers) streamBatch(c echo.Context) error {
	select {
	case h.streams <- struct{}{}:
		defer func() { <-h.streams }()
	default:
		c.Response().Header().Set("Retry-After", "5")
		return echo.NewHTTPError(http.StatusServiceUnavailable, fmt.Sprintf("too many event streams are open (MAX_STREAMS %d); try again shortly", cap(h.streams)))
	}
	id := c.Request().Header.Get("Last-Event-ID")
	if id == "" {
		id = c.QueryParam("last_event_id")
	}
	after, err := intParam(id, "Last-Event-ID")
	if err != nil {
		return err
	}
	// The stream ends with the request or with the server, whichever ends
	// first: http.Server.Shutdown waits for open responses.
	ctx, cancel := context.WithCancel(c.Request().Context())
	defer cancel()
	defer context.AfterFunc(h.ctx, cancel)()
	w := c.Response()
	rc := http.NewResponseController(w)
	// A stream lives longer than the server's WriteTimeout, which bounds
	// every other answer: its writes get no deadline. (A server without
	// one, as in tests, has nothing to clear.)
	if err := rc.SetWriteDeadline(time.Time{}); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	started := false
	var buf bytes.Buffer
	send := func(u eventhub.Update) error {
		if !started {
			w.Header().Set(echo.HeaderContentType, "text/event-stream")
			w.Header().Set(echo.HeaderCacheControl, "no-cache")
			w.Header().Set("X-Accel-Buffering", "no") // no buffering in nginx
			w.WriteHeader(http.StatusOK)
			started = true
		}
		buf.Reset()
		if err := writeSSE(&buf, u); err != nil {
			return err
		}
		_ = rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
		if _, err := w.Write(buf.Bytes()); err != nil {
			return err
		}
		return rc.Flush()
	}
	err = h.hub.Watch(ctx, c.Param("batchId"), after, send)
	if !started {
		return err // nothing sent yet: an ordinary JSON error answer
	}
	switch {
	case err == nil:
		_ = rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
		if _, werr := w.Write([]byte("event: end\ndata: {}\n\n")); werr == nil {
			_ = rc.Flush()
		}
	case ctx.Err() == nil && !errors.Is(err, context.Canceled):
		// The stream has begun: the error can no longer be answered, only
		// ended and logged. A client that went away is not worth a line.
		h.log.Warn("event stream ended", "batch_id", c.Param("batchId"), "error", err)
	}
	return nil
}

// writeSSE encodes one update as a Server-Sent Events message. JSON has no
// raw newlines, so each data payload is one `data:` line.
func writeSSE(buf *bytes.Buffer, u eventhub.Update) error {
	switch {
	case u.Status != nil:
		b, err := json.Marshal(u.Status)
		if err != nil {
			return err
		}
		fmt.Fprintf(buf, "event: status\ndata: %s\n\n", b)
	case u.Event != nil:
		b, err := json.Marshal(u.Event)
		if err != nil {
			return err
		}
		fmt.Fprintf(buf, "id: %d\nevent: %s\ndata: %s\n\n", u.Event.ID, u.Event.Type, b)
	default:
		buf.WriteString(": keep-alive\n\n")
	}
	return nil
}

// intParam parses an optional non-negative integer parameter; "" is 0.
func intParam(v, name string) (int64, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, &problem.InputError{Msg: fmt.Sprintf("%s must be a non-negative integer, got %q", name, v)}
	}
	return n, nil
}
