package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"
)

// Pool is a pool machine's side of its pool: instead of one task from its
// environment, it leases task after task (POST POOL_LEASE_URL with its
// POOL_TOKEN), runs each with that task's environment, heartbeats while it
// works, and exits when its pool has no work left or none came for
// POOL_IDLE_SECONDS. The orchestrator gives it only its pool credential;
// each task's URLs and callback token come with the task.
type Pool struct {
	LeaseURL string
	Token    string
	// MachineID is the provider's id of this machine (FLY_MACHINE_ID),
	// which the orchestrator records.
	MachineID string
	// Idle is how long to go on asking while no task comes.
	Idle time.Duration
	// Backoff paces retries of a lease request that failed (the
	// orchestrator restarting); its window is CALLBACK_RETRY_WINDOW's.
	Backoff Backoff
	// Protocol is the protocol version its lease requests and heartbeats
	// send (Callback.Protocol); 0 means protocol.Current.
	Protocol int
	// Client sends the requests; nil: one whose timeout outlasts a lease
	// request's wait.
	Client *http.Client
	Logger *slog.Logger
}

// Lease is the answer to a lease request (the orchestrator's pool.Lease).
type Lease struct {
	Task *LeasedTask `json:"task,omitempty"`
	Done bool        `json:"done,omitempty"`
}

// LeasedTask is a task leased to this machine: its worker environment and
// how often to heartbeat.
type LeasedTask struct {
	Env         map[string]string `json:"env"`
	HeartbeatMS int64             `json:"heartbeat_ms"`
}

// DefaultPoolIdle is POOL_IDLE_SECONDS unless set.
const DefaultPoolIdle = 30 * time.Second

// PoolFromEnv is the pool a machine belongs to, from POOL_LEASE_URL,
// POOL_TOKEN, POOL_IDLE_SECONDS, FLY_MACHINE_ID and CALLBACK_RETRY_WINDOW;
// false when POOL_LEASE_URL is unset (a machine of one task).
func PoolFromEnv(getenv func(string) string) (Pool, bool, error) {
	p := Pool{LeaseURL: getenv("POOL_LEASE_URL"), Token: getenv("POOL_TOKEN"), MachineID: getenv("FLY_MACHINE_ID"), Idle: DefaultPoolIdle}
	if p.LeaseURL == "" {
		return Pool{}, false, nil
	}
	if p.Token == "" {
		return Pool{}, true, errors.New("POOL_TOKEN is required with POOL_LEASE_URL")
	}
	if v := getenv("POOL_IDLE_SECONDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return Pool{}, true, fmt.Errorf("POOL_IDLE_SECONDS must be a positive number of seconds, got %q", v)
		}
		p.Idle = time.Duration(n) * time.Second
	}
	p.Backoff = DefaultBackoff
	if v := getenv("CALLBACK_RETRY_WINDOW"); v != "" {
		if ms, err := strconv.ParseInt(v, 10, 64); err == nil && ms > 0 {
			p.Backoff.Window = time.Duration(ms) * time.Millisecond
		}
	}
	return p, true, nil
}

// leaseTimeout bounds one lease request: the orchestrator answers within
// its wait (20 s).
const leaseTimeout = time.Minute

// Lease asks for the next task, retrying failed requests on the pool's
// backoff.
func (p Pool) Lease(ctx context.Context) (Lease, error) {
	client := p.Client
	if client == nil {
		client = &http.Client{Timeout: leaseTimeout}
	}
	cb := Callback{URL: p.LeaseURL, Token: p.Token, Client: client, Logger: p.Logger, Protocol: p.Protocol}
	var out Lease
	body := map[string]string{}
	if p.MachineID != "" {
		body["machine_id"] = p.MachineID
	}
	err := cb.exchange(ctx, "lease request", p.LeaseURL, p.Backoff, body, &out)
	return out, err
}

// Run leases and works tasks until the pool is done, no task came for
// Idle, or ctx ends. work runs one task with its environment (getenv
// gives the task's variables over the machine's own) and its context,
// which ends if the task's lease is taken back (a heartbeat answered
// 409). It returns the number of tasks worked, and an error when the
// orchestrator could not be reached.
func (p Pool) Run(ctx context.Context, getenv func(string) string, work func(ctx context.Context, getenv func(string) string)) (int, error) {
	log := p.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	worked := 0
	idleSince := time.Now()
	for ctx.Err() == nil {
		l, err := p.Lease(ctx)
		if err != nil {
			return worked, err
		}
		switch {
		case l.Done:
			log.Info("pool done", "tasks", worked)
			return worked, nil
		case l.Task == nil:
			if time.Since(idleSince) >= p.Idle {
				log.Info("pool idle, exiting", "tasks", worked, "idle", p.Idle.String())
				return worked, nil
			}
			continue
		}
		env := l.Task.Env
		taskEnv := func(k string) string {
			if v, ok := env[k]; ok {
				return v
			}
			return getenv(k)
		}
		taskCtx, cancel := context.WithCancelCause(ctx)
		stop := p.heartbeat(taskCtx, cancel, taskEnv, time.Duration(l.Task.HeartbeatMS)*time.Millisecond, log)
		work(taskCtx, taskEnv)
		stop()
		cancel(nil)
		worked++
		idleSince = time.Now()
	}
	return worked, context.Cause(ctx)
}

// heartbeat posts the task's heartbeat (CALLBACK_URL/heartbeat, with its
// callback token) every every until stop; a heartbeat answered 409 (the
// lease was taken back) cancels the task with why. A failed one is tried
// again at the next beat: the lease outlasts a few.
func (p Pool) heartbeat(ctx context.Context, cancel context.CancelCauseFunc, getenv func(string) string, every time.Duration, log *slog.Logger) (stop func()) {
	if every <= 0 {
		return func() {}
	}
	cb := Callback{URL: getenv("CALLBACK_URL") + "/heartbeat", Token: getenv("CALLBACK_TOKEN"), Client: p.Client, Logger: log, Protocol: p.Protocol,
		Traceparent: getenv("TRACEPARENT")}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			_, err := cb.attempt(ctx, httpClient(cb.Client), "heartbeat", cb.URL, []byte("{}"), nil)
			if errors.Is(err, ErrNotWanted) {
				log.Warn("lease taken back: stopping the task", "error", err.Error())
				cancel(fmt.Errorf("its lease was taken back: %w", err))
				return
			}
			if err != nil && ctx.Err() == nil {
				log.Warn("heartbeat failed", "error", err.Error())
			}
		}
	}()
	return func() { close(done); <-finished }
}

// httpClient is c, or a client with a 30 s timeout.
func httpClient(c *http.Client) *http.Client {
	if c == nil {
		return &http.Client{Timeout: 30 * time.Second}
	}
	return c
}
