// Package flycompute implements compute.Backend on the Fly Machines API
// through fly-go's flaps client (github.com/superfly/fly-go v0.9.3).
//
// What fly-go does underneath, and what this package does about it (read from
// the v0.9.3 sources):
//
//   - fly.NewHTTPClient wraps every request in a rehttp transport that retries
//     ANY method, POST included, up to 3 times (exponential jitter, 100ms base,
//     1s cap) when the answer is 502 or 503 or the transport error has
//     Temporary() == true (i/o timeouts, ETIMEDOUT, EAGAIN, EINTR, EMFILE,
//     ENFILE; not ECONNRESET, which Go's net.OpError calls temporary only on
//     accept). flaps.do additionally retries GETs (only) twice on ECONNRESET.
//   - A launch POST that Fly executed but answered 502/503 (or whose answer
//     timed out) is therefore silently sent again, and the retry creates a
//     second machine for the same task while the caller only sees the last
//     answer (demonstrated against the fake in flycompute_test.go). Our transport sits under rehttp and turns, for POSTs
//     only, 502/503 answers and post-send transport errors into errors rehttp
//     does not retry. They surface as compute.ErrAmbiguous and the launcher
//     reconciles with FindByTask before launching again. Dial errors (nothing
//     sent) stay retryable; GET and DELETE keep fly-go's retries (idempotent).
//   - Non-2xx answers surface as *flaps.FlapsError (status, body, request id)
//     wrapped as "failed to launch VM: ..."; response headers are dropped. Our
//     transport therefore turns 429 answers into its own error carrying the
//     Retry-After header, so compute.RetryAfter works.
//   - rehttp rewinds one shared body reader for each retry while net/http
//     may still be reading it for the previous attempt: a data race under
//     -race, and the retried request can go out with an empty body. Our
//     transport gives every attempt its own copy of the body.
//   - flaps.NewWithOptions reads FLY_FLAPS_BASE_URL from the environment and
//     has no option for the base URL. Config.BaseURL is applied by our
//     transport rewriting each request's scheme and host, so no package code
//     reads or mutates the environment; with BaseURL empty, fly-go's own
//     FLY_FLAPS_BASE_URL handling (default https://api.machines.dev) applies.
//   - fly-go's optional Logger installs a transport that prints request
//     bodies at debug level, i.e. every machine's env with R2 credentials and
//     callback tokens. We never give fly-go a logger.
//
// Launches and lists are not sent by fly-go's methods, only built by its
// NewRequest (base URL, Authorization, the JSON of fly.LaunchMachineInput)
// and sent through the guard transport alone (directClient):
//
//   - fly-go's List decodes the whole answer at once into fly.Machine
//     values, configs and env included, which for a batch's 100,000
//     machines held some 250 MB (the orchestrator's peak memory, every
//     MACHINE_CHECK_INTERVAL). list sends the same GET
//     /v1/apps/{app}/machines?metadata.{key}={value} (the Fly API's
//     documented metadata filter) and decodes the array one machine at a
//     time, keeping only what compute.Machine holds.
//   - fly-go's Launch took a fifth of the orchestrator's CPU at 10,000
//     launches (docs/performance.md): a tracing span with the token's
//     caveats parsed, otelhttp's and rehttp's transports, and the answer's
//     whole machine decoded, its config echoed back. launch sends the same
//     POST /v1/apps/{app}/machines and reads the ID, state and creation
//     time. The guard already kept rehttp from resending a POST, but for a
//     dial error (nothing sent): send retries those itself.
//
// Destroys still go through fly-go's methods.
package flycompute

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	fly "github.com/superfly/fly-go"
	"github.com/superfly/fly-go/flaps"
	"github.com/superfly/fly-go/tokens"

	"github.com/arke-institute/orchestrator/compute"
)

// DefaultRequestTimeout bounds one API call (with fly-go's internal retries)
// when Config.RequestTimeout is zero, so a hung connection becomes an
// ambiguous error instead of a stuck launcher.
const DefaultRequestTimeout = 30 * time.Second

// Metadata keys stored on every machine; FindByTask filters on task_id
// and reports attempt, for the launcher to fence by (compute.Fence).
const (
	MetadataTaskID  = "task_id"
	MetadataBatchID = "batch_id"
	MetadataAttempt = "attempt"
)

// Config configures the Fly backend. Only cmd/ reads the environment; it fills
// this struct once.
type Config struct {
	// APIToken is FLY_API_TOKEN (a "fm2_..." macaroon or a personal token,
	// with or without a "Bearer"/"FlyV1" scheme). Required. It is only ever
	// placed in the Authorization header: never logged, never in errors.
	APIToken string
	// BaseURL overrides the Machines API address (FLY_FLAPS_BASE_URL, e.g. a
	// fake in tests or the private http://_api.internal:4280). Empty means
	// fly-go's default, which itself honours FLY_FLAPS_BASE_URL.
	BaseURL string
	// Transport is the innermost HTTP transport (nil: a clone of
	// http.DefaultTransport keeping 64 idle connections to the API host).
	// fly-go builds its own http.Client around it, so a whole client cannot be
	// supplied.
	Transport http.RoundTripper
	// UserAgent is sent with every request (default "arke-orchestrator").
	UserAgent string
	// RequestTimeout bounds each call (default DefaultRequestTimeout).
	RequestTimeout time.Duration
	// Logger receives debug lines about launches and destroys (default
	// slog.Default()). Machine env is never logged.
	Logger *slog.Logger
}

// Backend launches task machines on Fly. It is safe for concurrent use.
type Backend struct {
	client  *flaps.Client
	timeout time.Duration
	log     *slog.Logger
	// direct sends launches and lists, built by fly-go (its base URL,
	// Authorization and JSON), through the guard transport.
	direct directClient
}

// directClient sends the launches' and lists' requests (see the package
// doc).
type directClient struct {
	flaps     *flaps.Client
	http      *http.Client
	userAgent string
}

var _ compute.Backend = (*Backend)(nil)

// New validates cfg and builds the flaps client. It makes no API call.
func New(ctx context.Context, cfg Config) (*Backend, error) {
	if tok := strings.TrimSpace(tokens.StripAuthorizationScheme(cfg.APIToken)); tok == "" ||
		strings.EqualFold(tok, "Bearer") || strings.EqualFold(tok, "FlyV1") {
		return nil, errors.New("flycompute: APIToken is required")
	}
	var base *url.URL
	if cfg.BaseURL != "" {
		u, err := url.Parse(cfg.BaseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("flycompute: BaseURL %q is not an http(s) URL", cfg.BaseURL)
		}
		base = u
	}
	next := cfg.Transport
	if next == nil {
		// Every call goes to one host; the default of 2 idle connections
		// per host would reconnect constantly under launcher concurrency.
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 64
		next = tr
	}
	userAgent := cfg.UserAgent
	if userAgent == "" {
		userAgent = "arke-orchestrator"
	}
	timeout := cfg.RequestTimeout
	if timeout <= 0 {
		timeout = DefaultRequestTimeout
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}

	guard := &guardTransport{base: base, next: next}
	client, err := flaps.NewWithOptions(ctx, flaps.NewClientOpts{
		UserAgent: userAgent,
		Tokens:    tokens.Parse(cfg.APIToken),
		Transport: guard,
		// Logger stays nil on purpose: see the package doc.
	})
	if err != nil {
		// fly-go's text names FLY_FLAPS_BASE_URL at most, never the token.
		return nil, fmt.Errorf("flycompute: building flaps client: %w", err)
	}
	direct := directClient{flaps: client, http: &http.Client{Transport: guard}, userAgent: userAgent}
	return &Backend{client: client, timeout: timeout, log: logger, direct: direct}, nil
}

// Launch creates and starts the task's machine: auto_destroy so it disappears
// when the worker exits, restart policy "no" so a crashed worker is not rerun
// behind the orchestrator's back (the sweep decides about retries).
func (b *Backend) Launch(ctx context.Context, spec compute.MachineSpec) (compute.Machine, error) {
	if err := validateSpec(spec); err != nil {
		return compute.Machine{}, compute.Permanent(err, 0)
	}
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()

	cfg := &fly.MachineConfig{
		Image:       spec.Image,
		Env:         spec.Env,
		AutoDestroy: true,
		Restart:     &fly.MachineRestart{Policy: fly.MachineRestartPolicyNo},
		Metadata: map[string]string{
			MetadataTaskID:  spec.TaskID,
			MetadataBatchID: spec.BatchID,
		},
	}
	if spec.Attempt > 0 {
		cfg.Metadata[MetadataAttempt] = strconv.Itoa(spec.Attempt)
	}
	if spec.MemoryMB != 0 || spec.CPUs != 0 || spec.CPUKind != "" {
		cfg.Guest = &fly.MachineGuest{MemoryMB: spec.MemoryMB, CPUs: spec.CPUs, CPUKind: spec.CPUKind}
	}
	m, err := b.direct.launch(ctx, spec.App, fly.LaunchMachineInput{
		Name:   spec.Name,
		Region: spec.Region,
		Config: cfg,
	})
	if err != nil {
		return compute.Machine{}, classify(ctx, fmt.Errorf("launching machine %s for task %s: %w", spec.Name, spec.TaskID, err))
	}
	b.log.DebugContext(ctx, "machine launched",
		"app", spec.App, "machine_id", m.ID, "machine_name", spec.Name,
		"task_id", spec.TaskID, "batch_id", spec.BatchID, "attempt", spec.Attempt, "phase", spec.Phase, "state", m.State)
	return compute.Machine{ID: m.ID, App: spec.App, State: m.State, TaskID: spec.TaskID, BatchID: spec.BatchID, Attempt: spec.Attempt,
		CreatedAt: createdAt(m.CreatedAt)}, nil
}

// FindByTask lists the app's machines carrying metadata task_id=taskID, of
// every attempt, excluding destroyed ones. The caller fences by attempt
// (compute.Fence).
func (b *Backend) FindByTask(ctx context.Context, app, taskID string) ([]compute.Machine, error) {
	return b.listBy(ctx, app, MetadataTaskID, "task", taskID)
}

// ListByBatch lists the app's machines carrying metadata
// batch_id=batchID, excluding destroyed ones, in one request.
func (b *Backend) ListByBatch(ctx context.Context, app, batchID string) ([]compute.Machine, error) {
	return b.listBy(ctx, app, MetadataBatchID, "batch", batchID)
}

// ListOwned lists the app's machines carrying metadata task_id, excluding
// destroyed ones, in one request. Fly's metadata filter matches a value,
// not a key's presence, so the app's machines are listed whole and
// filtered here.
func (b *Backend) ListOwned(ctx context.Context, app string) ([]compute.Machine, error) {
	if err := validatePathPart("app", app); err != nil {
		return nil, compute.Permanent(err, 0)
	}
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()

	ms, err := b.direct.list(ctx, app, "", func(meta map[string]string) bool { return meta[MetadataTaskID] != "" })
	if err != nil {
		return nil, classify(ctx, fmt.Errorf("listing the machines of %s: %w", app, err))
	}
	return ms, nil
}

// listBy lists the app's machines whose metadata key is value, excluding
// destroyed ones. The filter is applied by the API and again here, so a
// server that ignored the query parameter cannot produce a false match.
// what names the key in errors ("task").
func (b *Backend) listBy(ctx context.Context, app, key, what, value string) ([]compute.Machine, error) {
	if err := validatePathPart("app", app); err != nil {
		return nil, compute.Permanent(err, 0)
	}
	if value == "" {
		return nil, compute.Permanent(fmt.Errorf("flycompute: %s id is required", what), 0)
	}
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()

	ms, err := b.direct.list(ctx, app, "metadata."+key+"="+url.QueryEscape(value), func(meta map[string]string) bool { return meta[key] == value })
	if err != nil {
		return nil, classify(ctx, fmt.Errorf("listing machines of %s %s: %w", what, value, err))
	}
	return ms, nil
}

// listedMachine is what list reads of a machine in the list's answer;
// the rest of each element (its config's image, env, guest...) is skipped
// by the decoder unread.
type listedMachine struct {
	ID        string `json:"id"`
	State     string `json:"state"`
	CreatedAt string `json:"created_at"`
	Config    struct {
		Metadata map[string]string `json:"metadata"`
	} `json:"config"`
}

// dialRetries is how many times a request that never left (a dial
// error) is sent again, as fly-go's transport would: nothing can have
// taken effect.
const dialRetries = 3

// send sends method path with in as its JSON body (nil: none), built by
// fly-go's NewRequest, through the guard transport. A request that failed
// to dial is sent again, up to dialRetries times (100 ms, 200 ms, 400 ms
// apart); nothing else is: the guard makes every other failure of a POST
// ambiguous. A non-2xx answer is a *flaps.FlapsError, as fly-go's would
// be, so classify treats both alike. The caller closes the body.
func (c directClient) send(ctx context.Context, method, path string, in any) (*http.Response, error) {
	for attempt := 0; ; attempt++ {
		req, err := c.flaps.NewRequest(ctx, method, path, in, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("User-Agent", c.userAgent)
		resp, err := c.http.Do(req)
		if err != nil {
			if !neverSent(err) || attempt == dialRetries {
				return nil, err
			}
			select {
			case <-time.After((100 * time.Millisecond) << attempt):
				continue
			case <-ctx.Done():
				return nil, fmt.Errorf("%w (after %w)", ctx.Err(), err)
			}
		}
		if resp.StatusCode/100 != 2 {
			defer resp.Body.Close()
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			return nil, &flaps.FlapsError{ResponseStatusCode: resp.StatusCode, ResponseBody: body, OriginalError: fmt.Errorf("fly machines API answered %d %s: %s", resp.StatusCode, http.StatusText(resp.StatusCode), apiMessage(body))}
		}
		return resp, nil
	}
}

// launchedMachine is what launch reads of the API's answer to a create:
// the rest (the machine's config, its env included, echoed back) is
// skipped by the decoder unread.
type launchedMachine struct {
	ID        string `json:"id"`
	State     string `json:"state"`
	CreatedAt string `json:"created_at"`
}

// launch sends POST /v1/apps/{app}/machines, the request fly-go's Launch
// sends (see the package doc), and reads the machine's ID, state and
// creation time from the answer.
func (c directClient) launch(ctx context.Context, app string, in fly.LaunchMachineInput) (launchedMachine, error) {
	resp, err := c.send(ctx, http.MethodPost, "/apps/"+app+"/machines", in)
	if err != nil {
		return launchedMachine{}, err
	}
	defer resp.Body.Close()
	var m launchedMachine
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		return launchedMachine{}, fmt.Errorf("reading the launched machine: %w", err)
	}
	if m.ID == "" {
		return launchedMachine{}, errors.New("reading the launched machine: the answer has no id")
	}
	return m, nil
}

// list sends GET /v1/apps/{app}/machines?{query} and returns the machines
// keep accepts by their metadata, destroyed ones excluded, decoding the
// answer one machine at a time (see the package doc).
func (c directClient) list(ctx context.Context, app, query string, keep func(meta map[string]string) bool) ([]compute.Machine, error) {
	path := "/apps/" + app + "/machines"
	if query != "" {
		path += "?" + query
	}
	resp, err := c.send(ctx, http.MethodGet, path, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	if tok, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("reading the machines list: %w", err)
	} else if d, ok := tok.(json.Delim); !ok || d != '[' {
		return nil, fmt.Errorf("reading the machines list: want an array, got %v", tok)
	}
	var out []compute.Machine
	for dec.More() {
		var m listedMachine
		if err := dec.Decode(&m); err != nil {
			return nil, fmt.Errorf("reading the machines list: %w", err)
		}
		if m.State == fly.MachineStateDestroyed || !keep(m.Config.Metadata) {
			continue
		}
		// A missing or malformed attempt reads as 0: an earlier attempt.
		attempt, _ := strconv.Atoi(m.Config.Metadata[MetadataAttempt])
		out = append(out, compute.Machine{ID: m.ID, App: app, State: m.State, TaskID: m.Config.Metadata[MetadataTaskID],
			BatchID: m.Config.Metadata[MetadataBatchID], Attempt: attempt, CreatedAt: createdAt(m.CreatedAt)})
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("reading the machines list: %w", err)
	}
	return out, nil
}

// createdAt reads a machine's created_at (RFC 3339), zero if absent.
func createdAt(s string) time.Time {
	t, _ := time.Parse(time.RFC3339, s)
	return t
}

// Destroy force-destroys a machine (fly-go sends ?kill=true). A machine Fly no
// longer knows (404) is already gone, which is what the caller wanted.
func (b *Backend) Destroy(ctx context.Context, app, machineID string) error {
	if err := validatePathPart("app", app); err != nil {
		return compute.Permanent(err, 0)
	}
	if err := validatePathPart("machine id", machineID); err != nil {
		return compute.Permanent(err, 0)
	}
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()

	err := b.client.Destroy(ctx, app, fly.RemoveMachineInput{ID: machineID, Kill: true}, "")
	if err != nil {
		var fe *flaps.FlapsError
		if errors.As(err, &fe) && fe.ResponseStatusCode == http.StatusNotFound {
			b.log.DebugContext(ctx, "machine already gone", "app", app, "machine_id", machineID)
			return nil
		}
		return classify(ctx, fmt.Errorf("destroying machine %s: %w", machineID, err))
	}
	b.log.DebugContext(ctx, "machine destroyed", "app", app, "machine_id", machineID)
	return nil
}

func validateSpec(spec compute.MachineSpec) error {
	if err := validatePathPart("app", spec.App); err != nil {
		return err
	}
	switch {
	case spec.Image == "":
		return errors.New("flycompute: machine image is required")
	case spec.Name == "":
		return errors.New("flycompute: machine name is required")
	case spec.TaskID == "":
		return errors.New("flycompute: task id is required")
	}
	return nil
}

// validatePathPart rejects values that would change the request path or
// query when fly-go interpolates them into the URL.
func validatePathPart(what, v string) error {
	if v == "" {
		return fmt.Errorf("flycompute: %s is required", what)
	}
	if strings.ContainsAny(v, "/?#% \t\r\n") {
		return fmt.Errorf("flycompute: invalid %s %q", what, v)
	}
	return nil
}

// classify maps a failed call to a compute error kind; see package compute
// for what each kind obliges the launcher to do.
func classify(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		// rehttp reports a cancellation during its backoff as a plain
		// "request canceled" error; keep the real cause visible to errors.Is.
		err = fmt.Errorf("%w: %w", err, cerr)
	}
	var se *statusError
	if errors.As(err, &se) {
		if se.status == http.StatusTooManyRequests {
			return compute.RateLimited(err, se.status, se.retryAfter)
		}
		return compute.Ambiguous(err, se.status)
	}
	var fe *flaps.FlapsError
	if errors.As(err, &fe) {
		status := fe.ResponseStatusCode
		switch {
		case status == http.StatusTooManyRequests:
			return compute.RateLimited(err, status, 0)
		case status == http.StatusRequestTimeout, status >= 500:
			return compute.Ambiguous(err, status)
		case status == http.StatusConflict:
			// Fly documents machine names as unique: a conflict on create
			// means a machine with this task's name may already exist.
			return compute.Ambiguous(err, status)
		case status >= 400:
			if sc := fe.StatusCode(); sc != nil && *sc == "insufficient_capacity" {
				// Region momentarily full: nothing was created and a later
				// attempt may succeed, so it must not fail the phase.
				return compute.Ambiguous(err, status)
			}
			return compute.Permanent(err, status)
		default:
			return compute.Ambiguous(err, status)
		}
	}
	// Transport errors, timeouts and undecodable 2xx bodies: the request may
	// have been executed.
	return compute.Ambiguous(err, 0)
}

// readBody reads a request's body, into a buffer of its length when that
// is known (a launch's is several KB, which io.ReadAll would copy as it
// grows).
func readBody(req *http.Request) ([]byte, error) {
	if n := req.ContentLength; n > 0 && n <= 1<<20 {
		body := make([]byte, n)
		_, err := io.ReadFull(req.Body, body)
		return body, err
	}
	return io.ReadAll(req.Body)
}

// guardTransport sits under fly-go's retrying transport (see package doc).
// It points requests at the configured base URL, keeps Retry-After of 429
// answers, and stops fly-go from silently repeating a POST that may have
// taken effect.
type guardTransport struct {
	base *url.URL
	next http.RoundTripper
}

func (t *guardTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	out := req
	if req.Body != nil && req.Body != http.NoBody {
		// rehttp rewinds and reuses one body reader for its retries while
		// net/http may still be reading it for the previous attempt (a data
		// race; the retry can go out with an empty body). Handing net/http
		// its own copy, read here before returning, rules that out.
		body, err := readBody(req)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
		out = req.Clone(req.Context())
		out.Body = io.NopCloser(bytes.NewReader(body))
		out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		out.ContentLength = int64(len(body))
	}
	if t.base != nil {
		if out == req {
			out = req.Clone(req.Context())
		}
		out.URL.Scheme = t.base.Scheme
		out.URL.Host = t.base.Host
		if p := strings.TrimSuffix(t.base.Path, "/"); p != "" {
			out.URL.Path = p + out.URL.Path
			out.URL.RawPath = ""
		}
		out.Host = ""
	}
	resp, err := t.next.RoundTrip(out)
	if err != nil {
		if req.Method == http.MethodPost && !neverSent(err) {
			return nil, &sentError{err: err}
		}
		return nil, err
	}
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
		return nil, newStatusError(resp)
	case req.Method == http.MethodPost &&
		(resp.StatusCode == http.StatusBadGateway || resp.StatusCode == http.StatusServiceUnavailable):
		return nil, newStatusError(resp)
	}
	return resp, nil
}

// neverSent reports transport errors that happened before any byte of the
// request left (dial and DNS failures): retrying those cannot duplicate.
func neverSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// sentError hides Temporary() from rehttp so a POST that may have reached Fly
// is not sent again. It keeps the text and the chain.
type sentError struct{ err error }

func (e *sentError) Error() string { return e.err.Error() }
func (e *sentError) Unwrap() error { return e.err }

// statusError is an HTTP answer our transport turned into an error; it has
// no Temporary() method, so rehttp does not retry it.
type statusError struct {
	status     int
	retryAfter time.Duration
	msg        string
}

func (e *statusError) Error() string {
	return fmt.Sprintf("fly machines API answered %d %s: %s", e.status, http.StatusText(e.status), e.msg)
}

func newStatusError(resp *http.Response) *statusError {
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return &statusError{
		status:     resp.StatusCode,
		retryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()),
		msg:        apiMessage(body),
	}
}

// apiMessage extracts Fly's {"error"|"message": ...} text, like fly-go does,
// falling back to the (truncated) raw body.
func apiMessage(body []byte) string {
	var e struct {
		Error   string `json:"error"`
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &e) == nil {
		if e.Message != "" {
			return e.Message
		}
		if e.Error != "" {
			return e.Error
		}
	}
	s := strings.TrimSpace(string(body))
	if len(s) > 512 {
		s = s[:512] + "..."
	}
	return s
}

// parseRetryAfter reads delay-seconds or an HTTP date; 0 if absent or bad.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(v); err == nil {
		if secs < 0 {
			return 0
		}
		return time.Duration(secs) * time.Second
	}
	if at, err := http.ParseTime(v); err == nil {
		if d := at.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}
