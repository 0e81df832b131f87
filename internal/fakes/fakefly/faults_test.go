package fakefly_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
)

func TestFailForRefusesEveryRouteUntilItEnds(t *testing.T) {
	t.Parallel()
	fake := fakefly.New(t, fakefly.Options{})
	o := newOrchestrator(t, nil)
	b := newBackend(t, fake)
	fake.FailFor(http.StatusServiceUnavailable, time.Hour)
	_, err := b.Launch(t.Context(), spec(o, "f1"))
	require.Error(t, err)
	require.Zero(t, fake.Counts().Created, "no machine is created during an outage")
	for _, l := range fake.Launches() {
		require.Equal(t, http.StatusServiceUnavailable, l.Status)
	}

	fake.FailFor(http.StatusServiceUnavailable, time.Millisecond)
	require.Eventually(t, func() bool {
		_, err := b.Launch(t.Context(), spec(o, "f2"))
		return err == nil
	}, wait, 10*time.Millisecond, "launches succeed once the outage is over")
}

func TestOverlapsRecordTwoStartedMachinesOfATask(t *testing.T) {
	t.Parallel()
	fake := fakefly.New(t, fakefly.Options{Behave: func(fakefly.Launch) fakefly.Behavior { return fakefly.Behavior{Hang: true} }})
	o := newOrchestrator(t, nil)
	b := newBackend(t, fake)
	m1, err := b.Launch(t.Context(), spec(o, "o1"))
	require.NoError(t, err)
	_, err = b.Launch(t.Context(), spec(o, "o2"))
	require.NoError(t, err)
	require.Empty(t, fake.Overlaps(), "machines of different tasks do not overlap")

	m3, err := b.Launch(t.Context(), spec(o, "o1"))
	require.NoError(t, err)
	require.Equal(t, []fakefly.Overlap{{App: app, TaskID: "o1", MachineID: m3.ID, Running: m1.ID}}, fake.Overlaps())

	// Once the task's machines are destroyed, a new one overlaps nothing.
	require.NoError(t, b.Destroy(t.Context(), app, m1.ID))
	require.NoError(t, b.Destroy(t.Context(), app, m3.ID))
	_, err = b.Launch(t.Context(), spec(o, "o1"))
	require.NoError(t, err)
	require.Len(t, fake.Overlaps(), 1)
}

func TestCallbackRetryWindowOutlastsAnOutage(t *testing.T) {
	t.Parallel()
	fake := fakefly.New(t, fakefly.Options{CallbackRetryWindow: time.Minute})
	// Eight 503s: past the default's five tries, within the window.
	o := newOrchestrator(t, func(n int) int {
		if n <= 8 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	_, err := newBackend(t, fake).Launch(t.Context(), spec(o, "w1"))
	require.NoError(t, err)
	cbs := fake.AwaitCallbacks(t, 1, wait)
	require.Equal(t, http.StatusOK, cbs[0].Status)
	require.Equal(t, 9, cbs[0].Attempts)
	require.Equal(t, map[int]int{http.StatusServiceUnavailable: 8, http.StatusOK: 1}, fake.CallbackAnswers())
	// Backing off as the real worker does: 20 ms doubling, with jitter.
	require.Greater(t, cbs[0].Answered.Sub(cbs[0].Posted), 3*time.Second)
}

func TestControlHandler(t *testing.T) {
	t.Parallel()
	fake := fakefly.New(t, fakefly.Options{})
	ctl := httptest.NewServer(fake.ControlHandler())
	t.Cleanup(ctl.Close)
	o := newOrchestrator(t, nil)
	_, err := newBackend(t, fake).Launch(t.Context(), spec(o, "c1"))
	require.NoError(t, err)
	fake.AwaitCallbacks(t, 1, wait)

	resp, err := http.Post(ctl.URL+"/fail?status=abc", "", nil)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)

	resp, err = http.Get(ctl.URL + "/report")
	require.NoError(t, err)
	var rep fakefly.Report
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&rep))
	require.NoError(t, resp.Body.Close())
	require.Len(t, rep.Callbacks, 1)
	require.Equal(t, "c1", rep.Callbacks[0].TaskID)
	require.Equal(t, "success", rep.Callbacks[0].Outcome)
	require.Equal(t, http.StatusOK, rep.Callbacks[0].Status)
	require.Len(t, rep.Launches["c1"], 1)

	resp, err = http.Post(ctl.URL+"/fail?status=503&seconds=3600", "", strings.NewReader(""))
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	_, err = newBackend(t, fake).Launch(t.Context(), spec(o, "c2"))
	require.Error(t, err, "the outage set through the control handler refuses launches")
}
