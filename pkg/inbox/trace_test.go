package inbox_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/tracing"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// The tests here are not parallel: tracing.Use sets the process's tracer.

// echoBatchInbox is publishingInbox with a batch handler: each applied note
// publishes its echo on echo.a.
func echoBatchInbox(t *testing.T) *inbox.Inbox {
	t.Helper()
	bh := inbox.OnBatch(func(ctx context.Context, tx pgx.Tx, ds []*envelope.Decoded, ps []note) ([]inbox.Outcome, error) {
		outs := make([]inbox.Outcome, len(ds))
		for i, d := range ds {
			echo := ev(t, "Noted", 1, "echo-"+d.Envelope.EventID.String(), 1, note{Origin: "echo-" + ps[i].Origin})
			outs[i] = inbox.Outcome{Publish: []inbox.Publication{{Topic: "echo.a", Event: echo}}}
		}
		return outs, nil
	})
	ib, err := inbox.New(newRegistry(), nil, inbox.Options{Service: "publish",
		BatchHandlers: map[string]inbox.BatchHandler{"Noted": bh}})
	if err != nil {
		t.Fatal(err)
	}
	return ib
}

// echoTraceparents returns the traceparent of each echo in the outbox, by the
// origin it echoes.
func echoTraceparents(t *testing.T, pool *pgxpool.Pool) map[string]string {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT envelope FROM outbox_event ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for rows.Next() {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			t.Fatal(err)
		}
		d, err := newRegistry().Decode(raw)
		if err != nil {
			t.Fatal(err)
		}
		out[d.Payload.(note).Origin] = d.Envelope.Traceparent
		if got := envelope.TraceparentOf(raw); got != d.Envelope.Traceparent {
			t.Errorf("TraceparentOf the stored envelope = %q, decoded %q", got, d.Envelope.Traceparent)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// withTraceparent returns e carrying traceparent.
func withTraceparent(t *testing.T, e envelope.Envelope, traceparent string) []byte {
	t.Helper()
	e.Traceparent = traceparent
	return raw(t, e)
}

const causeTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// TestTracingOffCarriesTheCause checks that with tracing off an event a
// handler publishes carries its cause's traceparent, and none when the cause
// had none, for a handler and a batch handler.
func TestTracingOffCarriesTheCause(t *testing.T) {
	if tracing.Enabled() {
		t.Fatal("tracing is on")
	}
	for _, tc := range []struct {
		name string
		ib   func(*testing.T) *inbox.Inbox
	}{{"handler", publishingInbox}, {"batch handler", echoBatchInbox}} {
		t.Run(tc.name, func(t *testing.T) {
			pool := pgtest.NewPool(t, inboxOutboxTmpl)
			traced, untraced := "a-"+uuid.NewString(), "a-"+uuid.NewString()
			decide(t, tc.ib(t), pool,
				withTraceparent(t, ev(t, "Noted", 1, uuid.NewString(), 1, note{Origin: traced}), causeTraceparent),
				raw(t, ev(t, "Noted", 1, uuid.NewString(), 1, note{Origin: untraced})))
			got := echoTraceparents(t, pool)
			if got["echo-"+traced] != causeTraceparent {
				t.Errorf("echo of the traced event carries %q, want its cause's %s", got["echo-"+traced], causeTraceparent)
			}
			if got["echo-"+untraced] != "" {
				t.Errorf("echo of an event without traceparent carries %q", got["echo-"+untraced])
			}
		})
	}
}

// TestDecisionSpans checks the spans of a decided event with tracing on: the
// decision is a consumer span under the event's traceparent, the handler's
// span is under the decision, the append of each published event is under
// the handler's, and the published event carries the append's traceparent;
// for a handler and a batch handler deciding several events at once.
func TestDecisionSpans(t *testing.T) {
	for _, tc := range []struct {
		name string
		ib   func(*testing.T) *inbox.Inbox
	}{{"handler", publishingInbox}, {"batch handler", echoBatchInbox}} {
		t.Run(tc.name, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			defer tracing.Use(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))()
			pool := pgtest.NewPool(t, inboxOutboxTmpl)
			origins := []string{"a-" + uuid.NewString(), "a-" + uuid.NewString(), "a-" + uuid.NewString()}
			parents := []string{causeTraceparent, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", ""}
			var raws [][]byte
			for i, o := range origins {
				raws = append(raws, withTraceparent(t, ev(t, "Noted", 1, uuid.NewString(), 1, note{Origin: o}), parents[i]))
			}
			wantOutcomes(t, decide(t, tc.ib(t), pool, raws...), "applied", "applied", "applied")
			stored := echoTraceparents(t, pool)

			spans := rec.Ended()
			byParent := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
			for _, s := range spans {
				byParent[s.Parent().SpanID()] = append(byParent[s.Parent().SpanID()], s)
			}
			for i, o := range origins {
				var decision sdktrace.ReadOnlySpan
				for _, s := range spans {
					if s.Name() == "inbox decide Noted" && attr(s, "messaging.message.id") == eventIDOf(t, raws[i]) {
						decision = s
					}
				}
				if decision == nil {
					t.Fatalf("no decision span for event %d among %d spans", i, len(spans))
				}
				if decision.SpanKind() != trace.SpanKindConsumer || attr(decision, "inbox.outcome") != "applied" {
					t.Errorf("decision span: kind %v, outcome %q", decision.SpanKind(), attr(decision, "inbox.outcome"))
				}
				if sc, ok := tracing.Parse(parents[i]); ok {
					if decision.Parent().SpanID() != sc.SpanID() || decision.SpanContext().TraceID() != sc.TraceID() {
						t.Errorf("event %d: decision's parent %s, want the envelope's %s", i, tracing.Format(decision.Parent()), parents[i])
					}
				} else if decision.Parent().IsValid() {
					t.Errorf("event %d without traceparent: decision has parent %s", i, tracing.Format(decision.Parent()))
				}
				handle := only(t, byParent[decision.SpanContext().SpanID()], "inbox handle Noted")
				appendSpan := only(t, byParent[handle.SpanContext().SpanID()], "outbox append echo.a")
				if appendSpan.SpanKind() != trace.SpanKindProducer {
					t.Errorf("append span kind %v", appendSpan.SpanKind())
				}
				if want := tracing.Format(appendSpan.SpanContext()); stored["echo-"+o] != want {
					t.Errorf("event %d: echo carries %q, want its append span's %s", i, stored["echo-"+o], want)
				}
			}
		})
	}
}

func attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

func eventIDOf(t *testing.T, raw []byte) string {
	t.Helper()
	d, err := newRegistry().Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	return d.Envelope.EventID.String()
}

// only returns the one span named name among spans.
func only(t *testing.T, spans []sdktrace.ReadOnlySpan, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	var found []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		var names []string
		for _, s := range spans {
			names = append(names, s.Name())
		}
		t.Fatalf("%d spans named %q among the children %v, want 1", len(found), name, names)
	}
	return found[0]
}
