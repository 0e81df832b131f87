package machine

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/arke-institute/orchestrator/batchurls"
	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/problem"
	"github.com/arke-institute/orchestrator/tasktoken"
)

// URLsRequest is a worker's request for presigned URLs.
type URLsRequest struct {
	Objects []blob.Object `json:"objects"`
}

// URLsResult answers a URLsRequest: one URL per object, in its order.
type URLsResult struct {
	URLs []blob.Presigned `json:"urls"`
}

// URLs presigns the objects a running task's worker asks for, with the
// task's callback token as for its callback. Only objects under the
// batch's prefixes of the staging, archive and CDN buckets are presigned
// (batchurls.Signer.Check), a PUT of a phase that stages its outputs only
// in the attempt's staging area, valid until the task's deadline plus batchurls.Margin.
//
// Outcomes: 404 for an unknown batch or task, 401 for a missing or wrong
// token, 409 for a task no longer running (its worker's result is not
// wanted), 400 for a malformed body, no objects or more than
// blob.MaxPresignBatch, or any object a worker may not reach (the first is
// named).
func (e *Executor) URLs(ctx context.Context, batchID, taskID, token string, body []byte) (URLsResult, error) {
	record, err := e.tokens.Open(ctx, tasktoken.Task(batchID, taskID), token)
	if err != nil {
		return URLsResult{}, err
	}
	t, err := db.New(e.deps.Pool).TaskGetForURLs(ctx, taskID)
	switch {
	case errors.Is(err, pgx.ErrNoRows), err == nil && t.BatchID != batchID:
		return URLsResult{}, fmt.Errorf("task %s of batch %s: %w", taskID, batchID, problem.ErrNotFound)
	case err != nil:
		return URLsResult{}, fmt.Errorf("reading task %s: %w", taskID, err)
	}
	if t.TokenHash == nil || subtle.ConstantTimeCompare(record, t.TokenHash) != 1 {
		return URLsResult{}, fmt.Errorf("%w: wrong callback token for task %s", problem.ErrUnauthorized, taskID)
	}
	now := time.Now()
	if t.Status != string(phases.TaskProcessing) {
		return URLsResult{}, fmt.Errorf("%w: task %s is %s", problem.ErrConflict, taskID, t.Status)
	}
	deadline := now.Add(e.cfg.Phases[phases.Name(t.Phase)].TaskTimeout)
	if t.Deadline != nil {
		deadline = *t.Deadline
	}
	ttl := batchurls.TTL(now, deadline)
	if ttl <= 0 {
		return URLsResult{}, fmt.Errorf("%w: task %s is past its deadline", problem.ErrConflict, taskID)
	}

	req, err := parseURLsRequest(body)
	if err != nil {
		return URLsResult{}, err
	}
	p, _ := phases.Get(phases.Name(t.Phase))
	scope := batchurls.Scope{BatchID: batchID, Attempt: phases.StagingAttempt(p, taskID, t.TokenHash), Phase: p, Input: t.R2Key}
	urls, err := e.urls.Sign(ctx, scope, req.Objects, ttl)
	var refused *batchurls.RefusedError
	if errors.As(err, &refused) {
		return URLsResult{}, &problem.InputError{Msg: "refused: " + refused.Reason}
	}
	if err != nil {
		return URLsResult{}, err
	}
	_, err = db.New(e.deps.Pool).TaskSignURLs(ctx, db.TaskSignURLsParams{ID: taskID, TokenHash: record,
		N: int32(len(urls)), Most: MaxURLsPerAttempt})
	if errors.Is(err, pgx.ErrNoRows) {
		return URLsResult{}, fmt.Errorf("%w: task %s is no longer running, or its attempt has asked for more than %d URLs",
			problem.ErrConflict, taskID, MaxURLsPerAttempt)
	}
	if err != nil {
		return URLsResult{}, err
	}
	return URLsResult{URLs: urls}, nil
}

// MaxURLsPerAttempt bounds the URLs one attempt of a task is presigned on
// request: twice the outputs of a PDF of the largest PDF_MAX_PAGES (two
// files a page), renewed once, and more. A worker asking for more is
// refused (409), and reports its task failed.
const MaxURLsPerAttempt = 50_000

// parseURLsRequest decodes a request for URLs, refusing unknown fields, no
// objects and more than blob.MaxPresignBatch.
func parseURLsRequest(body []byte) (URLsRequest, error) {
	var req URLsRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, &problem.InputError{Msg: "invalid request for URLs: " + err.Error()}
	}
	switch n := len(req.Objects); {
	case n == 0:
		return req, &problem.InputError{Msg: "invalid request for URLs: objects must list at least one {method, bucket, key}"}
	case n > blob.MaxPresignBatch:
		return req, &problem.InputError{Msg: fmt.Sprintf("invalid request for URLs: %d objects, at most %d per request", n, blob.MaxPresignBatch)}
	}
	return req, nil
}

// Routes are the route workers ask for more URLs on (POST
// /callback/:batchId/:taskId/urls): the task's own token opens it.
func (e *Executor) Routes() []jobs.Route {
	return []jobs.Route{{
		Method: "POST", Path: "/callback/:batchId/:taskId/urls", Access: jobs.AccessTask,
		Handle: func(ctx context.Context, r jobs.Request) (any, error) {
			return e.URLs(ctx, r.Params["batchId"], r.Params["taskId"], r.Token, r.Body)
		},
	}}
}
