package httpx_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/usagebilling/billing/pkg/httpx"
	"github.com/usagebilling/billing/pkg/tracing"
)

const clientTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// tracedRouter serves POST /v1/tenants/{tenantID}/things behind Trace and
// reports the traceparent its handler's context carries.
func tracedRouter(seen *string) http.Handler {
	r := chi.NewRouter()
	r.Use(httpx.Trace)
	r.Post("/v1/tenants/{tenantID}/things", func(w http.ResponseWriter, r *http.Request) {
		*seen = tracing.Traceparent(r.Context())
		w.WriteHeader(http.StatusAccepted)
	})
	return r
}

// TestTraceOff checks that with tracing off the request's traceparent header
// reaches the handler's context (so the events it appends carry it), an
// invalid one is dropped, and no header means no trace context.
func TestTraceOff(t *testing.T) {
	for _, tc := range []struct{ header, want string }{
		{clientTraceparent, clientTraceparent}, {"00-garbage", ""}, {"", ""},
	} {
		var seen string
		req := httptest.NewRequest(http.MethodPost, "/v1/tenants/t1/things", nil)
		if tc.header != "" {
			req.Header.Set("traceparent", tc.header)
		}
		tracedRouter(&seen).ServeHTTP(httptest.NewRecorder(), req)
		if seen != tc.want {
			t.Errorf("header %q: handler's context carries %q, want %q", tc.header, seen, tc.want)
		}
	}
}

// TestTraceServerSpan checks the server span: named after the route pattern,
// a child of the request's traceparent, with the status, and in the handler's
// context.
func TestTraceServerSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	defer tracing.Use(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))()
	var seen string
	req := httptest.NewRequest(http.MethodPost, "/v1/tenants/t1/things", nil)
	req.Header.Set("traceparent", clientTraceparent)
	tracedRouter(&seen).ServeHTTP(httptest.NewRecorder(), req)

	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	s := spans[0]
	parent, _ := tracing.Parse(clientTraceparent)
	if s.Name() != "POST /v1/tenants/{tenantID}/things" || s.SpanKind() != trace.SpanKindServer {
		t.Errorf("span %q of kind %v", s.Name(), s.SpanKind())
	}
	if s.Parent().SpanID() != parent.SpanID() || s.SpanContext().TraceID() != parent.TraceID() {
		t.Errorf("span's parent %s, want the header's %s", tracing.Format(s.Parent()), clientTraceparent)
	}
	if want := tracing.Format(s.SpanContext()); seen != want {
		t.Errorf("handler's context carries %q, want the server span's %s", seen, want)
	}
	status := ""
	for _, kv := range s.Attributes() {
		if kv.Key == "http.response.status_code" {
			status = kv.Value.String()
		}
	}
	if status != "202" {
		t.Errorf("http.response.status_code = %q, want 202", status)
	}
}
