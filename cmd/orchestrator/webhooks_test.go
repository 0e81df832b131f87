package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/internal/harness/eventually"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
)

// TestWebhooksCommand: create prints the secret once; list, deliveries,
// delivery, replay, disable, enable and delete work against the real API;
// command-line mistakes are usage errors.
func TestWebhooksCommand(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{NoSweep: true})
	var hits atomic.Int32
	rcv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	t.Cleanup(rcv.Close)
	ctx := context.Background()
	cli := func(args ...string) (string, error) {
		vars := map[string]string{"ADMIN_TOKEN": testenv.AdminToken, "ORCHESTRATOR_URL": env.Server.URL}
		lookup := func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
		var out, errOut bytes.Buffer
		err := runWebhooks(ctx, args, lookup, &out, &errOut)
		return out.String(), err
	}

	for _, args := range [][]string{{}, {"nope"}, {"create", "-events", "batch.done"}, {"list", "-reason", "x"}, {"replay"}} {
		_, err := cli(args...)
		var ue usageError
		require.ErrorAs(t, err, &ue, "%v", args)
	}
	_, err := cli("create", "-url-of", rcv.URL, "-events", "batch.nope")
	require.ErrorContains(t, err, `unknown event type "batch.nope"`)

	out, err := cli("create", "-url-of", rcv.URL+"/hook", "-events", "batch.done, batch.error", "-description", "cli")
	require.NoError(t, err)
	sub := regexp.MustCompile(`wh_[0-9a-f]+`).FindString(out)
	require.NotEmpty(t, sub, out)
	require.Regexp(t, `secret: whsec_[A-Za-z0-9+/=]+\n`, out)
	out, err = cli("list")
	require.NoError(t, err)
	require.Contains(t, out, sub+" enabled "+rcv.URL+"/hook [batch.done,batch.error]")
	require.NotContains(t, out, "whsec_")

	require.NoError(t, db.New(env.Pool).EventRecord(ctx, db.Event{BatchID: "CLI", Type: db.EventBatchDone}))
	var msg string
	eventually.True(t, 30*time.Second, "the delivery succeeded", func() bool {
		out, err = cli("deliveries", sub)
		require.NoError(t, err)
		msg = regexp.MustCompile(`msg_[0-9a-f]+`).FindString(out)
		return strings.Contains(out, "succeeded")
	})
	require.Contains(t, out, "batch.done succeeded 1 attempt(s)")
	out, err = cli("delivery", msg)
	require.NoError(t, err)
	require.Contains(t, out, "attempt 1 at")
	require.Contains(t, out, `"type": "batch.done"`)
	out, err = cli("replay", msg)
	require.NoError(t, err)
	require.Contains(t, out, "replaying "+msg)
	eventually.True(t, 30*time.Second, "the replay sent", func() bool { return hits.Load() == 2 })

	out, err = cli("disable", sub, "-reason", "maintenance")
	require.NoError(t, err)
	require.Contains(t, out, "disabled (maintenance)")
	out, err = cli("enable", sub)
	require.NoError(t, err)
	require.Contains(t, out, sub+" enabled")
	out, err = cli("delete", sub)
	require.NoError(t, err)
	require.Contains(t, out, "deleted "+sub)
	_, err = cli("deliveries", sub)
	require.ErrorContains(t, err, "404")
}
