package inbox

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/usagebilling/billing/pkg/tracing"
)

// How a decision is traced (package tracing, decision 0016)
//
// Each message gets an "inbox decide <event type>" span (consumer) whose
// parent is the envelope's traceparent, the producer's append span, from the
// start of the call that decides it to its end; a handler call is an "inbox
// handle <event type>" span under it, and each event the handler publishes
// through its Outcome an "outbox append <topic>" span under that, whose
// traceparent the event carries. A batch handler's events get one handle
// span each, sharing the call's timing. When tracing is off there are no
// spans, and a published event carries the traceparent of the event that
// caused it (or its own when that had none).

// startDecision starts it's decision span, or, when tracing is off, keeps the
// span context of the event's traceparent for the handler's context.
func (it *item) startDecision(ctx context.Context) {
	if it.span != nil {
		return
	}
	var traceparent, eventType string
	if it.dec != nil {
		traceparent, eventType = it.env().Traceparent, it.env().EventType
	} else {
		eventType = it.hint.eventType
	}
	if !tracing.Enabled() {
		it.cause, _ = tracing.Parse(traceparent)
		return
	}
	_, it.span = tracing.StartSpan(tracing.WithTraceparent(ctx, traceparent), trace.SpanKindConsumer, "inbox decide", eventType)
	attrs := []attribute.KeyValue{
		attribute.String("messaging.system", "kafka"),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.destination.name", it.msg.Topic),
		attribute.Int("messaging.destination.partition.id", int(it.msg.Partition)),
		attribute.Int64("messaging.kafka.offset", it.msg.Offset),
		attribute.String("event.type", eventType),
	}
	if it.dec != nil {
		attrs = append(attrs, attribute.String("messaging.message.id", it.env().EventID.String()),
			attribute.String("tenant.id", it.env().TenantID))
	}
	it.span.SetAttributes(attrs...)
}

// endDecision ends it's decision span with d, or with err when the call that
// decided it failed (its transaction is rolled back; the message comes again).
func (it *item) endDecision(d *Decision, err error) {
	if it.span == nil {
		return
	}
	if d != nil {
		it.span.SetAttributes(attribute.String("inbox.outcome", d.Outcome), attribute.Bool("inbox.woken", d.Woken))
		if d.Reason != "" {
			it.span.SetAttributes(attribute.String("inbox.reason", d.Reason))
		}
	}
	tracing.End(it.span, err)
	it.span = nil
}

// context returns ctx carrying it's decision span, or, when tracing is off,
// the span context of its event's traceparent.
func (it *item) context(ctx context.Context) context.Context {
	switch {
	case it.span != nil:
		return trace.ContextWithSpan(ctx, it.span)
	case it.cause.IsValid():
		return trace.ContextWithRemoteSpanContext(ctx, it.cause)
	default:
		return ctx
	}
}

// startHandle starts the handle span of it under its decision.
func (it *item) startHandle(ctx context.Context) (context.Context, trace.Span) {
	return tracing.StartSpan(it.context(ctx), trace.SpanKindInternal, "inbox handle", it.env().EventType)
}

// traceOutcome traces the events out publishes as children of hctx, the handle
// span's context, and gives each event the traceparent of its append span (or,
// off, hctx's: the consumed event's). The spans end when the run's appends
// are sent (write).
func (p *pending) traceOutcome(hctx context.Context, out Outcome) {
	for i := range out.Publish {
		pub := &out.Publish[i]
		actx, span := tracing.StartSpan(hctx, trace.SpanKindProducer, "outbox append", pub.Topic)
		if span.IsRecording() {
			span.SetAttributes(
				attribute.String("messaging.system", "kafka"),
				attribute.String("messaging.operation.type", "create"),
				attribute.String("messaging.destination.name", pub.Topic),
				attribute.String("messaging.message.id", pub.Event.EventID.String()),
				attribute.String("event.type", pub.Event.EventType),
				attribute.String("tenant.id", pub.Event.TenantID))
			p.appendSpans = append(p.appendSpans, span)
		}
		if tp := tracing.Traceparent(actx); tp != "" {
			pub.Event.Traceparent = tp
		}
	}
}

// errRunUndone ends the append spans of a run that is rolled back or fails.
var errRunUndone = errors.New("run rolled back: its events are decided again")

// endAppends ends the append spans of a run's publications.
func (p *pending) endAppends(err error) {
	for _, span := range p.appendSpans {
		tracing.End(span, err)
	}
	p.appendSpans = nil
}
