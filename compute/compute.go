// Package compute is the backend-neutral interface the launcher uses to run
// one ephemeral machine per task. Implementations live in subpackages named
// after what they wrap (flycompute for the Fly Machines API, localcompute for
// local subprocesses), so phase and job code never imports a provider SDK.
//
// Failures are classified into three kinds because the launcher must react to
// them differently, and only the backend knows enough about the transport to
// tell them apart:
//
//   - ErrRateLimited: the provider pushed back (HTTP 429). Wait (RetryAfter)
//     and retry; this never fails a task.
//   - ErrAmbiguous: the request may have taken effect (a 5xx after it was
//     sent, a timeout, a connection reset after sending). For Launch this means
//     a machine may exist: reconcile with FindByTask before launching again, so
//     a task never ends up with two machines. For the other calls it means
//     "transient, retry".
//   - ErrPermanent: the provider rejected the request (other 4xx: bad config,
//     bad token, unknown app). Retrying the same request cannot help, so this is
//     a phase-level error.
package compute

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// MachineSpec is one machine to launch for one task. It carries everything a
// backend needs so that launching is a pure function of the task row.
type MachineSpec struct {
	// App is the provider application the machine belongs to (the Fly app).
	App string
	// Image is the container image the worker runs.
	Image string
	// Region is where to place the machine; empty lets the provider choose.
	Region string
	// Name is unique per launch attempt of a task and derived from the task
	// id and the attempt by the caller (for example "tiff-01abc...-a2"), so a
	// machine can be traced back to its launch by name as well as by
	// metadata, and a relaunch never collides with an earlier attempt's
	// machine that is still being destroyed.
	Name string
	// TaskID and BatchID are also stored as machine metadata task_id/batch_id;
	// FindByTask relies on task_id to reconcile after an ambiguous launch.
	TaskID, BatchID string
	// Attempt is the task's launch attempt (tasks.attempt, from 1), stored
	// as machine metadata attempt: reconciliation keeps only the current
	// attempt's machine (see Fence).
	Attempt int
	// Phase is the task's phase, for the backends' logs.
	Phase string
	// Env is the worker's whole input (spec 000 §4.3: task ids, R2 keys and
	// credentials, CALLBACK_URL, CALLBACK_TOKEN). It holds secrets: backends
	// must never log it.
	Env map[string]string
	// MemoryMB, CPUs and CPUKind size the guest per phase ("shared" CPUs in
	// the original system).
	MemoryMB int
	CPUs     int
	CPUKind  string
}

// Machine is what the launcher needs to remember about a launched machine:
// its ID to destroy it on timeout, and its task and attempt to reconcile.
type Machine struct {
	ID     string
	App    string
	State  string
	TaskID string
	// BatchID is the machine's batch_id metadata ("" for a pool machine
	// shared by a phase's batches); filled in by listings.
	BatchID string
	// Attempt is the launch attempt the machine was created for; 0 when its
	// metadata has none (a machine launched before attempts were recorded).
	Attempt int
	// CreatedAt is when the provider created the machine; zero if unknown.
	CreatedAt time.Time
}

// Ended reports whether the machine's worker has exited or is being
// stopped or destroyed (Fly's stopping, stopped, suspending, suspended,
// failed, destroying, destroyed): it will never call back.
func (m Machine) Ended() bool {
	switch m.State {
	case "stopping", "stopped", "suspending", "suspended", "failed", "destroying", "destroyed":
		return true
	}
	return false
}

// AttemptMachines is what FindByTask found for one launch attempt of a task.
type AttemptMachines struct {
	// Current are the attempt's machines that have not ended, newest first:
	// keep the first, destroy the others (duplicates of one launch).
	Current []Machine
	// Stale are machines of earlier attempts (or of no recorded attempt)
	// that have not been destroyed yet: they hold an earlier token or none
	// worth keeping, so they are destroyed.
	Stale []Machine
}

// Fence sorts the machines FindByTask returned for a task by the launch
// attempt the caller is reconciling. Machines of a later attempt are left
// out and never destroyed: the caller is then a stale launcher or sweep,
// and the later attempt's machine is the one the task wants. Ended machines
// of the current attempt are left out too (the worker exited: its machine
// cannot be the task's), while those of earlier attempts are only dropped
// once they are being destroyed. Ties in CreatedAt (Fly reports seconds)
// go to the machine listed later, as backends list in launch order.
func Fence(found []Machine, attempt int) AttemptMachines {
	var f AttemptMachines
	for i := len(found) - 1; i >= 0; i-- {
		m := found[i]
		switch {
		case m.Attempt == attempt && !m.Ended():
			f.Current = append(f.Current, m)
		case m.Attempt < attempt && m.State != "destroying" && m.State != "destroyed":
			f.Stale = append(f.Stale, m)
		}
	}
	slices.SortStableFunc(f.Current, func(a, b Machine) int { return b.CreatedAt.Compare(a.CreatedAt) })
	return f
}

// Backend launches, finds and destroys task machines. Implementations must be
// safe for concurrent use: the launcher launches with bounded concurrency.
type Backend interface {
	// Launch creates and starts a machine that destroys itself when its
	// process exits (auto-destroy, restart policy "no"): a worker processes
	// exactly one file and reports through its callback.
	Launch(ctx context.Context, spec MachineSpec) (Machine, error)
	// FindByTask returns the app's machines whose metadata task_id is taskID,
	// of every attempt and state but destroyed, with their Attempt and
	// CreatedAt, in launch order as far as the provider tells. The launcher
	// calls it after an ambiguous launch failure so that a task never gets
	// two machines; callers pick the current attempt's with Fence.
	FindByTask(ctx context.Context, app, taskID string) ([]Machine, error)
	// ListByBatch returns the app's machines whose metadata batch_id is
	// batchID, of every task, attempt and state but destroyed, in one
	// request (one list per app filtered by metadata, not one call per
	// task): the sweep checks running tasks' machines with it, so that a
	// machine that stopped, failed or vanished without calling back has
	// its task retried soon, not at its deadline.
	ListByBatch(ctx context.Context, app, batchID string) ([]Machine, error)
	// ListOwned returns every machine of the app that carries our metadata
	// (a task_id: a task's machine or a pool's), of every batch, attempt
	// and state but destroyed, with BatchID, Attempt and CreatedAt, in one
	// request: the orphan reaper compares them with the rows that want
	// them.
	ListOwned(ctx context.Context, app string) ([]Machine, error)
	// Destroy removes a machine, forcing it to stop if it is running (the
	// sweep destroys machines of timed-out tasks). A machine that is already
	// gone is not an error, so the sweep can be retried freely.
	Destroy(ctx context.Context, app, machineID string) error
}

// Sentinel kinds. Every error a Backend returns wraps exactly one of them
// (test with errors.Is) and keeps the provider's original text.
var (
	// ErrRateLimited is provider back-pressure (HTTP 429): wait and retry,
	// never fail the task. RetryAfter gives the server's hint, if any.
	ErrRateLimited = errors.New("compute: rate limited")
	// ErrAmbiguous means the request may have taken effect; for Launch a
	// machine MAY exist, so reconcile with FindByTask before relaunching.
	ErrAmbiguous = errors.New("compute: outcome unknown")
	// ErrPermanent means the provider rejected the request; repeating it
	// cannot succeed, so the launcher reports a phase-level error.
	ErrPermanent = errors.New("compute: rejected")
)

// Error is a classified backend failure. Error() is the original error's text
// unchanged (it never contains credentials); errors.Is matches both Kind and
// anything Err wraps, so callers can also see context.DeadlineExceeded and the
// like.
type Error struct {
	// Kind is ErrRateLimited, ErrAmbiguous or ErrPermanent.
	Kind error
	// StatusCode is the HTTP status the provider answered, 0 if none arrived.
	StatusCode int
	// RetryAfter is the provider's Retry-After hint for rate-limited errors.
	RetryAfter time.Duration
	// Err is the underlying error.
	Err error
}

// Error returns the underlying error's text so logs and task errors show what
// the provider said rather than our classification, with the HTTP status
// when the text does not already carry it (fly-go's does not).
func (e *Error) Error() string {
	msg := e.Kind.Error()
	if e.Err != nil {
		msg = e.Err.Error()
	}
	if e.StatusCode != 0 && !strings.Contains(msg, strconv.Itoa(e.StatusCode)) {
		msg += fmt.Sprintf(" (HTTP %d)", e.StatusCode)
	}
	return msg
}

// Unwrap exposes both the kind and the cause to errors.Is and errors.As.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// RateLimited classifies err as provider back-pressure, with the server's
// Retry-After hint (0 if none), for backends to return from any call.
func RateLimited(err error, statusCode int, retryAfter time.Duration) error {
	return &Error{Kind: ErrRateLimited, StatusCode: statusCode, RetryAfter: retryAfter, Err: err}
}

// Ambiguous classifies err as "may have taken effect", for backends to return
// when a request was (or may have been) sent but no clear answer came back.
func Ambiguous(err error, statusCode int) error {
	return &Error{Kind: ErrAmbiguous, StatusCode: statusCode, Err: err}
}

// Permanent classifies err as a rejection that retrying cannot fix, for
// backends to return on validation and authorisation failures.
func Permanent(err error, statusCode int) error {
	return &Error{Kind: ErrPermanent, StatusCode: statusCode, Err: err}
}

// RetryAfter returns the server's Retry-After hint from a rate-limited error,
// or 0 when err is not rate limited or the server gave no hint, so the
// launcher can honour the provider's pacing instead of guessing.
func RetryAfter(err error) time.Duration {
	var ce *Error
	if errors.As(err, &ce) && errors.Is(ce.Kind, ErrRateLimited) {
		return ce.RetryAfter
	}
	return 0
}
