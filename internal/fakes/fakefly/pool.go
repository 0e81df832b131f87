package fakefly

import (
	"bytes"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"strconv"
	"time"

	"github.com/arke-institute/orchestrator/worker/protocol"
)

// A launch whose env has POOL_LEASE_URL is a pool machine: like the
// worker program's pool loop (worker.Pool), it leases task after task
// with its POOL_TOKEN, works each as Behave says for a machine of that
// task (Delay, Hang, Crash, Body, Duplicate), heartbeats while it works,
// posts the task's callback, and exits (auto-destroy) when its pool is
// done, after POOL_IDLE_SECONDS without work, or when it crashes. Behave
// is asked once for the machine's launch (LaunchStatus and CreateThenFail
// apply to it, and Hang makes a machine that never leases) and once per
// leased task (its Launch has the task's env, TaskID and BatchID, and
// PoolMachine set).

// lease is the orchestrator's answer to a lease request.
type lease struct {
	Task *struct {
		Env         map[string]string `json:"env"`
		HeartbeatMS int64             `json:"heartbeat_ms"`
	} `json:"task"`
	Done bool `json:"done"`
}

// runPool is a pool machine's life, on a goroutine of its own.
func (s *Server) runPool(l Launch, machineID string) {
	defer s.wg.Done()
	env := l.Env
	version := protocolOf(env)
	idle := 30 * time.Second
	if n, err := strconv.Atoi(env["POOL_IDLE_SECONDS"]); err == nil && n > 0 {
		idle = time.Duration(n) * time.Second
	}
	crashed := false
	defer func() { s.poolExited(l.App, machineID, crashed) }()
	idleSince := time.Now()
	for s.alive(l.App, machineID) && s.ctx.Err() == nil {
		ls, ok := s.leaseTask(env["POOL_LEASE_URL"], env["POOL_TOKEN"], machineID, version)
		switch {
		case !ok, ls.Done:
			return
		case ls.Task == nil:
			if time.Since(idleSince) >= idle {
				return
			}
			continue
		}
		s.mu.Lock()
		s.counts.Leases++
		s.notify()
		s.mu.Unlock()
		taskEnv := ls.Task.Env
		if version == protocol.V1 {
			// The previous release's image reads no version: it keeps
			// speaking its own whatever its orchestrator names.
			taskEnv = maps.Clone(taskEnv)
			delete(taskEnv, protocol.EnvVar)
		}
		task := Launch{App: l.App, TaskID: taskEnv["TASK_ID"], BatchID: taskEnv["BATCH_ID"], Env: taskEnv,
			PoolMachine: machineID, At: time.Now()}
		var bh Behavior
		if s.opts.Behave != nil {
			bh = s.opts.Behave(task)
		}
		if bh.Hang {
			s.untilGone(l.App, machineID) // no heartbeat, no callback: the lease lapses
			return
		}
		if !s.work(l.App, machineID, taskEnv, bh.Delay, time.Duration(ls.Task.HeartbeatMS)*time.Millisecond) {
			return // destroyed mid-task
		}
		if bh.Crash {
			crashed = true
			return
		}
		body, err := callbackBody(bh.Body, task)
		if err != nil {
			s.tb.Errorf("fakefly: encoding callback body for task %s: %v", task.TaskID, err)
			return
		}
		if s.opts.Work != nil {
			body = s.opts.Work(s.ctx, taskEnv, body)
		}
		j := &job{launched: task.At, queued: time.Now(), app: l.App, machineID: machineID, taskID: task.TaskID, batchID: task.BatchID,
			url: taskEnv["CALLBACK_URL"], token: taskEnv["CALLBACK_TOKEN"], body: body, protocol: version}
		s.postCopies(j, 1+max(bh.Duplicate, 0))
		idleSince = time.Now()
	}
}

// leaseTask asks for a task, retrying network errors, 5xx and 429 as a
// worker does; false when no answer came or the credential was refused.
func (s *Server) leaseTask(url, token, machineID string, version int) (lease, bool) {
	body, _ := json.Marshal(map[string]string{"machine_id": machineID})
	backoff, start := 20*time.Millisecond, time.Now()
	for attempt := 1; s.ctx.Err() == nil; attempt++ {
		req, err := http.NewRequestWithContext(s.ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return lease{}, false
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		setProtocol(req, version)
		resp, err := s.leaseClient().Do(req)
		if err == nil {
			var out lease
			status := resp.StatusCode
			decodeErr := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&out)
			_ = resp.Body.Close()
			switch {
			case status == http.StatusOK && decodeErr == nil:
				return out, true
			case status < 500 && status != http.StatusTooManyRequests:
				return lease{}, false
			}
		}
		if s.retriesOver(attempt, start) {
			return lease{}, false
		}
		select {
		case <-s.ctx.Done():
		case <-time.After(backoff):
		}
		backoff = s.nextBackoff(backoff)
	}
	return lease{}, false
}

// leaseClient outlasts a lease request's wait (20 s).
func (s *Server) leaseClient() *http.Client {
	c := *s.client
	c.Timeout = time.Minute
	return &c
}

// work is a task's work: delay long, heartbeating every beat. False when
// the machine was destroyed meanwhile.
func (s *Server) work(app, machineID string, env map[string]string, delay, beat time.Duration) bool {
	end := time.Now().Add(delay)
	for {
		left := time.Until(end)
		if left <= 0 {
			return s.alive(app, machineID)
		}
		wait := left
		if beat > 0 {
			wait = min(wait, beat)
		}
		select {
		case <-s.ctx.Done():
			return false
		case <-time.After(wait):
		}
		if !s.alive(app, machineID) {
			return false
		}
		if beat > 0 && time.Until(end) > 0 {
			s.heartbeat(env)
		}
	}
}

// heartbeat posts one heartbeat of the task; its answer is the lease's
// business.
func (s *Server) heartbeat(env map[string]string) {
	req, err := http.NewRequestWithContext(s.ctx, http.MethodPost, env["CALLBACK_URL"]+"/heartbeat", bytes.NewReader([]byte("{}")))
	if err != nil {
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+env["CALLBACK_TOKEN"])
	setProtocol(req, protocolOf(env))
	resp, err := s.client.Do(req)
	if err != nil {
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	_ = resp.Body.Close()
	s.mu.Lock()
	s.counts.Heartbeats++
	s.mu.Unlock()
}

// untilGone waits for a hung machine to be destroyed.
func (s *Server) untilGone(app, machineID string) {
	for s.alive(app, machineID) {
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// poolExited ends a pool machine whose program exited: auto-destroy.
func (s *Server) poolExited(app, machineID string, crashed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a := s.apps[app]; a != nil {
		if m := a.live[machineID]; m != nil {
			if m.autoDestroy {
				s.kill(a, m)
				s.counts.AutoDestroyed++
			} else {
				m.state = "stopped"
				m.updatedAt = time.Now().UTC()
			}
		}
	}
	if crashed {
		s.counts.Crashed++
	}
	s.counts.CallbacksPending--
	s.notify()
}

// protocolOf is the protocol version of a fake machine launched with env:
// one launched by an orchestrator that names no version
// (protocol.EnvVar) runs the previous release's image, which sends none,
// so that a rolling upgrade's test (cmd/chaos -upgrade-from) meets both.
func protocolOf(env map[string]string) int {
	if env[protocol.EnvVar] == "" {
		return protocol.V1
	}
	return protocol.Current
}

// setProtocol sends version as a worker of that version does: version 1
// sends no header.
func setProtocol(req *http.Request, version int) {
	if version != protocol.V1 {
		req.Header.Set(protocol.Header, protocol.Value(version))
	}
}
