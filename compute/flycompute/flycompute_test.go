package flycompute_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	fly "github.com/superfly/fly-go"
	"github.com/superfly/fly-go/flaps"
	"github.com/superfly/fly-go/tokens"

	"github.com/arke-institute/orchestrator/compute"
	"github.com/arke-institute/orchestrator/compute/flycompute"
	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
)

const (
	app      = "arke-workers"
	apiToken = "fm2_super-secret-fly-token"
	cbToken  = "callback-secret"
	wait     = 10 * time.Second
)

func hang(fakefly.Launch) fakefly.Behavior { return fakefly.Behavior{Hang: true} }

func newFake(t *testing.T, behave func(fakefly.Launch) fakefly.Behavior) *fakefly.Server {
	return fakefly.New(t, fakefly.Options{Token: apiToken, Behave: behave, Apps: []string{app}})
}

// listingBackend is a backend on fake that records the query of each GET
// (the lists), which queries returns.
func listingBackend(t *testing.T, fake *fakefly.Server) (b *flycompute.Backend, queries func() []string) {
	t.Helper()
	var mu sync.Mutex
	var seen []string
	b = newBackend(t, fake, func(c *flycompute.Config) {
		c.Transport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodGet {
				mu.Lock()
				seen = append(seen, r.URL.RawQuery)
				mu.Unlock()
			}
			return http.DefaultTransport.RoundTrip(r)
		})
	})
	return b, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

func newBackend(t *testing.T, fake *fakefly.Server, mod ...func(*flycompute.Config)) *flycompute.Backend {
	t.Helper()
	cfg := flycompute.Config{APIToken: apiToken, BaseURL: fake.URL, Logger: slog.New(slog.DiscardHandler)}
	for _, m := range mod {
		m(&cfg)
	}
	b, err := flycompute.New(t.Context(), cfg)
	require.NoError(t, err)
	return b
}

func spec(taskID string) compute.MachineSpec {
	return compute.MachineSpec{
		App: app, Image: "registry.fly.io/arke-tiff-worker:v1.0.0", Region: "ams",
		Name: "tiff-" + taskID, TaskID: taskID, BatchID: "batch-123", Attempt: 1,
		Env: map[string]string{
			"TASK_ID":        taskID,
			"BATCH_ID":       "batch-123",
			"INPUT_R2_KEY":   "staging/batch-123/photo.tiff",
			"CALLBACK_URL":   "http://127.0.0.1:1/callback/batch-123/" + taskID,
			"CALLBACK_TOKEN": cbToken,
		},
		MemoryMB: 1024, CPUs: 2, CPUKind: "shared",
	}
}

// requireClean checks that an error never leaks credentials.
func requireClean(t *testing.T, err error) {
	t.Helper()
	require.NotContains(t, err.Error(), apiToken)
	require.NotContains(t, err.Error(), "super-secret")
	require.NotContains(t, err.Error(), cbToken)
}

func TestLaunchSendsFullMachineConfig(t *testing.T) {
	t.Parallel()
	fake := newFake(t, hang)
	b := newBackend(t, fake)

	m, err := b.Launch(t.Context(), spec("tiff_abc123"))
	require.NoError(t, err)
	require.NotEmpty(t, m.ID)
	require.Equal(t, compute.Machine{ID: m.ID, App: app, State: "created", TaskID: "tiff_abc123", BatchID: "batch-123", Attempt: 1, CreatedAt: m.CreatedAt}, m)
	require.False(t, m.CreatedAt.IsZero())

	ls := fake.Launches()
	require.Len(t, ls, 1)
	l := ls[0]
	require.Equal(t, app, l.App)
	require.Equal(t, "tiff-tiff_abc123", l.Name)
	require.Equal(t, "ams", l.Region)
	require.Equal(t, "registry.fly.io/arke-tiff-worker:v1.0.0", l.Image)
	require.Equal(t, spec("tiff_abc123").Env, l.Env)
	require.True(t, l.AutoDestroy)
	require.Equal(t, "no", l.RestartPolicy)
	require.Equal(t, 1024, l.MemoryMB)
	require.Equal(t, 2, l.CPUs)
	require.Equal(t, "shared", l.CPUKind)
	require.Equal(t, map[string]string{"task_id": "tiff_abc123", "batch_id": "batch-123", "attempt": "1"}, l.Metadata)
	require.Equal(t, "tiff_abc123", l.TaskID)
	require.Equal(t, "batch-123", l.BatchID)
	require.Equal(t, http.StatusOK, l.Status)
	require.Equal(t, m.ID, l.MachineID)

	// The wire JSON has the spec 000 §4.3 shape.
	var cfg map[string]any
	require.NoError(t, json.Unmarshal(l.Config, &cfg))
	require.Equal(t, true, cfg["auto_destroy"])
	require.Equal(t, map[string]any{"policy": "no"}, cfg["restart"])
	require.Equal(t, map[string]any{"memory_mb": 1024.0, "cpus": 2.0, "cpu_kind": "shared"}, cfg["guest"])

	ms := fake.Machines(app)
	require.Len(t, ms, 1)
	require.Equal(t, "started", ms[0].State)
	require.Equal(t, "ams", ms[0].Region)
}

func TestLaunchValidatesSpecWithoutCallingFly(t *testing.T) {
	t.Parallel()
	fake := newFake(t, hang)
	b := newBackend(t, fake)
	for name, mod := range map[string]func(*compute.MachineSpec){
		"NoImage":    func(s *compute.MachineSpec) { s.Image = "" },
		"NoName":     func(s *compute.MachineSpec) { s.Name = "" },
		"NoTask":     func(s *compute.MachineSpec) { s.TaskID = "" },
		"NoApp":      func(s *compute.MachineSpec) { s.App = "" },
		"PathInApp":  func(s *compute.MachineSpec) { s.App = "a/../b" },
		"QueryInApp": func(s *compute.MachineSpec) { s.App = "a?x=1" },
	} {
		t.Run(name, func(t *testing.T) {
			s := spec("t")
			mod(&s)
			_, err := b.Launch(t.Context(), s)
			require.ErrorIs(t, err, compute.ErrPermanent)
		})
	}
	require.Empty(t, fake.Launches())
}

func TestFindByTask(t *testing.T) {
	t.Parallel()
	fake := newFake(t, hang)
	b, queries := listingBackend(t, fake)

	m1, err := b.Launch(t.Context(), spec("task-1"))
	require.NoError(t, err)
	_, err = b.Launch(t.Context(), spec("task-2"))
	require.NoError(t, err)
	again := spec("task-1")
	again.Name, again.Attempt = "tiff-task-1-a2", 2
	m2, err := b.Launch(t.Context(), again)
	require.NoError(t, err)

	// Every attempt's machine, with its attempt and creation time.
	found, err := b.FindByTask(t.Context(), app, "task-1")
	require.NoError(t, err)
	require.Equal(t, []compute.Machine{
		{ID: m1.ID, App: app, State: "started", TaskID: "task-1", BatchID: "batch-123", Attempt: 1, CreatedAt: m1.CreatedAt},
		{ID: m2.ID, App: app, State: "started", TaskID: "task-1", BatchID: "batch-123", Attempt: 2, CreatedAt: m2.CreatedAt},
	}, found)

	none, err := b.FindByTask(t.Context(), app, "task-3")
	require.NoError(t, err)
	require.Empty(t, none)

	// Task ids are escaped into the documented metadata.{key} filter.
	_, err = b.FindByTask(t.Context(), app, "a&b=c")
	require.NoError(t, err)

	// A batch's machines, of every task and attempt, in one list.
	batch, err := b.ListByBatch(t.Context(), app, spec("x").BatchID)
	require.NoError(t, err)
	require.Len(t, batch, 3)
	other, err := b.ListByBatch(t.Context(), app, "another batch")
	require.NoError(t, err)
	require.Empty(t, other)
	require.Equal(t, []string{
		"metadata.task_id=task-1",
		"metadata.task_id=task-3",
		"metadata.task_id=a%26b%3Dc",
		"metadata.batch_id=" + spec("x").BatchID,
		"metadata.batch_id=another+batch",
	}, queries())
}

// TestListOwned: every machine of the app with our metadata, of every
// batch, in one unfiltered list; a machine without a task id is not ours,
// and a destroyed one is left out.
func TestListOwned(t *testing.T) {
	t.Parallel()
	fake := newFake(t, hang)
	b, queries := listingBackend(t, fake)
	m1, err := b.Launch(t.Context(), spec("task-1"))
	require.NoError(t, err)
	other := spec("pool-7")
	other.BatchID = ""
	m2, err := b.Launch(t.Context(), other)
	require.NoError(t, err)
	gone, err := b.Launch(t.Context(), spec("task-3"))
	require.NoError(t, err)
	require.NoError(t, b.Destroy(t.Context(), app, gone.ID))
	// Someone else's machine in the app, without our metadata.
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, fake.URL+"/v1/apps/"+app+"/machines",
		strings.NewReader(`{"config": {"image": "someone/else"}}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+apiToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Len(t, fake.Machines(app), 3)

	owned, err := b.ListOwned(t.Context(), app)
	require.NoError(t, err)
	require.Equal(t, []compute.Machine{
		{ID: m1.ID, App: app, State: "started", TaskID: "task-1", BatchID: "batch-123", Attempt: 1, CreatedAt: m1.CreatedAt},
		{ID: m2.ID, App: app, State: "started", TaskID: "pool-7", Attempt: 1, CreatedAt: m2.CreatedAt},
	}, owned)
	require.Equal(t, []string{""}, queries(), "one list, unfiltered")
}

func TestDestroy(t *testing.T) {
	t.Parallel()
	fake := newFake(t, hang)
	b := newBackend(t, fake)
	m, err := b.Launch(t.Context(), spec("task-d"))
	require.NoError(t, err)

	// The machine is running: only a forced destroy succeeds on Fly.
	require.NoError(t, b.Destroy(t.Context(), app, m.ID))
	require.Equal(t, []string{m.ID}, fake.Destroyed())
	require.Empty(t, fake.Machines(app))
	found, err := b.FindByTask(t.Context(), app, "task-d")
	require.NoError(t, err)
	require.Empty(t, found)

	// Already gone and never existed are both fine.
	require.NoError(t, b.Destroy(t.Context(), app, m.ID))
	require.NoError(t, b.Destroy(t.Context(), app, "0123456789abcd"))
	require.ErrorIs(t, b.Destroy(t.Context(), app, ""), compute.ErrPermanent)
}

func TestLaunchRateLimited(t *testing.T) {
	t.Parallel()
	fake := newFake(t, func(fakefly.Launch) fakefly.Behavior {
		return fakefly.Behavior{LaunchStatus: http.StatusTooManyRequests, RetryAfter: 7 * time.Second}
	})
	b := newBackend(t, fake)

	_, err := b.Launch(t.Context(), spec("task-r"))
	require.ErrorIs(t, err, compute.ErrRateLimited)
	require.NotErrorIs(t, err, compute.ErrAmbiguous)
	require.Equal(t, 7*time.Second, compute.RetryAfter(err))
	var ce *compute.Error
	require.ErrorAs(t, err, &ce)
	require.Equal(t, http.StatusTooManyRequests, ce.StatusCode)
	require.Contains(t, err.Error(), "launch refused by test behavior")
	requireClean(t, err)
	require.Empty(t, fake.Machines(app))
	require.Len(t, fake.Launches(), 1, "429 is not retried inside fly-go")
}

func TestListAndDestroyRateLimited(t *testing.T) {
	t.Parallel()
	fake := fakefly.New(t, fakefly.Options{Token: apiToken, RetryAfter: 2 * time.Second})
	b := newBackend(t, fake)

	fake.Fail(http.StatusTooManyRequests, 1)
	_, err := b.FindByTask(t.Context(), app, "x")
	require.ErrorIs(t, err, compute.ErrRateLimited)
	require.Equal(t, 2*time.Second, compute.RetryAfter(err))

	fake.Fail(http.StatusTooManyRequests, 1)
	err = b.Destroy(t.Context(), app, "0123456789abcd")
	require.ErrorIs(t, err, compute.ErrRateLimited)
	require.Equal(t, 2*time.Second, compute.RetryAfter(err))
}

func TestCreateThenFailIsAmbiguousAndReconcilable(t *testing.T) {
	t.Parallel()
	fake := newFake(t, func(fakefly.Launch) fakefly.Behavior {
		return fakefly.Behavior{CreateThenFail: true, Hang: true}
	})
	b := newBackend(t, fake)

	_, err := b.Launch(t.Context(), spec("task-a"))
	require.ErrorIs(t, err, compute.ErrAmbiguous)
	require.Equal(t, time.Duration(0), compute.RetryAfter(err))
	requireClean(t, err)

	found, err := b.FindByTask(t.Context(), app, "task-a")
	require.NoError(t, err)
	require.Len(t, found, 1)
	require.Equal(t, fake.Machines(app)[0].ID, found[0].ID)
}

// TestPost503IsNotRetriedByFlyGo: our transport stops fly-go from silently
// resending a launch answered 502/503, so the launcher learns the outcome is
// unknown and reconciles; a plain relaunch then succeeds.
func TestPost503IsNotRetriedByFlyGo(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusBadGateway, http.StatusServiceUnavailable} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			t.Parallel()
			fake := newFake(t, hang)
			b := newBackend(t, fake)

			fake.Fail(status, 1)
			_, err := b.Launch(t.Context(), spec("task-5"))
			require.ErrorIs(t, err, compute.ErrAmbiguous)
			var ce *compute.Error
			require.ErrorAs(t, err, &ce)
			require.Equal(t, status, ce.StatusCode)
			require.Len(t, fake.Launches(), 1)
			require.Empty(t, fake.Machines(app))

			found, err := b.FindByTask(t.Context(), app, "task-5")
			require.NoError(t, err)
			require.Empty(t, found)
			_, err = b.Launch(t.Context(), spec("task-5"))
			require.NoError(t, err)
			require.Len(t, fake.Machines(app), 1)
		})
	}
}

// TestCreatedThen503YieldsOneMachine is the duplicate hazard with our guard:
// Fly created the machine and answered 503; we report ambiguous instead of
// letting fly-go create a second one.
func TestCreatedThen503YieldsOneMachine(t *testing.T) {
	t.Parallel()
	fake := newFake(t, func(l fakefly.Launch) fakefly.Behavior {
		if l.Attempt == 1 {
			return fakefly.Behavior{CreateThenFail: true, LaunchStatus: http.StatusServiceUnavailable, Hang: true}
		}
		return fakefly.Behavior{Hang: true}
	})
	b := newBackend(t, fake)

	_, err := b.Launch(t.Context(), spec("task-6"))
	require.ErrorIs(t, err, compute.ErrAmbiguous)
	require.Len(t, fake.Launches(), 1)
	found, err := b.FindByTask(t.Context(), app, "task-6")
	require.NoError(t, err)
	require.Len(t, found, 1)
}

// TestFlyGoItselfRetriesPOSTOn503 documents fly-go v0.9.3 without our guard
// (a bare flaps client, pointed at the fake through FLY_FLAPS_BASE_URL):
// a 503 answer to a launch is resent, so a 503 from a Fly that had already
// created the machine leaves two machines for one task while the caller sees
// success. A 503 that created nothing is harmless.
func TestFlyGoItselfRetriesPOSTOn503(t *testing.T) {
	fake := newFake(t, func(l fakefly.Launch) fakefly.Behavior {
		if l.TaskID == "dup" && l.Attempt == 1 {
			return fakefly.Behavior{CreateThenFail: true, LaunchStatus: http.StatusServiceUnavailable, Hang: true}
		}
		return fakefly.Behavior{Hang: true}
	})
	t.Setenv("FLY_FLAPS_BASE_URL", fake.URL)
	raw, err := flaps.NewWithOptions(t.Context(), flaps.NewClientOpts{
		Tokens: tokens.Parse(apiToken), Transport: ownBody(http.DefaultTransport),
	})
	require.NoError(t, err)
	input := func(task string) fly.LaunchMachineInput {
		return fly.LaunchMachineInput{Name: "tiff-" + task, Config: &fly.MachineConfig{
			Image: "img", Metadata: map[string]string{"task_id": task},
		}}
	}

	// Created, answered 503, resent: success, but two machines.
	m, err := raw.Launch(t.Context(), app, input("dup"))
	require.NoError(t, err)
	dups, err := raw.List(t.Context(), app, "metadata.task_id=dup")
	require.NoError(t, err)
	require.Len(t, dups, 2)
	require.Equal(t, m.ID, dups[1].ID)

	// Nothing created, answered 503, resent: one machine.
	fake.Fail(http.StatusServiceUnavailable, 1)
	_, err = raw.Launch(t.Context(), app, input("clean"))
	require.NoError(t, err)
	clean, err := raw.List(t.Context(), app, "metadata.task_id=clean")
	require.NoError(t, err)
	require.Len(t, clean, 1)
	require.Len(t, fake.Launches(), 4)

	// Four 503s in a row exhaust its 3 retries.
	fake.Fail(http.StatusServiceUnavailable, 4)
	_, err = raw.Launch(t.Context(), app, input("gone"))
	var fe *flaps.FlapsError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, http.StatusServiceUnavailable, fe.ResponseStatusCode)
}

func TestBaseURLFromEnvironment(t *testing.T) {
	fake := newFake(t, hang)
	t.Setenv("FLY_FLAPS_BASE_URL", fake.URL)
	b, err := flycompute.New(t.Context(), flycompute.Config{APIToken: apiToken, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	_, err = b.Launch(t.Context(), spec("env"))
	require.NoError(t, err)
	require.Len(t, fake.Machines(app), 1)
}

func TestServerErrorsAreAmbiguous(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusInternalServerError, http.StatusGatewayTimeout, http.StatusRequestTimeout, http.StatusConflict} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			t.Parallel()
			fake := newFake(t, hang)
			b := newBackend(t, fake)
			fake.Fail(status, 1)
			_, err := b.Launch(t.Context(), spec("task-x"))
			require.ErrorIs(t, err, compute.ErrAmbiguous)
			requireClean(t, err)
		})
	}
}

func TestInsufficientCapacityIsAmbiguous(t *testing.T) {
	t.Parallel()
	fake := newFake(t, hang)
	b := newBackend(t, fake, func(c *flycompute.Config) {
		c.Transport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodPost {
				return &http.Response{
					StatusCode: http.StatusPreconditionFailed, Request: r, Header: http.Header{},
					Body: readCloser(`{"error":"insufficient resources to create new machine","status":"insufficient_capacity"}`),
				}, nil
			}
			return http.DefaultTransport.RoundTrip(r)
		})
	})
	_, err := b.Launch(t.Context(), spec("task-c"))
	require.ErrorIs(t, err, compute.ErrAmbiguous)
	require.Contains(t, err.Error(), "insufficient resources")
}

func TestClientErrorsArePermanent(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusBadRequest, http.StatusUnprocessableEntity, http.StatusForbidden} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			t.Parallel()
			fake := newFake(t, func(fakefly.Launch) fakefly.Behavior { return fakefly.Behavior{LaunchStatus: status} })
			_, err := newBackend(t, fake).Launch(t.Context(), spec("task-p"))
			require.ErrorIs(t, err, compute.ErrPermanent)
			var ce *compute.Error
			require.ErrorAs(t, err, &ce)
			require.Equal(t, status, ce.StatusCode)
			requireClean(t, err)
		})
	}
	t.Run("UnknownApp", func(t *testing.T) {
		t.Parallel()
		fake := newFake(t, hang)
		s := spec("task-p")
		s.App = "no-such-app"
		_, err := newBackend(t, fake).Launch(t.Context(), s)
		require.ErrorIs(t, err, compute.ErrPermanent)
		require.Contains(t, err.Error(), "app not found")
	})
}

func TestWrongTokenIsPermanentAndNotLeaked(t *testing.T) {
	t.Parallel()
	fake := newFake(t, hang)
	const wrong = "fm2_wrong-but-still-secret"
	b := newBackend(t, fake, func(c *flycompute.Config) { c.APIToken = wrong })

	_, err := b.Launch(t.Context(), spec("task-w"))
	require.ErrorIs(t, err, compute.ErrPermanent)
	var ce *compute.Error
	require.ErrorAs(t, err, &ce)
	require.Equal(t, http.StatusUnauthorized, ce.StatusCode)
	_, findErr := b.FindByTask(t.Context(), app, "task-w")
	require.ErrorIs(t, findErr, compute.ErrPermanent)
	destroyErr := b.Destroy(t.Context(), app, "0123456789abcd")
	require.ErrorIs(t, destroyErr, compute.ErrPermanent)
	for _, e := range []error{err, findErr, destroyErr} {
		require.NotContains(t, e.Error(), wrong)
		require.NotContains(t, e.Error(), "still-secret")
		requireClean(t, e)
	}
	require.Empty(t, fake.Machines(app))
}

// TestTimeoutAfterSendIsAmbiguous: Fly created the machine but the answer
// never arrived before our deadline.
func TestTimeoutAfterSendIsAmbiguous(t *testing.T) {
	t.Parallel()
	fake := newFake(t, hang)
	b := newBackend(t, fake, func(c *flycompute.Config) {
		c.RequestTimeout = 200 * time.Millisecond
		c.Transport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := http.DefaultTransport.RoundTrip(r)
			if err != nil || r.Method != http.MethodPost {
				return resp, err
			}
			_ = resp.Body.Close()
			<-r.Context().Done() // the answer is lost
			return nil, r.Context().Err()
		})
	})
	_, err := b.Launch(t.Context(), spec("task-t"))
	require.ErrorIs(t, err, compute.ErrAmbiguous)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Len(t, fake.Launches(), 1)
	found, err := b.FindByTask(t.Context(), app, "task-t")
	require.NoError(t, err)
	require.Len(t, found, 1)
}

// lostAnswer is an innermost transport that delivers the request to the
// fake and then fails the POST with err, as when the connection breaks after
// Fly received the request.
func lostAnswer(err error) roundTripFunc {
	return func(r *http.Request) (*http.Response, error) {
		resp, rerr := http.DefaultTransport.RoundTrip(r)
		if rerr != nil || r.Method != http.MethodPost {
			return resp, rerr
		}
		_ = resp.Body.Close()
		return nil, err
	}
}

// TestBrokenConnectionAfterSendIsAmbiguousAndNotResent: rehttp resends a
// POST after a "temporary" error such as an i/o timeout (see
// TestFlyGoItselfResendsPOSTAfterTimeout); the guard prevents it.
func TestBrokenConnectionAfterSendIsAmbiguousAndNotResent(t *testing.T) {
	t.Parallel()
	for name, errno := range map[string]syscall.Errno{"Reset": syscall.ECONNRESET, "TimedOut": syscall.ETIMEDOUT} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fake := newFake(t, hang)
			b := newBackend(t, fake, func(c *flycompute.Config) {
				c.Transport = lostAnswer(&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", errno)})
			})
			_, err := b.Launch(t.Context(), spec("task-broken"))
			require.ErrorIs(t, err, compute.ErrAmbiguous)
			require.ErrorIs(t, err, errno)
			require.Len(t, fake.Launches(), 1)
			require.Len(t, fake.Machines(app), 1)
		})
	}
}

// TestFlyGoItselfResendsPOSTAfterTimeout documents the other duplicate path
// in bare fly-go: a temporary transport error after the request was sent.
func TestFlyGoItselfResendsPOSTAfterTimeout(t *testing.T) {
	fake := newFake(t, hang)
	t.Setenv("FLY_FLAPS_BASE_URL", fake.URL)
	var mu sync.Mutex
	posts := 0
	raw, err := flaps.NewWithOptions(t.Context(), flaps.NewClientOpts{
		Tokens: tokens.Parse(apiToken),
		Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			mu.Lock()
			posts++
			first := posts == 1
			mu.Unlock()
			if first {
				return lostAnswer(&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ETIMEDOUT)})(r)
			}
			return http.DefaultTransport.RoundTrip(r)
		}).withOwnBody(),
	})
	require.NoError(t, err)
	_, err = raw.Launch(t.Context(), app, fly.LaunchMachineInput{Config: &fly.MachineConfig{
		Image: "img", Metadata: map[string]string{"task_id": "dup"},
	}})
	require.NoError(t, err)
	require.Len(t, fake.Machines(app), 2)
}

// TestDialErrorBeforeSendIsStillRetried: nothing left the client, so fly-go's
// own retry of a temporary dial error is safe and kept.
func TestDialErrorBeforeSendIsStillRetried(t *testing.T) {
	t.Parallel()
	fake := newFake(t, hang)
	var mu sync.Mutex
	dials := 0
	b := newBackend(t, fake, func(c *flycompute.Config) {
		c.Transport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
			mu.Lock()
			dials++
			first := dials == 1
			mu.Unlock()
			if first {
				return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ETIMEDOUT)}
			}
			return http.DefaultTransport.RoundTrip(r)
		})
	})
	_, err := b.Launch(t.Context(), spec("task-dial"))
	require.NoError(t, err)
	require.Len(t, fake.Machines(app), 1)
	require.Len(t, fake.Launches(), 1)
}

func TestCanceledContextIsAmbiguous(t *testing.T) {
	t.Parallel()
	fake := newFake(t, hang)
	b := newBackend(t, fake)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := b.Launch(ctx, spec("task-c"))
	require.ErrorIs(t, err, compute.ErrAmbiguous)
	require.ErrorIs(t, err, context.Canceled)
}

func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]flycompute.Config{
		"NoToken":      {},
		"SchemeOnly":   {APIToken: "Bearer  "},
		"BadBaseURL":   {APIToken: "x", BaseURL: "::not a url"},
		"RelativeBase": {APIToken: "x", BaseURL: "/v1"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := flycompute.New(t.Context(), cfg)
			require.Error(t, err)
		})
	}
}

func TestBaseURLWithPathPrefix(t *testing.T) {
	t.Parallel()
	fake := newFake(t, hang)
	var mu sync.Mutex
	var paths []string
	b := newBackend(t, fake, func(c *flycompute.Config) {
		c.BaseURL = fake.URL + "/proxy/"
		c.Transport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
			mu.Lock()
			paths = append(paths, r.URL.Path)
			mu.Unlock()
			r2 := r.Clone(r.Context())
			r2.URL.Path = strings.TrimPrefix(r.URL.Path, "/proxy")
			return http.DefaultTransport.RoundTrip(r2)
		})
	})
	_, err := b.FindByTask(t.Context(), app, "x")
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"/proxy/v1/apps/" + app + "/machines"}, paths)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (f roundTripFunc) withOwnBody() http.RoundTripper { return ownBody(f) }

// ownBody reads the request body before sending a copy, for bare fly-go
// clients in tests: without it, rehttp's reuse of the body reader across
// retries races with net/http (the bug our guard transport also avoids).
func ownBody(next http.RoundTripper) roundTripFunc {
	return func(r *http.Request) (*http.Response, error) {
		if r.Body == nil || r.Body == http.NoBody {
			return next.RoundTrip(r)
		}
		body, err := io.ReadAll(r.Body)
		_ = r.Body.Close()
		if err != nil {
			return nil, err
		}
		r2 := r.Clone(r.Context())
		r2.Body = io.NopCloser(bytes.NewReader(body))
		r2.ContentLength = int64(len(body))
		return next.RoundTrip(r2)
	}
}

func readCloser(s string) *stringBody { return &stringBody{Reader: strings.NewReader(s)} }

type stringBody struct{ *strings.Reader }

func (*stringBody) Close() error { return nil }

// BenchmarkLaunch is one launch through fly-go and the fake Machines API
// (in this process: its JSON work is counted too), by the size of the
// machine's environment, in URL-like bytes.
func BenchmarkLaunch(b *testing.B) {
	fake := fakefly.New(b, fakefly.Options{Token: apiToken, Behave: hang, Apps: []string{app}, DetailLimit: 1})
	backend, err := flycompute.New(b.Context(), flycompute.Config{APIToken: apiToken, BaseURL: fake.URL, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(b, err)
	for _, size := range []int{800, 1400, 3000} {
		b.Run(fmt.Sprintf("Env%d", size), func(b *testing.B) {
			s := spec("task_1")
			s.Env["PAD"] = strings.Repeat("X-Amz-Date=20251029T193745Z&", size/28)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				s.TaskID = fmt.Sprintf("task_%d", i)
				if _, err := backend.Launch(b.Context(), s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestListAnswersThatAreNoList: a list answered with something other than
// an array of machines, or cut short, is an error that names the list and
// never the token; a list's server error is ambiguous, as fly-go's are.
func TestListAnswersThatAreNoList(t *testing.T) {
	t.Parallel()
	for name, answer := range map[string]string{
		"an object":  `{"machines": []}`,
		"cut short":  `[{"id": "m1", "state": "started", "config": {"metadata": {"batch_id": "b"}}}, {"id": `,
		"not json":   `<html>gateway</html>`,
		"bad member": `[{"id": 7}]`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fake := newFake(t, hang)
			b := newBackend(t, fake, func(c *flycompute.Config) {
				c.Transport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
					return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}},
						Body: io.NopCloser(strings.NewReader(answer)), Request: r}, nil
				})
			})
			_, err := b.ListByBatch(t.Context(), app, "b")
			require.ErrorIs(t, err, compute.ErrAmbiguous)
			require.ErrorContains(t, err, "listing machines of batch b")
			requireClean(t, err)
		})
	}
	fake := newFake(t, hang)
	b := newBackend(t, fake)
	fake.Fail(http.StatusInternalServerError, 1)
	_, err := b.ListOwned(t.Context(), app)
	require.ErrorIs(t, err, compute.ErrAmbiguous)
	require.ErrorContains(t, err, "500")
	requireClean(t, err)
}
