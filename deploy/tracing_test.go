package deploy

// The checks of compose.yaml's trace backend (decision 0016): Jaeger under
// the tracing profile, and every service's OTEL_* variables, read by the
// services' own tracing.LoadConfig.

import (
	"net/url"
	"slices"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/usagebilling/billing/pkg/tracing"
)

const traceService = "jaeger"

// loadComposeTracing loads compose.yaml as
// `OTEL_TRACES_EXPORTER=otlp docker compose --profile tracing config` would.
func loadComposeTracing(t *testing.T) *types.Project {
	t.Helper()
	opts, err := cli.NewProjectOptions([]string{"compose.yaml"}, cli.WithWorkingDirectory("."),
		cli.WithEnv([]string{"OTEL_TRACES_EXPORTER=otlp"}), cli.WithProfiles([]string{"tracing"}))
	if err != nil {
		t.Fatalf("compose options: %v", err)
	}
	p, err := opts.LoadProject(t.Context())
	if err != nil {
		t.Fatalf("load compose.yaml with the tracing profile: %v", err)
	}
	return p
}

// TestTracingOffByDefault checks that a plain `docker compose up` starts no
// trace backend and leaves every service's tracing off.
func TestTracingOffByDefault(t *testing.T) {
	p := loadCompose(t)
	if _, ok := p.Services[traceService]; ok {
		t.Errorf("%s runs without the tracing profile", traceService)
	}
	for _, spec := range specs {
		e := env(composeService(t, p, spec.Name))
		cfg, err := tracing.LoadConfig(func(k string) (string, bool) { v, ok := e[k]; return v, ok }, spec.Name)
		if err != nil {
			t.Fatalf("%s rejects its compose tracing variables: %v", spec.Name, err)
		}
		if cfg.Enabled {
			t.Errorf("%s traces without OTEL_TRACES_EXPORTER=otlp", spec.Name)
		}
	}
}

// TestTracingProfile checks that with the tracing profile and
// OTEL_TRACES_EXPORTER=otlp every service traces, exporting to the trace
// backend's OTLP/HTTP port under its own name, and that the backend is under
// the profile with its UI published on loopback.
func TestTracingProfile(t *testing.T) {
	p := loadComposeTracing(t)
	backend := composeService(t, p, traceService)
	if !slices.Contains(backend.Profiles, "tracing") {
		t.Errorf("%s profiles %v, want tracing", traceService, backend.Profiles)
	}
	ui := false
	for _, port := range backend.Ports {
		ui = ui || (port.Target == 16686 && port.HostIP == "127.0.0.1")
	}
	if !ui {
		t.Errorf("%s does not publish its UI (16686) on 127.0.0.1: %v", traceService, backend.Ports)
	}
	for _, spec := range specs {
		t.Run(spec.Name, func(t *testing.T) {
			e := env(composeService(t, p, spec.Name))
			cfg, err := tracing.LoadConfig(func(k string) (string, bool) { v, ok := e[k]; return v, ok }, spec.Name)
			if err != nil {
				t.Fatalf("%s rejects its compose tracing variables: %v", spec.Name, err)
			}
			if !cfg.Enabled {
				t.Fatalf("%s does not trace with OTEL_TRACES_EXPORTER=otlp", spec.Name)
			}
			if cfg.ServiceName != spec.Name {
				t.Errorf("%s exports as service.name %q", spec.Name, cfg.ServiceName)
			}
			u, err := url.Parse(cfg.Endpoint)
			if err != nil {
				t.Fatal(err)
			}
			if u.Hostname() != traceService || u.Port() != "4318" || u.Path != "/v1/traces" {
				t.Errorf("%s exports to %s, want %s's OTLP/HTTP traces endpoint (port 4318, /v1/traces)", spec.Name, cfg.Endpoint, traceService)
			}
			if !slices.Contains(backend.Expose, "4318") {
				t.Errorf("%s does not expose 4318 to the services: %v", traceService, backend.Expose)
			}
		})
	}
}
