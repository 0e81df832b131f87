package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/batchurls"
	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/executor/machine"
	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
	"github.com/arke-institute/orchestrator/phases"
)

// launchedImage submits a batch of one JPEG, whose machine hangs, and
// returns its launch once recorded.
func launchedImage(t *testing.T, env *testenv.Env, batchID string, data []byte) fakefly.Launch {
	t.Helper()
	env.PutObject(t, "staging/"+batchID+"/photos/a.jpg", data)
	env.Submit(t, batchID, []testenv.File{{LogicalPath: "/photos/a.jpg", Size: int64(len(data)), ContentType: "image/jpeg"}})
	var launch fakefly.Launch
	env.Fly.Await(t, 30*time.Second, "the image's machine", func() bool {
		for _, l := range env.Fly.Launches() {
			if l.MachineID != "" {
				launch = l
				return true
			}
		}
		return false
	})
	return launch
}

// request makes a presigned request, returning its status and body.
func request(t *testing.T, u blob.Presigned, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(u.Method.HTTPMethod(), u.URL, bytes.NewReader(body))
	require.NoError(t, err)
	if body == nil {
		req.Body = http.NoBody
	}
	for k, v := range u.Header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, got
}

func askURLs(t *testing.T, env *testenv.Env, batchID, taskID, token string, body any) (int, []byte) {
	t.Helper()
	data, ok := body.(string)
	if !ok {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		data = string(b)
	}
	return env.DoAuth(t, http.MethodPost, "/callback/"+batchID+"/"+taskID+"/urls", token, strings.NewReader(data))
}

// TestMachineGetsURLsNotKeys: a machine's environment holds no storage
// credentials but a GET of its input and PUTs of its planned outputs,
// valid until the task's deadline plus batchurls.Margin, and they work on the S3
// server.
func TestMachineGetsURLsNotKeys(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, hanging)
	const batchID = "URLENV"
	l := launchedImage(t, env, batchID, []byte("jpeg bytes"))

	for _, k := range []string{"R2_ACCESS_KEY_ID", "R2_SECRET_ACCESS_KEY", "R2_ACCOUNT_ID", "R2_ENDPOINT"} {
		require.NotContains(t, l.Env, k)
	}
	require.NotContains(t, fmt.Sprint(l.Env), env.Config.R2SecretAccessKey)
	code, got := request(t, blob.Presigned{Object: blob.Object{Method: blob.MethodGet}, URL: l.Env["INPUT_URL"]}, nil)
	require.Equal(t, http.StatusOK, code, string(got))
	require.Equal(t, "jpeg bytes", string(got))

	input := "staging/" + batchID + "/photos/a.jpg"
	outputs, err := blob.ParseCompact(blob.Presigned{Object: blob.Object{Method: blob.MethodGet, Bucket: env.Bucket, Key: input}, URL: l.Env["INPUT_URL"]},
		l.Env["OUTPUT_URLS"])
	require.NoError(t, err)
	var planned []blob.Object
	for _, u := range outputs {
		planned = append(planned, u.Object)
	}
	// Each replaces: each is in the attempt's staging area.
	attempt := l.Env["TASK_ATTEMPT"]
	require.Regexp(t, "^"+l.TaskID+`\.[0-9a-f]{16}$`, attempt, "the task and its token's hash")
	area := batchID + "/.attempts/" + attempt
	require.Equal(t, []blob.Object{
		{Method: blob.MethodPut, Bucket: "arke-cdn", Key: "variants/" + area + "/photos/a.jpg/thumbnail.jpg"},
		{Method: blob.MethodPut, Bucket: "arke-cdn", Key: "variants/" + area + "/photos/a.jpg/medium.jpg"},
		{Method: blob.MethodPut, Bucket: "arke-cdn", Key: "variants/" + area + "/photos/a.jpg/large.jpg"},
		{Method: blob.MethodPut, Bucket: "arke-archive", Key: "staging/" + area + "/photos/a.jpg"},
		{Method: blob.MethodPut, Bucket: env.Bucket, Key: "staging/" + area + "/photos/a.jpg.ref.json"},
	}, planned)
	var deadline time.Time
	require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT deadline FROM tasks WHERE id = $1`, l.TaskID).Scan(&deadline))
	for _, u := range outputs {
		require.WithinDuration(t, deadline.Add(batchurls.Margin), u.Expires, 5*time.Second, u.Key)
		require.False(t, u.Expires.Before(deadline.Add(batchurls.Margin).Add(-time.Second)), "not before the deadline plus the margin")
	}
	// The ref.json's PUT works (the test's bucket is the staging bucket).
	code, got = request(t, outputs[4], []byte(`{"url":"x"}`))
	require.Equal(t, http.StatusOK, code, string(got))
	stored, err := env.Store.Get(context.Background(), env.Bucket, "staging/"+area+"/photos/a.jpg.ref.json")
	require.NoError(t, err)
	require.Equal(t, `{"url":"x"}`, string(stored))
}

// TestWorkerAsksForURLs: POST /callback/:batchId/:taskId/urls presigns a
// running task's batch objects for its worker, and nothing else, for no
// one else.
func TestWorkerAsksForURLs(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, hanging)
	const batchID = "URLASK"
	l := launchedImage(t, env, batchID, []byte("jpeg bytes"))
	token := l.Env["CALLBACK_TOKEN"]
	input := "staging/" + batchID + "/photos/a.jpg"
	staged := func(key string) string { return phases.AttemptKey(key, l.Env["TASK_ATTEMPT"]) }

	t.Run("Presigns", func(t *testing.T) {
		code, body := askURLs(t, env, batchID, l.TaskID, token, map[string]any{"objects": []blob.Object{
			{Method: blob.MethodPut, Bucket: env.Bucket, Key: staged(input + ".ref.json")},
			{Method: blob.MethodGet, Bucket: env.Bucket, Key: input},
			{Method: blob.MethodPut, Bucket: "arke-cdn", Key: staged("variants/" + batchID + "/photos/a.jpg/large.jpg")},
			{Method: blob.MethodPut, Bucket: "arke-archive", Key: staged(input)},
		}})
		require.Equal(t, http.StatusOK, code, string(body))
		var res machine.URLsResult
		require.NoError(t, json.Unmarshal(body, &res))
		require.Len(t, res.URLs, 4)
		put, get := res.URLs[0], res.URLs[1]
		var deadline time.Time
		require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT deadline FROM tasks WHERE id = $1`, l.TaskID).Scan(&deadline))
		require.WithinDuration(t, deadline.Add(batchurls.Margin), put.Expires, 2*time.Second)

		code, got := request(t, put, []byte(`{"url": "x"}`))
		require.Equal(t, http.StatusOK, code, string(got))
		code, got = request(t, get, nil)
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, "jpeg bytes", string(got))
	})

	t.Run("Refused", func(t *testing.T) {
		many := make([]blob.Object, blob.MaxPresignBatch+1)
		for i := range many {
			many[i] = blob.Object{Method: blob.MethodGet, Bucket: env.Bucket, Key: input}
		}
		obj := func(m blob.Method, bucket, key string) map[string]any {
			return map[string]any{"objects": []blob.Object{{Method: m, Bucket: bucket, Key: key}}}
		}
		for name, c := range map[string]struct {
			body any
			want string
		}{
			"OtherBatch":    {obj(blob.MethodGet, env.Bucket, "staging/OTHER/a.jpg"), `refused: key "staging/OTHER/a.jpg" is not under the batch's prefix "staging/URLASK/"`},
			"Climbing":      {obj(blob.MethodPut, env.Bucket, "staging/URLASK/../OTHER/a.jpg"), `refused: key "staging/URLASK/../OTHER/a.jpg" has an empty, "." or ".." path segment`},
			"EmptySegment":  {obj(blob.MethodPut, env.Bucket, "staging/URLASK//a.jpg"), `has an empty, "." or ".." path segment`},
			"Control":       {obj(blob.MethodPut, env.Bucket, "staging/URLASK/a\r.jpg"), `holds a control character`},
			"CDNPrefix":     {obj(blob.MethodPut, "arke-cdn", "staging/URLASK/a.jpg"), `refused: key "staging/URLASK/a.jpg" is not under the batch's prefix "variants/URLASK/"`},
			"Unstaged":      {obj(blob.MethodPut, env.Bucket, "staging/URLASK/a.jpg"), `refused: key "staging/URLASK/a.jpg" is not in the attempt's staging area "staging/URLASK/.attempts/`},
			"OtherBucket":   {obj(blob.MethodGet, "someone-elses", "staging/URLASK/a.jpg"), `refused: bucket "someone-elses" of key "staging/URLASK/a.jpg" is not one a worker may reach`},
			"Method":        {obj("DELETE", env.Bucket, "staging/URLASK/a.jpg"), `refused: method "DELETE" of key "staging/URLASK/a.jpg" is not GET, PUT or PUT_IF_ABSENT`},
			"OneBadOfMany":  {map[string]any{"objects": append(many[:3:3], blob.Object{Method: blob.MethodGet, Bucket: env.Bucket, Key: "staging/X/y"})}, `"staging/X/y"`},
			"TooMany":       {map[string]any{"objects": many}, "1001 objects, at most 1000 per request"},
			"None":          {map[string]any{"objects": []blob.Object{}}, "objects must list at least one"},
			"UnknownField":  {`{"objects": [], "expires": 9999999}`, `unknown field "expires"`},
			"Malformed":     {`{"objects": [`, "invalid request for URLs"},
			"NotAnArray":    {`{"objects": {"key": "x"}}`, "invalid request for URLs"},
			"EmptyKeyFirst": {obj(blob.MethodGet, env.Bucket, ""), `refused: key "" is not under the batch's prefix`},
			// The batch's other files and any other key of the task's
			// folders are not the task's to reach.
			"OtherFile":    {obj(blob.MethodGet, env.Bucket, "staging/URLASK/photos/b.jpg"), `refused: key "staging/URLASK/photos/b.jpg" of staging is neither the task's input "staging/URLASK/photos/a.jpg" nor one of its outputs`},
			"HTMLOnCDN":    {obj(blob.MethodPut, "arke-cdn", staged("variants/URLASK/photos/a.jpg/x.html")), "nor one of its outputs"},
			"OtherArchive": {obj(blob.MethodPut, "arke-archive", staged("staging/URLASK/photos/b.jpg")), "nor one of its outputs"},
			"OwnInput":     {obj(blob.MethodPutIfAbsent, env.Bucket, input), "the task's input, which it may read, not write"},
		} {
			t.Run(name, func(t *testing.T) {
				code, body := askURLs(t, env, batchID, l.TaskID, token, c.body)
				require.Equal(t, http.StatusBadRequest, code, string(body))
				var e struct{ Error string }
				require.NoError(t, json.Unmarshal(body, &e))
				require.Contains(t, e.Error, c.want)
				require.NotContains(t, string(body), "X-Amz-Signature")
			})
		}
	})

	t.Run("NotThisTask", func(t *testing.T) {
		ok := map[string]any{"objects": []blob.Object{{Method: blob.MethodGet, Bucket: env.Bucket, Key: input}}}
		code, body := askURLs(t, env, batchID, l.TaskID, "wrong-token", ok)
		require.Equal(t, http.StatusUnauthorized, code, string(body))
		code, body = askURLs(t, env, batchID, l.TaskID, "", ok)
		require.Equal(t, http.StatusUnauthorized, code, string(body))
		require.Contains(t, string(body), "missing bearer token")
		// The token opens its own task only, refused on its seal.
		code, body = askURLs(t, env, batchID, "image_nosuchtask", token, ok)
		require.Equal(t, http.StatusUnauthorized, code, string(body))
		code, body = askURLs(t, env, "OTHERBATCH", l.TaskID, token, ok)
		require.Equal(t, http.StatusUnauthorized, code, string(body))
		require.Contains(t, string(body), "not issued for this task")
	})

	// An attempt is presigned at most MaxURLsPerAttempt URLs on request.
	t.Run("URLCap", func(t *testing.T) {
		_, err := env.Pool.Exec(context.Background(), `UPDATE tasks SET urls_signed = $2 WHERE id = $1`, l.TaskID, machine.MaxURLsPerAttempt-1)
		require.NoError(t, err)
		get := blob.Object{Method: blob.MethodGet, Bucket: env.Bucket, Key: input}
		code, body := askURLs(t, env, batchID, l.TaskID, token, map[string]any{"objects": []blob.Object{get, get}})
		require.Equal(t, http.StatusConflict, code, string(body))
		require.Contains(t, string(body), "has asked for more than 50000 URLs")
		code, body = askURLs(t, env, batchID, l.TaskID, token, map[string]any{"objects": []blob.Object{get}})
		require.Equal(t, http.StatusOK, code, string(body))
		code, body = askURLs(t, env, batchID, l.TaskID, token, map[string]any{"objects": []blob.Object{get}})
		require.Equal(t, http.StatusConflict, code, string(body))
	})

	t.Run("TaskEnded", func(t *testing.T) {
		code, body := env.DoAuth(t, http.MethodPost, "/admin/reset/"+batchID, testenv.AdminToken, nil)
		require.Equal(t, http.StatusOK, code, string(body))
		ok := map[string]any{"objects": []blob.Object{{Method: blob.MethodGet, Bucket: env.Bucket, Key: input}}}
		code, body = askURLs(t, env, batchID, l.TaskID, token, ok)
		require.Equal(t, http.StatusConflict, code, string(body))
		require.Contains(t, string(body), "task "+l.TaskID+" is failed")
	})
}
