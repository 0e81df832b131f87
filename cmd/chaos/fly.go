package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
	"github.com/arke-institute/orchestrator/internal/fakes/ocrfixture"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/worker"
	"github.com/arke-institute/orchestrator/worker/protocol"
)

// Worker fault kinds the fake machines play, per launch.
const (
	faultHang  = "hang"
	faultCrash = "crash"
	faultLate  = "late"
)

// flyToken is the fake Machines API's token.
const flyToken = "chaos-fly-token"

// errorEvery makes one input in errorEvery a permanent error of its
// worker: the outcome the orchestrator must report for it.
const errorEvery = 17

// intendedSuccess is the outcome the workers give for an input key,
// whatever faults get in the way: the driver checks every task against it.
func intendedSuccess(inputKey string) bool {
	h := fnv.New32a()
	h.Write([]byte(inputKey))
	return h.Sum32()%errorEvery != 0
}

// flyChild is the fake Machines API's process state.
type flyChild struct {
	mu     sync.Mutex
	rng    *rand.Rand
	hang   float64
	crash  float64
	late   float64
	delay  time.Duration
	lateBy time.Duration
	counts map[string]int
	// faulted lists, by task, the launches given a hang, a crash or a late
	// answer ("2:hang": its second launch hung): a task all of whose
	// machines were faulty has no outcome from its worker to keep.
	faulted map[string][]string
	// createFailUntil: until then, a launch creates its machine and is
	// answered 503 (POST /create-then-fail).
	createFailUntil time.Time
}

// behave decides a launch's worker: its intended outcome, and at the
// configured rates a hang, a crash or a late answer.
func (c *flyChild) behave(l fakefly.Launch) fakefly.Behavior {
	var b fakefly.Behavior
	if intendedSuccess(l.Env["INPUT_R2_KEY"]) {
		b = fakefly.Succeed(l)
	} else {
		body, _ := json.Marshal(map[string]any{"task_id": l.TaskID, "batch_id": l.BatchID, "status": "error",
			"error": "chaos: the input is corrupt", "retryable": false})
		b = fakefly.Behavior{Body: body}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if l.PoolMachine == "" && time.Now().Before(c.createFailUntil) {
		b.CreateThenFail, b.LaunchStatus = true, http.StatusServiceUnavailable
	}
	b.Delay = time.Duration(c.rng.Int64N(int64(c.delay) + 1))
	var kind string
	switch roll := c.rng.Float64(); {
	case roll < c.hang:
		b.Hang, kind = true, faultHang
	case roll < c.hang+c.crash:
		b.Crash, kind = true, faultCrash
	case roll < c.hang+c.crash+c.late:
		b.Delay, kind = c.lateBy, faultLate
	default:
		return b
	}
	c.counts[kind]++
	c.faulted[l.TaskID] = append(c.faulted[l.TaskID], fmt.Sprintf("%d:%s", l.Attempt, kind))
	return b
}

// childTB lets a program use fakefly, which is written for tests.
type childTB struct{}

func (childTB) Helper() {}
func (childTB) Errorf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "fakefly: "+format+"\n", args...)
}
func (childTB) Cleanup(func()) {}

// runFly is `chaos fly`: the fake Machines API (internal/fakes/fakefly) as a
// process of its own, shared by both orchestrators and outliving them. Its
// machines give each input its intended outcome (intendedSuccess), after
// up to -delay, and at the given rates hang (until destroyed), crash (exit
// without calling back) or answer after -late-by. Callbacks are retried for
// -callback-window, as real workers do. The control listener serves
// POST /fail (an API outage), GET /report (fakefly.Report) and GET
// /worker-faults. It prints one JSON line, {"url", "control"}, once it
// serves, and runs until killed.
func runFly(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("fly", flag.ContinueOnError)
	control := fs.String("control", "127.0.0.1:0", "control listen address")
	seed := fs.Uint64("seed", 1, "random seed of the worker faults")
	c := &flyChild{counts: map[string]int{}, faulted: map[string][]string{}}
	fs.Float64Var(&c.hang, "hang", 0, "share of machines that hang")
	fs.Float64Var(&c.crash, "crash", 0, "share of machines that crash without calling back")
	fs.Float64Var(&c.late, "late", 0, "share of machines that call back after -late-by")
	fs.DurationVar(&c.delay, "delay", time.Second, "machines call back after up to this")
	fs.DurationVar(&c.lateBy, "late-by", 30*time.Second, "when a late machine calls back")
	window := fs.Duration("callback-window", 15*time.Minute, "how long a machine retries its callback")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c.rng = rand.New(rand.NewPCG(*seed, *seed^0x9e3779b97f4a7c15))
	fly := fakefly.New(childTB{}, fakefly.Options{Token: flyToken, Behave: c.behave, Work: c.work, DetailLimit: -1, Workers: 512,
		CallbackRetryWindow: *window})
	cln, err := net.Listen("tcp", *control)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/", fly.ControlHandler())
	mux.HandleFunc("GET /worker-faults", func(w http.ResponseWriter, _ *http.Request) {
		c.mu.Lock()
		body, _ := json.Marshal(c.counts)
		c.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	})
	mux.HandleFunc("POST /create-then-fail", func(w http.ResponseWriter, r *http.Request) {
		secs, err := strconv.ParseFloat(r.URL.Query().Get("seconds"), 64)
		if err != nil || secs <= 0 {
			http.Error(w, "seconds must be a positive number", http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		c.createFailUntil = time.Now().Add(time.Duration(secs * float64(time.Second)))
		c.mu.Unlock()
	})
	mux.HandleFunc("GET /faulted-tasks", func(w http.ResponseWriter, _ *http.Request) {
		c.mu.Lock()
		body, _ := json.Marshal(c.faulted)
		c.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	})
	go http.Serve(cln, mux) //nolint:errcheck // runs until the process ends
	line, _ := json.Marshal(map[string]string{"url": fly.URL, "control": "http://" + cln.Addr().String()})
	fmt.Fprintln(stdout, string(line))
	<-ctx.Done()
	return nil
}

// outputContent is what a fake worker writes at key, and what the driver
// expects to find there.
func outputContent(key string) string { return "chaos output of " + key }

// inputContent is what the driver uploads at an input's key.
func inputContent(key string) string { return "chaos input of " + key }

// work is the fake workers' storage, as the real worker's: with no
// credentials, through the presigned URLs of its environment (and the
// orchestrator's URL endpoint for more), retrying transient failures until
// the task's deadline (worker.URLStore). It reads the input, and on a
// success writes what the phase makes of it: a TIFF's JPEG (outputContent),
// so the driver can check the final manifest against storage; an image's
// variants and ref, as the image worker does (ocrfixture), so the OCR
// phase has pages to read and the driver knows their text. A storage
// failure is reported as a retryable error, as the real worker does.
func (c *flyChild) work(ctx context.Context, env map[string]string, body []byte) []byte {
	fail := func(err error) []byte {
		b, _ := json.Marshal(map[string]any{"task_id": env["TASK_ID"], "batch_id": env["BATCH_ID"], "status": "error",
			"error": "chaos worker: " + err.Error(), "retryable": true})
		return b
	}
	name := phases.OfTask(env["TASK_ID"])
	p, ok := phases.Get(name)
	if !ok {
		return body
	}
	kind := worker.KindTIFF
	if name == phases.ImageProcessing {
		kind = worker.KindImage
	}
	cfg, err := worker.ParseEnv(kind, func(k string) string { return env[k] })
	if err != nil {
		return fail(err)
	}
	if cfg.Orchestrator == protocol.V1 {
		// Launched by the previous release: its image sends no version
		// (fakefly's machines do the same).
		cfg.Callback.Protocol = protocol.V1
	}
	store := cfg.NewStore(nil)
	data, err := store.Get(ctx, cfg.Bucket, cfg.Input.Key)
	if err != nil {
		return fail(err)
	}
	if string(data) != inputContent(cfg.Input.Key) && string(data) != outputContent(cfg.Input.Key) {
		return fail(fmt.Errorf("input %s holds %q", cfg.Input.Key, data))
	}
	var res struct {
		Status string `json:"status"`
	}
	if json.Unmarshal(body, &res) != nil || res.Status != "success" {
		return body
	}
	if name == phases.ImageProcessing {
		// As the image worker: the variants in the CDN bucket and the
		// ref, which the OCR phase reads, staged under the attempt's area
		// through the presigned URLs (the store of the environment).
		out, err := ocrfixture.Stores{StagingBucket: cfg.Bucket, CDNBucket: cfg.CDNBucket, CDNPublicURL: cfg.CDNPublicURL}.Write(ctx, env)
		if err != nil {
			return fail(err)
		}
		b, err := json.Marshal(out)
		if err != nil {
			return fail(err)
		}
		return b
	}
	in := phases.File{R2Key: cfg.Input.Key, ContentType: cfg.Input.ContentType, FileName: cfg.Input.FileName, LogicalPath: "/" + path.Base(cfg.Input.Key)}
	outs, problem := phases.ApplyOne(p, in, &phases.Task{Status: phases.TaskCompleted, Result: body})
	if problem != nil {
		return body // the orchestrator will say what is wrong with it
	}
	for _, o := range outs {
		if o.R2Key == in.R2Key {
			continue
		}
		// As the TIFF and PDF workers: a write that never replaces, the
		// only one their URLs allow. A retried task finds its first
		// attempt's output, with the same content.
		content := outputContent(o.R2Key)
		err := store.PutIfAbsent(ctx, cfg.Bucket, o.R2Key, strings.NewReader(content), int64(len(content)), "application/octet-stream")
		if err != nil && !errors.Is(err, blob.ErrExists) {
			return fail(err)
		}
	}
	return body
}
