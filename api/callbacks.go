package api

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"

	"github.com/arke-institute/orchestrator/fanin"
	"github.com/arke-institute/orchestrator/manifest"
	"github.com/arke-institute/orchestrator/metrics"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/problem"
	"github.com/arke-institute/orchestrator/tasktoken"
	"github.com/arke-institute/orchestrator/tracing"
	"github.com/arke-institute/orchestrator/worker/protocol"
)

// callback is POST /callback/:batchId/:taskId: a worker's result, with the
// task's token as `Authorization: Bearer <CALLBACK_TOKEN>`.
func (h *handlers) callback(c echo.Context) error {
	start := time.Now()
	res, err := h.applyCallback(c)
	h.countCallback(c, res, err, start)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, res)
}

// applyCallback checks the worker's protocol version, then the callback's
// token before anything else: a token this orchestrator did not seal for
// the path's task is refused before the body is read, queued or stored,
// without reading the database.
func (h *handlers) applyCallback(c echo.Context) (callbackResult, error) {
	if err := checkWorkerProtocol(c.Request()); err != nil {
		return callbackResult{}, err
	}
	batchID, taskID := c.Param("batchId"), c.Param("taskId")
	record, err := h.tokens.Open(c.Request().Context(), tasktoken.Task(batchID, taskID), bearerToken(c.Request()))
	if err != nil {
		return callbackResult{}, err
	}
	body, err := readBodyUpTo(c, h.callbackMax)
	if err != nil {
		return callbackResult{}, err
	}
	// The callback is a span of its task's trace: a child of the request
	// when the worker sent its machine's TRACEPARENT, else a root of it.
	ctx, span := h.tracer.StartWork(c.Request().Context(), batchID, tracing.WorkTask, taskID, "task.callback")
	out, err := h.callbacks.Apply(ctx, fanin.NewCallback(batchID, taskID, record, body))
	if err == nil && span.IsRecording() {
		span.SetAttributes(attribute.String("task.status", string(out.Status)), attribute.Bool("duplicate", out.Duplicate))
		if out.Refusal != fanin.NotRefused {
			span.SetAttributes(attribute.String("refusal", out.Reason))
		}
	}
	tracing.End(span, err)
	if err != nil {
		return callbackResult{}, err
	}
	switch out.Refusal {
	case fanin.UnknownTask:
		return callbackResult{}, fmt.Errorf("%s: %w", out.Reason, problem.ErrNotFound)
	case fanin.BadToken:
		return callbackResult{}, fmt.Errorf("%w: %s", problem.ErrUnauthorized, out.Reason)
	case fanin.InvalidBody:
		return callbackResult{}, &problem.InputError{Msg: "invalid callback: " + out.Reason}
	case fanin.TaskEnded:
		return callbackResult{}, fmt.Errorf("%w: %s", problem.ErrConflict, out.Reason)
	}
	return callbackResult{TaskID: taskID, Status: string(out.Status), Duplicate: out.Duplicate}, nil
}

// callbackResult is the answer to an applied callback.
type callbackResult struct {
	TaskID string `json:"task_id"`
	// Status is the task's status after the callback: completed, failed,
	// or pending (a retryable error with attempts left: it is retried).
	Status string `json:"status"`
	// Duplicate is true when the task had already been ended by a
	// callback: nothing changed.
	Duplicate bool `json:"duplicate"`
}

// countCallback times a callback by its result and counts and logs a
// rejected one by its reason.
func (h *handlers) countCallback(c echo.Context, res callbackResult, err error, start time.Time) {
	result := metrics.CallbackApplied
	switch reason := callbackRejection(err); {
	case reason != "":
		// A flood of forged callbacks makes one line per reason every
		// coalescedLogEvery, which names no path: the last one refused.
		result = metrics.CallbackRejected
		h.metrics.CallbackRejected(reason)
		h.quiet.Warn("callback rejected: "+reason, "error", err)
	case err != nil:
		result = metrics.CallbackError
	case res.Duplicate:
		result = metrics.CallbackDuplicate
	}
	h.metrics.CallbackHandled(result, time.Since(start))
}

// callbackRejection names why a callback was refused, for the metrics, or
// returns "" for a callback that was not refused (applied, or failed on our
// side). The cases follow errorHandler's, so that each reason is one status.
func callbackRejection(err error) string {
	var (
		maxErr *http.MaxBytesError
		verr   *manifest.ValidationError
		ierr   *problem.InputError
	)
	switch {
	case err == nil:
		return ""
	case errors.As(err, &maxErr):
		return metrics.RejectedTooLarge
	case errors.As(err, &verr), errors.As(err, &ierr), errors.Is(err, manifest.ErrMalformedJSON):
		return metrics.RejectedMalformed
	case errors.Is(err, problem.ErrUnauthorized):
		return metrics.RejectedBadToken
	case errors.Is(err, problem.ErrConflict):
		return metrics.RejectedTaskEnded
	case errors.Is(err, problem.ErrNotFound):
		return metrics.RejectedUnknownTask
	}
	return ""
}

// callbackMaxBytes is the largest callback body taken: what a result of
// maxOutputs output files needs (a PDF of PDF_MAX_PAGES pages makes two a
// page, each about 60 bytes of JSON, more with a file name of its own),
// with room for the rest of the result and an error message, and at most
// MaxBodyBytes.
func callbackMaxBytes(maxOutputs int) int64 {
	if maxOutputs <= 0 {
		maxOutputs = phases.DefaultMaxOutputs
	}
	return min(MaxBodyBytes, callbackBaseBytes+callbackBytesPerOutput*int64(maxOutputs))
}

// The parts of callbackMaxBytes.
const (
	callbackBaseBytes      = 64 << 10
	callbackBytesPerOutput = 160
)

// checkWorkerProtocol refuses (400) a request of a worker whose protocol
// version (protocol.Header, absent for version 1) this orchestrator does
// not speak.
func checkWorkerProtocol(r *http.Request) error {
	if _, err := protocol.Check(r.Header.Get(protocol.Header)); err != nil {
		return &problem.InputError{Msg: err.Error()}
	}
	return nil
}

// workerProtocol is checkWorkerProtocol on the workers' other routes
// (lease, heartbeat, URLs).
func workerProtocol(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if err := checkWorkerProtocol(c.Request()); err != nil {
			return err
		}
		return next(c)
	}
}

// bearerToken returns the token of an `Authorization: Bearer` header, or "".
func bearerToken(r *http.Request) string {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}
