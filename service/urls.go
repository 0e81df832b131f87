package service

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/arke-institute/orchestrator/batchurls"
	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/phases"
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
// (batchurls.Signer.Check), valid until the task's deadline plus
// batchurls.Margin.
//
// Outcomes: 404 for an unknown batch or task, 401 for a missing or wrong
// token, 409 for a task no longer running (its worker's result is not
// wanted), 400 for a malformed body, no objects or more than
// blob.MaxPresignBatch, or any object a worker may not reach (the first is
// named).
func (s *Service) URLs(ctx context.Context, batchID, taskID, token string, body []byte) (URLsResult, error) {
	t, err := db.New(s.pool).TaskGetForURLs(ctx, taskID)
	switch {
	case errors.Is(err, pgx.ErrNoRows), err == nil && t.BatchID != batchID:
		return URLsResult{}, fmt.Errorf("task %s of batch %s: %w", taskID, batchID, ErrNotFound)
	case err != nil:
		return URLsResult{}, fmt.Errorf("reading task %s: %w", taskID, err)
	case token == "":
		return URLsResult{}, fmt.Errorf("%w: missing bearer token", ErrUnauthorized)
	}
	sum := sha256.Sum256([]byte(token))
	if t.TokenHash == nil || subtle.ConstantTimeCompare(sum[:], t.TokenHash) != 1 {
		return URLsResult{}, fmt.Errorf("%w: wrong callback token for task %s", ErrUnauthorized, taskID)
	}
	now := time.Now()
	if t.Status != string(phases.TaskProcessing) {
		return URLsResult{}, fmt.Errorf("%w: task %s is %s", ErrConflict, taskID, t.Status)
	}
	deadline := now.Add(s.cfg.Phases[phases.Name(t.Phase)].TaskTimeout)
	if t.Deadline != nil {
		deadline = *t.Deadline
	}
	ttl := batchurls.TTL(now, deadline)
	if ttl <= 0 {
		return URLsResult{}, fmt.Errorf("%w: task %s is past its deadline", ErrConflict, taskID)
	}

	req, err := parseURLsRequest(body)
	if err != nil {
		return URLsResult{}, err
	}
	if s.urls == nil {
		return URLsResult{}, errors.New("no presigner: the store cannot presign URLs")
	}
	urls, err := s.urls.Sign(ctx, batchID, req.Objects, ttl)
	var refused *batchurls.RefusedError
	if errors.As(err, &refused) {
		return URLsResult{}, &InputError{Msg: "refused: " + refused.Reason}
	}
	if err != nil {
		return URLsResult{}, err
	}
	return URLsResult{URLs: urls}, nil
}

// parseURLsRequest decodes a request for URLs, refusing unknown fields, no
// objects and more than blob.MaxPresignBatch.
func parseURLsRequest(body []byte) (URLsRequest, error) {
	var req URLsRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, &InputError{Msg: "invalid request for URLs: " + err.Error()}
	}
	switch n := len(req.Objects); {
	case n == 0:
		return req, &InputError{Msg: "invalid request for URLs: objects must list at least one {method, bucket, key}"}
	case n > blob.MaxPresignBatch:
		return req, &InputError{Msg: fmt.Sprintf("invalid request for URLs: %d objects, at most %d per request", n, blob.MaxPresignBatch)}
	}
	return req, nil
}
