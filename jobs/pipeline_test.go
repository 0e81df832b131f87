package jobs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/manifest"
	"github.com/arke-institute/orchestrator/status"
	"github.com/arke-institute/orchestrator/tasktoken"
)

// TestMixedBatchEndToEnd drives a batch of TIFFs, images and documents
// through TIFF_CONVERSION and IMAGE_PROCESSING to DONE through the real
// fly-go client against the fake Machines API, whose machines play the
// workers. One TIFF worker reports an error, one never calls back (it times
// out), one image worker calls back twice.
func TestMixedBatchEndToEnd(t *testing.T) {
	t.Parallel()
	behave := func(l fakefly.Launch) fakefly.Behavior {
		switch path.Base(l.Env["INPUT_R2_KEY"]) {
		case "b.TIFF":
			return fakefly.Behavior{Body: map[string]any{"task_id": l.TaskID, "batch_id": l.BatchID, "status": "error", "error": "Failed to decode TIFF: corrupt data at byte 12345"}}
		case "c.tiff":
			return fakefly.Behavior{Hang: true}
		case "d.jpg":
			return fakefly.Behavior{Body: testenv.WorkerResult(l), Duplicate: 1}
		}
		return testenv.Succeed(l)
	}
	// One attempt per task: the hung machine's task fails at its timeout
	// (attempts_test.go has the retries).
	env := testenv.New(t, testenv.Options{Behave: behave, Settings: map[string]string{"TASK_TIMEOUT_TIFF_CONVERSION": "1500", "TASK_MAX_ATTEMPTS": "1"}})
	ocr := manifest.ProcessingConfig{OCR: true, Describe: true, Pinax: true}
	const id = "E2E-MIXED"
	env.Submit(t, id, []testenv.File{
		{LogicalPath: "/scans/a.tif", Size: 1000, ContentType: "image/tiff", Config: ocr},
		{LogicalPath: "/scans/b.TIFF", Size: 2000, ContentType: "image/tiff", Config: ocr},
		{LogicalPath: "/scans/c.tiff", Size: 3000, ContentType: "image/tiff", Config: ocr},
		{LogicalPath: "/photos/d.jpg", Size: 400, ContentType: "image/jpeg"},
		{LogicalPath: "/photos/e.png", Size: 500, ContentType: "image/png"},
		{LogicalPath: "/docs/f.csv", Size: 600, ContentType: "text/csv"},
		{LogicalPath: "/meta.json", Size: 70, ContentType: "application/json"},
	})

	st := env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	require.NotNil(t, st.CompletedAt)
	require.Equal(t, []status.PhaseProgress{
		// b's file is bad (permanent); c's machine hung (infrastructure).
		{Phase: "TIFF_CONVERSION", Executor: "machine", Unit: "tasks", TasksTotal: 3, TasksCompleted: 1, TasksFailed: 2, TasksFailedInfrastructure: 1},
		{Phase: "IMAGE_PROCESSING", Executor: "machine", Unit: "tasks", TasksTotal: 3, TasksCompleted: 3},
		// The fake image workers publish no variants: the one ref whose
		// directory asked for OCR fails, as a missing object.
		{Phase: "OCR", Executor: "chunked", Unit: "refs", TasksTotal: 1, TasksFailed: 1,
			Detail: map[string]int64{"chunks_total": 1, "chunks_done": 0, "chunks_error": 1}},
	}, st.Phases)
	require.Equal(t, status.Failures{Permanent: 2, Infrastructure: 1}, st.Failures)

	// The final manifest reaches ingest once, with an idempotency key.
	call := env.AwaitIngest(t, 1)[0]
	require.Equal(t, "/api/batches/"+id+"/enqueue-processed", call.Path)
	require.Equal(t, http.StatusOK, call.Status)
	require.True(t, strings.HasPrefix(call.IdempotencyKey, id+"@"), call.IdempotencyKey)
	var delivered jobs.ProcessedManifest
	require.NoError(t, json.Unmarshal(call.Body, &delivered))
	require.Equal(t, id, delivered.BatchID)

	type entry struct {
		Dir, Path, Type string
		Size            int64
		Tags            []string
		OCR             bool
	}
	var got []entry
	for _, d := range delivered.Manifest.Directories {
		var sum int64
		for _, f := range d.Files {
			got = append(got, entry{d.DirectoryPath, f.LogicalPath, f.ContentType, f.FileSize, f.PreprocessorTags, d.ProcessingConfig.OCR})
			sum += f.FileSize
		}
		require.Equal(t, int64(len(d.Files)), d.FileCount)
		require.Equal(t, sum, d.TotalBytes)
	}
	require.Equal(t, []entry{
		{"/scans", "/scans/a.tif", "image/tiff", 1000, []string{"TiffConverter:source"}, true},
		{"/scans", "/scans/a.jpg.ref.json", "application/json", 321, []string{"ImageProcessor"}, true},
		{"/scans", "/scans/b.TIFF", "image/tiff", 2000, []string{}, true},
		{"/scans", "/scans/c.tiff", "image/tiff", 3000, []string{}, true},
		{"/photos", "/photos/d.jpg.ref.json", "application/json", 321, []string{"ImageProcessor"}, false},
		{"/photos", "/photos/e.png.ref.json", "application/json", 321, []string{"ImageProcessor"}, false},
		{"/docs", "/docs/f.csv", "text/csv", 600, []string{}, false},
		{"/", "/meta.json", "application/json", 70, []string{}, false},
	}, got)
	require.Equal(t, int64(8), delivered.Manifest.TotalFiles)

	// Lineage: the ref.json came from the JPEG, which came from the TIFF.
	ctx := context.Background()
	var lineage []string
	rows, err := env.Pool.Query(ctx, `WITH RECURSIVE up AS (
			SELECT id, parent_id, generation, logical_path FROM files
			WHERE batch_id = $1 AND generation = 2 AND logical_path = '/scans/a.jpg.ref.json'
			UNION ALL
			SELECT f.id, f.parent_id, f.generation, f.logical_path FROM files f JOIN up ON f.id = up.parent_id
		) SELECT generation || ':' || logical_path FROM up ORDER BY generation`, id)
	require.NoError(t, err)
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		lineage = append(lineage, s)
	}
	require.Equal(t, []string{"0:/scans/a.tif", "1:/scans/a.jpg", "2:/scans/a.jpg.ref.json"}, lineage)

	// Failure isolation: the error and the timeout are kept with their tasks.
	taskErr := func(file string) string {
		var e string
		require.NoError(t, env.Pool.QueryRow(ctx, `SELECT coalesce(t.error, '') FROM tasks t JOIN files f ON f.id = t.file_id
			WHERE t.batch_id = $1 AND f.file_name = $2`, id, file).Scan(&e))
		return e
	}
	require.Equal(t, "Failed to decode TIFF: corrupt data at byte 12345", taskErr("b.TIFF"))
	require.Regexp(t, `^Task timed out after \d+(\.\d)?s$`, taskErr("c.tiff"))

	// The duplicate callback was answered 200 and changed nothing.
	var dCallbacks []int
	for _, cb := range env.Fly.Callbacks() {
		if strings.HasSuffix(cb.URL, "/"+env.TaskOf(t, id, "d.jpg")) {
			dCallbacks = append(dCallbacks, cb.Status)
		}
	}
	require.Equal(t, []int{http.StatusOK, http.StatusOK}, dCallbacks)
	var dResults int
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT count(*) FROM batch_events WHERE batch_id = $1 AND type = 'task.completed' AND task_id = $2`,
		id, env.TaskOf(t, id, "d.jpg")).Scan(&dResults))
	require.Equal(t, 1, dResults)

	// The hung machine is destroyed, and its late callback is refused.
	hung := env.LaunchOf(t, "c.tiff")
	env.Fly.Await(t, 30*time.Second, "hung machine destroyed", func() bool {
		for _, d := range env.Fly.Destroyed() {
			if d == hung.MachineID {
				return true
			}
		}
		return false
	})
	late, _ := json.Marshal(map[string]any{"status": "success", "output_r2_key": "staging/" + id + "/x.jpg", "output_file_name": "x.jpg", "output_file_size": 1})
	code, body := env.DoAuth(t, http.MethodPost, "/callback/"+id+"/"+hung.TaskID, hung.Env["CALLBACK_TOKEN"], bytes.NewReader(late))
	require.Equal(t, http.StatusConflict, code, string(body))
	require.Contains(t, string(body), "already timed out")
	var rejected int
	require.NoError(t, env.Pool.QueryRow(ctx, `SELECT count(*) FROM batch_events WHERE batch_id = $1 AND type = 'callback.rejected'`, id).Scan(&rejected))
	require.Equal(t, 1, rejected)

	// Every launch carried the contract, and no task got two machines.
	perTask := map[string]int{}
	for _, l := range env.Fly.Launches() {
		perTask[l.TaskID]++
		requireLaunchContract(t, env, id, l)
	}
	require.Len(t, perTask, 6)
	for task, n := range perTask {
		require.Equal(t, 1, n, "task %s launched %d times", task, n)
	}
}

// requireLaunchContract checks one launch against spec 000 §4.3 and the
// execution issue: app, image, region, guest, auto-destroy, restart policy,
// metadata, name and env.
func requireLaunchContract(t *testing.T, env *testenv.Env, batchID string, l fakefly.Launch) {
	t.Helper()
	cfg := env.Config
	wantMem, image := 1024, cfg.Executors.Machine.Phases["TIFF_CONVERSION"].Image
	if l.App == testenv.ImageApp {
		wantMem, image = 2048, cfg.Executors.Machine.Phases["IMAGE_PROCESSING"].Image
	}
	require.Contains(t, []string{testenv.TiffApp, testenv.ImageApp}, l.App)
	require.Equal(t, image, l.Image)
	require.Equal(t, "ord", l.Region)
	require.Equal(t, wantMem, l.MemoryMB)
	require.Equal(t, 2, l.CPUs)
	require.Equal(t, "shared", l.CPUKind)
	require.True(t, l.AutoDestroy)
	require.Equal(t, "no", l.RestartPolicy)
	require.Equal(t, batchID, l.Metadata["batch_id"])
	require.NotEmpty(t, l.Metadata["task_id"])
	require.Equal(t, "1", l.Metadata["attempt"])
	require.Equal(t, strings.ReplaceAll(l.Metadata["task_id"], "_", "-")+"-a1", l.Name, "named after the task and its attempt")

	want := map[string]string{
		"TASK_ID":      l.Metadata["task_id"],
		"BATCH_ID":     batchID,
		"R2_BUCKET":    env.Bucket,
		"CALLBACK_URL": env.Server.URL + "/callback/" + batchID + "/" + l.Metadata["task_id"],
	}
	if l.App == testenv.ImageApp {
		want["ARCHIVE_BUCKET"] = "arke-archive"
		want["CDN_BUCKET"] = "arke-cdn"
		want["CDN_PUBLIC_URL"] = "https://cdn.test"
	}
	require.NotEmpty(t, l.Env["INPUT_FILE_NAME"])
	require.NotEmpty(t, l.Env["INPUT_CONTENT_TYPE"])
	for k, v := range want {
		require.Equal(t, v, l.Env[k], "env %s", k)
	}
	// No storage credentials: a presigned GET of the input, and PUTs of the
	// outputs its phase plans.
	for _, k := range []string{"R2_ACCOUNT_ID", "R2_ENDPOINT", "R2_ACCESS_KEY_ID", "R2_SECRET_ACCESS_KEY"} {
		require.NotContains(t, l.Env, k)
	}
	require.True(t, strings.HasPrefix(l.Env["INPUT_URL"], cfg.R2Endpoint+"/"+env.Bucket+"/"+l.Env["INPUT_R2_KEY"]+"?"), "INPUT_URL")
	require.Contains(t, l.Env["INPUT_URL"], "X-Amz-Signature=")
	require.NotEmpty(t, l.Env["OUTPUT_URLS"], "the TIFF and image phases plan their outputs")
	require.True(t, strings.HasPrefix(l.Env["INPUT_R2_KEY"], "staging/"+batchID+"/"), l.Env["INPUT_R2_KEY"])
	require.GreaterOrEqual(t, len(l.Env["CALLBACK_TOKEN"]), 40, "a fresh random token")

	// Only the hash of the token's nonce is stored, and the token is
	// sealed for its own task.
	var stored []byte
	require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT token_hash FROM tasks WHERE id = $1`, l.Metadata["task_id"]).Scan(&stored))
	record, err := tasktoken.New(env.Pool).Open(context.Background(), tasktoken.Task(batchID, l.Metadata["task_id"]), l.Env["CALLBACK_TOKEN"])
	require.NoError(t, err)
	require.Equal(t, stored, record)
	_, err = tasktoken.New(env.Pool).Open(context.Background(), tasktoken.Task(batchID, "tiff_other"), l.Env["CALLBACK_TOKEN"])
	require.ErrorIs(t, err, tasktoken.ErrForged, "the token opens no other task")
}

// TestThousandsOfFiles runs a 2,000-file batch (10% TIFF) to DONE: every
// task completes, every file is in the final manifest once, and each task got
// one machine.
func TestThousandsOfFiles(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Behave: testenv.Succeed})
	const id, n = "THOUSANDS", 2000
	var files []testenv.File
	for i := range n {
		f := testenv.File{LogicalPath: fmt.Sprintf("/d%d/p%05d.jpg", i%7, i), Size: 100, ContentType: "image/jpeg"}
		if i%10 == 0 {
			f = testenv.File{LogicalPath: fmt.Sprintf("/d%d/s%05d.tif", i%7, i), Size: 100, ContentType: "image/tiff"}
		}
		files = append(files, f)
	}
	env.Submit(t, id, files)
	st := env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	require.Equal(t, []status.PhaseProgress{
		{Phase: "TIFF_CONVERSION", Executor: "machine", Unit: "tasks", TasksTotal: n / 10, TasksCompleted: n / 10},
		{Phase: "IMAGE_PROCESSING", Executor: "machine", Unit: "tasks", TasksTotal: n, TasksCompleted: n},
	}, st.Phases)

	var delivered jobs.ProcessedManifest
	require.NoError(t, json.Unmarshal(env.AwaitIngest(t, 1)[0].Body, &delivered))
	// Every image became its ref.json; every TIFF stayed as the source.
	require.Equal(t, int64(n+n/10), delivered.Manifest.TotalFiles)
	seen := map[string]bool{}
	for _, d := range delivered.Manifest.Directories {
		for _, f := range d.Files {
			require.False(t, seen[f.R2Key], "%s listed twice", f.R2Key)
			seen[f.R2Key] = true
		}
	}
	env.RequireOneMachinePerTask(t, id)
}
