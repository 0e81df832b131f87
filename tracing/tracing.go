// Package tracing holds the orchestrator's OpenTelemetry tracing: its
// setup (off unless an OTLP endpoint is configured) and the shape of its
// traces.
//
// A batch has one trace for its own steps: intake, start, each phase it
// enters, each transition, finalize. The work of its tasks, chunks and
// documents goes into traces of their own, one per unit of work, each
// linked to the batch's, so that a batch of 100,000 files is one small
// trace and 100,000 small ones rather than one giant trace.
//
// These traces are joined across processes and jobs without storing
// anything: a batch's trace id, and the span id of its root (the intake),
// are derived from the batch id, and a unit of work's trace id from its
// kind and id, by the ID generator every Tracer's provider is built with.
// Each process therefore starts a batch's steps as children of the same
// root, and a task's spans in the same trace, whichever process launched
// it or takes its callback. Sampling stays whole: the sampler's decision
// for a root depends on its trace id (always, never, or a ratio of trace
// ids), so every process decides the same for a batch's trace.
//
// A nil *Tracer is tracing off: its methods start no span and cost next to
// nothing, so the hot paths (callbacks, launches) call them unguarded.
package tracing

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// scope names the orchestrator's own spans (the instrumentation scope).
const scope = "github.com/arke-institute/orchestrator"

// Attribute keys the orchestrator's spans carry.
const (
	BatchIDKey  = attribute.Key("batch.id")
	PhaseKey    = attribute.Key("phase")
	WorkKindKey = attribute.Key("work.kind")
	WorkIDKey   = attribute.Key("work.id")
)

// Kinds of work whose spans go into traces of their own (StartWork).
const (
	WorkTask     = "task"
	WorkChunk    = "chunk"
	WorkDocument = "document"
)

// Config says whether to trace, and as which service.
type Config struct {
	// Enabled turns tracing on: spans are exported over OTLP/HTTP to the
	// collector that the standard OTEL_EXPORTER_OTLP_* variables name,
	// which the exporter reads itself (endpoint, headers, timeout,
	// compression); the sampler is OTEL_TRACES_SAMPLER's, which the SDK
	// reads itself.
	Enabled bool
	// ServiceName is the service.name of the spans' resource.
	ServiceName string
}

// Tracer starts the orchestrator's spans. nil is tracing off.
type Tracer struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
}

// New returns a Tracer on a new SDK provider built with opts (an exporter,
// a resource, a sampler) and the ID generator that derives batches' and
// work's trace ids. Tests pass an in-memory exporter here.
func New(opts ...sdktrace.TracerProviderOption) *Tracer {
	tp := sdktrace.NewTracerProvider(append([]sdktrace.TracerProviderOption{sdktrace.WithIDGenerator(idGenerator{})}, opts...)...)
	return &Tracer{provider: tp, tracer: tp.Tracer(scope)}
}

// Setup returns the process's Tracer as cfg says: nil when tracing is
// off, else one that exports to the OTLP endpoint of the environment.
// The exporter connects lazily: a collector that is down loses spans,
// never stops the orchestrator.
func Setup(ctx context.Context, cfg Config) (*Tracer, error) {
	if !cfg.Enabled {
		return nil, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("creating the OTLP trace exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attribute.String("service.name", cfg.ServiceName)))
	if err != nil {
		return nil, fmt.Errorf("describing the service for tracing: %w", err)
	}
	return New(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}

// Provider is the TracerProvider of t, for the middlewares that make the
// River jobs' and HTTP requests' spans; a no-op one when t is nil.
func (t *Tracer) Provider() trace.TracerProvider {
	if t == nil {
		return noop.NewTracerProvider()
	}
	return t.provider
}

// Shutdown exports the spans still buffered and stops the exporter.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// noSpan is the span the methods of a nil Tracer return.
var noSpan = trace.SpanFromContext(context.Background())

// StartIntake starts the root span of the batch's trace, with the ids
// derived from batchID, linked to the span current in ctx (the intake
// request's). End it only when the batch was created: a redelivered
// batch's intake is not its root, and a root ended twice would be two
// spans of one id.
func (t *Tracer) StartIntake(ctx context.Context, batchID string) (context.Context, trace.Span) {
	if t == nil {
		return ctx, noSpan
	}
	tid, sid := derive(WorkBatch, batchID)
	opts := []trace.SpanStartOption{trace.WithNewRoot(), trace.WithAttributes(BatchIDKey.String(batchID))}
	if cur := trace.SpanContextFromContext(ctx); cur.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: cur}))
	}
	_, span := t.tracer.Start(context.WithValue(ctx, idsKey{}, fixedIDs{trace: tid, span: sid, fixed: true}), "batch.intake", opts...)
	return trace.ContextWithSpan(ctx, span), span
}

// StartBatchStep starts a span of the batch's own trace: a child of the
// span current in ctx if that is already one of the batch's, else of the
// batch's root, linked to the span current in ctx (e.g. the River job run
// that does the step).
func (t *Tracer) StartBatchStep(ctx context.Context, batchID, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if t == nil {
		return ctx, noSpan
	}
	return t.startBatchStep(ctx, batchID, name, attrs)
}

func (t *Tracer) startBatchStep(ctx context.Context, batchID, name string, attrs []attribute.KeyValue, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	opts = append(opts, trace.WithAttributes(append(attrs, BatchIDKey.String(batchID))...))
	cur := trace.SpanContextFromContext(ctx)
	tid, _ := derive(WorkBatch, batchID)
	if cur.TraceID() == tid {
		return t.tracer.Start(ctx, name, opts...)
	}
	if cur.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: cur}))
	}
	_, span := t.tracer.Start(trace.ContextWithRemoteSpanContext(ctx, t.batchRoot(batchID)), name, opts...)
	return trace.ContextWithSpan(ctx, span), span
}

// StartWork starts a span of a unit of work's own trace: kind (WorkTask,
// WorkChunk, WorkDocument) and id name the unit, and every span started
// for it, in any process, joins that trace. A span of the unit already
// current in ctx is the new span's parent; otherwise the span is a root of
// the unit's trace, linked to the batch's trace (when batchID is set) and
// to the span current in ctx.
func (t *Tracer) StartWork(ctx context.Context, batchID, kind, id, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if t == nil {
		return ctx, noSpan
	}
	attrs = append(attrs, WorkKindKey.String(kind), WorkIDKey.String(id))
	if batchID != "" {
		attrs = append(attrs, BatchIDKey.String(batchID))
	}
	cur := trace.SpanContextFromContext(ctx)
	tid, _ := derive(kind, id)
	if cur.TraceID() == tid {
		return t.tracer.Start(ctx, name, trace.WithAttributes(attrs...))
	}
	links := make([]trace.Link, 0, 2)
	if batchID != "" {
		links = append(links, trace.Link{SpanContext: BatchLink(batchID)})
	}
	if cur.IsValid() {
		links = append(links, trace.Link{SpanContext: cur})
	}
	_, span := t.tracer.Start(context.WithValue(ctx, idsKey{}, fixedIDs{trace: tid}), name,
		trace.WithNewRoot(), trace.WithLinks(links...), trace.WithAttributes(attrs...))
	return trace.ContextWithSpan(ctx, span), span
}

// LinkBatch links the span current in ctx (e.g. a callback's request) to
// the batch's trace.
func (t *Tracer) LinkBatch(ctx context.Context, batchID string) {
	if t == nil {
		return
	}
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.AddLink(trace.Link{SpanContext: BatchLink(batchID)})
	span.SetAttributes(BatchIDKey.String(batchID))
}

// batchRoot is the span context of the root of the batch's trace as the
// batch's steps take it for their parent: its ids derived from batchID,
// and sampled as the provider's sampler decides for that trace id, which
// every process decides alike. The decision is the sampler's own: a span
// is started with the root's ids and never ended, so never exported.
func (t *Tracer) batchRoot(batchID string) trace.SpanContext {
	tid, sid := derive(WorkBatch, batchID)
	_, probe := t.tracer.Start(context.WithValue(context.Background(), idsKey{}, fixedIDs{trace: tid, span: sid, fixed: true}), "batch", trace.WithNewRoot())
	return probe.SpanContext().WithRemote(true)
}

// BatchLink is the span context of the root of the batch's trace, for a
// link to it (a link needs no sampling decision).
func BatchLink(batchID string) trace.SpanContext {
	tid, sid := derive(WorkBatch, batchID)
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, Remote: true})
}

// BatchTraceID is the id of the batch's trace, the same in every process.
func BatchTraceID(batchID string) trace.TraceID {
	tid, _ := derive(WorkBatch, batchID)
	return tid
}

// WorkTraceID is the id of the trace of a unit of work (StartWork).
func WorkTraceID(kind, id string) trace.TraceID {
	tid, _ := derive(kind, id)
	return tid
}

// WorkBatch is the kind whose derived ids are a batch's.
const WorkBatch = "batch"

// End ends span, marking it failed with err when err is not nil.
func End(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// Traceparent is the W3C traceparent of the span current in ctx, "" when
// there is none: what a machine is handed as TRACEPARENT, for its worker to
// send with its callbacks, so that their requests join its task's trace.
func Traceparent(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	return carrier["traceparent"]
}

// derive is the trace id of (kind, id) and the span id of its root: the
// first 24 bytes of a SHA-256 of them, so every process derives the same.
func derive(kind, id string) (trace.TraceID, trace.SpanID) {
	h := sha256.Sum256([]byte(kind + "\x00" + id))
	var tid trace.TraceID
	var sid trace.SpanID
	copy(tid[:], h[:16])
	copy(sid[:], h[16:24])
	if !tid.IsValid() || !sid.IsValid() { // all zeros: a chance of 2^-64
		tid[15], sid[7] = 1, 1
	}
	return tid, sid
}

// idsKey is the context key of the ids a new root span must take.
type idsKey struct{}

// fixedIDs are the ids a root span started by this package takes: its
// trace's derived id, and with fixed its span id too (a batch's root).
type fixedIDs struct {
	trace trace.TraceID
	span  trace.SpanID
	fixed bool
}

// idGenerator is the SDK's ID generator: random ids, but for the roots
// this package starts, the ids their context names.
type idGenerator struct{}

var _ sdktrace.IDGenerator = idGenerator{}

// NewIDs implements sdktrace.IDGenerator.
func (g idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if f, ok := ctx.Value(idsKey{}).(fixedIDs); ok {
		if f.fixed {
			return f.trace, f.span
		}
		return f.trace, g.NewSpanID(ctx, f.trace)
	}
	var tid trace.TraceID
	for !tid.IsValid() {
		binary.BigEndian.PutUint64(tid[:8], rand.Uint64())
		binary.BigEndian.PutUint64(tid[8:], rand.Uint64())
	}
	return tid, g.NewSpanID(ctx, tid)
}

// NewSpanID implements sdktrace.IDGenerator.
func (idGenerator) NewSpanID(context.Context, trace.TraceID) trace.SpanID {
	var sid trace.SpanID
	for !sid.IsValid() {
		binary.BigEndian.PutUint64(sid[:], rand.Uint64())
	}
	return sid
}

// RecordPhase records a phase of the batch, from its start to its end, as
// a span of the batch's trace, after the fact: its times are the phase's
// events', whichever processes ran it.
func (t *Tracer) RecordPhase(ctx context.Context, batchID, phase string, start, end time.Time) {
	if t == nil {
		return
	}
	ctx = trace.ContextWithSpanContext(ctx, trace.SpanContext{}) // a child of the root, not of the caller's step
	_, span := t.startBatchStep(ctx, batchID, "phase "+phase, []attribute.KeyValue{PhaseKey.String(phase)}, trace.WithTimestamp(start))
	span.End(trace.WithTimestamp(end))
}
