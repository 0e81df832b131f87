package tracing_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/arke-institute/orchestrator/tracing"
)

// process is a Tracer with an exporter of its own, as one orchestrator
// process has.
func process(t *testing.T, opts ...sdktrace.TracerProviderOption) (*tracing.Tracer, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tr := tracing.New(append([]sdktrace.TracerProviderOption{sdktrace.WithSyncer(exp)}, opts...)...)
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	return tr, exp
}

// TestBatchTraceAcrossProcesses checks that the steps of a batch started in
// two processes that share nothing are children of the intake's root, in
// the batch's trace, and linked to the spans they were started in.
func TestBatchTraceAcrossProcesses(t *testing.T) {
	t.Parallel()
	api, apiSpans := process(t)
	worker, workerSpans := process(t)

	ctx, request := api.Provider().Tracer("test").Start(context.Background(), "POST /batches")
	_, intake := api.StartIntake(ctx, "B1")
	intake.End()
	request.End()

	jobCtx, job := worker.Provider().Tracer("test").Start(context.Background(), "river.work/batch_start")
	stepCtx, step := worker.StartBatchStep(jobCtx, "B1", "batch.start")
	_, enter := worker.StartBatchStep(stepCtx, "B1", "phase.enter")
	enter.End()
	step.End()
	job.End()

	root := apiSpans.GetSpans().Snapshots()[0]
	require.Equal(t, "batch.intake", root.Name())
	require.Equal(t, tracing.BatchTraceID("B1"), root.SpanContext().TraceID())
	require.False(t, root.Parent().IsValid(), "the intake is the root")
	require.Equal(t, request.SpanContext(), root.Links()[0].SpanContext, "linked to the request")
	require.NotEqual(t, tracing.BatchTraceID("B1"), tracing.BatchTraceID("B2"))

	got := workerSpans.GetSpans().Snapshots()
	require.Len(t, got, 3)
	enterSpan, startSpan := got[0], got[1]
	require.Equal(t, "phase.enter", enterSpan.Name())
	require.Equal(t, root.SpanContext().TraceID(), startSpan.SpanContext().TraceID())
	require.Equal(t, root.SpanContext().SpanID(), startSpan.Parent().SpanID(), "a step is the root's child in another process too")
	require.Equal(t, job.SpanContext(), startSpan.Links()[0].SpanContext, "linked to the job run")
	require.Equal(t, startSpan.SpanContext().SpanID(), enterSpan.Parent().SpanID(), "a step within a step is its child")
	require.Empty(t, enterSpan.Links())
}

// TestWorkTraces checks that a unit of work's spans are roots of its own
// trace, in any process, linked to the batch's root, and that a span
// started within one is its child.
func TestWorkTraces(t *testing.T) {
	t.Parallel()
	a, aSpans := process(t)
	b, bSpans := process(t)

	stepCtx, step := a.StartBatchStep(context.Background(), "B1", "phase.launch")
	launchCtx, launch := a.StartWork(stepCtx, "B1", tracing.WorkTask, "T1", "task.launch")
	_, inner := a.StartWork(launchCtx, "B1", tracing.WorkTask, "T1", "fly.launch")
	inner.End()
	launch.End()
	step.End()
	_, callback := b.StartWork(context.Background(), "B1", tracing.WorkTask, "T1", "task.callback")
	tracing.End(callback, errors.New("bad result"))

	spans := aSpans.GetSpans().Snapshots()
	require.Len(t, spans, 3)
	innerSpan, launchSpan := spans[0], spans[1]
	require.Equal(t, tracing.WorkTraceID(tracing.WorkTask, "T1"), launchSpan.SpanContext().TraceID())
	require.False(t, launchSpan.Parent().IsValid(), "a root of the task's trace")
	require.Equal(t, []trace.SpanContext{tracing.BatchLink("B1"), step.SpanContext()},
		[]trace.SpanContext{launchSpan.Links()[0].SpanContext, launchSpan.Links()[1].SpanContext})
	require.Equal(t, launchSpan.SpanContext().SpanID(), innerSpan.Parent().SpanID())

	cb := bSpans.GetSpans().Snapshots()[0]
	require.Equal(t, tracing.WorkTraceID(tracing.WorkTask, "T1"), cb.SpanContext().TraceID(), "another process joins the task's trace")
	require.NotEqual(t, launchSpan.SpanContext().SpanID(), cb.SpanContext().SpanID())
	require.Equal(t, codes.Error, cb.Status().Code)
	require.Len(t, cb.Links(), 1)
}

// TestSamplingIsWhole checks that with a ratio sampler a batch's steps
// are sampled exactly when its root is, in whichever process: the
// decision rests on the derived trace id.
func TestSamplingIsWhole(t *testing.T) {
	t.Parallel()
	sampler := sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.5)))
	api, apiSpans := process(t, sampler)
	worker, workerSpans := process(t, sampler)
	const n = 200
	for i := range n {
		id := fmt.Sprintf("B%d", i)
		_, intake := api.StartIntake(context.Background(), id)
		intake.End()
		_, step := worker.StartBatchStep(context.Background(), id, "batch.start")
		step.End()
	}
	roots := map[trace.TraceID]bool{}
	for _, s := range apiSpans.GetSpans() {
		roots[s.SpanContext.TraceID()] = true
	}
	steps := map[trace.TraceID]bool{}
	for _, s := range workerSpans.GetSpans() {
		steps[s.SpanContext.TraceID()] = true
	}
	require.Equal(t, roots, steps)
	require.Greater(t, len(roots), n/4)
	require.Less(t, len(roots), 3*n/4)
}

// TestOffCostsNothing checks that a nil Tracer starts nothing and
// allocates nothing on the paths every callback and launch takes.
func TestOffCostsNothing(t *testing.T) {
	var off *tracing.Tracer
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		c, span := off.StartBatchStep(ctx, "B1", "batch.start")
		c, work := off.StartWork(c, "B1", tracing.WorkTask, "T1", "task.launch")
		off.LinkBatch(c, "B1")
		tracing.End(work, nil)
		span.End()
	})
	require.Zero(t, allocs)
	_, span := off.StartIntake(ctx, "B1")
	require.False(t, span.IsRecording())
	require.Empty(t, tracing.Traceparent(ctx))
	require.NoError(t, off.Shutdown(ctx))
}

// TestLogHandler checks that a line logged in a sampled span names its
// trace and span, and one logged outside any does not.
func TestLogHandler(t *testing.T) {
	t.Parallel()
	tr, _ := process(t)
	var buf bytes.Buffer
	logger := slog.New(tracing.LogHandler(slog.NewJSONHandler(&buf, nil))).With("batch_id", "B1")
	ctx, span := tr.StartBatchStep(context.Background(), "B1", "batch.start")
	logger.InfoContext(ctx, "batch started")
	span.End()
	logger.Info("no context")

	var lines []map[string]any
	for line := range bytes.Lines(buf.Bytes()) {
		var m map[string]any
		require.NoError(t, json.Unmarshal(line, &m))
		lines = append(lines, m)
	}
	require.Len(t, lines, 2)
	require.Equal(t, span.SpanContext().TraceID().String(), lines[0]["trace_id"])
	require.Equal(t, span.SpanContext().SpanID().String(), lines[0]["span_id"])
	require.Equal(t, "B1", lines[0]["batch_id"])
	require.NotContains(t, lines[1], "trace_id")

	require.Equal(t, "00-"+span.SpanContext().TraceID().String()+"-"+span.SpanContext().SpanID().String()+"-01", tracing.Traceparent(ctx))
}
