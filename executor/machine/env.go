package machine

import (
	"context"
	"maps"
	"strconv"
	"time"

	"github.com/arke-institute/orchestrator/batchurls"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/tasktoken"
	"github.com/arke-institute/orchestrator/worker/protocol"
)

// Task is one attempt of a task as a worker gets it: its ids, its input,
// and the callback token of the attempt.
type Task struct {
	ID, BatchID string
	Phase       phases.Name
	R2Key       string
	FileName    string
	ContentType string
	CID         *string
	// Token is the attempt's callback token, given to its worker once.
	Token string
	// Deadline is the attempt's, set as it was claimed or leased.
	Deadline *time.Time
	// Traceparent is the trace context of the span that launched or
	// leased the attempt, "" when not traced: the worker sends it with
	// its callbacks (TRACEPARENT), which then join the task's trace.
	Traceparent string
}

// TaskEnv is the worker's environment for one task (spec 000 §4.3), the
// same for a machine of its own and for a pool machine that leased it: the
// protocol's version, the task's ids and input, its callback URL and token, the attempt's name
// for a phase that stages its outputs (TASK_ATTEMPT), the phase's own
// settings and the shared ones it names. The worker gets no storage
// credentials: presigned URLs for its input and planned outputs
// (batchurls.Signer.Env), valid until the task's deadline plus
// batchurls.Margin.
func TaskEnv(deps jobs.Deps, cfg Config, urls *batchurls.Signer, t Task) map[string]string {
	s := deps.Settings
	pcfg := cfg.Phases[t.Phase]
	p, known := phases.Get(t.Phase)
	var shared []string
	if known {
		shared = p.Spec().SharedEnv
	}
	// Sized for every variable, INPUT_URL and OUTPUT_URLS included: a
	// launch builds no map twice.
	env := make(map[string]string, 14+len(pcfg.Env)+len(shared))
	env[protocol.EnvVar] = protocol.Value(protocol.Current)
	env["TASK_ID"] = t.ID
	env["BATCH_ID"] = t.BatchID
	env["INPUT_R2_KEY"] = t.R2Key
	env["INPUT_FILE_NAME"] = t.FileName
	env["INPUT_CONTENT_TYPE"] = t.ContentType
	env["R2_BUCKET"] = s.StagingBucket()
	env["CALLBACK_URL"] = s.CallbackURL + "/callback/" + t.BatchID + "/" + t.ID
	env["CALLBACK_TOKEN"] = t.Token
	env["CALLBACK_RETRY_WINDOW"] = strconv.FormatInt(cfg.CallbackRetryWindow.Milliseconds(), 10)
	if t.CID != nil {
		env["INPUT_CID"] = *t.CID
	}
	if t.Traceparent != "" {
		env["TRACEPARENT"] = t.Traceparent
	}
	maps.Copy(env, pcfg.Env)
	if !known {
		return env
	}
	for _, k := range shared {
		env[k] = sharedValue(s, k)
	}
	// The task's deadline was set at its claim, just before (the timeout
	// scaled by the input's size).
	now := time.Now()
	deadline := now.Add(pcfg.TaskTimeout)
	if t.Deadline != nil {
		deadline = *t.Deadline
	}
	// The worker retries storage and URL requests until then.
	env["TASK_DEADLINE"] = deadline.UTC().Format(time.RFC3339)
	if t.Deadline != nil {
		// Two seconds more: the signature's date and TTL are whole
		// seconds, and the URLs must not expire before the deadline plus
		// the margin.
		deadline = t.Deadline.Add(2 * time.Second)
	}
	attempt := phases.StagingAttempt(p, t.ID, tasktoken.RecordOf(t.Token))
	if attempt != "" {
		env["TASK_ATTEMPT"] = attempt
	}
	scope := batchurls.Scope{BatchID: t.BatchID, Attempt: attempt, Phase: p, Input: t.R2Key}
	if err := urls.Env(context.Background(), env, scope, batchurls.TTL(now, deadline)); err != nil {
		// A worker without its URLs asks for them, and reports why it
		// cannot have them.
		deps.Logger.Error("presigning a worker's URLs", "batch_id", t.BatchID, "task_id", t.ID, "phase", string(t.Phase), "error", err)
	}
	return env
}
