package api_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/harness/eventually"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
	"github.com/arke-institute/orchestrator/status"
	"github.com/arke-institute/orchestrator/webhook"
)

// hookReceiver records the webhooks it is sent, answering 200.
type hookReceiver struct {
	*httptest.Server
	mu   sync.Mutex
	got  []*http.Request
	body [][]byte
}

func newHookReceiver(t *testing.T) *hookReceiver {
	r := &hookReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got, r.body = append(r.got, req), append(r.body, b)
		r.mu.Unlock()
		_, _ = io.WriteString(w, "thanks")
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *hookReceiver) requests() ([]*http.Request, [][]byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*http.Request(nil), r.got...), append([][]byte(nil), r.body...)
}

// TestWebhookOfABatchDone: a subscription made through the admin API
// receives a small batch's batch.done, signed with the secret the
// creation answered (verified here as a receiver would); its delivery
// and attempt are listed, replayed with the same webhook-id, and shown on
// the dashboard, to the admin only.
func TestWebhookOfABatchDone(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{})
	rcv := newHookReceiver(t)

	for body, want := range map[string]string{
		`{"url": "` + rcv.URL + `", "event_types": ["batch.nope"]}`:         `unknown event type \"batch.nope\"`,
		`{"url": "ftp://example.com", "event_types": ["batch.done"]}`:       "the scheme must be http or https",
		`{"url": "http://10.0.0.1/x", "event_types": ["batch.done"]}`:       "forbidden address",
		`{"url": "` + rcv.URL + `", "event_types": ["batch.done"], "x": 1}`: "unknown field",
	} {
		code, got := env.Do(t, http.MethodPost, "/admin/webhooks", strings.NewReader(body))
		require.Equal(t, http.StatusBadRequest, code, body)
		require.Contains(t, string(got), want)
	}

	const id = "WEBHOOK-BATCH"
	code, body := env.Do(t, http.MethodPost, "/admin/webhooks", strings.NewReader(
		`{"url": "`+rcv.URL+`/hook", "event_types": ["batch.done", "phase.completed"], "batch_id": "`+id+`", "description": "test receiver"}`))
	require.Equal(t, http.StatusCreated, code, string(body))
	var sub webhook.Subscription
	require.NoError(t, json.Unmarshal(body, &sub))
	require.True(t, strings.HasPrefix(sub.Secret, "whsec_"))

	env.Submit(t, id, testenv.Tiffs(2))
	env.AwaitStatus(t, id, func(st status.Status) bool { return st.Status == "DONE" })
	var done []byte
	var doneReq *http.Request
	eventually.True(t, 30*time.Second, "batch.done delivered", func() bool {
		reqs, bodies := rcv.requests()
		for i, b := range bodies {
			if strings.Contains(string(b), `"type": "batch.done"`) {
				done, doneReq = b, reqs[i]
				return true
			}
		}
		return false
	})
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(sub.Secret, "whsec_"))
	require.NoError(t, err)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(doneReq.Header.Get("webhook-id") + "." + doneReq.Header.Get("webhook-timestamp") + "." + string(done)))
	require.Equal(t, "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)), doneReq.Header.Get("webhook-signature"))
	var payload struct {
		Type string         `json:"type"`
		Data map[string]any `json:"data"`
	}
	require.NoError(t, json.Unmarshal(done, &payload))
	require.Equal(t, id, payload.Data["batch_id"])

	var deliveries struct {
		Deliveries []webhook.Delivery `json:"deliveries"`
	}
	eventually.True(t, 30*time.Second, "the delivery recorded as succeeded", func() bool {
		code, body = env.Do(t, http.MethodGet, "/admin/webhooks/"+sub.ID+"/deliveries?status=succeeded", nil)
		require.Equal(t, http.StatusOK, code, string(body))
		require.NoError(t, json.Unmarshal(body, &deliveries))
		for _, d := range deliveries.Deliveries {
			if d.EventType == "batch.done" {
				return true
			}
		}
		return false
	})
	doneID := doneReq.Header.Get("webhook-id")
	code, body = env.Do(t, http.MethodGet, "/admin/webhooks/deliveries/"+doneID, nil)
	require.Equal(t, http.StatusOK, code, string(body))
	var detail webhook.Delivery
	require.NoError(t, json.Unmarshal(body, &detail))
	require.Equal(t, string(done), detail.Payload)
	require.Len(t, detail.AttemptList, 1)
	require.EqualValues(t, 200, detail.AttemptList[0].StatusCode)
	require.Equal(t, "thanks", detail.AttemptList[0].Response)

	before, _ := rcv.requests()
	code, body = env.Do(t, http.MethodPost, "/admin/webhooks/deliveries/"+doneID+"/replay", nil)
	require.Equal(t, http.StatusAccepted, code, string(body))
	eventually.True(t, 30*time.Second, "the replay delivered", func() bool {
		reqs, _ := rcv.requests()
		return len(reqs) > len(before) && reqs[len(reqs)-1].Header.Get("webhook-id") == doneID
	})
	eventually.True(t, 30*time.Second, "the replay recorded", func() bool {
		code, body = env.Do(t, http.MethodGet, "/admin/webhooks/deliveries/"+doneID, nil)
		require.Equal(t, http.StatusOK, code, string(body))
		require.NoError(t, json.Unmarshal(body, &detail))
		return detail.Status == webhook.StatusSucceeded && len(detail.AttemptList) == 2
	})

	code, body = env.Do(t, http.MethodPost, "/admin/webhooks/"+sub.ID+"/disable", strings.NewReader(`{"reason": "receiver moving"}`))
	require.Equal(t, http.StatusOK, code, string(body))
	require.Contains(t, string(body), `"disabled_reason":"receiver moving"`)
	code, body = env.Do(t, http.MethodGet, "/admin/webhooks", nil)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, string(body), sub.ID)
	require.NotContains(t, string(body), sub.Secret, "the secret is shown once")

	admin := func(r *http.Request) { r.SetBasicAuth("admin", testenv.AdminToken) }
	for path, want := range map[string]string{
		"/ui/webhooks":                      `data-subscription="` + sub.ID + `"`,
		"/ui/webhooks/" + sub.ID:            `data-delivery="` + doneID + `"`,
		"/ui/webhooks/deliveries/" + doneID: `id="replay"`,
	} {
		resp, page := send(t, http.MethodGet, env.Server.URL+path, "", admin)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", path, page)
		require.Contains(t, page, want, path)
	}
	resp, page := send(t, http.MethodGet, env.Server.URL+"/ui/webhooks/"+sub.ID, "", admin)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, page, "receiver moving", "the page shows the subscription disabled")
	resp, _ = send(t, http.MethodGet, env.Server.URL+"/ui/webhooks", "", func(r *http.Request) { r.SetBasicAuth("reader", testenv.ReadToken) })
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "a reader sees no webhooks")
	resp, page = send(t, http.MethodPost, env.Server.URL+"/ui/webhooks/deliveries/"+doneID+"/replay", "", func(r *http.Request) {
		admin(r)
		r.Header.Set("Origin", env.Server.URL)
	})
	require.Equal(t, http.StatusConflict, resp.StatusCode, "a disabled subscription's delivery is not replayed")
	require.Contains(t, page, "enable it before replaying")

	code, _ = env.Do(t, http.MethodDelete, "/admin/webhooks/"+sub.ID, nil)
	require.Equal(t, http.StatusNoContent, code)
	code, _ = env.Do(t, http.MethodGet, "/admin/webhooks/deliveries/"+doneID, nil)
	require.Equal(t, http.StatusNotFound, code, "its deliveries went with it")
}
