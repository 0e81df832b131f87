// Package batchurls presigns the URLs through which a batch's worker
// machines reach storage, in place of credentials: a task's machine may
// reach only its own input and its own outputs (phases.Reach), under its
// batch's prefixes (phases.BatchPrefix) of the staging, archive and CDN
// buckets, until its task's deadline plus Margin. The
// launcher puts the URLs a task needs into its machine's environment
// (Env), compactly; the API presigns any other a worker asks for (Sign).
package batchurls

import (
	"context"
	"fmt"
	"time"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/phases"
)

// Margin is how long a task's URLs stay valid after its deadline: a
// worker's last upload may still be under way as the deadline passes, and
// the timeout sweep, not an expired URL, should end the task. It is short:
// a URL cannot be taken back, so a superseded attempt's, or a reset
// batch's, last no longer than this past their deadline.
const Margin = 2 * time.Minute

// Buckets names the bucket of each role (config's R2_BUCKET,
// ARCHIVE_BUCKET and CDN_BUCKET). One bucket may have several roles.
type Buckets map[phases.Bucket]string

// Signer presigns URLs for the objects of batches.
type Signer struct {
	presigner blob.Presigner
	buckets   Buckets
}

// New returns a signer over buckets. Every role must have a bucket.
func New(p blob.Presigner, buckets Buckets) (*Signer, error) {
	if p == nil {
		return nil, fmt.Errorf("batchurls: a presigner is required")
	}
	for _, role := range phases.Buckets {
		if buckets[role] == "" {
			return nil, fmt.Errorf("batchurls: no %s bucket", role)
		}
	}
	return &Signer{presigner: p, buckets: buckets}, nil
}

// TTL is how long URLs made now stay valid for a task whose deadline is
// deadline: until deadline plus Margin, at most blob.MaxPresignExpiry. It
// is not positive once that has passed.
func TTL(now, deadline time.Time) time.Duration {
	return min(deadline.Add(Margin).Sub(now), blob.MaxPresignExpiry).Truncate(time.Second)
}

// Scope is what one task's worker may reach (Check).
type Scope struct {
	BatchID string
	// Attempt is the attempt's id (phases.StagingAttempt) when its phase
	// stages its outputs, "" otherwise.
	Attempt string
	Phase   phases.Phase
	// Input is the task's input key, in the staging bucket.
	Input string
}

// Check refuses an object the worker of sc may not reach, saying why and
// naming the key: an unknown method or bucket, a key that is not under the
// batch's prefix for that bucket (phases.CheckKey), a write that replaces
// (blob.MethodPut) outside the attempt's staging area when the phase
// stages its outputs (phases.AttemptPrefix), or a key that is neither the
// task's input nor one of its outputs, written their way (phases.Reach).
func (s *Signer) Check(sc Scope, o blob.Object) error {
	if !o.Method.Valid() {
		return fmt.Errorf("method %q of key %q is not GET, PUT or PUT_IF_ABSENT", o.Method, o.Key)
	}
	var err error
	known := false
	for _, role := range phases.Buckets {
		if s.buckets[role] != o.Bucket {
			continue
		}
		known = true
		if err = s.checkRole(sc, role, o); err == nil {
			return nil
		}
	}
	if !known {
		return fmt.Errorf("bucket %q of key %q is not one a worker may reach", o.Bucket, o.Key)
	}
	return err
}

// checkRole is Check of o in the bucket of role.
func (s *Signer) checkRole(sc Scope, role phases.Bucket, o blob.Object) error {
	if err := phases.CheckKey(o.Key, phases.BatchPrefix(role, sc.BatchID)); err != nil {
		return err
	}
	key := o.Key
	if o.Method == blob.MethodPut && sc.Attempt != "" {
		final, ok := phases.FinalKey(role, sc.BatchID, sc.Attempt, o.Key)
		if !ok {
			return fmt.Errorf("key %q is not in the attempt's staging area %q: a PUT, which replaces, goes there (TASK_ATTEMPT)",
				o.Key, phases.AttemptPrefix(role, sc.BatchID, sc.Attempt))
		}
		key = final
	}
	return phases.Reach(sc.Phase, sc.Input, role, key, o.Method != blob.MethodGet, o.Method == blob.MethodPut)
}

// Sign checks every object for sc (Check) and presigns them all for ttl,
// in order. A refused object fails the whole request with its reason.
func (s *Signer) Sign(ctx context.Context, sc Scope, objs []blob.Object, ttl time.Duration) ([]blob.Presigned, error) {
	for _, o := range objs {
		if err := s.Check(sc, o); err != nil {
			return nil, &RefusedError{Reason: err.Error()}
		}
	}
	return s.presigner.PresignAll(ctx, objs, ttl)
}

// RefusedError is an object a worker may not reach.
type RefusedError struct{ Reason string }

func (e *RefusedError) Error() string { return e.Reason }

// The environment variables Env sets.
const (
	EnvInputURL   = "INPUT_URL"
	EnvOutputURLs = "OUTPUT_URLS"
)

// Env sets the URL part of the environment of attempt's machine in env:
// INPUT_URL, a GET of its input (in the staging bucket), and, for a phase
// that plans its outputs (phases.OutputPlanner), OUTPUT_URLS, their PUTs
// (for an attempt of a phase that stages its outputs, those that replace
// at their keys in the attempt's staging area, phases.AttemptKey, where the
// worker writes them) in the compact
// form of blob.AppendCompact, signed together with INPUT_URL, whose URL they
// share but for path, signed headers and signature. The input is the
// orchestrator's own choice and is not checked; the planned outputs are, as
// if the worker had asked for them. When they are refused, the error comes
// with INPUT_URL alone: the worker then asks for them and reports the
// refusal.
func (s *Signer) Env(ctx context.Context, env map[string]string, sc Scope, ttl time.Duration) error {
	var outs []phases.Output
	if planner, ok := sc.Phase.(phases.OutputPlanner); ok {
		outs = planner.PlanOutputs(sc.Input)
	}
	var refused error
	objs := make([]blob.Object, 0, len(outs))
	for _, out := range outs {
		o := blob.Object{Method: blob.MethodPut, Bucket: s.buckets[out.Bucket], Key: out.Key}
		switch {
		case out.IfAbsent:
			o.Method = blob.MethodPutIfAbsent
		case sc.Attempt != "":
			o.Key = phases.AttemptKey(out.Key, sc.Attempt)
		}
		if err := s.Check(sc, o); err != nil {
			refused = fmt.Errorf("planning the outputs of %s: %w", sc.Input, &RefusedError{Reason: err.Error()})
			objs = nil
			break
		}
		objs = append(objs, o)
	}
	get := blob.Object{Method: blob.MethodGet, Bucket: s.buckets[phases.StagingBucket], Key: sc.Input}
	base, lines, err := s.presigner.PresignCompact(ctx, get, objs, ttl)
	if err != nil {
		return err
	}
	env[EnvInputURL] = base.URL
	if len(objs) > 0 {
		env[EnvOutputURLs] = lines
	}
	return refused
}
