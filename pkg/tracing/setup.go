package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// EnvNames are the variables LoadConfig reads or checks. The OpenTelemetry
// SDK reads the others of the standard set itself (OTEL_EXPORTER_OTLP_HEADERS,
// _TIMEOUT, _COMPRESSION, OTEL_BSP_*, OTEL_RESOURCE_ATTRIBUTES, the limits),
// so they work too.
var EnvNames = []string{
	"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES",
	"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
	"OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG", "OTEL_BSP_SCHEDULE_DELAY",
}

// Config is what LoadConfig makes of the environment.
type Config struct {
	// Enabled: spans are recorded and exported over OTLP/HTTP.
	Enabled bool
	// ServiceName is the resource's service.name: OTEL_SERVICE_NAME, or the
	// service's own name.
	ServiceName string
	// Endpoint is the OTLP/HTTP traces URL the exporter posts to
	// (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as it is, or
	// OTEL_EXPORTER_OTLP_ENDPOINT + "/v1/traces"; http://localhost:4318/v1/traces
	// by default).
	Endpoint string
	// Sampler is OTEL_TRACES_SAMPLER ("parentbased_always_on" when unset).
	Sampler string
}

// samplers are the OTEL_TRACES_SAMPLER values the Go SDK implements.
var samplers = []string{"always_on", "always_off", "traceidratio",
	"parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio"}

// LoadConfig reads the tracing configuration of service from lookup
// (os.LookupEnv in a service) and reports every problem at once.
//
// Tracing is on when OTEL_TRACES_EXPORTER is "otlp", or when it is unset and
// an OTLP endpoint variable is set; it is off when OTEL_TRACES_EXPORTER is
// "none" or unset without an endpoint, and whenever OTEL_SDK_DISABLED is
// "true". Only OTLP over HTTP (protobuf) is built in: the protocol variables
// may be unset or "http/protobuf".
func LoadConfig(lookup func(string) (string, bool), service string) (Config, error) {
	get := func(name string) string {
		v, _ := lookup(name)
		return strings.TrimSpace(v)
	}
	var problems []string
	bad := func(name, format string, args ...any) {
		problems = append(problems, name+": "+fmt.Sprintf(format, args...))
	}
	c := Config{ServiceName: service, Sampler: "parentbased_always_on"}
	if v := get("OTEL_SERVICE_NAME"); v != "" {
		c.ServiceName = v
	}
	base, traces := get("OTEL_EXPORTER_OTLP_ENDPOINT"), get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	switch exp := get("OTEL_TRACES_EXPORTER"); exp {
	case "otlp":
		c.Enabled = true
	case "":
		c.Enabled = base != "" || traces != ""
	case "none":
	default:
		bad("OTEL_TRACES_EXPORTER", "want otlp or none, got %q", exp)
	}
	switch v := strings.ToLower(get("OTEL_SDK_DISABLED")); v {
	case "true":
		c.Enabled = false
	case "", "false":
	default:
		bad("OTEL_SDK_DISABLED", "want true or false, got %q", v)
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
		if v := get(name); v != "" && v != "http/protobuf" {
			bad(name, "only http/protobuf is built in, got %q", v)
		}
	}
	c.Endpoint = "http://localhost:4318/v1/traces"
	switch {
	case traces != "":
		c.Endpoint = traces
		checkURL(bad, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", traces)
	case base != "":
		c.Endpoint = strings.TrimSuffix(base, "/") + "/v1/traces"
		checkURL(bad, "OTEL_EXPORTER_OTLP_ENDPOINT", base)
	}
	if v := get("OTEL_TRACES_SAMPLER"); v != "" {
		c.Sampler = v
		known := false
		for _, s := range samplers {
			known = known || s == v
		}
		if !known {
			bad("OTEL_TRACES_SAMPLER", "want one of %s, got %q", strings.Join(samplers, ", "), v)
		}
	}
	if v := get("OTEL_TRACES_SAMPLER_ARG"); v != "" && strings.HasSuffix(c.Sampler, "traceidratio") {
		if r, err := strconv.ParseFloat(v, 64); err != nil || r < 0 || r > 1 {
			bad("OTEL_TRACES_SAMPLER_ARG", "want a ratio from 0 to 1, got %q", v)
		}
	}
	if v := get("OTEL_BSP_SCHEDULE_DELAY"); v != "" {
		if n, err := strconv.Atoi(v); err != nil || n < 0 {
			bad("OTEL_BSP_SCHEDULE_DELAY", "want milliseconds, got %q", v)
		}
	}
	if len(problems) > 0 {
		return Config{}, errors.New("invalid tracing configuration:\n  " + strings.Join(problems, "\n  "))
	}
	return c, nil
}

func checkURL(bad func(string, string, ...any), name, v string) {
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad(name, "want an http:// or https:// URL, got %q", v)
	}
}

// Setup installs the tracer provider cfg describes: when cfg.Enabled, the
// SDK's, exporting in batches over OTLP/HTTP (the exporter and the sampler
// read the rest of the OTEL_* variables themselves), also as OpenTelemetry's
// global provider with the W3C trace-context propagator. Off, it installs
// nothing. shutdown flushes the spans still buffered; call it last, after the
// work that records spans has stopped.
func Setup(ctx context.Context, cfg Config, log *slog.Logger) (shutdown func(context.Context) error, err error) {
	if !cfg.Enabled {
		return func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(cfg.Endpoint))
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", cfg.ServiceName)),
		resource.WithFromEnv(), // OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME
		resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("tracing: export failed", "err", err)
	}))
	restore := Use(tp)
	log.Info("tracing on", "endpoint", cfg.Endpoint, "service_name", cfg.ServiceName, "sampler", cfg.Sampler)
	return func(ctx context.Context) error {
		restore()
		if err := tp.Shutdown(ctx); err != nil {
			return fmt.Errorf("tracing: flush spans: %w", err)
		}
		return nil
	}, nil
}
