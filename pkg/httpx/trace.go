package httpx

import (
	"net/http"

	"github.com/go-chi/chi/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/usagebilling/billing/pkg/tracing"
)

// Trace is the middleware that traces each request as a server span, named
// "<METHOD> <route pattern>" once chi has routed it, under the request's W3C
// traceparent header when it has a valid one (package tracing). The span is in
// the request's context, so the events the handler appends carry it.
//
// With tracing off it starts no span: a request with a valid traceparent
// header has it put in its context, so the events it causes carry it
// (decision 0016); one without costs a header lookup.
func Trace(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		header := r.Header.Get("traceparent")
		if !tracing.Enabled() {
			if header != "" {
				r = r.WithContext(tracing.WithTraceparent(r.Context(), header))
			}
			next.ServeHTTP(w, r)
			return
		}
		ctx, span := tracing.StartSpan(tracing.WithTraceparent(r.Context(), header), trace.SpanKindServer, r.Method, "")
		defer span.End()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, r.WithContext(ctx))
		route := ""
		if rc := chi.RouteContext(ctx); rc != nil {
			route = rc.RoutePattern()
		}
		if route != "" {
			span.SetName(r.Method + " " + route)
		}
		span.SetAttributes(
			attribute.String("http.request.method", r.Method),
			attribute.String("http.route", route),
			attribute.String("url.path", r.URL.Path),
			attribute.Int("http.response.status_code", sw.status))
		if sw.status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(sw.status))
		}
	})
}

// statusWriter records the status a handler writes.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(status int) {
	if !w.wrote {
		w.status, w.wrote = status, true
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (ExtendDeadline).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
