package outbox_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/usagebilling/billing/pkg/outbox"
	"github.com/usagebilling/billing/pkg/tracing"
	"github.com/usagebilling/billing/testkit/kafkatest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// Not parallel: tracing.Use sets the process's tracer.

const requestTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// TestAppendAndSendSpans checks, on PostgreSQL and the broker, that an append
// under a span is an "outbox append" producer span under it, that every event
// reaches Kafka carrying the append span's traceparent (not the one it was
// built with), and that the relay sends each under an "outbox send" span
// whose parent is its event's append.
func TestAppendAndSendSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	defer tracing.Use(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))()
	pool := pgtest.NewPool(t, outboxDB)
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.Topic(t, brokers, 3)

	evs := newEvents(t, 3, 3)
	evs[0].Traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" // built with another
	ctx := tracing.WithTraceparent(t.Context(), requestTraceparent)
	ctx, request := tracing.StartSpan(ctx, trace.SpanKindServer, "POST /things", "")
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return outbox.Append(ctx, tx, topic, evs...) }); err != nil {
		t.Fatal(err)
	}
	request.End()
	_, stop := startRelays(t, pool, 1, outbox.Config{Brokers: brokers})
	waitDrained(t, pool, time.Minute)
	stop()

	var appendSpan, requestSpan sdktrace.ReadOnlySpan
	sends := map[string]sdktrace.ReadOnlySpan{} // by event id
	for _, s := range rec.Ended() {
		switch s.Name() {
		case "outbox append " + topic:
			appendSpan = s
		case "POST /things":
			requestSpan = s
		case "outbox send " + topic:
			for _, kv := range s.Attributes() {
				if kv.Key == "messaging.message.id" {
					sends[kv.Value.AsString()] = s
				}
			}
		}
	}
	if appendSpan == nil || requestSpan == nil {
		t.Fatalf("no append or request span among %d", len(rec.Ended()))
	}
	if appendSpan.Parent().SpanID() != requestSpan.SpanContext().SpanID() || appendSpan.SpanKind() != trace.SpanKindProducer {
		t.Errorf("append span: parent %s, kind %v; want the request's span, producer", tracing.Format(appendSpan.Parent()), appendSpan.SpanKind())
	}
	want := tracing.Format(appendSpan.SpanContext())
	got := readTopic(t, brokers, topic)
	if len(got) != len(evs) {
		t.Fatalf("%d messages on the topic, want %d", len(got), len(evs))
	}
	for _, d := range got {
		if d.Envelope.Traceparent != want {
			t.Errorf("event %s sent with traceparent %q, want the append span's %s", d.Envelope.EventID, d.Envelope.Traceparent, want)
		}
		send, ok := sends[d.Envelope.EventID.String()]
		if !ok {
			t.Errorf("no send span for event %s", d.Envelope.EventID)
			continue
		}
		if send.Parent().SpanID() != appendSpan.SpanContext().SpanID() || send.SpanContext().TraceID() != appendSpan.SpanContext().TraceID() {
			t.Errorf("send span of %s: parent %s, want the append span", d.Envelope.EventID, tracing.Format(send.Parent()))
		}
	}
	if evs[0].Traceparent == want {
		t.Error("Append modified the caller's event")
	}
}

// TestAppendOffKeepsTheCause checks that with tracing off an append under a
// traceparent (a request's header, a consumed event's) writes it into every
// event, and one without leaves the events' own.
func TestAppendOffKeepsTheCause(t *testing.T) {
	if tracing.Enabled() {
		t.Fatal("tracing is on")
	}
	pool := pgtest.NewPool(t, outboxDB)
	evs := newEvents(t, 2, 2)
	own := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	evs[1].Traceparent = own
	caused := tracing.WithTraceparent(t.Context(), requestTraceparent)
	for _, tc := range []struct {
		ctx   context.Context
		topic string
		want  []string
	}{
		{caused, "caused", []string{requestTraceparent, requestTraceparent}},
		{t.Context(), "uncaused", []string{"", own}},
	} {
		if err := pgx.BeginFunc(tc.ctx, pool, func(tx pgx.Tx) error { return outbox.Append(tc.ctx, tx, tc.topic, evs...) }); err != nil {
			t.Fatal(err)
		}
		rows, err := pool.Query(t.Context(), `SELECT envelope FROM outbox_event WHERE topic = $1 ORDER BY id`, tc.topic)
		if err != nil {
			t.Fatal(err)
		}
		raws, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
		if err != nil {
			t.Fatal(err)
		}
		for i, raw := range raws {
			var got struct {
				Traceparent string `json:"traceparent"`
			}
			if err := json.Unmarshal(raw, &got); err != nil {
				t.Fatal(err)
			}
			if got.Traceparent != tc.want[i] {
				t.Errorf("%s event %d: traceparent %q, want %q", tc.topic, i, got.Traceparent, tc.want[i])
			}
		}
		if _, err := pool.Exec(t.Context(), `DELETE FROM outbox_event`); err != nil {
			t.Fatal(err)
		}
	}
}
