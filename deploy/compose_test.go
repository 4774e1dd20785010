package deploy

// The checks of compose.yaml against the services' real configuration: their
// Spec (name, default port), service.LoadConfig and service.EnvNames,
// events.AllTopics, the metrics their outbox relay and inbox register. No
// Docker engine is needed: compose.yaml is loaded with compose-go, the loader
// of `docker compose` itself, so a file it rejects fails here too.

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/pkg/tracing"
	"github.com/usagebilling/billing/services/billing"
	"github.com/usagebilling/billing/services/invoice"
	"github.com/usagebilling/billing/services/meter"
	"github.com/usagebilling/billing/services/query"
	"github.com/usagebilling/billing/services/usage"
	"github.com/usagebilling/billing/testkit/pgcluster"
)

// specs are the five services, as their main packages run them.
var specs = []service.Spec{meter.Spec, usage.Spec, billing.Spec, invoice.Spec, query.Spec}

// ownEnvNames are the variables a service's Build reads beyond
// service.EnvNames, for the services whose settings the deployments set.
var ownEnvNames = map[string][]string{"invoice": invoice.EnvNames, "query": query.EnvNames}

// readsEnv reports whether the service reads the variable name.
func readsEnv(spec service.Spec, name string) bool {
	return slices.Contains(service.EnvNames, name) || slices.Contains(tracing.EnvNames, name) ||
		slices.Contains(ownEnvNames[spec.Name], name)
}

// Names of the infrastructure services in compose.yaml.
const (
	pgService        = "postgres"
	kafkaService     = "kafka"
	topicInitService = "topic-init"
	proxyService     = "toxiproxy"
	exporterService  = "kafka-exporter"
	promService      = "prometheus"
	grafanaService   = "grafana"
)

// probePath is where the Dockerfiles put the probe binary.
const probePath = "/usr/local/bin/probe"

// loadCompose loads compose.yaml as `docker compose config` would, with an
// empty environment so that the defaults written in the file apply.
func loadCompose(t *testing.T) *types.Project {
	t.Helper()
	opts, err := cli.NewProjectOptions([]string{"compose.yaml"}, cli.WithWorkingDirectory("."), cli.WithEnv(nil))
	if err != nil {
		t.Fatalf("compose options: %v", err)
	}
	p, err := opts.LoadProject(t.Context())
	if err != nil {
		t.Fatalf("load compose.yaml: %v", err)
	}
	return p
}

// composeService returns the named service or fails the test.
func composeService(t *testing.T, p *types.Project, name string) types.ServiceConfig {
	t.Helper()
	s, ok := p.Services[name]
	if !ok {
		t.Fatalf("compose.yaml has no service %q", name)
	}
	return s
}

// env returns a service's environment with the values set in the file.
func env(s types.ServiceConfig) map[string]string {
	m := map[string]string{}
	for k, v := range s.Environment {
		if v != nil {
			m[k] = *v
		}
	}
	return m
}

// serviceConfig is what the service itself makes of its compose environment.
func serviceConfig(t *testing.T, p *types.Project, spec service.Spec) service.Config {
	t.Helper()
	svc := composeService(t, p, spec.Name)
	e := env(svc)
	mounted := keyMounts(svc)
	for name, v := range e {
		if strings.HasPrefix(v, "/keys/") && !mounted[v] {
			t.Fatalf("%s: %s names %s, which no read-only mount of its own file gives it", spec.Name, name, v)
		}
	}
	// The keys `make compose-keys` writes to ./keys, made here as it makes
	// them, where the container sees /keys.
	dir := composeKeys(t)
	for name, v := range e {
		if rest, ok := strings.CutPrefix(v, "/keys/"); ok {
			e[name] = filepath.Join(dir, rest)
		}
	}
	cfg, err := service.LoadConfig(service.NewEnvFrom(e), spec.Name, spec.DefaultPort)
	if err != nil {
		t.Fatalf("%s rejects its compose environment: %v", spec.Name, err)
	}
	return cfg
}

// composeKeys writes an issuer key, query's service key and their JWKS to
// a temporary directory, as `make compose-keys` does to deploy/keys.
func composeKeys(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	var doc auth.JWKS
	for _, k := range []struct{ kid, file string }{{"issuer-1", "issuer.pem"}, {"query/1", "query.pem"}} {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		pemKey, err := auth.MarshalPrivateKey(priv)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, k.file), pemKey, 0o600); err != nil {
			t.Fatal(err)
		}
		doc.Keys = append(doc.Keys, auth.PublicJWK(auth.Key{ID: k.kid, Private: priv}))
	}
	raw, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "jwks.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func splitHostPort(t *testing.T, addr string) (string, int) {
	t.Helper()
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		t.Fatalf("address %q: port: %v", addr, err)
	}
	return host, port
}

// dbAddr returns the host and port of a DATABASE_URL (5432 by default).
func dbAddr(t *testing.T, rawURL string) (string, int) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatalf("DATABASE_URL %q: %v", rawURL, err)
	}
	if u.Port() == "" {
		return u.Hostname(), 5432
	}
	return splitHostPort(t, u.Host)
}

func TestComposeHasEveryService(t *testing.T) {
	p := loadCompose(t)
	want := []string{pgService, kafkaService, topicInitService, proxyService, exporterService, promService, grafanaService}
	for _, s := range specs {
		want = append(want, s.Name, migrateService(s))
	}
	var got []string
	for name := range p.Services {
		got = append(got, name)
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("compose services = %v, want %v", got, want)
	}
}

func TestServiceEnvironment(t *testing.T) {
	p := loadCompose(t)
	dbs := map[string]string{} // database name -> service
	for _, spec := range specs {
		t.Run(spec.Name, func(t *testing.T) {
			e := env(composeService(t, p, spec.Name))
			for name := range e {
				if !readsEnv(spec, name) {
					t.Errorf("%s: %s is not a variable the service reads (service.EnvNames, tracing.EnvNames, its own EnvNames)", spec.Name, name)
				}
			}
			for _, name := range []string{"DATABASE_URL", "KAFKA_BROKERS"} {
				if e[name] == "" {
					t.Errorf("%s: %s is not set", spec.Name, name)
				}
			}
			cfg := serviceConfig(t, p, spec)
			if spec.Name == invoice.Spec.Name {
				// Compose's development key, on compose's own database.
				if sealed, err := invoice.SealsWebhookSecrets(service.NewEnvFrom(e)); err != nil || !sealed {
					t.Errorf("invoice: webhook signing secrets sealed %v (%v): want WEBHOOK_SECRET_KEYS set", sealed, err)
				}
			}
			if _, port := splitHostPort(t, cfg.HTTPAddr); port != spec.DefaultPort {
				t.Errorf("%s: listens on %s, want port %d", spec.Name, cfg.HTTPAddr, spec.DefaultPort)
			}
			if cfg.ConsumerGroup != spec.Name {
				t.Errorf("%s: consumer group %q: the dashboard's lag panel expects groups named after services", spec.Name, cfg.ConsumerGroup)
			}
			if slices.Contains(service.EnvNames, "SERVICE_URLS") {
				checkServiceURLs(t, spec.Name, e["SERVICE_URLS"])
			}
			u, err := url.Parse(cfg.DatabaseURL)
			if err != nil {
				t.Fatal(err)
			}
			db := strings.TrimPrefix(u.Path, "/")
			if other, ok := dbs[db]; ok {
				t.Errorf("%s and %s share database %q: each service owns its own", spec.Name, other, db)
			}
			dbs[db] = spec.Name
		})
	}
}

// checkServiceURLs checks a SERVICE_URLS value (name=http://host:port,...):
// inside compose the default (every service on 127.0.0.1) reaches nothing,
// so it must be set and name every service at its compose host and port.
func checkServiceURLs(t *testing.T, svc, value string) {
	t.Helper()
	if value == "" {
		t.Errorf("%s: SERVICE_URLS is not set: the default, 127.0.0.1, is the container itself", svc)
		return
	}
	got := map[string]string{}
	for _, part := range strings.Split(value, ",") {
		name, raw, _ := strings.Cut(strings.TrimSpace(part), "=")
		got[name] = raw
	}
	for _, spec := range specs {
		want := fmt.Sprintf("http://%s:%d", spec.Name, spec.DefaultPort)
		if got[spec.Name] != want {
			t.Errorf("%s: SERVICE_URLS has %s=%q, want %s", svc, spec.Name, got[spec.Name], want)
		}
	}
	if len(got) != len(specs) {
		t.Errorf("%s: SERVICE_URLS names %d services, want %d: %s", svc, len(got), len(specs), value)
	}
}

func TestServicePortsAndHealthchecks(t *testing.T) {
	p := loadCompose(t)
	for _, spec := range specs {
		t.Run(spec.Name, func(t *testing.T) {
			s := composeService(t, p, spec.Name)
			published := false
			for _, port := range s.Ports {
				if port.Target == uint32(spec.DefaultPort) && port.Published == strconv.Itoa(spec.DefaultPort) {
					published = true
				}
			}
			if !published {
				t.Errorf("%s: port %d is not published as %d: %+v", spec.Name, spec.DefaultPort, spec.DefaultPort, s.Ports)
			}
			hc := s.HealthCheck
			if hc == nil || hc.Disable || len(hc.Test) != 3 || hc.Test[0] != "CMD" || hc.Test[1] != probePath {
				t.Fatalf("%s: healthcheck %+v, want [CMD %s http://127.0.0.1:%d/readyz]", spec.Name, hc, probePath, spec.DefaultPort)
			}
			u, err := url.Parse(hc.Test[2])
			if err != nil {
				t.Fatal(err)
			}
			if u.Path != "/readyz" || u.Port() != strconv.Itoa(spec.DefaultPort) || u.Scheme != "http" {
				t.Errorf("%s: healthcheck probes %s, want http://...:%d/readyz", spec.Name, u, spec.DefaultPort)
			}
		})
	}
}

// migrateService is the one-shot compose service running `<name> migrate`.
func migrateService(spec service.Spec) string { return spec.Name + "-migrate" }

// migrateConfig is what `<name> migrate` makes of its one-shot's environment.
func migrateConfig(t *testing.T, p *types.Project, spec service.Spec) service.Config {
	t.Helper()
	e := env(composeService(t, p, migrateService(spec)))
	dir := composeKeys(t)
	for name, v := range e {
		if rest, ok := strings.CutPrefix(v, "/keys/"); ok {
			e[name] = filepath.Join(dir, rest)
		}
	}
	cfg, err := service.LoadConfig(service.NewEnvFrom(e), spec.Name, spec.DefaultPort)
	if err != nil {
		t.Fatalf("%s rejects its compose environment: %v", migrateService(spec), err)
	}
	return cfg
}

// TestMigrateStep checks that each service runs as a role other than its
// database's owner, and starts only after a one-shot of its own image has
// run `migrate` as the owner for that same database and runtime role.
func TestMigrateStep(t *testing.T) {
	p := loadCompose(t)
	for _, spec := range specs {
		t.Run(spec.Name, func(t *testing.T) {
			svc, mig := composeService(t, p, spec.Name), composeService(t, p, migrateService(spec))
			if mig.Image != svc.Image {
				t.Errorf("%s runs image %q, want the service's %q", mig.Name, mig.Image, svc.Image)
			}
			if !slices.Equal(mig.Command, types.ShellCommand{"migrate"}) {
				t.Errorf("%s: command %v, want [migrate]", mig.Name, mig.Command)
			}
			if mig.Restart != "no" {
				t.Errorf("%s: restart %q, want \"no\" (a one-shot)", mig.Name, mig.Restart)
			}
			if got := svc.DependsOn[mig.Name].Condition; got != types.ServiceConditionCompletedSuccessfully {
				t.Errorf("%s depends on %s with condition %q, want %q", spec.Name, mig.Name, got, types.ServiceConditionCompletedSuccessfully)
			}
			if got := mig.DependsOn[pgService].Condition; got != types.ServiceConditionHealthy {
				t.Errorf("%s depends on %s with condition %q, want %q", mig.Name, pgService, got, types.ServiceConditionHealthy)
			}
			run, m := serviceConfig(t, p, spec), migrateConfig(t, p, spec)
			if run.DatabaseMigrateURL != "" {
				t.Errorf("%s is given the owner's DATABASE_MIGRATE_URL: the service needs only its runtime role", spec.Name)
			}
			if m.DatabaseMigrateURL == "" {
				t.Fatalf("%s: DATABASE_MIGRATE_URL is not set", mig.Name)
			}
			runDB, runUser, _ := dbName(t, run.DatabaseURL)
			migDB, owner, _ := dbName(t, m.DatabaseMigrateURL)
			if _, grantee, _ := dbName(t, m.DatabaseURL); grantee != runUser {
				t.Errorf("%s grants %q, but %s runs as %q", mig.Name, grantee, spec.Name, runUser)
			}
			if migDB != runDB {
				t.Errorf("%s migrates database %q, %s uses %q", mig.Name, migDB, spec.Name, runDB)
			}
			if owner == runUser {
				t.Errorf("%s runs as %q, its database's owner: want a DML-only role", spec.Name, runUser)
			}
		})
	}
}

// keyMounts is the files of ./keys a service mounts read-only under /keys,
// each at /keys/<its name>: target -> true.
func keyMounts(s types.ServiceConfig) map[string]bool {
	m := map[string]bool{}
	for _, v := range s.Volumes {
		if v.ReadOnly && strings.HasPrefix(v.Target, "/keys/") && filepath.Base(filepath.Dir(v.Source)) == "keys" &&
			v.Target == "/keys/"+filepath.Base(v.Source) {
			m[v.Target] = true
		}
	}
	return m
}

// TestKeyFilesOnlyForTheirService checks that every container of compose.yaml
// sees only the files of ./keys its own AUTH_ variables name, each mounted
// on its own: the public keys (jwks.json), and a private key only to the
// service it belongs to (query.pem to query). A mount of the whole ./keys
// directory would hand the issuer's private key (issuer.pem, which signs
// any user's token with any role) and query's service key to every service.
func TestKeyFilesOnlyForTheirService(t *testing.T) {
	p := loadCompose(t)
	keysDir := filepath.Join(p.WorkingDir, "keys")
	for name, svc := range p.Services {
		named := map[string]bool{}
		for _, v := range env(svc) {
			if strings.HasPrefix(v, "/keys/") {
				named[v] = true
			}
		}
		for _, v := range svc.Volumes {
			inKeys := v.Source == keysDir || strings.HasPrefix(v.Source, keysDir+string(filepath.Separator))
			if !inKeys && v.Target != "/keys" && !strings.HasPrefix(v.Target, "/keys/") {
				continue
			}
			switch {
			case v.Source == keysDir:
				t.Errorf("%s mounts the whole keys directory at %s: mount only the files its AUTH_ variables name", name, v.Target)
			case !v.ReadOnly:
				t.Errorf("%s mounts %s writable: key files are read-only", name, v.Source)
			case v.Target != "/keys/"+filepath.Base(v.Source):
				t.Errorf("%s mounts %s at %s, want /keys/%s", name, v.Source, v.Target, filepath.Base(v.Source))
			case !named[v.Target]:
				t.Errorf("%s mounts %s, which none of its variables names: only its own keys", name, v.Target)
			}
			if filepath.Base(v.Source) == "issuer.pem" {
				t.Errorf("%s mounts the issuer's private key: no service signs users' tokens", name)
			}
		}
	}
	if svc := composeService(t, p, "query"); !keyMounts(svc)["/keys/query.pem"] {
		t.Errorf("query does not mount its own service key /keys/query.pem")
	}
}

// TestKafkaSecurityMatchesListener checks that each service speaks the
// security protocol of the broker listener it bootstraps from.
func TestKafkaSecurityMatchesListener(t *testing.T) {
	p := loadCompose(t)
	kenv := env(composeService(t, p, kafkaService))
	protocols := map[string]string{} // listener name -> protocol
	for _, l := range strings.Split(kenv["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"], ",") {
		name, proto, _ := strings.Cut(strings.TrimSpace(l), ":")
		protocols[name] = proto
	}
	advertised := map[string]string{} // host:port -> protocol
	for _, l := range strings.Split(kenv["KAFKA_ADVERTISED_LISTENERS"], ",") {
		name, addr, _ := strings.Cut(strings.TrimSpace(l), "://")
		advertised[addr] = protocols[name]
	}
	for _, spec := range specs {
		cfg := serviceConfig(t, p, spec)
		want := cfg.Kafka.Protocol
		for _, b := range cfg.Brokers {
			// The services reach the broker through toxiproxy, which the
			// broker advertises: the listener is the one advertising b.
			if got, ok := advertised[b]; !ok {
				t.Errorf("%s: no Kafka listener advertises %s", spec.Name, b)
			} else if got != want {
				t.Errorf("%s: KAFKA_SECURITY_PROTOCOL %s, but the listener at %s is %s", spec.Name, want, b, got)
			}
		}
	}
}

// TestServiceDependencies checks that a service starts only once every path
// it needs is there: the hosts of its DATABASE_URL and KAFKA_BROKERS (the
// proxy) healthy, what the proxy forwards to healthy (toxiproxy does not wait
// for its upstreams), and the topics created.
func TestServiceDependencies(t *testing.T) {
	p := loadCompose(t)
	proxies := loadProxies(t)
	for _, spec := range specs {
		t.Run(spec.Name, func(t *testing.T) {
			s := composeService(t, p, spec.Name)
			cfg := serviceConfig(t, p, spec)
			want := map[string]string{topicInitService: types.ServiceConditionCompletedSuccessfully}
			addrs := slices.Clone(cfg.Brokers)
			host, port := dbAddr(t, cfg.DatabaseURL)
			addrs = append(addrs, net.JoinHostPort(host, strconv.Itoa(port)))
			for _, addr := range addrs {
				host, port := splitHostPort(t, addr)
				want[host] = types.ServiceConditionHealthy
				if host != proxyService {
					continue
				}
				if pr, ok := proxies.byListenPort(port); ok {
					upHost, _ := splitHostPort(t, pr.Upstream)
					want[upHost] = types.ServiceConditionHealthy
				}
			}
			for dep, cond := range want {
				got, ok := s.DependsOn[dep]
				if !ok {
					t.Errorf("%s: does not depend on %s", spec.Name, dep)
					continue
				}
				if got.Condition != cond {
					t.Errorf("%s: depends on %s with condition %q, want %q", spec.Name, dep, got.Condition, cond)
				}
			}
			for _, dep := range []string{pgService, kafkaService} {
				if _, ok := want[dep]; !ok {
					t.Errorf("%s: neither DATABASE_URL nor KAFKA_BROKERS leads to %s", spec.Name, dep)
				}
			}
		})
	}
	// The topic job waits for a broker that answers.
	if got := composeService(t, p, topicInitService).DependsOn[kafkaService].Condition; got != types.ServiceConditionHealthy {
		t.Errorf("%s depends on %s with condition %q, want %q", topicInitService, kafkaService, got, types.ServiceConditionHealthy)
	}
}

func TestTopicInitCreatesAllTopics(t *testing.T) {
	p := loadCompose(t)
	s := composeService(t, p, topicInitService)
	e := env(s)
	topics := strings.Fields(e["TOPICS"])
	got, want := slices.Sorted(slices.Values(topics)), slices.Sorted(slices.Values(events.AllTopics))
	if !slices.Equal(got, want) {
		t.Errorf("%s creates %v, want events.AllTopics %v", topicInitService, topics, events.AllTopics)
	}
	if n, err := strconv.Atoi(e["PARTITIONS"]); err != nil || n < 1 {
		t.Errorf("%s: PARTITIONS=%q, want a positive count", topicInitService, e["PARTITIONS"])
	}
	script := strings.Join(s.Command, " ")
	for _, part := range []string{"kafkatool create-topics", "$TOPICS", "-partitions \"$PARTITIONS\"", "-bootstrap \"$BOOTSTRAP\""} {
		if !strings.Contains(script, part) {
			t.Errorf("%s: command does not use %q:\n%s", topicInitService, part, script)
		}
	}
	if !slices.Contains(advertisedAddrs(t, p), e["BOOTSTRAP"]) {
		t.Errorf("%s: BOOTSTRAP=%q is not an address the broker advertises (%v)", topicInitService, e["BOOTSTRAP"], advertisedAddrs(t, p))
	}
	// Every topic a service consumes is created.
	for _, spec := range specs {
		for _, topic := range build(t, spec).topics {
			if !slices.Contains(topics, topic) {
				t.Errorf("%s consumes %s, which %s does not create", spec.Name, topic, topicInitService)
			}
		}
	}
}

// kafkaListeners parses a KAFKA_LISTENERS-style value: name -> host:port.
func kafkaListeners(t *testing.T, value string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, l := range strings.Split(value, ",") {
		name, addr, ok := strings.Cut(strings.TrimSpace(l), "://")
		if !ok {
			t.Fatalf("listener %q: want NAME://host:port", l)
		}
		m[name] = addr
	}
	return m
}

// advertisedAddrs are the addresses the broker advertises.
func advertisedAddrs(t *testing.T, p *types.Project) []string {
	t.Helper()
	var addrs []string
	for _, addr := range kafkaListeners(t, env(composeService(t, p, kafkaService))["KAFKA_ADVERTISED_LISTENERS"]) {
		addrs = append(addrs, addr)
	}
	slices.Sort(addrs)
	return addrs
}

func TestDockerfileForEveryService(t *testing.T) {
	p := loadCompose(t)
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, spec := range specs {
		t.Run(spec.Name, func(t *testing.T) {
			s := composeService(t, p, spec.Name)
			if s.Build == nil {
				t.Fatalf("%s: no build section", spec.Name)
			}
			if got, _ := filepath.Abs(s.Build.Context); got != root {
				t.Errorf("%s: build context %s, want the repository root %s", spec.Name, s.Build.Context, root)
			}
			want := fmt.Sprintf("deploy/docker/%s.Dockerfile", spec.Name)
			if s.Build.Dockerfile != want {
				t.Errorf("%s: dockerfile %s, want %s", spec.Name, s.Build.Dockerfile, want)
			}
			checkDockerfile(t, root, spec)
		})
	}
}

// TestComposePostgresSettings checks that compose's PostgreSQL runs with
// the settings of a durable cluster of the stack (pgcluster.DurableSettings),
// so the two cannot drift apart.
func TestComposePostgresSettings(t *testing.T) {
	pg := composeService(t, loadCompose(t), pgService)
	var want []string
	for _, line := range pgcluster.DurableSettings {
		name, value, ok := strings.Cut(line, " = ")
		if !ok {
			t.Fatalf("DurableSettings: %q is not name = 'value'", line)
		}
		want = append(want, "-c", name+"="+strings.Trim(value, "'"))
	}
	if got := []string(pg.Command); !slices.Equal(got, want) {
		t.Errorf("%s: command %q, want %q (pgcluster.DurableSettings)", pgService, got, want)
	}
}
