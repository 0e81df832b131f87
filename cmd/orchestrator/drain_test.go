package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/harness/dbtest"
)

// drainArgs is a job of the drain tests: it runs for Hold, or until its
// context is cancelled.
type drainArgs struct {
	Hold time.Duration `json:"hold"`
}

func (drainArgs) Kind() string { return "drain_test" }

type drainWorker struct {
	river.WorkerDefaults[drainArgs]
	started chan int64
}

func (w *drainWorker) Work(ctx context.Context, job *river.Job[drainArgs]) error {
	w.started <- job.ID
	select {
	case <-time.After(job.Args.Hold):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// drainEnv is a River client working drain_test jobs and an HTTP server
// whose /slow answers after its request's hold.
type drainEnv struct {
	client  *river.Client[pgx.Tx]
	srv     *http.Server
	url     string
	started chan int64
	// received hears of each request /slow took.
	received chan struct{}
}

func newDrainEnv(t *testing.T) *drainEnv {
	pool := dbtest.New(t)
	e := &drainEnv{started: make(chan int64, 4), received: make(chan struct{}, 4)}
	workers := river.NewWorkers()
	river.AddWorker(workers, &drainWorker{started: e.started})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 4}}, Workers: workers,
		FetchPollInterval: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler), TestOnly: true,
	})
	require.NoError(t, err)
	require.NoError(t, client.Start(context.Background()))
	e.client = client
	t.Cleanup(func() { _ = client.StopAndCancel(context.Background()) })

	mux := http.NewServeMux()
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		hold, _ := time.ParseDuration(r.URL.Query().Get("hold"))
		e.received <- struct{}{}
		time.Sleep(hold) // the request being answered; the drain waits for it
		_, _ = io.WriteString(w, "answered")
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	e.srv, e.url = &http.Server{Handler: mux, ReadHeaderTimeout: time.Second}, "http://"+ln.Addr().String()
	go func() { _ = e.srv.Serve(ln) }()
	t.Cleanup(func() { _ = e.srv.Close() })
	return e
}

// request sends GET /slow?hold=hold and returns its answer's body (or the
// error) on the channel.
func (e *drainEnv) request(hold time.Duration) chan string {
	out := make(chan string, 1)
	go func() {
		resp, err := http.Get(e.url + "/slow?hold=" + hold.String())
		if err != nil {
			out <- "error: " + err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		out <- string(b)
	}()
	return out
}

// TestDrainFinishesWhatItHolds: a drain answers the request it holds and
// lets the running job finish, then refuses new connections; it returns
// once both are done, well before its timeout.
func TestDrainFinishesWhatItHolds(t *testing.T) {
	t.Parallel()
	e := newDrainEnv(t)
	ctx := context.Background()
	ins, err := e.client.Insert(ctx, drainArgs{Hold: 500 * time.Millisecond}, nil)
	require.NoError(t, err)
	<-e.started
	answer := e.request(500 * time.Millisecond)
	<-e.received

	start := time.Now()
	drain(ctx, e.srv, e.client, time.Minute, slog.New(slog.DiscardHandler))
	require.Less(t, time.Since(start), 30*time.Second, "the drain returns when its work is done, not at its timeout")
	require.Equal(t, "answered", <-answer, "the request held was answered")
	job, err := e.client.JobGet(ctx, ins.Job.ID)
	require.NoError(t, err)
	require.Equal(t, rivertype.JobStateCompleted, job.State, "the running job finished")
	_, err = http.Get(e.url + "/slow")
	require.Error(t, err, "a drained server takes no new connection")
}

// TestDrainBoundedInTime: a job that outlives the drain's timeout is
// cancelled and given back to River (retryable, to run again elsewhere),
// and the drain returns within its timeout and the wait for cancelled
// jobs.
func TestDrainBoundedInTime(t *testing.T) {
	t.Parallel()
	e := newDrainEnv(t)
	ctx := context.Background()
	ins, err := e.client.Insert(ctx, drainArgs{Hold: time.Hour}, nil)
	require.NoError(t, err)
	<-e.started

	const timeout = time.Second
	start := time.Now()
	drain(ctx, e.srv, e.client, timeout, slog.New(slog.DiscardHandler))
	require.Less(t, time.Since(start), timeout+cancelWait, "the drain is bounded")
	job, err := e.client.JobGet(ctx, ins.Job.ID)
	require.NoError(t, err)
	require.Contains(t, []rivertype.JobState{rivertype.JobStateAvailable, rivertype.JobStateRetryable}, job.State,
		"the cancelled job goes back to River, to run again")
}
