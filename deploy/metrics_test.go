package deploy

import (
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/outbox"
	"github.com/usagebilling/billing/pkg/service"
)

// metric is what the dashboard may rely on about one metric family.
type metric struct {
	histogram bool
	labels    map[string]bool
	services  map[string]bool // the services that expose it
}

// lazyPool is a pool that never connects: the relay and the consumer only
// keep it until they run, and nothing here runs them.
func lazyPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), "postgres://deploy-test@127.0.0.1:1/none?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// built is a service wired as service.Main wires it, without running.
type built struct {
	parts  service.Parts
	topics []string // what its consumer subscribes to
	rec    *recorder
	router http.Handler
}

// build wires spec the way service.Main does (pkg/service/service.go,
// serve), from the service's compose environment, on a registry of its own:
// the relay registers through a registerer that adds the service label; the
// inbox (service.NewInbox) and its runner label their metrics themselves.
// The pool never connects and the broker address refuses, so nothing runs.
func build(t *testing.T, spec service.Spec) built {
	t.Helper()
	ctx := t.Context()
	log := slog.New(slog.DiscardHandler)
	pool := lazyPool(t)
	rec := &recorder{reg: prometheus.NewRegistry()}
	reg := prometheus.WrapRegistererWith(prometheus.Labels{"service": spec.Name}, rec)
	registry := envelope.NewRegistry()
	events.Register(registry)
	if spec.Register != nil {
		spec.Register(registry)
	}
	project := loadCompose(t)
	cfg := serviceConfig(t, project, spec)
	cfg.Brokers = []string{"127.0.0.1:1"} // /readyz answers at once
	// Build reads the service's own settings from the process's
	// environment: compose's (invoice refuses plaintext webhook secrets on
	// its listener, which is not loopback).
	for name, v := range env(composeService(t, project, spec.Name)) {
		if slices.Contains(ownEnvNames[spec.Name], name) {
			t.Setenv(name, v)
		}
	}
	deps := service.Deps{Config: cfg, Logger: log, Pool: pool, Metrics: reg, Registry: registry}
	parts, err := spec.Build(ctx, deps)
	if err != nil {
		t.Fatalf("build %s: %v", spec.Name, err)
	}
	if _, err := outbox.NewRelay(pool, outbox.Config{Brokers: cfg.Brokers, Name: spec.Name + "-relay", Logger: log, Registerer: reg}); err != nil {
		t.Fatalf("%s relay: %v", spec.Name, err)
	}
	ib, topics, err := service.NewInbox(spec, deps, parts, rec)
	if err != nil {
		t.Fatalf("%s inbox: %v", spec.Name, err)
	}
	if _, err := inbox.NewRunner(pool, ib, inbox.RunnerConfig{
		Brokers: cfg.Brokers, Group: cfg.ConsumerGroup, Topics: topics, Logger: log, Registerer: rec,
	}); err != nil {
		t.Fatalf("%s consumer: %v", spec.Name, err)
	}
	return built{parts: parts, topics: topics, rec: rec, router: service.NewRouter(deps, rec.reg, parts)}
}

// recorder is a Registerer that remembers the descriptions of what it
// registers: a vector with no child yet (inbox_decisions_total before the
// first decision) is described but not gathered.
type recorder struct {
	reg   *prometheus.Registry
	mu    sync.Mutex
	descs []*prometheus.Desc
}

func (r *recorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	var ds []*prometheus.Desc
	for d := range ch {
		ds = append(ds, d)
	}
	if err := r.reg.Register(c); err != nil {
		return err
	}
	r.mu.Lock()
	r.descs = append(r.descs, ds...)
	r.mu.Unlock()
	return nil
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

func (r *recorder) Unregister(c prometheus.Collector) bool { return r.reg.Unregister(c) }

var (
	descName     = regexp.MustCompile(`fqName: "([^"]+)"`)
	descConst    = regexp.MustCompile(`constLabels: \{([^}]*)\}`)
	descVariable = regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
)

// realMetrics returns every metric family the five services register, by
// name. Names come from the collectors' descriptions, label names from the
// descriptions too, types from a gather.
func realMetrics(t *testing.T) map[string]*metric {
	t.Helper()
	all := map[string]*metric{}
	get := func(name string) *metric {
		m, ok := all[name]
		if !ok {
			m = &metric{labels: map[string]bool{}, services: map[string]bool{}}
			all[name] = m
		}
		return m
	}
	for _, spec := range specs {
		rec := build(t, spec).rec
		for _, d := range rec.descs {
			s := d.String()
			name := descName.FindStringSubmatch(s)
			cl, vl := descConst.FindStringSubmatch(s), descVariable.FindStringSubmatch(s)
			if name == nil || cl == nil || vl == nil {
				t.Fatalf("cannot read the metric description %s (has client_golang changed Desc.String?)", s)
			}
			m := get(name[1])
			m.services[spec.Name] = true
			for _, pair := range strings.Split(cl[1], ",") {
				if k, _, ok := strings.Cut(pair, "="); ok {
					m.labels[k] = true
				}
			}
			for _, l := range strings.Split(vl[1], ",") {
				if l = strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"); l != "" {
					m.labels[l] = true
				}
			}
		}
		families, err := rec.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			m := get(f.GetName())
			m.services[spec.Name] = true
			if f.GetType() == dto.MetricType_HISTOGRAM {
				m.histogram = true
			}
			for _, x := range f.GetMetric() {
				for _, l := range x.GetLabel() {
					m.labels[l.GetName()] = true
				}
			}
		}
	}
	return all
}

func TestRealMetricsAreFound(t *testing.T) {
	// The dashboard test is only as good as this list: make sure it sees
	// the outbox and inbox metrics, with their labels, where they exist.
	all := realMetrics(t)
	for name, want := range map[string]struct {
		histogram bool
		labels    []string
		services  []string
	}{
		"outbox_pending":               {false, []string{"service"}, []string{"meter", "usage", "billing", "invoice", "query"}},
		"outbox_commit_to_ack_seconds": {true, []string{"service"}, []string{"meter"}},
		"inbox_decisions_total":        {false, []string{"service", "outcome", "event_type"}, []string{"meter", "usage", "billing", "invoice", "query"}},
		"inbox_batch_duration_seconds": {true, []string{"service"}, []string{"usage"}},
	} {
		m, ok := all[name]
		if !ok {
			t.Errorf("%s not registered by any service", name)
			continue
		}
		if m.histogram != want.histogram {
			t.Errorf("%s: histogram %v, want %v", name, m.histogram, want.histogram)
		}
		for _, l := range want.labels {
			if !m.labels[l] {
				t.Errorf("%s: no label %s (labels %v)", name, l, m.labels)
			}
		}
		for _, s := range want.services {
			if !m.services[s] {
				t.Errorf("%s: not registered by %s", name, s)
			}
		}
	}
}
