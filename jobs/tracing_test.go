package jobs_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/arke-institute/orchestrator/internal/harness/eventually"
	"github.com/arke-institute/orchestrator/internal/harness/testenv"
	"github.com/arke-institute/orchestrator/tracing"
)

// TestBatchTrace runs a small batch (a TIFF and two JPEGs: two phases)
// with tracing on, spans kept in memory, and checks the traces' shape: the
// batch's trace holds its own steps (intake, start, the phases entered,
// their transitions, the end, finalize) under one root and nothing of its
// tasks; each task's launch and callback are in a trace of the task's own,
// linked to the batch's, the callback's request continuing the trace its
// machine was handed (TRACEPARENT); and each job run is a trace of its own
// (River's middleware) that the step it ran links to.
func TestBatchTrace(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tr := tracing.New(sdktrace.WithSyncer(exp))
	env := testenv.New(t, testenv.Options{Behave: testenv.Succeed, Tracer: tr})
	const id = "TRACED"
	env.Submit(t, id, []testenv.File{
		{LogicalPath: "/scans/a.tif", Size: 100, ContentType: "image/tiff"},
		{LogicalPath: "/photos/b.jpg", Size: 100, ContentType: "image/jpeg"},
		{LogicalPath: "/photos/c.jpg", Size: 100, ContentType: "image/jpeg"},
	})
	st := env.AwaitStatus(t, id, testenv.IsDone)
	require.Equal(t, "DONE", st.Status, "error: %v", st.Error)
	env.AwaitIngest(t, 1)
	batchTrace := tracing.BatchTraceID(id)
	eventually.True(t, 10*time.Second, "the finalize span", func() bool {
		return slices.ContainsFunc(exp.GetSpans(), func(s tracetest.SpanStub) bool {
			return s.Name == "batch.finalize" && s.SpanContext.TraceID() == batchTrace
		})
	})
	spans := exp.GetSpans()
	byID := map[trace.SpanID]tracetest.SpanStub{}
	var steps []string
	for _, s := range spans {
		byID[s.SpanContext.SpanID()] = s
		if s.SpanContext.TraceID() == batchTrace {
			steps = append(steps, s.Name)
		}
	}

	// The batch's trace: its steps, under the intake's root.
	require.Subset(t, steps, []string{"batch.intake", "batch.start", "phase.enter", "phase.transition",
		"phase TIFF_CONVERSION", "phase IMAGE_PROCESSING", "batch.done", "batch.finalize"})
	require.Equal(t, 2, count(steps, "phase.enter"), "a span per phase entered: %v", steps)
	require.Equal(t, 2, count(steps, "phase.transition"), "a span per transition: %v", steps)
	require.Equal(t, 1, count(steps, "batch.intake"))
	require.NotContains(t, steps, "task.launch", "the tasks' work is not in the batch's trace")
	require.NotContains(t, steps, "task.callback")
	root := tracing.BatchLink(id).SpanID()
	for _, s := range spans {
		if s.SpanContext.TraceID() != batchTrace {
			continue
		}
		if s.Name == "batch.intake" {
			require.Equal(t, root, s.SpanContext.SpanID())
			require.False(t, s.Parent.IsValid(), "the intake is the root")
			continue
		}
		parent, ok := byID[s.Parent.SpanID()]
		require.True(t, ok, "%s's parent was exported", s.Name)
		require.Equal(t, batchTrace, parent.SpanContext.TraceID(), "%s's parent is the batch's", s.Name)
	}
	start := find(t, spans, batchTrace, "batch.start")
	require.Len(t, start.Links, 1)
	job := byID[start.Links[0].SpanContext.SpanID()]
	require.Equal(t, "river.work/batch_start", job.Name, "batch.start links to its job's run")
	require.NotEqual(t, batchTrace, job.SpanContext.TraceID(), "a job run is a trace of its own")

	// Each task's trace: its launch and its callback, linked to the batch.
	rows, err := env.Pool.Query(context.Background(), `SELECT id FROM tasks WHERE batch_id = $1`, id)
	require.NoError(t, err)
	var tasks []string
	for rows.Next() {
		var task string
		require.NoError(t, rows.Scan(&task))
		tasks = append(tasks, task)
	}
	require.NoError(t, rows.Err())
	require.Len(t, tasks, 4, "a conversion and three images")
	for _, task := range tasks {
		taskTrace := tracing.WorkTraceID(tracing.WorkTask, task)
		launch := find(t, spans, taskTrace, "task.launch")
		require.False(t, launch.Parent.IsValid(), "the launch is a root of the task's trace")
		require.Contains(t, linked(launch), tracing.BatchLink(id), "the launch links to the batch")
		callback := find(t, spans, taskTrace, "task.callback")
		request := byID[callback.Parent.SpanID()]
		require.Equal(t, "POST /callback/:batchId/:taskId", request.Name, "the callback's request is its parent")
		require.Equal(t, taskTrace, request.SpanContext.TraceID(), "the request continued the trace its machine was handed")
		require.Equal(t, launch.SpanContext.SpanID(), request.Parent.SpanID())
		require.Equal(t, "completed", attr(callback, "task.status"))
	}
}

func count(names []string, name string) int {
	n := 0
	for _, s := range names {
		if s == name {
			n++
		}
	}
	return n
}

// find is the one span of the trace with that name.
func find(t *testing.T, spans tracetest.SpanStubs, traceID trace.TraceID, name string) tracetest.SpanStub {
	t.Helper()
	var found []tracetest.SpanStub
	for _, s := range spans {
		if s.SpanContext.TraceID() == traceID && s.Name == name {
			found = append(found, s)
		}
	}
	require.Len(t, found, 1, "spans %s in trace %s", name, traceID)
	return found[0]
}

func linked(s tracetest.SpanStub) []trace.SpanContext {
	var out []trace.SpanContext
	for _, l := range s.Links {
		out = append(out, l.SpanContext)
	}
	return out
}

func attr(s tracetest.SpanStub, key string) string {
	for _, a := range s.Attributes {
		if string(a.Key) == key {
			return a.Value.String()
		}
	}
	return ""
}
