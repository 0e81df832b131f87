package fakefly

import (
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"time"
)

// faults are the fault knobs of a long-running fake (the chaos driver's):
// an outage of the whole API for a while, and what it saw that must not
// happen (two live machines for one task). Guarded by Server.mu.
type faults struct {
	outageCode  int
	outageUntil time.Time
	outages     int
	overlaps    []Overlap
	// answers counts the orchestrator's answers to callback posts by
	// status, every retry included.
	answers map[int]int
}

// Overlap is a machine created for a task while another machine of the
// same task was still started: two machines alive at once.
type Overlap struct {
	App       string `json:"app"`
	TaskID    string `json:"task_id"`
	MachineID string `json:"machine_id"`
	// Running is the machine that was still started.
	Running string `json:"running"`
}

// FailFor makes every API request answer status (e.g. 503) for d, as when
// Fly's API is down; requests are refused before anything else is done,
// so no machine is created meanwhile. It replaces any outage under way.
func (s *Server) FailFor(status int, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults.outageCode, s.faults.outageUntil = status, time.Now().Add(d)
	s.faults.outages++
}

// outage returns the status to answer while an outage set by FailFor lasts.
func (s *Server) outage() (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.faults.outageCode == 0 || !time.Now().Before(s.faults.outageUntil) {
		return 0, false
	}
	return s.faults.outageCode, true
}

// Overlaps returns every launch that found another machine of its task
// still started.
func (s *Server) Overlaps() []Overlap {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.faults.overlaps)
}

// CallbackAnswers counts the orchestrator's answers to callback posts by
// HTTP status, retries included (0: no answer, a network error).
func (s *Server) CallbackAnswers() map[int]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[int]int, len(s.faults.answers))
	for k, v := range s.faults.answers {
		out[k] = v
	}
	return out
}

// recordOverlap notes m if another machine of its task is started; s.mu
// must be held.
func (s *Server) recordOverlap(app string, a *appState, m *machine) {
	if m.taskID == "" || m.state != "started" {
		return
	}
	for id := range a.byTask[m.taskID] {
		if other := a.live[id]; other != nil && other.state == "started" {
			s.faults.overlaps = append(s.faults.overlaps, Overlap{App: app, TaskID: m.taskID, MachineID: m.id, Running: other.id})
		}
	}
}

// countAnswer counts one answer to a callback post.
func (s *Server) countAnswer(status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.faults.answers == nil {
		s.faults.answers = map[int]int{}
	}
	s.faults.answers[status]++
}

// retriesOver tells whether a worker gives up its callback after attempt
// posts begun at start: after 5 by default, or once
// Options.CallbackRetryWindow has passed.
func (s *Server) retriesOver(attempt int, start time.Time) bool {
	if w := s.opts.CallbackRetryWindow; w > 0 {
		return time.Since(start) >= w
	}
	return attempt == 5
}

// nextBackoff doubles the pause between callback posts: with a retry
// window (a worker riding out an outage) up to 30 s, as the real worker's
// (worker.DefaultBackoff), without bound otherwise.
func (s *Server) nextBackoff(d time.Duration) time.Duration {
	if s.opts.CallbackRetryWindow > 0 {
		return min(2*d, 30*time.Second)
	}
	return 2 * d
}

// pause is how long a worker waits before its next callback post: the
// backoff, with jitter as the real worker's (0.8 to 1.2 times), or the
// orchestrator's Retry-After when longer (up to 30 s).
func pause(backoff, retryAfter time.Duration) time.Duration {
	d := time.Duration(float64(backoff) * (0.8 + 0.4*rand.Float64()))
	if retryAfter > d {
		d = min(retryAfter, 30*time.Second)
	}
	return d
}

// ControlHandler serves the fault knobs and what the fake saw, for a
// driver in another process (cmd/chaos):
//
//	POST /fail?status=503&seconds=30   FailFor
//	GET  /report                       counts, overlaps, callback answers and every callback
func (s *Server) ControlHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /fail", func(w http.ResponseWriter, r *http.Request) {
		status, err1 := strconv.Atoi(r.URL.Query().Get("status"))
		secs, err2 := strconv.ParseFloat(r.URL.Query().Get("seconds"), 64)
		if err1 != nil || err2 != nil || status < 400 || secs <= 0 {
			writeError(w, http.StatusBadRequest, "want ?status=4xx|5xx&seconds=N (N > 0)", 0)
			return
		}
		s.FailFor(status, time.Duration(secs*float64(time.Second)))
		writeJSON(w, http.StatusOK, []byte(`{"ok":true}`))
	})
	mux.HandleFunc("GET /report", func(w http.ResponseWriter, _ *http.Request) {
		body, err := json.Marshal(s.Report())
		if err != nil {
			writeError(w, http.StatusInternalServerError, err.Error(), 0)
			return
		}
		writeJSON(w, http.StatusOK, body)
	})
	return mux
}

// Report is what the fake saw, as ControlHandler serves it.
type Report struct {
	Counts          Counts              `json:"counts"`
	Outages         int                 `json:"outages"`
	Overlaps        []Overlap           `json:"overlaps"`
	CallbackAnswers map[string]int      `json:"callback_answers"`
	Callbacks       []CallbackSummary   `json:"callbacks"`
	Launches        map[string][]string `json:"launches"` // task id -> machine ids created, in order
	// LaunchLog is every launch request by task id, in order, rejected
	// ones included: what a timeline of a task needs.
	LaunchLog map[string][]LaunchSummary `json:"launch_log"`
}

// LaunchSummary is one launch request: when it came, the answer, the
// machine it made.
type LaunchSummary struct {
	At        time.Time `json:"at"`
	Attempt   int       `json:"attempt"`
	Status    int       `json:"status"`
	MachineID string    `json:"machine_id,omitempty"`
}

// CallbackSummary is one callback post, without its body.
type CallbackSummary struct {
	TaskID    string `json:"task_id"`
	BatchID   string `json:"batch_id"`
	MachineID string `json:"machine_id"`
	// Outcome is the body's status: "success" or "error".
	Outcome  string `json:"outcome"`
	Copy     int    `json:"copy"`
	Status   int    `json:"status"`
	Attempts int    `json:"attempts"`
	Err      string `json:"err,omitempty"`
	// As CallbackResult's.
	Protocol int       `json:"protocol"`
	Launched time.Time `json:"launched"`
	Queued   time.Time `json:"queued"`
	Posted   time.Time `json:"posted"`
	Answered time.Time `json:"answered"`
}

// Report gathers what the fake saw.
func (s *Server) Report() Report {
	r := Report{Counts: s.Counts(), Overlaps: s.Overlaps(), CallbackAnswers: map[string]int{}, Launches: map[string][]string{},
		LaunchLog: map[string][]LaunchSummary{}}
	for k, v := range s.CallbackAnswers() {
		r.CallbackAnswers[strconv.Itoa(k)] = v
	}
	s.mu.Lock()
	r.Outages = s.faults.outages
	s.mu.Unlock()
	for _, c := range s.Callbacks() {
		var body struct {
			Status string `json:"status"`
		}
		_ = json.Unmarshal(c.Body, &body)
		r.Callbacks = append(r.Callbacks, CallbackSummary{TaskID: c.TaskID, BatchID: c.BatchID, MachineID: c.MachineID,
			Outcome: body.Status, Copy: c.Copy, Status: c.Status, Attempts: c.Attempts, Err: c.Err, Protocol: c.Protocol,
			Launched: c.Launched, Queued: c.Queued, Posted: c.Posted, Answered: c.Answered})
	}
	for _, l := range s.Launches() {
		r.LaunchLog[l.TaskID] = append(r.LaunchLog[l.TaskID], LaunchSummary{At: l.At, Attempt: l.Attempt, Status: l.Status, MachineID: l.MachineID})
		if l.MachineID != "" {
			r.Launches[l.TaskID] = append(r.Launches[l.TaskID], l.MachineID)
		}
	}
	return r
}
