package deploy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

type promConfig struct {
	ScrapeConfigs []struct {
		JobName       string `yaml:"job_name"`
		MetricsPath   string `yaml:"metrics_path"`
		Scheme        string `yaml:"scheme"`
		StaticConfigs []struct {
			Targets []string          `yaml:"targets"`
			Labels  map[string]string `yaml:"labels"`
		} `yaml:"static_configs"`
	} `yaml:"scrape_configs"`
}

// scrapeTarget is one target with the path it is scraped at.
type scrapeTarget struct{ job, addr, path string }

func loadPrometheus(t *testing.T) []scrapeTarget {
	t.Helper()
	b, err := os.ReadFile("prometheus/prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	var c promConfig
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf("prometheus.yml: %v", err)
	}
	var out []scrapeTarget
	for _, sc := range c.ScrapeConfigs {
		path := sc.MetricsPath
		if path == "" {
			path = "/metrics" // Prometheus's default
		}
		if sc.Scheme != "" && sc.Scheme != "http" {
			t.Errorf("job %s: scheme %s, the services serve plain HTTP", sc.JobName, sc.Scheme)
		}
		for _, st := range sc.StaticConfigs {
			if _, ok := st.Labels["service"]; ok {
				t.Errorf("job %s: a target label named service would clash with the services' own service label", sc.JobName)
			}
			for _, addr := range st.Targets {
				out = append(out, scrapeTarget{sc.JobName, addr, path})
			}
		}
	}
	return out
}

func TestPrometheusScrapesEveryService(t *testing.T) {
	p := loadCompose(t)
	targets := loadPrometheus(t)
	for _, spec := range specs {
		want := scrapeTarget{spec.Name, spec.Name + ":" + strconv.Itoa(spec.DefaultPort), "/metrics"}
		if !slices.Contains(targets, want) {
			t.Errorf("%s: no scrape job %s of %s%s (targets %v)", spec.Name, want.job, want.addr, want.path, targets)
		}
	}
	// Every target is a compose service (or Prometheus itself).
	for _, tg := range targets {
		host, _ := splitHostPort(t, tg.addr)
		if _, ok := p.Services[host]; !ok && host != "localhost" {
			t.Errorf("job %s scrapes %s, which is not a compose service", tg.job, tg.addr)
		}
	}
	prom := composeService(t, p, promService)
	var configPath string
	for _, arg := range prom.Command {
		if v, ok := strings.CutPrefix(arg, "--config.file="); ok {
			configPath = v
		}
	}
	if !mounts(prom, "prometheus/prometheus.yml", configPath) {
		t.Errorf("%s: --config.file=%q is not prometheus/prometheus.yml mounted", promService, configPath)
	}
}

// exporterMetrics are the metrics of the Kafka exporter (danielqsj/kafka-exporter)
// the dashboard may use, with their labels; they are not in this repository,
// so they are listed by hand from the exporter's documentation.
var exporterMetrics = map[string][]string{
	"kafka_consumergroup_lag":     {"consumergroup", "topic", "partition"},
	"kafka_consumergroup_lag_sum": {"consumergroup", "topic"},
}

// targetLabels are added by Prometheus to every series it scrapes; up is its
// own per-target metric.
var targetLabels = []string{"job", "instance"}

type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string          `json:"name"`
			Datasource *datasourceRef  `json:"datasource"`
			Query      json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Datasource *datasourceRef `json:"datasource"`
	Targets    []struct {
		Expr       string         `json:"expr"`
		Datasource *datasourceRef `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's panels
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// promQuery is one PromQL expression of the dashboard and where it is.
type promQuery struct{ where, expr string }

func loadDashboard(t *testing.T) (dashboard, []promQuery, []*datasourceRef) {
	t.Helper()
	b, err := os.ReadFile("grafana/dashboards/usage-billing.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	var qs []promQuery
	var refs []*datasourceRef
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type != "row" {
				refs = append(refs, p.Datasource)
			}
			for i, tg := range p.Targets {
				qs = append(qs, promQuery{fmt.Sprintf("panel %q target %d", p.Title, i), tg.Expr})
				refs = append(refs, tg.Datasource)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var s string
			if err := json.Unmarshal(v.Query, &s); err != nil {
				t.Fatalf("variable %s: query %s", v.Name, v.Query)
			}
			q.Query = s
		}
		qs = append(qs, promQuery{"variable " + v.Name, q.Query})
		refs = append(refs, v.Datasource)
	}
	return d, qs, refs
}

// TestDashboardUsesRealMetrics checks every query of the Grafana dashboard
// against the metrics the services really register (gathered from their
// outbox relay and inbox on a Prometheus registry) and the Kafka exporter's.
func TestDashboardUsesRealMetrics(t *testing.T) {
	p := loadCompose(t)
	real := realMetrics(t)
	targets := loadPrometheus(t)
	_, exporterRuns := p.Services[exporterService]
	exporterScraped := slices.ContainsFunc(targets, func(tg scrapeTarget) bool { return strings.HasPrefix(tg.addr, exporterService+":") })

	_, queries, _ := loadDashboard(t)
	if len(queries) == 0 {
		t.Fatal("the dashboard has no queries")
	}
	used := map[string]bool{}
	for _, q := range queries {
		refs, err := parsePromQL(q.expr)
		if err != nil {
			t.Errorf("%s: %v", q.where, err)
			continue
		}
		if len(refs.metrics) == 0 {
			t.Errorf("%s: %q uses no metric", q.where, q.expr)
		}
		labels := map[string]bool{}
		for _, l := range targetLabels {
			labels[l] = true
		}
		for _, name := range refs.metrics {
			base, m := resolveMetric(real, name)
			switch {
			case m != nil:
				used[base] = true
				for l := range m.labels {
					labels[l] = true
				}
				if name == base+"_bucket" {
					labels["le"] = true
				}
			case exporterMetrics[name] != nil:
				if !exporterRuns || !exporterScraped {
					t.Errorf("%s: %s comes from %s, which compose.yaml does not run or Prometheus does not scrape", q.where, name, exporterService)
				}
				used[name] = true
				for _, l := range exporterMetrics[name] {
					labels[l] = true
				}
			case name == "up":
				used[name] = true
			case real[name] != nil:
				t.Errorf("%s: %s is a histogram: query %s_bucket, _sum or _count", q.where, name, name)
			default:
				t.Errorf("%s: metric %s is registered by no service (nor the Kafka exporter)", q.where, name)
			}
		}
		for _, l := range slices.Compact(slices.Sorted(slices.Values(refs.labels))) {
			if !labels[l] {
				t.Errorf("%s: label %s is not a label of %v", q.where, l, refs.metrics)
			}
		}
	}
	// What the dashboard must show: backlogs, decisions, publish latency, consumer lag.
	for _, want := range []string{
		"outbox_pending", "outbox_oldest_pending_age_seconds", "outbox_commit_to_ack_seconds",
		"inbox_decisions_total", "inbox_deferred", "inbox_quarantined", "kafka_consumergroup_lag",
	} {
		if !used[want] {
			t.Errorf("the dashboard shows no %s", want)
		}
	}
}

// resolveMetric finds name among the real metrics, allowing a histogram's
// _bucket, _sum and _count series.
func resolveMetric(real map[string]*metric, name string) (string, *metric) {
	if m, ok := real[name]; ok && !m.histogram {
		return name, m
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if m, ok := real[base]; ok && m.histogram {
				return base, m
			}
		}
	}
	return "", nil
}

func TestGrafanaProvisioning(t *testing.T) {
	p := loadCompose(t)
	g := composeService(t, p, grafanaService)

	var ds struct {
		Datasources []struct {
			Name string `yaml:"name"`
			UID  string `yaml:"uid"`
			Type string `yaml:"type"`
			URL  string `yaml:"url"`
		} `yaml:"datasources"`
	}
	readYAML(t, "grafana/provisioning/datasources/prometheus.yml", &ds)
	if len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" {
		t.Fatalf("want one prometheus datasource, got %+v", ds.Datasources)
	}
	src := ds.Datasources[0]
	if want := "http://" + promService + ":9090"; src.URL != want {
		t.Errorf("datasource url %s, want %s", src.URL, want)
	}

	var providers struct {
		Providers []struct {
			Type    string `yaml:"type"`
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, "grafana/provisioning/dashboards/dashboards.yml", &providers)
	if len(providers.Providers) != 1 || providers.Providers[0].Type != "file" {
		t.Fatalf("want one file provider, got %+v", providers.Providers)
	}
	if !mounts(g, "grafana/dashboards", providers.Providers[0].Options.Path) {
		t.Errorf("%s: the dashboards provider reads %s, where grafana/dashboards is not mounted", grafanaService, providers.Providers[0].Options.Path)
	}
	if !mounts(g, "grafana/provisioning", "/etc/grafana/provisioning") {
		t.Errorf("%s: grafana/provisioning is not mounted at /etc/grafana/provisioning", grafanaService)
	}

	d, _, refs := loadDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard needs a uid and a title")
	}
	for _, r := range refs {
		if r == nil || r.UID != src.UID || r.Type != "prometheus" {
			t.Errorf("dashboard datasource %+v, want the provisioned %s (uid %s)", r, src.Name, src.UID)
		}
	}
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestProbedPathsAreServed sends the healthcheck's and Prometheus's requests,
// without credentials, to each service's real router: the probed path must
// exist and be open (here /readyz answers 503: nothing is reachable), and
// /metrics must serve the outbox metrics.
func TestProbedPathsAreServed(t *testing.T) {
	p := loadCompose(t)
	targets := loadPrometheus(t)
	for _, spec := range specs {
		t.Run(spec.Name, func(t *testing.T) {
			router := build(t, spec).router
			get := func(path string) (int, string) {
				rec := httptest.NewRecorder()
				router.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, path, nil))
				return rec.Code, rec.Body.String()
			}
			hc := composeService(t, p, spec.Name).HealthCheck
			u, err := url.Parse(hc.Test[len(hc.Test)-1])
			if err != nil {
				t.Fatal(err)
			}
			if code, body := get(u.Path); code != http.StatusOK && code != http.StatusServiceUnavailable {
				t.Errorf("%s: GET %s = %d %s, want 200 or 503", spec.Name, u.Path, code, body)
			}
			for _, tg := range targets {
				if tg.job != spec.Name {
					continue
				}
				code, body := get(tg.path)
				if code != http.StatusOK || !strings.Contains(body, "outbox_pending") {
					t.Errorf("%s: GET %s = %d, want 200 with the outbox metrics", spec.Name, tg.path, code)
				}
			}
		})
	}
}
