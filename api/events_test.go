package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
	"github.com/arke-institute/orchestrator/internal/harness/eventually"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
	"github.com/arke-institute/orchestrator/status"
)

func TestEventsList(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, hanging)
	env.PutObject(t, exampleManifestKey, []byte(exampleManifest))
	code, _ := postBatch(t, env, exampleMessage)
	require.Equal(t, http.StatusAccepted, code)
	awaitEvents(t, env, exampleBatchID, 3)

	get := func(query string) status.EventPage {
		t.Helper()
		code, body := env.Do(t, http.MethodGet, "/batches/"+exampleBatchID+"/events"+query, nil)
		require.Equal(t, http.StatusOK, code, "body: %s", body)
		var page status.EventPage
		require.NoError(t, json.Unmarshal(body, &page))
		return page
	}
	all := get("")
	require.Len(t, all.Events, 3)
	require.Equal(t, []string{"batch.created", "phase.started", "task.launched"}, eventTypes(all.Events))
	require.False(t, all.HasMore)
	require.Equal(t, all.Events[2].ID, all.NextAfter)
	require.Equal(t, "PDF_PAGES", *all.Events[1].Phase)
	require.NotNil(t, all.Events[2].TaskID)
	require.JSONEq(t, `{"uploader": "john.doe@arke.institute", "total_files": 3, "total_bytes": 3145728}`, string(all.Events[0].Data))

	// Pages follow the cursor.
	first := get("?limit=2")
	require.Equal(t, all.Events[:2], first.Events)
	require.True(t, first.HasMore)
	require.Equal(t, all.Events[1].ID, first.NextAfter)
	rest := get(fmt.Sprintf("?limit=2&after=%d", first.NextAfter))
	require.Equal(t, all.Events[2:], rest.Events)
	require.False(t, rest.HasMore)
	// Past the end: empty, and the cursor stays where it was.
	end := get(fmt.Sprintf("?after=%d", rest.NextAfter))
	require.Empty(t, end.Events)
	require.Equal(t, rest.NextAfter, end.NextAfter)

	tests := []struct {
		name, path string
		code       int
		msg        string
	}{
		{"UnknownBatch", "/batches/NO-SUCH-BATCH/events", http.StatusNotFound, "batch NO-SUCH-BATCH: not found"},
		{"BadAfter", "/batches/" + exampleBatchID + "/events?after=abc", http.StatusBadRequest, `after must be a non-negative integer, got "abc"`},
		{"NegativeAfter", "/batches/" + exampleBatchID + "/events?after=-1", http.StatusBadRequest, "after must be a non-negative integer"},
		{"LimitTooLarge", "/batches/" + exampleBatchID + "/events?limit=5000", http.StatusBadRequest, "limit must be between 1 and 1000, got 5000"},
		{"StreamUnknownBatch", "/batches/NO-SUCH-BATCH/stream", http.StatusNotFound, "batch NO-SUCH-BATCH: not found"},
		{"StreamBadLastEventID", "/batches/" + exampleBatchID + "/stream?last_event_id=x", http.StatusBadRequest, "Last-Event-ID must be a non-negative integer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := env.Do(t, http.MethodGet, tt.path, nil)
			require.Equal(t, tt.code, code, "body: %s", body)
			var out map[string]string
			require.NoError(t, json.Unmarshal(body, &out))
			require.Contains(t, out["error"], tt.msg)
		})
	}
}

func eventTypes(events []status.Event) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e.Type
	}
	return out
}

// sseMessage is one Server-Sent Events message.
type sseMessage struct {
	ID, Event, Data string
}

// openStream connects to the batch's stream and delivers its messages on
// the returned channel, which is closed when the server ends the stream.
func openStream(t *testing.T, env *testenv.Env, batchID string, lastEventID int64) <-chan sseMessage {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, env.Server.URL+"/batches/"+batchID+"/stream", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+testenv.ReadToken)
	if lastEventID > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(lastEventID, 10))
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	out := make(chan sseMessage, 1024)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 0, 1<<16), 1<<20)
		var m sseMessage
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if m != (sseMessage{}) {
					out <- m
				}
				m = sseMessage{}
			case strings.HasPrefix(line, ":"): // a comment (keep-alive)
			case strings.HasPrefix(line, "id: "):
				m.ID = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "event: "):
				m.Event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				m.Data = strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	return out
}

// streamReader collects what a stream sent while a test waits for messages.
type streamReader struct {
	t        *testing.T
	c        <-chan sseMessage
	events   []status.Event
	statuses []string
	ended    bool
}

// await reads messages until match accepts one, failing the test if none
// comes within limit: the stream must deliver promptly, not at its
// keep-alive interval (15 s), which would mean it missed the notification.
func (r *streamReader) await(limit time.Duration, what string, match func(sseMessage) bool) sseMessage {
	r.t.Helper()
	timeout := time.After(limit)
	for {
		select {
		case m, ok := <-r.c:
			if !ok {
				r.t.Fatalf("stream closed while waiting for %s", what)
			}
			switch m.Event {
			case "status":
				var st status.Status
				require.NoError(r.t, json.Unmarshal([]byte(m.Data), &st))
				r.statuses = append(r.statuses, st.Status)
			case "end":
				r.ended = true
			default:
				var e status.Event
				require.NoError(r.t, json.Unmarshal([]byte(m.Data), &e))
				require.Equal(r.t, strconv.FormatInt(e.ID, 10), m.ID)
				require.Equal(r.t, e.Type, m.Event)
				if n := len(r.events); n > 0 {
					require.Greater(r.t, e.ID, r.events[n-1].ID, "events arrive in order, once")
				}
				r.events = append(r.events, e)
			}
			if match(m) {
				return m
			}
		case <-timeout:
			r.t.Fatalf("no %s within %s; events so far: %v, statuses: %v", what, limit, eventTypes(r.events), r.statuses)
		}
	}
}

// has tells whether an event of that type and task was received.
func (r *streamReader) has(typ, taskID string) bool {
	for _, e := range r.events {
		if e.Type == typ && e.TaskID != nil && *e.TaskID == taskID {
			return true
		}
	}
	return false
}

func isEvent(typ, taskID string) func(sseMessage) bool {
	return func(m sseMessage) bool {
		return m.Event == typ && (taskID == "" || strings.Contains(m.Data, `"task_id":"`+taskID+`"`))
	}
}

// callbackBody is a successful worker callback for the launch.
func callbackBody(l fakefly.Launch) string {
	key := l.Env["INPUT_R2_KEY"]
	var body map[string]any
	if strings.HasPrefix(l.TaskID, "tiff_") {
		name := strings.TrimSuffix(path.Base(key), path.Ext(key)) + ".jpg"
		body = map[string]any{"task_id": l.TaskID, "batch_id": l.BatchID, "status": "success",
			"output_r2_key": path.Join(path.Dir(key), name), "output_file_name": name, "output_file_size": 4242}
	} else {
		body = map[string]any{"task_id": l.TaskID, "batch_id": l.BatchID, "status": "success",
			"ref_json_r2_key": key + ".ref.json", "archive_r2_key": key,
			"ref_data": map[string]any{"url": "https://cdn.test/" + key, "type": "image/jpeg", "size": 4242, "filename": path.Base(key)}}
	}
	b, _ := json.Marshal(body)
	return string(b)
}

// postCallback plays the worker of l: it posts the success callback the
// test chooses to send, when it chooses.
func postCallback(t *testing.T, env *testenv.Env, l fakefly.Launch, body string) {
	t.Helper()
	code, resp := env.DoAuth(t, http.MethodPost, "/callback/"+l.BatchID+"/"+l.TaskID, l.Env["CALLBACK_TOKEN"], strings.NewReader(body))
	require.Equal(t, http.StatusOK, code, "callback: %s", resp)
}

// heldLaunches makes every machine testenv.Hang (the test posts the callbacks
// itself) and hands the launches to the test.
func heldLaunches() (testenv.Options, <-chan fakefly.Launch) {
	launches := make(chan fakefly.Launch, 64)
	return testenv.Options{Behave: func(l fakefly.Launch) fakefly.Behavior {
		launches <- l
		return fakefly.Behavior{Hang: true}
	}}, launches
}

func nextLaunch(t *testing.T, launches <-chan fakefly.Launch) fakefly.Launch {
	t.Helper()
	select {
	case l := <-launches:
		return l
	case <-time.After(30 * time.Second):
		t.Fatal("no machine was launched")
		return fakefly.Launch{}
	}
}

// TestStreamFollowsBatchLive watches a batch from its first phase to DONE
// over SSE while the test plays its workers one callback at a time: each
// callback's event and each status change arrive on the stream promptly,
// the stream ends after DONE, and a reconnection with Last-Event-ID
// resumes after that event. Several streams share one LISTEN connection.
func TestStreamFollowsBatchLive(t *testing.T) {
	t.Parallel()
	opts, launches := heldLaunches()
	env := testenv.New(t, opts)
	const id = "STREAM-LIVE"
	env.Submit(t, id, []testenv.File{
		{LogicalPath: "/scans/a.tif", Size: 100, ContentType: "image/tiff"},
		{LogicalPath: "/photos/b.jpg", Size: 100, ContentType: "image/jpeg"},
	})
	tiff := nextLaunch(t, launches)

	r := &streamReader{t: t, c: openStream(t, env, id, 0)}
	// Two more watchers of the same batch, to count listener connections.
	other1, other2 := openStream(t, env, id, 0), openStream(t, env, id, 0)
	for _, c := range []<-chan sseMessage{other1, other2} {
		m := <-c
		require.Equal(t, "status", m.Event, "a stream starts with the status document")
	}
	// The listener connects in the background: wait for it, then count.
	var listeners int
	eventually.Within(10*time.Second, func() bool {
		require.NoError(t, env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND query = 'LISTEN batch_events'`).Scan(&listeners))
		return listeners > 0
	})
	require.Equal(t, 1, listeners, "one listener connection serves every stream of the process")

	first := r.await(5*time.Second, "the status document", func(m sseMessage) bool { return m.Event == "status" })
	require.Empty(t, first.ID)
	require.Empty(t, r.events, "the status document comes first")
	r.await(5*time.Second, "the TIFF launch", isEvent("task.launched", tiff.TaskID))

	postCallback(t, env, tiff, callbackBody(tiff))
	r.await(5*time.Second, "the TIFF task's completion", isEvent("task.completed", tiff.TaskID))
	r.await(10*time.Second, "the next phase", isEvent("phase.started", ""))
	images := []fakefly.Launch{nextLaunch(t, launches), nextLaunch(t, launches)}
	// The two launches may be recorded in either order.
	r.await(5*time.Second, "the image launches", func(sseMessage) bool {
		return r.has("task.launched", images[0].TaskID) && r.has("task.launched", images[1].TaskID)
	})
	for _, l := range images {
		postCallback(t, env, l, callbackBody(l))
		r.await(5*time.Second, "an image task's completion", isEvent("task.completed", l.TaskID))
	}
	r.await(10*time.Second, "the end of the batch", isEvent("batch.done", ""))
	r.await(5*time.Second, "the end of the stream", func(m sseMessage) bool { return m.Event == "end" })
	_, open := <-r.c
	require.False(t, open, "the stream closes after DONE")

	require.Equal(t, []string{"TIFF_CONVERSION", "IMAGE_PROCESSING", "DONE"}, dedupe(r.statuses))
	require.Equal(t, "DONE", r.statuses[len(r.statuses)-1])
	// Every event up to DONE came, in order, exactly as the log has them.
	page := listAll(t, env, id)
	require.GreaterOrEqual(t, len(page), len(r.events))
	require.Equal(t, page[:len(r.events)], r.events)
	// Delivery to ingest may be recorded before the stream's last read.
	types := eventTypes(r.events)
	if types[len(types)-1] == "batch.delivered" {
		types = types[:len(types)-1]
	}
	require.Equal(t, []string{"batch.created", "phase.started", "task.launched", "task.completed", "phase.completed",
		"phase.started", "task.launched", "task.launched", "task.completed", "task.completed", "phase.completed", "batch.done"},
		types)

	// Resume after the first phase.completed: what follows it, and no more.
	var resumeAfter int64
	for _, e := range r.events {
		if e.Type == "phase.completed" {
			resumeAfter = e.ID
			break
		}
	}
	r2 := &streamReader{t: t, c: openStream(t, env, id, resumeAfter)}
	r2.await(5*time.Second, "the end of the resumed stream", func(m sseMessage) bool { return m.Event == "end" })
	require.Equal(t, []string{"DONE"}, r2.statuses)
	var want []status.Event
	for _, e := range listAll(t, env, id) {
		if e.ID > resumeAfter {
			want = append(want, e)
		}
	}
	// Delivery to ingest may be recorded after the resumed stream's read.
	if n := len(want); want[n-1].Type == "batch.delivered" && len(r2.events) == n-1 {
		want = want[:n-1]
	}
	require.Equal(t, want, r2.events)
	require.Equal(t, "phase.started", r2.events[0].Type)
}

// dedupe drops consecutive repeats.
func dedupe(s []string) []string {
	var out []string
	for _, v := range s {
		if len(out) == 0 || out[len(out)-1] != v {
			out = append(out, v)
		}
	}
	return out
}

func listAll(t *testing.T, env *testenv.Env, id string) []status.Event {
	t.Helper()
	code, body := env.Do(t, http.MethodGet, "/batches/"+id+"/events?limit=1000", nil)
	require.Equal(t, http.StatusOK, code)
	var page status.EventPage
	require.NoError(t, json.Unmarshal(body, &page))
	return page.Events
}

// TestStreamsAreBounded: past MAX_STREAMS open streams, one more is
// answered 503 with Retry-After; once a stream ends, its slot is free.
func TestStreamsAreBounded(t *testing.T) {
	t.Parallel()
	opts, _ := heldLaunches()
	opts.Settings = map[string]string{"MAX_STREAMS": "2"}
	env := testenv.New(t, opts)
	const id = "STREAM-BOUND"
	env.Submit(t, id, []testenv.File{{LogicalPath: "/scans/a.tif", Size: 100, ContentType: "image/tiff"}})
	first := openStream(t, env, id, 0)
	require.Equal(t, "status", (<-first).Event)
	ctx, cancel := context.WithCancel(context.Background())
	second, err := http.NewRequestWithContext(ctx, http.MethodGet, env.Server.URL+"/batches/"+id+"/stream", nil)
	require.NoError(t, err)
	second.Header.Set("Authorization", "Bearer "+testenv.ReadToken)
	resp2, err := http.DefaultClient.Do(second)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp2.StatusCode)

	resp, err := getAsReader(env.Server.URL + "/batches/" + id + "/stream")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, string(body))
	require.Equal(t, "5", resp.Header.Get("Retry-After"))
	require.Contains(t, string(body), "MAX_STREAMS 2")

	cancel() // the second stream ends: its slot is free again
	resp2.Body.Close()
	require.Eventually(t, func() bool {
		resp, err := getAsReader(env.Server.URL + "/batches/" + id + "/stream?last_event_id=999999")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 10*time.Second, 20*time.Millisecond)
}

// getAsReader is http.Get with the read token.
func getAsReader(url string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+testenv.ReadToken)
	return http.DefaultClient.Do(req)
}
