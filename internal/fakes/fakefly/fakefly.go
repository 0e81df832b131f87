// Package fakefly is a fake of the Fly Machines API for tests that drive the
// real fly-go client (point Config.BaseURL or FLY_FLAPS_BASE_URL at
// Server.URL). Fly is a service we do not run, so this hand-written fake is how
// the launch path is tested end to end.
//
// It speaks the routes and JSON fly-go v0.9.3 uses:
//
//	POST   /v1/apps/{app}/machines               create (launch)
//	GET    /v1/apps/{app}/machines               list; ?metadata.{key}=v, ?region=, ?state=a,b, ?include_deleted=true
//	GET    /v1/apps/{app}/machines/{id}          get
//	DELETE /v1/apps/{app}/machines/{id}          destroy; ?kill=true (fly-go) or ?force=true (Fly docs) to destroy a running machine
//
// Requests need "Authorization: Bearer <token>" (or "FlyV1 <token>", as
// fly-go sends for macaroons); anything else answers 401. Errors are
// {"error": "..."} bodies, as fly-go expects.
//
// It also plays the worker: each launched machine reads CALLBACK_URL and
// CALLBACK_TOKEN from its config env and POSTs a callback
// (Authorization: Bearer <CALLBACK_TOKEN>) whose body and timing a per-test
// Behavior decides, then exits; with auto_destroy it is destroyed, otherwise
// (or with Behavior.Linger) it stays stopped. A machine destroyed through
// the API before its callback never calls back, as on Fly.
//
// It is built for benchmarks too: per-launch work is O(1), callbacks are
// posted by a fixed pool of goroutines, destroyed machines keep only a small
// tombstone, and heavy details (env, raw config, callback bodies) are kept only
// for the first Options.DetailLimit launches and callbacks. Nothing is logged.
package fakefly

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/superfly/fly-go/tokens"

	"github.com/arke-institute/orchestrator/phases"
)

// DefaultToken is the API token expected when Options.Token is empty, so
// simple tests need no setup.
const DefaultToken = "fakefly-test-token"

// Defaults for Options fields left zero.
const (
	DefaultRegion      = "ord"
	DefaultWorkers     = 32
	DefaultDetailLimit = 10000
	DefaultRetryAfter  = time.Second
)

// Options configures a fake. The zero value is usable.
type Options struct {
	// Token is the expected Fly API token (DefaultToken if empty).
	Token string
	// Behave decides, per launch request, how Fly answers and how the
	// launched worker behaves. nil means: create the machine and post a
	// default success callback. It is called concurrently and must be safe
	// for that; it must not block.
	Behave func(l Launch) Behavior
	// Apps, if non-empty, lists the apps that exist; others answer 404 like
	// an unknown Fly app. Empty means every app exists.
	Apps []string
	// Region is where machines land when the launch names none.
	Region string
	// RetryAfter is the Retry-After header sent with 429 answers injected by
	// Fail (default 1s; negative sends none).
	RetryAfter time.Duration
	// Workers is how many callbacks are posted concurrently (default 32),
	// taken in turn across batches (callbackQueue).
	Workers int
	// DetailLimit is how many launches and callbacks keep their Env, Config,
	// Metadata and Body; later records keep everything else, so counts and order stay
	// exact while memory stays small at 100,000 launches. 0 means 10,000,
	// negative means no limit.
	DetailLimit int
	// HTTPClient posts callbacks (default: a pooled client, 30s timeout).
	HTTPClient *http.Client
	// Work, when set, is the worker's work with storage, run before its
	// callback (a machine's own, or a pool machine's leased task) unless
	// it crashes: it gets the task's environment and the body the
	// Behavior gives, and returns the body to post (an error body when
	// its storage failed, as a real worker reports).
	Work func(ctx context.Context, env map[string]string, body []byte) []byte
	// CallbackRetryWindow, when set, makes a worker retry its callback
	// (network errors, 5xx, 429) with backoff for this long, as real
	// workers do through a Postgres restart, instead of 5 quick tries.
	CallbackRetryWindow time.Duration
	// CreateRate and CreateBurst, when set, enforce Fly's limit on
	// machine creations per app (about 1 a second, bursts of 3): a launch
	// over it is answered 429 with the Retry-After of the next token.
	CreateRate  float64
	CreateBurst int
}

// Launch is one launch request as the fake received it, decoded from the
// JSON on the wire (not from fly-go's types), so tests see exactly what fly-go
// sent.
type Launch struct {
	App, Name, Region, Image string
	// TaskID and BatchID come from config.metadata task_id/batch_id, or the
	// env TASK_ID/BATCH_ID when metadata lacks them.
	TaskID, BatchID string
	Env             map[string]string
	Metadata        map[string]string
	// Config is config as received, byte for byte.
	Config        json.RawMessage
	MemoryMB      int
	CPUs          int
	CPUKind       string
	AutoDestroy   bool
	RestartPolicy string
	// Attempt is n for the nth launch request for this app and task id,
	// counting every request, rejected ones included.
	Attempt int
	// Status is the HTTP status the fake answered.
	Status int
	// Rejected is true when the answer was an error status (a machine may
	// still have been created: see MachineID).
	Rejected bool
	// MachineID is the machine created by this request, "" if none.
	MachineID string
	// At is when the request came.
	At time.Time
	// PoolMachine is, for a task a pool machine leased (Behave's second
	// kind of call, see pool.go), that machine's id.
	PoolMachine string
}

// Behavior is what the fake does for one launch request.
type Behavior struct {
	// Body is the callback JSON: []byte, json.RawMessage and string are sent
	// as is, anything else is JSON-encoded. nil sends SuccessBody.
	Body any
	// Hang: the worker never calls back and never exits (a stuck machine).
	Hang bool
	// Crash: the worker exits without calling back (after Delay).
	Crash bool
	// Linger: when the worker exits, its machine stays "stopped" even with
	// auto_destroy, as on Fly until the automatic destroy goes through
	// (tests of reconciliation with an earlier attempt's machine).
	Linger bool
	// Duplicate posts the same callback this many extra times.
	Duplicate int
	// Delay is how long the worker runs before calling back (late callbacks).
	Delay time.Duration
	// LaunchStatus, if non-zero, answers the launch with this status
	// instead of creating a machine (429, 500, 503, 422...).
	LaunchStatus int
	// CreateThenFail creates and runs the machine but answers the launch
	// with LaunchStatus (default 500): the ambiguous case.
	CreateThenFail bool
	// RetryAfter is sent as Retry-After when the answer is 429 (default
	// Options.RetryAfter; negative sends none).
	RetryAfter time.Duration
}

// Machine is a machine as the fake holds it.
type Machine struct {
	ID, App, Name, Region, State string
	TaskID, BatchID              string
	Metadata                     map[string]string
}

// CallbackResult is one callback the fake worker posted.
type CallbackResult struct {
	TaskID, BatchID, MachineID, URL string
	// Copy is 0 for the first post and 1.. for Behavior.Duplicate copies.
	Copy int
	// Status is the orchestrator's final HTTP status (0 if none came).
	Status int
	// Err is the transport error of the last attempt, if any.
	Err string
	// Attempts counts posts including retries after 5xx, 429 and network
	// errors.
	Attempts int
	// Protocol is the worker's protocol version (1: the previous
	// release's image, which sends none).
	Protocol int
	// Body is what was posted (nil past Options.DetailLimit).
	Body []byte
	// Launched is when the machine's launch was answered, Queued when its
	// worker was ready to call back (after Behavior.Delay), Posted when a
	// callback worker of the fake began posting (Options.Workers are
	// shared), Answered when the final answer came.
	Launched, Queued, Posted, Answered time.Time
}

// Counts are exact totals, also past Options.DetailLimit.
type Counts struct {
	Launches         int // launch requests received
	Created          int // machines created
	Live             int // machines not destroyed
	MaxLive          int // the most machines not destroyed at once, across apps
	Destroyed        int // destroyed through DELETE
	AutoDestroyed    int // exited with auto_destroy
	Callbacks        int // callback posts finished, duplicates included
	CallbacksPending int // workers that have not yet called back or exited
	Leases           int // tasks pool machines leased
	Heartbeats       int // heartbeats pool machines posted
	Crashed          int // pool machines that exited mid-task without a callback
	CreateLimited    int // launches answered 429 by CreateRate
}

// Server is a running fake. Its methods are safe for concurrent use.
type Server struct {
	// URL is the base URL to give fly-go (Config.BaseURL / FLY_FLAPS_BASE_URL).
	URL string

	tb     TB
	opts   Options
	token  string
	srv    *httptest.Server
	client *http.Client
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	cond      *sync.Cond
	changed   chan struct{}
	closed    bool
	apps      map[string]*appState
	attempts  map[string]int
	launches  []Launch
	callbacks []CallbackResult
	destroyed []string
	counts    Counts
	failCode  int
	failLeft  int
	// destroyFailCode and destroyFailLeft are FailDestroys'.
	destroyFailCode int
	destroyFailLeft int
	seq             uint64
	idBase          uint64
	queue           callbackQueue
	faults          faults // faults.go
	// creates is each app's bucket of machine creations (CreateRate).
	creates map[string]*createBucket
}

// createBucket is an app's token bucket of machine creations.
type createBucket struct {
	tokens float64
	last   time.Time
}

// takeCreate takes a creation of app from its bucket (CreateRate,
// CreateBurst). When none is left it says how long until one is.
func (s *Server) takeCreate(app string) (time.Duration, bool) {
	rate, burst := s.opts.CreateRate, float64(max(s.opts.CreateBurst, 1))
	if rate <= 0 {
		return 0, true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.creates == nil {
		s.creates = map[string]*createBucket{}
	}
	now := time.Now()
	b := s.creates[app]
	if b == nil {
		b = &createBucket{tokens: burst, last: now}
		s.creates[app] = b
	}
	b.tokens = min(burst, b.tokens+now.Sub(b.last).Seconds()*rate)
	b.last = now
	if b.tokens < 1 {
		return time.Duration((1 - b.tokens) / rate * float64(time.Second)), false
	}
	b.tokens--
	return 0, true
}

type appState struct {
	live   map[string]*machine
	dead   map[string]*machine
	byTask map[string]map[string]struct{} // task id -> live machine ids
}

type machine struct {
	seq         uint64
	id, name    string
	region      string
	state       string
	taskID      string
	batchID     string
	attempt     string // metadata attempt, kept in tombstones
	image       string
	metadata    map[string]string
	config      json.RawMessage // nil once destroyed
	autoDestroy bool
	createdAt   time.Time
	updatedAt   time.Time
}

type job struct {
	launched, queued time.Time
	app, machineID   string
	taskID, batchID  string
	url, token       string
	body             []byte
	env              map[string]string // the machine's, for Options.Work
	protocol         int               // the worker's protocol version (protocolOf)
	copies           int
	crash, linger    bool
}

// TB is the part of testing.TB that New needs: a *testing.T in tests, or a
// small stand-in in a program such as cmd/bench, which calls its Cleanup
// functions when it is done with the fake.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
	Cleanup(func())
}

var _ TB = testing.TB(nil)

// New starts a fake and closes it when the test ends (pending worker
// callbacks are abandoned).
func New(tb TB, opts Options) *Server {
	tb.Helper()
	if opts.Token == "" {
		opts.Token = DefaultToken
	}
	if opts.Region == "" {
		opts.Region = DefaultRegion
	}
	if opts.RetryAfter == 0 {
		opts.RetryAfter = DefaultRetryAfter
	}
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.DetailLimit == 0 {
		opts.DetailLimit = DefaultDetailLimit
	}
	client := opts.HTTPClient
	if client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns = opts.Workers * 2
		tr.MaxIdleConnsPerHost = opts.Workers * 2
		client = &http.Client{Transport: tr, Timeout: 30 * time.Second}
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		tb:       tb,
		opts:     opts,
		token:    tokens.Parse(opts.Token).Flaps(),
		client:   client,
		ctx:      ctx,
		cancel:   cancel,
		changed:  make(chan struct{}),
		apps:     map[string]*appState{},
		attempts: map[string]int{},
		// 14 hex digits like Fly machine ids, distinct across fakes.
		idBase: 0x10000000000000 + binary.BigEndian.Uint64(b[:])%0x0f000000000000,
	}
	s.cond = sync.NewCond(&s.mu)

	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/apps/{app}/machines", s.handleLaunch)
	mux.HandleFunc("GET /v1/apps/{app}/machines", s.handleList)
	mux.HandleFunc("GET /v1/apps/{app}/machines/{id}", s.handleGet)
	mux.HandleFunc("DELETE /v1/apps/{app}/machines/{id}", s.handleDestroy)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if s.injected(w) {
			return
		}
		writeError(w, http.StatusNotFound, "not found", 0)
	})
	s.srv = httptest.NewServer(mux)
	s.URL = s.srv.URL

	for range opts.Workers {
		s.wg.Add(1)
		go s.worker()
	}
	tb.Cleanup(s.close)
	return s
}

func (s *Server) close() {
	s.mu.Lock()
	s.closed = true
	s.cond.Broadcast()
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	s.srv.Close()
}

// Fail makes the next n API requests, on any route, answer status before
// anything else is checked, as when Fly's proxy answers 429 or 5xx for a
// while. It replaces any failure still pending.
func (s *Server) Fail(status int, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failCode, s.failLeft = status, n
}

// FailDestroys makes the next n DELETE requests (machine destructions)
// answer status, and only them, as when Fly cannot reach a machine's host
// for a while: the machine stays alive. It replaces any such failure still
// pending.
func (s *Server) FailDestroys(status int, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.destroyFailCode, s.destroyFailLeft = status, n
}

// injectedDestroy answers a destruction with the failure set by
// FailDestroys, if any is left.
func (s *Server) injectedDestroy(w http.ResponseWriter) bool {
	s.mu.Lock()
	if s.destroyFailLeft <= 0 {
		s.mu.Unlock()
		return false
	}
	s.destroyFailLeft--
	code := s.destroyFailCode
	s.mu.Unlock()
	writeError(w, code, "injected destroy failure", 0)
	return true
}

// Launches returns every launch request received, rejected ones included, in
// the order they were answered.
func (s *Server) Launches() []Launch {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.launches)
}

// Machines returns the app's machines that are not destroyed, oldest first.
func (s *Server) Machines(app string) []Machine {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.apps[app]
	if a == nil {
		return nil
	}
	ms := make([]*machine, 0, len(a.live))
	for _, m := range a.live {
		ms = append(ms, m)
	}
	sortMachines(ms)
	out := make([]Machine, len(ms))
	for i, m := range ms {
		out[i] = m.public(app)
	}
	return out
}

// Backdate makes the app's live machine id look created age earlier, as
// a machine that has run that long (tests of what judges machines by
// their age). It reports whether the machine is live.
func (s *Server) Backdate(app, id string, age time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.apps[app]
	if a == nil || a.live[id] == nil {
		return false
	}
	a.live[id].createdAt = a.live[id].createdAt.Add(-age)
	return true
}

// Destroyed returns the ids of machines destroyed through DELETE, in order
// (auto-destroyed machines are only counted, in Counts).
func (s *Server) Destroyed() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.destroyed)
}

// Callbacks returns every callback posted so far, in order of completion.
func (s *Server) Callbacks() []CallbackResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.callbacks)
}

// Counts returns exact totals, cheap enough to poll in benchmarks.
func (s *Server) Counts() Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.counts
	c.Live = 0
	for _, a := range s.apps {
		c.Live += len(a.live)
	}
	return c
}

// Await blocks until cond returns true, re-evaluating it whenever the fake's
// state changes (no polling), and fails the test after timeout. cond runs
// without the fake's lock, so it may call any Server method.
func (s *Server) Await(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		s.mu.Lock()
		ch := s.changed
		s.mu.Unlock()
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-timer.C:
			tb.Fatalf("fakefly: timed out after %s waiting for %s (counts %+v)", timeout, what, s.Counts())
			return
		}
	}
}

// AwaitCallbacks waits until at least n callbacks were posted and returns
// all of them.
func (s *Server) AwaitCallbacks(tb testing.TB, n int, timeout time.Duration) []CallbackResult {
	tb.Helper()
	s.Await(tb, timeout, fmt.Sprintf("%d callbacks", n), func() bool { return s.Counts().Callbacks >= n })
	return s.Callbacks()
}

// AwaitLaunches waits until at least n launch requests were answered and
// returns all of them.
func (s *Server) AwaitLaunches(tb testing.TB, n int, timeout time.Duration) []Launch {
	tb.Helper()
	s.Await(tb, timeout, fmt.Sprintf("%d launches", n), func() bool { return s.Counts().Launches >= n })
	return s.Launches()
}

// AwaitIdle waits until no worker has a callback or exit still to do
// (hanging workers never have one), so a test can assert that something did
// NOT happen without sleeping.
func (s *Server) AwaitIdle(tb testing.TB, timeout time.Duration) {
	tb.Helper()
	s.Await(tb, timeout, "idle workers", func() bool { return s.Counts().CallbacksPending == 0 })
}

// notify wakes Await callers; s.mu must be held.
func (s *Server) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// injected answers a request with the failure set by Fail, if any is left.
func (s *Server) injected(w http.ResponseWriter) bool {
	if code, ok := s.outage(); ok {
		writeError(w, code, "injected outage", s.opts.RetryAfter)
		return true
	}
	s.mu.Lock()
	if s.failLeft <= 0 {
		s.mu.Unlock()
		return false
	}
	s.failLeft--
	code := s.failCode
	s.mu.Unlock()
	writeError(w, code, "injected failure", s.opts.RetryAfter)
	return true
}

// authorized checks the token the way Fly does: a Bearer or FlyV1 scheme
// and the token fly-go derives from FLY_API_TOKEN.
func (s *Server) authorized(w http.ResponseWriter, r *http.Request) bool {
	h := strings.TrimSpace(r.Header.Get("Authorization"))
	scheme, rest, _ := strings.Cut(h, " ")
	ok := (strings.EqualFold(scheme, "Bearer") || strings.EqualFold(scheme, "FlyV1")) &&
		subtle.ConstantTimeCompare([]byte(tokens.StripAuthorizationScheme(rest)), []byte(s.token)) == 1
	if !ok {
		writeError(w, http.StatusUnauthorized, "Authenticate: token validation error", 0)
	}
	return ok
}

func (s *Server) appExists(w http.ResponseWriter, app string) bool {
	if len(s.opts.Apps) == 0 || slices.Contains(s.opts.Apps, app) {
		return true
	}
	writeError(w, http.StatusNotFound, "app not found", 0)
	return false
}

// wire types: the Fly API's JSON, independent of fly-go's structs.
type launchRequest struct {
	Name       string          `json:"name"`
	Region     string          `json:"region"`
	Config     json.RawMessage `json:"config"`
	SkipLaunch bool            `json:"skip_launch"`
}

type wireConfig struct {
	Image       string            `json:"image"`
	Env         map[string]string `json:"env"`
	AutoDestroy bool              `json:"auto_destroy"`
	Restart     *struct {
		Policy string `json:"policy"`
	} `json:"restart"`
	Guest *struct {
		CPUKind  string `json:"cpu_kind"`
		CPUs     int    `json:"cpus"`
		MemoryMB int    `json:"memory_mb"`
	} `json:"guest"`
	Metadata map[string]string `json:"metadata"`
}

func (s *Server) handleLaunch(w http.ResponseWriter, r *http.Request) {
	app := r.PathValue("app")
	raw, readErr := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	var req launchRequest
	var cfg wireConfig
	parseErr := readErr
	if parseErr == nil {
		parseErr = json.Unmarshal(raw, &req)
	}
	if parseErr == nil && len(req.Config) > 0 && string(req.Config) != "null" {
		parseErr = json.Unmarshal(req.Config, &cfg)
	}
	l := Launch{
		App: app, Name: req.Name, Region: req.Region, Image: cfg.Image,
		TaskID: cfg.Metadata["task_id"], BatchID: cfg.Metadata["batch_id"],
		Env: cfg.Env, Metadata: cfg.Metadata, Config: req.Config,
		AutoDestroy: cfg.AutoDestroy, At: time.Now(),
	}
	if l.TaskID == "" {
		l.TaskID = cfg.Env["TASK_ID"]
	}
	if l.BatchID == "" {
		l.BatchID = cfg.Env["BATCH_ID"]
	}
	if cfg.Restart != nil {
		l.RestartPolicy = cfg.Restart.Policy
	}
	if cfg.Guest != nil {
		l.MemoryMB, l.CPUs, l.CPUKind = cfg.Guest.MemoryMB, cfg.Guest.CPUs, cfg.Guest.CPUKind
	}
	if l.Region == "" {
		l.Region = s.opts.Region
	}

	s.mu.Lock()
	key := app + "\x00" + l.TaskID
	s.attempts[key]++
	l.Attempt = s.attempts[key]
	s.mu.Unlock()

	answer := func(status int, m *machine, msg string, retryAfter time.Duration) {
		l.Status = status
		l.Rejected = status >= 300
		if m != nil {
			l.MachineID = m.id
		}
		s.mu.Lock()
		if s.opts.DetailLimit > 0 && len(s.launches) >= s.opts.DetailLimit {
			l.Env, l.Config, l.Metadata = nil, nil, nil
		}
		s.launches = append(s.launches, l)
		s.counts.Launches++
		var body []byte
		if status < 300 {
			body = m.json(app, "created")
		}
		s.notify()
		s.mu.Unlock()
		if status >= 300 {
			writeError(w, status, msg, retryAfter)
			return
		}
		writeJSON(w, status, body)
	}

	if s.injectedStatus(&l) {
		answer(l.Status, nil, "injected failure", s.opts.RetryAfter)
		return
	}
	if !s.authorized(w, r) {
		s.record(l, http.StatusUnauthorized)
		return
	}
	if !s.appExists(w, app) {
		s.record(l, http.StatusNotFound)
		return
	}
	switch {
	case parseErr != nil:
		answer(http.StatusBadRequest, nil, "invalid request body: "+parseErr.Error(), 0)
		return
	case cfg.Image == "":
		answer(http.StatusUnprocessableEntity, nil, "invalid config: image is required", 0)
		return
	}

	if wait, ok := s.takeCreate(app); !ok {
		s.mu.Lock()
		s.counts.CreateLimited++
		s.mu.Unlock()
		answer(http.StatusTooManyRequests, nil, "rate limit exceeded: machine creations of this app", wait)
		return
	}
	var bh Behavior
	if s.opts.Behave != nil {
		bh = s.opts.Behave(l)
	}
	retryAfter := bh.RetryAfter
	if retryAfter == 0 {
		retryAfter = s.opts.RetryAfter
	}
	if bh.LaunchStatus != 0 && !bh.CreateThenFail {
		answer(bh.LaunchStatus, nil, "launch refused by test behavior", retryAfter)
		return
	}

	body, err := callbackBody(bh.Body, l)
	if err != nil {
		s.tb.Errorf("fakefly: encoding callback body for task %s: %v", l.TaskID, err)
		answer(http.StatusInternalServerError, nil, "fakefly: bad Behavior.Body", 0)
		return
	}
	m := s.create(l, req.SkipLaunch)
	pool := cfg.Env["POOL_LEASE_URL"] != ""
	if pool && !req.SkipLaunch && !bh.Hang { // a hung pool machine never leases
		s.mu.Lock()
		s.counts.CallbacksPending++
		s.wg.Add(1)
		s.mu.Unlock()
		go s.runPool(l, m.id)
	}
	if !pool && !req.SkipLaunch && !bh.Hang {
		s.schedule(&job{
			launched: time.Now(), app: app, machineID: m.id, taskID: l.TaskID, batchID: l.BatchID,
			url: cfg.Env["CALLBACK_URL"], token: cfg.Env["CALLBACK_TOKEN"], env: cfg.Env, protocol: protocolOf(cfg.Env),
			body: body, copies: 1 + max(bh.Duplicate, 0), crash: bh.Crash, linger: bh.Linger,
		}, bh.Delay)
	}
	if bh.CreateThenFail {
		status := bh.LaunchStatus
		if status == 0 {
			status = http.StatusInternalServerError
		}
		answer(status, m, "launch failed after the machine was created", retryAfter)
		return
	}
	answer(http.StatusOK, m, "", 0)
}

// injectedStatus applies Fail to a launch, recording its status in l.
func (s *Server) injectedStatus(l *Launch) bool {
	if code, ok := s.outage(); ok {
		l.Status = code
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failLeft <= 0 {
		return false
	}
	s.failLeft--
	l.Status = s.failCode
	return true
}

// record stores a launch answered outside handleLaunch's answer helper.
func (s *Server) record(l Launch, status int) {
	l.Status, l.Rejected = status, true
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.opts.DetailLimit > 0 && len(s.launches) >= s.opts.DetailLimit {
		l.Env, l.Config, l.Metadata = nil, nil, nil
	}
	s.launches = append(s.launches, l)
	s.counts.Launches++
	s.notify()
}

func callbackBody(b any, l Launch) ([]byte, error) {
	switch v := b.(type) {
	case nil:
		return SuccessBody(l)
	case []byte:
		return v, nil
	case json.RawMessage:
		return v, nil
	case string:
		return []byte(v), nil
	default:
		return json.Marshal(v)
	}
}

func (s *Server) app(name string) *appState {
	a := s.apps[name]
	if a == nil {
		a = &appState{live: map[string]*machine{}, dead: map[string]*machine{}, byTask: map[string]map[string]struct{}{}}
		s.apps[name] = a
	}
	return a
}

func (s *Server) create(l Launch, skipLaunch bool) *machine {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	now := time.Now().UTC()
	state := "started"
	if skipLaunch {
		state = "stopped"
	}
	m := &machine{
		seq: s.seq, id: fmt.Sprintf("%014x", s.idBase+s.seq), name: l.Name, region: l.Region,
		state: state, taskID: l.TaskID, batchID: l.BatchID, attempt: l.Metadata["attempt"], image: l.Image,
		metadata: l.Metadata, config: l.Config, autoDestroy: l.AutoDestroy,
		createdAt: now, updatedAt: now,
	}
	if m.name == "" {
		m.name = "machine-" + m.id
	}
	a := s.app(l.App)
	s.recordOverlap(l.App, a, m)
	a.live[m.id] = m
	live := 0
	for _, other := range s.apps {
		live += len(other.live)
	}
	s.counts.MaxLive = max(s.counts.MaxLive, live)
	if m.taskID != "" {
		ids := a.byTask[m.taskID]
		if ids == nil {
			ids = map[string]struct{}{}
			a.byTask[m.taskID] = ids
		}
		ids[m.id] = struct{}{}
	}
	s.counts.Created++
	s.notify()
	return m
}

// kill moves a live machine to the tombstones; s.mu must be held.
func (s *Server) kill(a *appState, m *machine) {
	delete(a.live, m.id)
	if ids := a.byTask[m.taskID]; ids != nil {
		delete(ids, m.id)
		if len(ids) == 0 {
			delete(a.byTask, m.taskID)
		}
	}
	m.state = "destroyed"
	m.config = nil
	if onlyIDs(m) {
		m.metadata = nil // tombstones rebuild it from the ids; see meta
	}
	m.updatedAt = time.Now().UTC()
	a.dead[m.id] = m
}

func (s *Server) schedule(j *job, delay time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.counts.CallbacksPending++
	if delay <= 0 {
		j.queued = time.Now()
		s.queue.push(j)
		s.cond.Signal()
		return
	}
	time.AfterFunc(delay, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closed {
			return
		}
		j.queued = time.Now()
		s.queue.push(j)
		s.cond.Signal()
	})
}

func (s *Server) worker() {
	defer s.wg.Done()
	for {
		s.mu.Lock()
		for s.queue.len() == 0 && !s.closed {
			s.cond.Wait()
		}
		if s.closed {
			s.mu.Unlock()
			return
		}
		j := s.queue.pop()
		s.mu.Unlock()
		s.run(j)
	}
}

// callbackQueue holds the callbacks due, and gives them to the workers
// in turn across batches, in order within each: on Fly each machine calls
// back on its own, so the callbacks of one batch's machines never wait
// behind those of another batch's thousands.
type callbackQueue struct {
	byBatch map[string][]*job
	turn    []string // the batches with callbacks due, in turn
	n       int
}

func (q *callbackQueue) len() int { return q.n }

func (q *callbackQueue) push(j *job) {
	if q.byBatch == nil {
		q.byBatch = map[string][]*job{}
	}
	if len(q.byBatch[j.batchID]) == 0 {
		q.turn = append(q.turn, j.batchID)
	}
	q.byBatch[j.batchID] = append(q.byBatch[j.batchID], j)
	q.n++
}

// pop takes the next callback of the batch whose turn it is; the queue
// must not be empty.
func (q *callbackQueue) pop() *job {
	batch := q.turn[0]
	q.turn = q.turn[1:]
	jobs := q.byBatch[batch]
	j := jobs[0]
	jobs[0] = nil
	if jobs = jobs[1:]; len(jobs) == 0 {
		delete(q.byBatch, batch) // let the backing array go
	} else {
		q.byBatch[batch] = jobs
		q.turn = append(q.turn, batch)
	}
	q.n--
	return j
}

// postCopies posts j's callback copies times (Behavior.Duplicate), each
// recorded as a CallbackResult.
func (s *Server) postCopies(j *job, copies int) {
	for c := range copies {
		res := s.post(j)
		res.Copy = c
		s.mu.Lock()
		if s.opts.DetailLimit > 0 && len(s.callbacks) >= s.opts.DetailLimit {
			res.Body = nil
		}
		s.callbacks = append(s.callbacks, res)
		s.counts.Callbacks++
		s.notify()
		s.mu.Unlock()
	}
}

// run is the worker program: call back (unless crashing), then exit.
func (s *Server) run(j *job) {
	if !j.crash && s.alive(j.app, j.machineID) {
		if s.opts.Work != nil {
			j.body = s.opts.Work(s.ctx, j.env, j.body)
		}
		s.postCopies(j, j.copies)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if a := s.apps[j.app]; a != nil {
		if m := a.live[j.machineID]; m != nil {
			if m.autoDestroy && !j.linger {
				s.kill(a, m)
				s.counts.AutoDestroyed++
			} else {
				m.state = "stopped"
				m.updatedAt = time.Now().UTC()
			}
		}
	}
	s.counts.CallbacksPending--
	s.notify()
}

func (s *Server) alive(app, id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.apps[app]
	return a != nil && a.live[id] != nil
}

// post sends one callback like a real worker: retry network errors, 5xx and
// 429 a few times with a small backoff, keep the final answer.
func (s *Server) post(j *job) (res CallbackResult) {
	res = CallbackResult{TaskID: j.taskID, BatchID: j.batchID, MachineID: j.machineID, URL: j.url, Body: j.body, Protocol: j.protocol,
		Launched: j.launched, Queued: j.queued, Posted: time.Now()}
	defer func() { res.Answered = time.Now() }()
	if j.url == "" {
		res.Err = "machine env has no CALLBACK_URL"
		return res
	}
	backoff, start := 20*time.Millisecond, time.Now()
	for attempt := 1; ; attempt++ {
		res.Attempts = attempt
		res.Status, res.Err = 0, ""
		var retryAfter time.Duration
		req, err := http.NewRequestWithContext(s.ctx, http.MethodPost, j.url, bytes.NewReader(j.body))
		if err != nil {
			res.Err = err.Error()
			return res
		}
		req.Header.Set("Content-Type", "application/json")
		if j.token != "" {
			req.Header.Set("Authorization", "Bearer "+j.token)
		}
		if tp := j.env["TRACEPARENT"]; tp != "" { // as the workers send it
			req.Header.Set("traceparent", tp)
		}
		setProtocol(req, j.protocol)
		resp, err := s.client.Do(req)
		if err != nil {
			res.Err = err.Error()
		} else {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
			_ = resp.Body.Close()
			res.Status = resp.StatusCode
			s.countAnswer(resp.StatusCode)
			if resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests {
				return res
			}
			if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 {
				retryAfter = time.Duration(secs) * time.Second
			}
		}
		if s.ctx.Err() != nil || s.retriesOver(attempt, start) {
			return res
		}
		t := time.NewTimer(pause(backoff, retryAfter))
		select {
		case <-s.ctx.Done():
			t.Stop()
			return res
		case <-t.C:
		}
		backoff = s.nextBackoff(backoff)
	}
}

func (s *Server) handleList(w http.ResponseWriter, r *http.Request) {
	if s.injected(w) || !s.authorized(w, r) {
		return
	}
	app := r.PathValue("app")
	if !s.appExists(w, app) {
		return
	}
	q := r.URL.Query()
	includeDeleted := q.Get("include_deleted") == "true"
	region := q.Get("region")
	var states []string
	if v := q.Get("state"); v != "" {
		states = strings.Split(v, ",")
	}
	meta := map[string]string{}
	for k, vs := range q {
		if key, ok := strings.CutPrefix(k, "metadata."); ok && len(vs) > 0 {
			meta[key] = vs[0]
		}
	}

	s.mu.Lock()
	a := s.apps[app]
	var cands []*machine
	if a != nil {
		if tid, ok := meta["task_id"]; ok {
			for id := range a.byTask[tid] {
				cands = append(cands, a.live[id])
			}
		} else {
			for _, m := range a.live {
				cands = append(cands, m)
			}
		}
		if includeDeleted {
			for _, m := range a.dead {
				cands = append(cands, m)
			}
		}
	}
	sortMachines(cands)
	out := make([]json.RawMessage, 0, len(cands))
	for _, m := range cands {
		if region != "" && m.region != region {
			continue
		}
		if len(states) > 0 && !slices.Contains(states, m.state) {
			continue
		}
		match := true
		for k, v := range meta {
			if m.meta(k) != v {
				match = false
				break
			}
		}
		if match {
			out = append(out, m.json(app, m.state))
		}
	}
	s.mu.Unlock()
	body, _ := json.Marshal(out)
	writeJSON(w, http.StatusOK, body)
}

func (s *Server) handleGet(w http.ResponseWriter, r *http.Request) {
	if s.injected(w) || !s.authorized(w, r) {
		return
	}
	app, id := r.PathValue("app"), r.PathValue("id")
	if !s.appExists(w, app) {
		return
	}
	s.mu.Lock()
	var body []byte
	if a := s.apps[app]; a != nil {
		if m := a.live[id]; m != nil {
			body = m.json(app, m.state)
		} else if m := a.dead[id]; m != nil {
			body = m.json(app, m.state)
		}
	}
	s.mu.Unlock()
	if body == nil {
		writeError(w, http.StatusNotFound, "machine not found", 0)
		return
	}
	writeJSON(w, http.StatusOK, body)
}

func (s *Server) handleDestroy(w http.ResponseWriter, r *http.Request) {
	if s.injected(w) || s.injectedDestroy(w) || !s.authorized(w, r) {
		return
	}
	app, id := r.PathValue("app"), r.PathValue("id")
	if !s.appExists(w, app) {
		return
	}
	q := r.URL.Query()
	force := q.Get("kill") == "true" || q.Get("force") == "true"
	s.mu.Lock()
	a := s.apps[app]
	var m *machine
	if a != nil {
		m = a.live[id]
	}
	switch {
	case m == nil:
		s.mu.Unlock()
		writeError(w, http.StatusNotFound, "machine not found", 0)
		return
	case !force && m.state != "stopped" && m.state != "suspended":
		s.mu.Unlock()
		writeError(w, http.StatusPreconditionFailed, "unable to destroy machine, not currently stopped or suspended", 0)
		return
	}
	s.kill(a, m)
	s.destroyed = append(s.destroyed, id)
	s.counts.Destroyed++
	s.notify()
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, []byte(`{"ok":true}`))
}

func sortMachines(ms []*machine) {
	slices.SortFunc(ms, func(a, b *machine) int {
		switch {
		case a.seq < b.seq:
			return -1
		case a.seq > b.seq:
			return 1
		}
		return 0
	})
}

// onlyIDs reports whether m's metadata is exactly what meta can rebuild.
func onlyIDs(m *machine) bool {
	want := 0
	if m.taskID != "" {
		want++
	}
	if m.batchID != "" {
		want++
	}
	if m.attempt != "" {
		want++ // it can only come from the metadata
	}
	return len(m.metadata) == want &&
		(m.taskID == "" || m.metadata["task_id"] == m.taskID) &&
		(m.batchID == "" || m.metadata["batch_id"] == m.batchID)
}

// meta reads a metadata value, also from a tombstone whose map was dropped.
func (m *machine) meta(k string) string {
	if m.metadata != nil {
		return m.metadata[k]
	}
	switch k {
	case "task_id":
		return m.taskID
	case "batch_id":
		return m.batchID
	case "attempt":
		return m.attempt
	}
	return ""
}

func (m *machine) public(app string) Machine {
	return Machine{
		ID: m.id, App: app, Name: m.name, Region: m.region, State: m.state,
		TaskID: m.taskID, BatchID: m.batchID, Metadata: m.metadata,
	}
}

type imageRef struct {
	Registry   string `json:"registry"`
	Repository string `json:"repository"`
	Tag        string `json:"tag"`
	Digest     string `json:"digest"`
}

type machineJSON struct {
	ID         string          `json:"id"`
	Name       string          `json:"name"`
	State      string          `json:"state"`
	Region     string          `json:"region"`
	InstanceID string          `json:"instance_id"`
	PrivateIP  string          `json:"private_ip"`
	Config     json.RawMessage `json:"config"`
	ImageRef   imageRef        `json:"image_ref"`
	CreatedAt  string          `json:"created_at"`
	UpdatedAt  string          `json:"updated_at"`
}

// json renders the machine as the Machines API does; s.mu must be held.
func (m *machine) json(app, state string) []byte {
	cfg := m.config
	if cfg == nil {
		// Tombstones keep only what list filters need.
		md := m.metadata
		if md == nil {
			md = map[string]string{}
			if m.taskID != "" {
				md["task_id"] = m.taskID
			}
			if m.batchID != "" {
				md["batch_id"] = m.batchID
			}
			if m.attempt != "" {
				md["attempt"] = m.attempt
			}
		}
		cfg, _ = json.Marshal(map[string]any{"image": m.image, "metadata": md})
	}
	b, _ := json.Marshal(machineJSON{
		ID: m.id, Name: m.name, State: state, Region: m.region,
		InstanceID: fmt.Sprintf("01FAKE%020d", m.seq),
		PrivateIP:  fmt.Sprintf("fdaa:0:1:a7b:%x::2", m.seq&0xffff),
		Config:     cfg, ImageRef: parseImage(m.image),
		CreatedAt: m.createdAt.Format(time.RFC3339), UpdatedAt: m.updatedAt.Format(time.RFC3339),
	})
	return b
}

// parseImage splits "registry.fly.io/repo:tag" the way image_ref reports it.
func parseImage(image string) imageRef {
	var ref imageRef
	rest := image
	if i := strings.Index(rest, "@"); i >= 0 {
		ref.Digest, rest = rest[i+1:], rest[:i]
	}
	if first, after, ok := strings.Cut(rest, "/"); ok && strings.ContainsAny(first, ".:") {
		ref.Registry, rest = first, after
	} else {
		ref.Registry = "docker.io"
	}
	if i := strings.LastIndex(rest, ":"); i >= 0 && !strings.Contains(rest[i:], "/") {
		ref.Tag, rest = rest[i+1:], rest[:i]
	}
	ref.Repository = rest
	return ref
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func writeError(w http.ResponseWriter, status int, msg string, retryAfter time.Duration) {
	if status == http.StatusTooManyRequests && retryAfter > 0 {
		w.Header().Set("Retry-After", fmt.Sprint(int((retryAfter+time.Second-1)/time.Second)))
	}
	body, _ := json.Marshal(map[string]string{"error": msg})
	writeJSON(w, status, body)
}

// SuccessBody is the success callback the real worker of the launch's phase
// would send (phases.Phase.SampleResult for the task's input, named by the
// launch's env), or {"task_id","batch_id","status":"success"} alone when
// the task id names no phase. The fake learns every registered phase this
// way, and so do the tests and benchmarks built on it.
func SuccessBody(l Launch) ([]byte, error) {
	body := map[string]any{}
	if p, ok := phases.Get(phases.OfTask(l.TaskID)); ok {
		key := l.Env["INPUT_R2_KEY"]
		in := phases.File{
			R2Key: key, LogicalPath: "/" + path.Base(key), FileName: cmp.Or(l.Env["INPUT_FILE_NAME"], path.Base(key)),
			ContentType: l.Env["INPUT_CONTENT_TYPE"], FileSize: 4242,
		}
		if err := json.Unmarshal(p.SampleResult(in), &body); err != nil {
			return nil, fmt.Errorf("fakefly: sample result of %s: %w", p.Spec().Name, err)
		}
	}
	body["task_id"], body["batch_id"], body["status"] = l.TaskID, l.BatchID, "success"
	return json.Marshal(body)
}

// Succeed is a Behavior that calls back at once with SuccessBody.
func Succeed(l Launch) Behavior {
	b, err := SuccessBody(l)
	if err != nil {
		return Behavior{Body: fmt.Sprintf(`{"task_id":%q,"batch_id":%q,"status":"error","error":%q}`, l.TaskID, l.BatchID, err.Error())}
	}
	return Behavior{Body: b}
}
