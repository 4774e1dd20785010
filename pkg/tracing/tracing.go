// Package tracing sets up OpenTelemetry tracing from the standard OTEL_*
// variables and gives the few helpers the shared packages call: a span that
// costs nothing when tracing is off (StartSpan), and the W3C traceparent that
// carries a trace from one process to the next inside an event's envelope
// (Traceparent, WithTraceparent).
//
// Tracing is off unless the environment turns it on (see LoadConfig); off,
// the process's tracer is OpenTelemetry's no-op tracer, StartSpan starts
// nothing and allocates nothing, and a traceparent still travels: an event
// carries its cause's (the consumed event's, or the request's traceparent
// header), so turning tracing on in one service joins the traces the others
// already pass along.
//
// Spans, by package (decision 0016):
//
//	httpx.Trace     "<METHOD> <route>"            server
//	outbox.Append   "outbox append <topic>"       producer (the event's traceparent points here)
//	outbox.Relay    "outbox send <topic>"         producer, child of the append
//	inbox           "inbox decide <event type>"   consumer, child of the event's traceparent
//	inbox           "inbox handle <event type>"   internal, child of the decision
package tracing

import (
	"context"
	"encoding/hex"
	"sync/atomic"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/usagebilling/billing/pkg/envelope"
)

// ScopeName is the instrumentation scope of every span the shared packages
// start.
const ScopeName = "github.com/usagebilling/billing"

// state is the process's tracer; off is the no-op tracer.
type state struct {
	tracer trace.Tracer
	on     bool
}

var current atomic.Pointer[state]

func init() { current.Store(&state{tracer: noop.NewTracerProvider().Tracer(ScopeName)}) }

// Enabled reports whether spans are recorded and exported (Setup found
// tracing configured, or a test called Use).
func Enabled() bool { return current.Load().on }

// Tracer returns the process's tracer: the SDK's when Enabled, the no-op
// tracer otherwise.
func Tracer() trace.Tracer { return current.Load().tracer }

// Use makes tp the process's tracer provider (tests pass one whose spans a
// tracetest.SpanRecorder records) and returns a function that restores the
// previous one.
func Use(tp trace.TracerProvider) (restore func()) {
	prev := current.Swap(&state{tracer: tp.Tracer(ScopeName), on: true})
	return func() { current.Store(prev) }
}

// off is the span StartSpan returns when tracing is off: a zero-size value,
// so returning it as a trace.Span does not allocate.
var off trace.Span = noop.Span{}

// StartSpan starts a span named name+" "+detail (detail may be empty) of kind
// as a child of ctx's span. When tracing is off it returns ctx unchanged and a
// no-op span, without building the name: the cost of an instrumented call
// that is not traced is one atomic load.
func StartSpan(ctx context.Context, kind trace.SpanKind, name, detail string) (context.Context, trace.Span) {
	s := current.Load()
	if !s.on {
		return ctx, off
	}
	if detail != "" {
		name += " " + detail
	}
	return s.tracer.Start(ctx, name, trace.WithSpanKind(kind))
}

// End ends span, recording err (when not nil) as its error status.
func End(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// WithTraceparent returns ctx carrying the remote span context of a W3C
// traceparent (an envelope's, a request header's), so the spans started from
// it, and the events appended under it, join that trace. An empty or invalid
// traceparent leaves ctx as it is.
func WithTraceparent(ctx context.Context, traceparent string) context.Context {
	sc, ok := Parse(traceparent)
	if !ok {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// Parse returns the span context of a W3C traceparent of version 00
// (envelope.ValidTraceparent), marked remote.
func Parse(traceparent string) (trace.SpanContext, bool) {
	if !envelope.ValidTraceparent(traceparent) {
		return trace.SpanContext{}, false
	}
	var tid trace.TraceID
	var sid trace.SpanID
	var flags [1]byte
	if _, err := hex.Decode(tid[:], []byte(traceparent[3:35])); err != nil {
		return trace.SpanContext{}, false
	}
	if _, err := hex.Decode(sid[:], []byte(traceparent[36:52])); err != nil {
		return trace.SpanContext{}, false
	}
	if _, err := hex.Decode(flags[:], []byte(traceparent[53:55])); err != nil {
		return trace.SpanContext{}, false
	}
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(flags[0]) & trace.FlagsSampled, Remote: true,
	}), true
}

// Traceparent returns the W3C traceparent of ctx's span context, "" when ctx
// has none.
func Traceparent(ctx context.Context) string {
	return Format(trace.SpanContextFromContext(ctx))
}

// Format returns sc as a W3C traceparent of version 00, "" when sc is not
// valid.
func Format(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	var b [55]byte
	b[0], b[1], b[2] = '0', '0', '-'
	tid, sid := sc.TraceID(), sc.SpanID()
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	b[52] = '-'
	hex.Encode(b[53:55], []byte{byte(sc.TraceFlags() & trace.FlagsSampled)})
	return string(b[:])
}
