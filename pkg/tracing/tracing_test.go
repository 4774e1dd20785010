package tracing_test

import (
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/usagebilling/billing/pkg/tracing"
)

const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestLoadConfig(t *testing.T) {
	for _, tc := range []struct {
		name     string
		env      map[string]string
		enabled  bool
		endpoint string
		service  string
		problems []string
	}{
		{name: "nothing set: off", env: nil, endpoint: "http://localhost:4318/v1/traces", service: "usage"},
		{name: "exporter otlp", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, enabled: true,
			endpoint: "http://localhost:4318/v1/traces", service: "usage"},
		{name: "endpoint alone turns it on", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://jaeger:4318/"},
			enabled: true, endpoint: "http://jaeger:4318/v1/traces", service: "usage"},
		{name: "traces endpoint as it is", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318",
			"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://b:4318/custom"}, enabled: true, endpoint: "http://b:4318/custom", service: "usage"},
		{name: "none wins over an endpoint", env: map[string]string{"OTEL_TRACES_EXPORTER": "none",
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://jaeger:4318"}, endpoint: "http://jaeger:4318/v1/traces", service: "usage"},
		{name: "sdk disabled", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"},
			endpoint: "http://localhost:4318/v1/traces", service: "usage"},
		{name: "service name", env: map[string]string{"OTEL_SERVICE_NAME": "usage-eu"},
			endpoint: "http://localhost:4318/v1/traces", service: "usage-eu"},
		{name: "every problem at once", env: map[string]string{
			"OTEL_TRACES_EXPORTER": "zipkin", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": "jaeger:4318",
			"OTEL_TRACES_SAMPLER": "sometimes", "OTEL_SDK_DISABLED": "yes", "OTEL_BSP_SCHEDULE_DELAY": "1s"},
			problems: []string{"OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_ENDPOINT",
				"OTEL_TRACES_SAMPLER", "OTEL_SDK_DISABLED", "OTEL_BSP_SCHEDULE_DELAY"}},
		{name: "ratio out of range", env: map[string]string{"OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
			"OTEL_TRACES_SAMPLER_ARG": "1.5"}, problems: []string{"OTEL_TRACES_SAMPLER_ARG"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := tracing.LoadConfig(func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }, "usage")
			if len(tc.problems) > 0 {
				if err == nil {
					t.Fatalf("LoadConfig accepted %v", tc.env)
				}
				for _, name := range tc.problems {
					if !strings.Contains(err.Error(), name+":") {
						t.Errorf("error does not name %s: %v", name, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Enabled != tc.enabled || cfg.Endpoint != tc.endpoint || cfg.ServiceName != tc.service {
				t.Errorf("got enabled=%v endpoint=%s service=%s, want %v %s %s",
					cfg.Enabled, cfg.Endpoint, cfg.ServiceName, tc.enabled, tc.endpoint, tc.service)
			}
		})
	}
}

func TestEveryReadVariableIsListed(t *testing.T) {
	var read []string
	_, _ = tracing.LoadConfig(func(k string) (string, bool) { read = append(read, k); return "", false }, "x")
	for _, k := range read {
		found := false
		for _, n := range tracing.EnvNames {
			found = found || n == k
		}
		if !found {
			t.Errorf("LoadConfig reads %s, which EnvNames does not list", k)
		}
	}
}

func TestTraceparentRoundTrip(t *testing.T) {
	sc, ok := tracing.Parse(tp)
	if !ok || !sc.IsRemote() || !sc.IsSampled() {
		t.Fatalf("Parse(%s) = %v, %v", tp, sc, ok)
	}
	if got := tracing.Format(sc); got != tp {
		t.Errorf("Format = %s, want %s", got, tp)
	}
	if got := tracing.Traceparent(tracing.WithTraceparent(t.Context(), tp)); got != tp {
		t.Errorf("Traceparent(WithTraceparent) = %s, want %s", got, tp)
	}
	for _, bad := range []string{"", "garbage", strings.ToUpper(tp), "ff" + tp[2:], "00-00000000000000000000000000000000-00f067aa0ba902b7-01"} {
		if _, ok := tracing.Parse(bad); ok {
			t.Errorf("Parse(%q) accepted", bad)
		}
		if ctx := tracing.WithTraceparent(t.Context(), bad); trace.SpanContextFromContext(ctx).IsValid() {
			t.Errorf("WithTraceparent(%q) gave a span context", bad)
		}
	}
}

// TestOffCostsNothing checks what decision 0016 promises: with tracing off,
// an instrumented call starts no span, keeps the context's traceparent and
// allocates nothing.
func TestOffCostsNothing(t *testing.T) {
	if tracing.Enabled() {
		t.Fatal("tracing is on without Setup or Use")
	}
	ctx := tracing.WithTraceparent(t.Context(), tp)
	allocs := testing.AllocsPerRun(1000, func() {
		sctx, span := tracing.StartSpan(ctx, trace.SpanKindProducer, "outbox append", "usage.events.v1")
		if span.IsRecording() || sctx != ctx {
			t.Fatal("a span was started with tracing off")
		}
		tracing.End(span, nil)
	})
	if allocs != 0 {
		t.Errorf("StartSpan and End off: %v allocations, want 0", allocs)
	}
	_, span := tracing.StartSpan(ctx, trace.SpanKindProducer, "outbox append", "t")
	if got := tracing.Traceparent(trace.ContextWithSpan(ctx, span)); got != "" && got != tp {
		t.Errorf("off span carries %s", got)
	}
}

// BenchmarkOff is the whole cost tracing adds, off, to one event: the append's
// StartSpan, Traceparent and End, and the inbox's Parse of the consumed
// event's traceparent and the handler's context.
//
//	go test -run '^$' -bench Off ./tracing/
func BenchmarkOff(b *testing.B) {
	ctx := b.Context()
	b.ReportAllocs()
	for b.Loop() {
		sc, _ := tracing.Parse(tp)
		hctx := trace.ContextWithRemoteSpanContext(ctx, sc)
		actx, span := tracing.StartSpan(hctx, trace.SpanKindProducer, "outbox append", "billing.events.v1")
		if tracing.Traceparent(actx) == "" {
			b.Fatal("lost the traceparent")
		}
		tracing.End(span, nil)
	}
}

// BenchmarkOffNoTraceparent is BenchmarkOff for an event without a
// traceparent: an append from a request that sent none.
func BenchmarkOffNoTraceparent(b *testing.B) {
	ctx := b.Context()
	b.ReportAllocs()
	for b.Loop() {
		actx, span := tracing.StartSpan(ctx, trace.SpanKindProducer, "outbox append", "usage.events.v1")
		if tracing.Traceparent(actx) != "" {
			b.Fatal("a traceparent from nowhere")
		}
		tracing.End(span, nil)
	}
}
