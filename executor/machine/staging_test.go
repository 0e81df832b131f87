package machine_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/fanin"
	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
	"github.com/arke-institute/orchestrator/internal/harness/eventually"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
	"github.com/arke-institute/orchestrator/manifest"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/worker"
)

// TestAttemptsStageTheirOutputs: two attempts of an image task write the
// same ref.json through their presigned URLs, as the real worker does.
// Each lands in its attempt's staging area; the second attempt's success
// promotes its own to the final key, and the first attempt, which hung
// and wrote again after that, changes nothing the batch keeps. At the
// phase's end the first attempt's staged object is gone.
func TestAttemptsStageTheirOutputs(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	stores := map[int]*worker.URLStore{}
	ref := func(name string) []byte {
		b, _ := json.Marshal(map[string]any{"url": "http://cdn.test/x", "type": "image/jpeg", "size": 100, "filename": name,
			"width": 8, "height": 8, "variants": map[string]string{}})
		return b
	}
	env := testenv.New(t, testenv.Options{Behave: func(l fakefly.Launch) fakefly.Behavior {
		if l.App != testenv.ImageApp {
			return testenv.Succeed(l)
		}
		cfg, err := worker.ParseEnv(worker.KindImage, func(k string) string { return l.Env[k] })
		if err != nil {
			return fakefly.Behavior{Body: map[string]any{"task_id": l.TaskID, "batch_id": l.BatchID, "status": "error", "error": err.Error()}}
		}
		store := cfg.NewStore(nil)
		mu.Lock()
		stores[l.Attempt] = store
		mu.Unlock()
		key := phases.RefJSONKey(cfg.Input.Key)
		body := ref("attempt-" + strconv.Itoa(l.Attempt))
		if err := store.Put(context.Background(), cfg.Bucket, key, strings.NewReader(string(body)), int64(len(body)), "application/json"); err != nil {
			return fakefly.Behavior{Body: map[string]any{"task_id": l.TaskID, "batch_id": l.BatchID, "status": "error", "error": err.Error()}}
		}
		if l.Attempt == 1 {
			return fakefly.Behavior{Hang: true}
		}
		return fakefly.Behavior{Body: map[string]any{"task_id": l.TaskID, "batch_id": l.BatchID, "status": "success",
			"ref_json_r2_key": key, "ref_data": json.RawMessage(body), "archive_r2_key": cfg.Input.Key, "ref_json_size": len(body)}}
	}, Settings: map[string]string{"TASK_TIMEOUT_IMAGE_PROCESSING": "1000"}})
	const id = "STAGED"
	env.Submit(t, id, testenv.Images("/photos", 1, manifest.ProcessingConfig{Pinax: true}))
	st := env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)

	ctx := context.Background()
	final := "staging/" + id + "/photos/p000.jpg.ref.json"
	staged := func() []string {
		var keys []string
		require.NoError(t, env.Store.(blob.Deleter).List(ctx, env.Bucket, phases.AttemptsPrefix(phases.StagingBucket, id), func(ks []string) error {
			keys = append(keys, ks...)
			return nil
		}))
		return keys
	}
	got, err := env.Store.Get(ctx, env.Bucket, final)
	require.NoError(t, err)
	require.JSONEq(t, string(ref("attempt-2")), string(got), "the applied attempt's output, promoted")
	// The check that ended the phase deletes the staging areas after its
	// transaction (Settled), then completes: once it has, the first
	// attempt's staged output is gone.
	eventually.True(t, 10*time.Second, "the phase's last check done, the first attempt's staged output deleted", func() bool {
		var unfinished int
		require.NoError(t, env.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = $1 AND args->>'batch_id' = $2
			AND args->>'phase' = $3 AND state NOT IN ('completed', 'cancelled', 'discarded')`,
			fanin.PhaseCheckArgs{}.Kind(), id, string(phases.ImageProcessing)).Scan(&unfinished))
		return unfinished == 0 && len(staged()) == 0
	})

	// The first attempt writes again, late: into its own area only.
	mu.Lock()
	first := stores[1]
	mu.Unlock()
	late := ref("late")
	require.NoError(t, first.Put(ctx, env.Bucket, final, strings.NewReader(string(late)), int64(len(late)), "application/json"))
	got, err = env.Store.Get(ctx, env.Bucket, final)
	require.NoError(t, err)
	require.JSONEq(t, string(ref("attempt-2")), string(got), "a superseded attempt changes nothing the batch keeps")
	require.Len(t, staged(), 1)
}
