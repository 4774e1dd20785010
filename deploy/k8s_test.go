package deploy

// The checks of k8s/ (kustomize) against the services' real configuration,
// as compose_test.go checks compose.yaml. No cluster is needed: every file is
// decoded strictly with the Kubernetes API types (an unknown or misspelt
// field is refused), the kustomization is built with kustomize's own library
// (what `kubectl apply -k` runs), and each object is held to the services'
// code: their Spec (name, port), the variables service.LoadConfig and
// tracing.LoadConfig read and accept, the probe paths, the migrate command,
// the consumers' topics and the topic job's partition count.

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	kusttypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

const (
	k8sDir       = "k8s"
	k8sKustomize = "kustomization.yaml"
	// k8sSecretsDir holds the secretGenerator's inputs, made per
	// installation and ignored by git (k8s/.gitignore).
	k8sSecretsDir = "secrets"
	// k8sUID is the Dockerfiles' USER (distroless nonroot).
	k8sUID = 65532
)

// k8sObjects are the objects of a kustomize build, decoded strictly.
type k8sObjects struct {
	deployments map[string]*appsv1.Deployment
	services    map[string]*corev1.Service
	pdbs        map[string]*policyv1.PodDisruptionBudget
	hpas        map[string]*autoscalingv2.HorizontalPodAutoscaler
	jobs        map[string]*batchv1.Job
	configMaps  map[string]*corev1.ConfigMap
	secrets     map[string]*corev1.Secret
	namespaces  map[string]*corev1.Namespace
	policies    []*networkingv1.NetworkPolicy
}

// k8sKinds are the kinds the manifests may hold, by apiVersion and kind.
var k8sKinds = map[string]func() any{
	"apps/v1 Deployment":                            func() any { return &appsv1.Deployment{} },
	"v1 Service":                                    func() any { return &corev1.Service{} },
	"policy/v1 PodDisruptionBudget":                 func() any { return &policyv1.PodDisruptionBudget{} },
	"autoscaling/v2 HorizontalPodAutoscaler":        func() any { return &autoscalingv2.HorizontalPodAutoscaler{} },
	"batch/v1 Job":                                  func() any { return &batchv1.Job{} },
	"v1 ConfigMap":                                  func() any { return &corev1.ConfigMap{} },
	"v1 Secret":                                     func() any { return &corev1.Secret{} },
	"v1 Namespace":                                  func() any { return &corev1.Namespace{} },
	"networking.k8s.io/v1 NetworkPolicy":            func() any { return &networkingv1.NetworkPolicy{} },
	"kustomize.config.k8s.io/v1beta1 Kustomization": func() any { return &kusttypes.Kustomization{} },
}

// decodeK8s decodes every YAML document of raw strictly into its API type:
// an unknown kind, an unknown field or a duplicate key is an error.
func decodeK8s(raw []byte) ([]any, error) {
	r := k8syaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	var out []any
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, err
		}
		if string(bytes.TrimSpace(j)) == "null" {
			continue // comments only
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, err
		}
		mk, ok := k8sKinds[tm.APIVersion+" "+tm.Kind]
		if !ok {
			return nil, fmt.Errorf("unexpected kind %q %q", tm.APIVersion, tm.Kind)
		}
		obj := mk()
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			return nil, fmt.Errorf("%s: %w", tm.Kind, err)
		}
		out = append(out, obj)
	}
}

// k8sFiles reads the directory's files (not the secrets' inputs).
func k8sFiles(t *testing.T) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(k8sDir)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(k8sDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = raw
	}
	return files
}

// k8sSecretInputs are the secretGenerator's inputs as deploy/k8s/README.md
// says to make them: the keys `make compose-keys` makes (jwks.json with the
// issuer's key and query/1, query.pem), and for each service its runtime
// role's DATABASE_URL and its owner's DATABASE_MIGRATE_URL, its Kafka
// principal's password, the Kafka CA's certificate, invoice's webhook
// secret key and the query console's form key.
func k8sSecretInputs(t *testing.T) map[string][]byte {
	t.Helper()
	dir := composeKeys(t)
	in := map[string][]byte{}
	for _, f := range []string{"jwks.json", "query.pem"} {
		raw, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		in[path.Join(k8sSecretsDir, f)] = raw
	}
	in[path.Join(k8sSecretsDir, "kafka-ca.crt")] = testCACert(t)
	// openssl rand -base64 32, and -hex 32.
	in[path.Join(k8sSecretsDir, "invoice-webhook-keys.env")] = []byte("WEBHOOK_SECRET_KEYS=webhook-1:" + randomKey(t, base64.StdEncoding.EncodeToString) + "\n")
	in[path.Join(k8sSecretsDir, "query-console-csrf.key")] = []byte(randomKey(t, hex.EncodeToString) + "\n")
	for _, spec := range specs {
		n := spec.Name
		in[path.Join(k8sSecretsDir, n+"-kafka.password")] = []byte(n + "-kafka-password\n")
		in[path.Join(k8sSecretsDir, n+"-database.env")] = fmt.Appendf(nil,
			"DATABASE_URL=postgres://%s_app:app-password@%s-db.example.internal:5432/%s?sslmode=verify-full\n", n, n, n)
		in[path.Join(k8sSecretsDir, n+"-database-owner.env")] = fmt.Appendf(nil,
			"DATABASE_MIGRATE_URL=postgres://%s:owner-password@%s-db.example.internal:5432/%s?sslmode=verify-full\n", n, n, n)
	}
	return in
}

// randomKey is 32 random bytes, encoded.
func randomKey(t *testing.T, encode func([]byte) string) string {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return encode(b)
}

// buildK8s runs kustomize on files (and the secrets' inputs) in memory, as
// `kubectl apply -k` would on the directory, and decodes what it makes.
func buildK8s(files, inputs map[string][]byte) (*k8sObjects, error) {
	fs := filesys.MakeFsInMemory()
	for name, raw := range files {
		if err := fs.WriteFile(path.Join("/k8s", name), raw); err != nil {
			return nil, err
		}
	}
	for name, raw := range inputs {
		if err := fs.WriteFile(path.Join("/k8s", name), raw); err != nil {
			return nil, err
		}
	}
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fs, "/k8s")
	if err != nil {
		return nil, fmt.Errorf("kustomize build: %w", err)
	}
	o := &k8sObjects{
		deployments: map[string]*appsv1.Deployment{}, services: map[string]*corev1.Service{},
		pdbs: map[string]*policyv1.PodDisruptionBudget{}, hpas: map[string]*autoscalingv2.HorizontalPodAutoscaler{},
		jobs: map[string]*batchv1.Job{}, configMaps: map[string]*corev1.ConfigMap{},
		secrets: map[string]*corev1.Secret{}, namespaces: map[string]*corev1.Namespace{},
	}
	for _, r := range m.Resources() {
		raw, err := r.AsYAML()
		if err != nil {
			return nil, err
		}
		objs, err := decodeK8s(raw)
		if err != nil {
			return nil, fmt.Errorf("%s %s as built: %w", r.GetKind(), r.GetName(), err)
		}
		for _, obj := range objs {
			switch v := obj.(type) {
			case *appsv1.Deployment:
				o.deployments[v.Name] = v
			case *corev1.Service:
				o.services[v.Name] = v
			case *policyv1.PodDisruptionBudget:
				o.pdbs[v.Name] = v
			case *autoscalingv2.HorizontalPodAutoscaler:
				o.hpas[v.Name] = v
			case *batchv1.Job:
				o.jobs[v.Name] = v
			case *corev1.ConfigMap:
				o.configMaps[v.Name] = v
			case *corev1.Secret:
				o.secrets[v.Name] = v
			case *corev1.Namespace:
				o.namespaces[v.Name] = v
			case *networkingv1.NetworkPolicy:
				o.policies = append(o.policies, v)
			default:
				return nil, fmt.Errorf("%s %s: not expected in the build", r.GetKind(), r.GetName())
			}
		}
	}
	return o, nil
}

// k8sFacts is what the checks compare the manifests with, from the code and
// from compose.yaml.
type k8sFacts struct {
	consumers  map[string]bool // services whose own consumer reads domain topics
	partitions int             // the topic job's partitions per topic
	keysDir    string          // where the mounted files are written for LoadConfig
	// composeWebhookKeys is compose's committed WEBHOOK_SECRET_KEYS.
	composeWebhookKeys string
}

func newK8sFacts(t *testing.T) k8sFacts {
	t.Helper()
	f := k8sFacts{consumers: map[string]bool{}, keysDir: t.TempDir()}
	for _, spec := range specs {
		f.consumers[spec.Name] = len(build(t, spec).parts.Topics) > 0
	}
	project := loadCompose(t)
	n, err := strconv.Atoi(env(composeService(t, project, topicInitService))["PARTITIONS"])
	if err != nil {
		t.Fatalf("%s: PARTITIONS: %v", topicInitService, err)
	}
	f.partitions = n
	f.composeWebhookKeys = env(composeService(t, project, "invoice"))["WEBHOOK_SECRET_KEYS"]
	return f
}

// problems collects what is wrong, so that a mutated manifest can be shown
// to be refused.
type problems []string

func (p *problems) add(format string, args ...any) { *p = append(*p, fmt.Sprintf(format, args...)) }

// k8sCheck is one group of checks over the files and their build.
type k8sCheck struct {
	name string
	run  func(p *problems, files map[string][]byte, o *k8sObjects, f k8sFacts)
}

var k8sChecks = []k8sCheck{
	{"strict decode of every file", checkK8sDecode},
	{"kustomization lists every file", checkK8sKustomization},
	{"every service", checkK8sEveryService},
	{"deployments", checkK8sDeployments},
	{"migration jobs", checkK8sJobs},
	{"autoscalers and disruption budgets", checkK8sScaling},
	{"network policies", checkK8sNetworkPolicies},
}

// k8sProblems runs every check on files; a build that fails is a problem.
func k8sProblems(files, inputs map[string][]byte, f k8sFacts) problems {
	var p problems
	o, err := buildK8s(files, inputs)
	if err != nil {
		p.add("%v", err)
		checkK8sDecode(&p, files, nil, f)
		checkK8sKustomization(&p, files, nil, f)
		return p
	}
	for _, c := range k8sChecks {
		c.run(&p, files, o, f)
	}
	return p
}

func TestK8sManifests(t *testing.T) {
	files, inputs, f := k8sFiles(t), k8sSecretInputs(t), newK8sFacts(t)
	o, err := buildK8s(files, inputs)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range k8sChecks {
		t.Run(c.name, func(t *testing.T) {
			var p problems
			c.run(&p, files, o, f)
			for _, msg := range p {
				t.Error(msg)
			}
		})
	}
}

// TestK8sRefusesWrongManifests mutates one file at a time and requires the
// checks to refuse it, naming what is wrong.
func TestK8sRefusesWrongManifests(t *testing.T) {
	files, inputs, f := k8sFiles(t), k8sSecretInputs(t), newK8sFacts(t)
	if p := k8sProblems(files, inputs, f); len(p) > 0 {
		t.Fatalf("the manifests as committed have problems: %v", p)
	}
	cases := []struct {
		name, file, old, new string
		n                    int // occurrences replaced, 1 or -1 (all)
		want                 string
	}{
		{"misspelt field", "meter.yaml", "readinessProbe:", "readinesProbe:", 1, `unknown field "readinesProbe"`},
		{"readiness path", "usage.yaml", "path: /readyz", "path: /ready", 1, "readiness probe GET /ready"},
		{"liveness port", "billing.yaml", "path: /healthz\n              port: http", "path: /healthz\n              port: 8080", 1, "liveness probe GET /healthz on port 8080"},
		{"container port", "query.yaml", "containerPort: 8085", "containerPort: 8086", 1, "no container port named http on 8085"},
		{"variable no service reads", "meter.yaml", "            - name: HTTP_ADDR\n", "            - name: DB_PASSWORD\n              value: x\n            - name: HTTP_ADDR\n", 1, "DB_PASSWORD is not a variable the service reads"},
		{"value the service refuses", "config.yaml", "LOG_LEVEL: info", "LOG_LEVEL: verbose", 1, "LOG_LEVEL"},
		{"deployment as the owner", "billing.yaml", "name: billing-database\n                  key: DATABASE_URL", "name: billing-database-owner\n                  key: DATABASE_MIGRATE_URL", 1, "billing: Deployment reads Secret billing-database-owner"},
		{"job not migrating", "invoice.yaml", `args: ["migrate"]`, `args: ["serve"]`, 1, `invoice-migrate: args [serve], want [migrate]`},
		{"job without the owner", "usage.yaml", "name: usage-database-owner\n                  key: DATABASE_MIGRATE_URL", "name: usage-database\n                  key: DATABASE_URL", 1, "usage-migrate: DATABASE_MIGRATE_URL is the role the Deployment runs as"},
		{"file left out", k8sKustomize, "  - query.yaml\n", "", 1, "query.yaml is not in kustomization.yaml's resources"},
		{"writable root", "invoice.yaml", "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false", 1, "invoice: Deployment container: readOnlyRootFilesystem"},
		{"no memory limit", "query.yaml", "            limits:\n              cpu: \"1\"\n              memory: 512Mi\n", "            limits:\n              cpu: \"1\"\n", 1, "query: Deployment: no memory limit"},
		{"partitions exceeded", "billing.yaml", "maxReplicas: 12", "maxReplicas: 24", 1, "maxReplicas 24 above the 12 partitions"},
		{"no webhook egress", "networkpolicy.yaml", "cidr: 0.0.0.0/0", "cidr: 10.0.0.0/8", 1, "invoice: no egress to webhook endpoints"},
		{"metadata reachable", "networkpolicy.yaml", "              - 169.254.0.0/16\n", "", 1, "invoice: egress to 169.254.169.254"},
		{"no Kafka egress", "networkpolicy.yaml", "port: 9092", "port: 9093", -1, "egress to Kafka on TCP 9092"},
		{"wrong service url", "config.yaml", "billing=http://billing:8083", "billing=http://billing:8080", 1, "SERVICE_URLS has billing="},
		{"replicas on one node", "usage.yaml", "topologyKey: kubernetes.io/hostname", "topologyKey: topology.kubernetes.io/zone", 1, "usage: Deployment: no topology spread over kubernetes.io/hostname"},
		{"kafka in the clear", "config.yaml", "KAFKA_SECURITY_PROTOCOL: SASL_SSL", "KAFKA_SECURITY_PROTOCOL: PLAINTEXT", 1, "KAFKA_SECURITY_PROTOCOL: PLAINTEXT to kafka-0"},
		{"another service's principal", "billing.yaml", "name: KAFKA_SASL_USERNAME\n              value: billing", "name: KAFKA_SASL_USERNAME\n              value: usage", 1,
			"billing: Deployment: Kafka principal \"usage\", want \"billing\""},
		{"jwks not mounted", "meter.yaml", "mountPath: /keys", "mountPath: /etc/keys", 1, "meter: Deployment: AUTH_JWKS=/keys/jwks.json is no file the pod mounts"},
		{"webhook secrets in plaintext", "invoice.yaml", "            - name: WEBHOOK_SECRET_KEYS\n              valueFrom:\n                secretKeyRef:\n                  name: invoice-webhook-keys\n                  key: WEBHOOK_SECRET_KEYS\n", "", 1,
			"invoice: Deployment: no WEBHOOK_SECRET_KEYS"},
		{"console key per replica", "query.yaml", "            - name: QUERY_CONSOLE_CSRF_KEY_FILE\n              value: /keys/console-csrf.key\n", "", 1,
			"query: Deployment: no QUERY_CONSOLE_CSRF_KEY_FILE"},
		{"console key not mounted", "query.yaml", "              - secret:\n                  name: query-console-csrf\n", "", 1,
			"query: Deployment: QUERY_CONSOLE_CSRF_KEY_FILE=/keys/console-csrf.key is no file the pod mounts"},
		{"console cookie not Secure", "query.yaml", "name: QUERY_CONSOLE_SECURE_COOKIE\n              value: \"true\"", "name: QUERY_CONSOLE_SECURE_COOKIE\n              value: \"false\"", 1,
			"query: Deployment: QUERY_CONSOLE_SECURE_COOKIE is not true"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mutated := map[string][]byte{}
			for k, v := range files {
				mutated[k] = v
			}
			before := string(files[c.file])
			if !strings.Contains(before, c.old) {
				t.Fatalf("%s has no %q to change", c.file, c.old)
			}
			mutated[c.file] = []byte(strings.Replace(before, c.old, c.new, c.n))
			p := k8sProblems(mutated, inputs, f)
			if !slices.ContainsFunc(p, func(s string) bool { return strings.Contains(s, c.want) }) {
				t.Errorf("the change was not refused with %q; problems: %q", c.want, p)
			}
		})
	}
}

func checkK8sDecode(p *problems, files map[string][]byte, _ *k8sObjects, _ k8sFacts) {
	for name, raw := range files {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		objs, err := decodeK8s(raw)
		if err != nil {
			p.add("%s: %v", name, err)
			continue
		}
		if len(objs) == 0 {
			p.add("%s: no object", name)
		}
		for _, obj := range objs {
			if _, ok := obj.(*kusttypes.Kustomization); ok != (name == k8sKustomize) {
				p.add("%s: a Kustomization belongs in %s only", name, k8sKustomize)
			}
		}
	}
}

func readKustomization(p *problems, files map[string][]byte) *kusttypes.Kustomization {
	objs, err := decodeK8s(files[k8sKustomize])
	if err != nil || len(objs) != 1 {
		p.add("%s: %v (%d objects)", k8sKustomize, err, len(objs))
		return nil
	}
	k, ok := objs[0].(*kusttypes.Kustomization)
	if !ok {
		p.add("%s: not a Kustomization", k8sKustomize)
		return nil
	}
	return k
}

// checkK8sKustomization: the resources are exactly the directory's
// manifests, and the Secrets' inputs are in the ignored secrets directory.
func checkK8sKustomization(p *problems, files map[string][]byte, _ *k8sObjects, _ k8sFacts) {
	k := readKustomization(p, files)
	if k == nil {
		return
	}
	for name := range files {
		if strings.HasSuffix(name, ".yaml") && name != k8sKustomize && !slices.Contains(k.Resources, name) {
			p.add("%s is not in %s's resources", name, k8sKustomize)
		}
	}
	for _, r := range k.Resources {
		if _, ok := files[r]; !ok {
			p.add("%s lists %s, which is not a file of %s", k8sKustomize, r, k8sDir)
		}
	}
	if !strings.Contains(string(files[".gitignore"]), "/"+k8sSecretsDir+"/") {
		p.add("%s/.gitignore does not ignore /%s/: the keys and database URLs must not be committed", k8sDir, k8sSecretsDir)
	}
	for _, g := range k.SecretGenerator {
		for _, src := range slices.Concat(g.FileSources, g.EnvSources) {
			_, file, _ := strings.Cut(src, "=")
			if file == "" {
				file = src
			}
			if !strings.HasPrefix(file, k8sSecretsDir+"/") {
				p.add("secret %s is made from %s, outside the ignored %s/", g.Name, file, k8sSecretsDir)
			}
		}
		if len(g.LiteralSources) > 0 {
			p.add("secret %s has literals in %s: secrets come from the ignored %s/", g.Name, k8sKustomize, k8sSecretsDir)
		}
	}
	for _, s := range specs {
		want := "usagebilling/" + s.Name
		if !slices.ContainsFunc(k.Images, func(i kusttypes.Image) bool { return i.Name == want }) {
			p.add("%s: no images entry for %s", k8sKustomize, want)
		}
	}
}

func checkK8sEveryService(p *problems, _ map[string][]byte, o *k8sObjects, _ k8sFacts) {
	for _, s := range specs {
		if o.deployments[s.Name] == nil {
			p.add("%s: no Deployment", s.Name)
		}
		if o.services[s.Name] == nil {
			p.add("%s: no Service", s.Name)
		}
		if o.pdbs[s.Name] == nil {
			p.add("%s: no PodDisruptionBudget", s.Name)
		}
		if o.jobs[s.Name+"-migrate"] == nil {
			p.add("%s: no migration Job %s-migrate", s.Name, s.Name)
		}
	}
	if len(o.deployments) != len(specs) || len(o.jobs) != len(specs) {
		p.add("%d Deployments and %d Jobs, want one each per service (%d)", len(o.deployments), len(o.jobs), len(specs))
	}
}

// testCACert is a self-signed CA certificate in PEM, standing for the Kafka
// cluster's CA (the services refuse a KAFKA_TLS_CA_FILE holding none).
func testCACert(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kafka test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
