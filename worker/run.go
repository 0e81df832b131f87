package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"time"
	"unicode/utf8"
)

// Callback statuses (spec 000 §4.4).
const (
	ResultSuccess = "success"
	ResultError   = "error"
)

// ErrorBody is the callback of a failed task.
type ErrorBody struct {
	TaskID  string `json:"task_id"`
	BatchID string `json:"batch_id"`
	Status  string `json:"status"` // always "error"
	Error   string `json:"error"`
	// Retryable says the failure is transient (Retryable): the
	// orchestrator retries the task on a fresh machine while it has
	// attempts left. False for a permanent one (bad input).
	Retryable bool `json:"retryable"`
}

// maxErrorLen bounds the error message sent: a libvips or S3 message can
// be long, and the orchestrator stores it with the task.
const maxErrorLen = 2000

// reportMargin is added to the callback's retry window to bound its
// delivery once the work is over, even if the work's own context was
// cancelled (a SIGTERM): the result, or the reason there is none, must
// still get out.
const reportMargin = time.Minute

// Run runs fn and always posts a callback: fn's result as the success body
// (its JSON fields plus task_id, batch_id and status "success"), or an
// ErrorBody if fn returns an error or panics. A worker must never end
// without a callback, or its task waits for the timeout sweep.
//
// If the orchestrator refuses a success body as malformed or too large
// (400, 413 or 422), Run reports that refusal as the task's error instead,
// so the task fails now rather than at its timeout.
//
// Run returns nil once a callback is delivered, whatever the task's
// outcome, or when the orchestrator answers 409 (it no longer wants the
// result: nothing left to do). It returns an error only when no callback
// could be delivered, and the process should then exit non-zero.
func Run(ctx context.Context, cb Callback, log *slog.Logger, fn func(context.Context) (any, error)) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cb.Logger == nil {
		cb.Logger = log
	}
	start := time.Now()
	result, err := call(ctx, fn, log)

	var body json.RawMessage
	if err == nil {
		body, err = successBody(cb, result)
	}
	if err != nil {
		retry := Retryable(err)
		log.Error("task failed", "error", err.Error(), "retryable", retry, "duration_ms", time.Since(start).Milliseconds())
		body = errorBody(cb, err.Error(), retry)
	} else {
		log.Info("task succeeded", "duration_ms", time.Since(start).Milliseconds())
	}

	bo := cb.backoff()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(bo.Window, time.Duration(bo.Attempts)*bo.Max)+reportMargin)
	defer cancel()
	perr := cb.Post(rctx, body)
	var se *StatusError
	if err == nil && errors.As(perr, &se) && (se.Code == http.StatusBadRequest || se.Code == http.StatusRequestEntityTooLarge || se.Code == http.StatusUnprocessableEntity) {
		log.Error("orchestrator refused the result", "error", perr.Error())
		perr = cb.Post(rctx, errorBody(cb, "orchestrator refused the worker's result: "+perr.Error(), false))
	}
	switch {
	case perr == nil:
		log.Info("callback delivered")
		return nil
	case errors.Is(perr, ErrNotWanted):
		log.Info("callback not wanted by the orchestrator", "reason", perr.Error())
		return nil
	}
	return fmt.Errorf("delivering callback: %w", perr)
}

// call runs fn, turning a panic into an error so the callback still goes
// out.
func call(ctx context.Context, fn func(context.Context) (any, error), log *slog.Logger) (result any, err error) {
	defer func() {
		if p := recover(); p != nil {
			log.Error("worker panicked", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			result, err = nil, fmt.Errorf("worker panicked: %v", p)
		}
	}()
	result, err = fn(ctx)
	if err != nil && ctx.Err() != nil {
		// Say why the work stopped (e.g. "received SIGTERM"), not just
		// "context canceled". The machine was stopped under the work:
		// another may well finish it.
		return nil, Transient(fmt.Errorf("interrupted (%v): %w", context.Cause(ctx), err))
	}
	return result, err
}

// successBody is result's JSON object with the callback's envelope fields
// set.
func successBody(cb Callback, result any) (json.RawMessage, error) {
	data, err := json.Marshal(result)
	if err != nil {
		return nil, fmt.Errorf("encoding result: %w", err)
	}
	fields := map[string]json.RawMessage{}
	if string(data) != "null" {
		if err := json.Unmarshal(data, &fields); err != nil {
			return nil, fmt.Errorf("result must be a JSON object: %w", err)
		}
	}
	for k, v := range map[string]string{"task_id": cb.TaskID, "batch_id": cb.BatchID, "status": ResultSuccess} {
		fields[k], _ = json.Marshal(v)
	}
	return json.Marshal(fields)
}

func errorBody(cb Callback, msg string, retryable bool) json.RawMessage {
	if len(msg) > maxErrorLen {
		cut := maxErrorLen
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + "…"
	}
	data, _ := json.Marshal(ErrorBody{TaskID: cb.TaskID, BatchID: cb.BatchID, Status: ResultError, Error: msg, Retryable: retryable})
	return data
}
