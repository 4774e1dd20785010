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
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	kusttypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/pkg/tracing"
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
// role's DATABASE_URL and its owner's DATABASE_MIGRATE_URL.
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
	for _, spec := range specs {
		n := spec.Name
		in[path.Join(k8sSecretsDir, n+"-database.env")] = fmt.Appendf(nil,
			"DATABASE_URL=postgres://%s_app:app-password@%s-db.example.internal:5432/%s?sslmode=verify-full\n", n, n, n)
		in[path.Join(k8sSecretsDir, n+"-database-owner.env")] = fmt.Appendf(nil,
			"DATABASE_MIGRATE_URL=postgres://%s:owner-password@%s-db.example.internal:5432/%s?sslmode=verify-full\n", n, n, n)
	}
	return in
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
}

func newK8sFacts(t *testing.T) k8sFacts {
	t.Helper()
	f := k8sFacts{consumers: map[string]bool{}, keysDir: t.TempDir()}
	for _, spec := range specs {
		f.consumers[spec.Name] = len(build(t, spec).parts.Topics) > 0
	}
	n, err := strconv.Atoi(env(composeService(t, loadCompose(t), topicInitService))["PARTITIONS"])
	if err != nil {
		t.Fatalf("%s: PARTITIONS: %v", topicInitService, err)
	}
	f.partitions = n
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
		{"jwks not mounted", "meter.yaml", "mountPath: /keys", "mountPath: /etc/keys", 1, "meter: Deployment: AUTH_JWKS=/keys/jwks.json is no file the pod mounts"},
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

// podEnv resolves a container's environment as the kubelet would, from its
// values, ConfigMaps and Secrets, and writes the files it mounts from
// Secrets and ConfigMaps under dir, rewriting the variables that name them.
// refs are the Secrets the container reads.
func podEnv(p *problems, what string, o *k8sObjects, pod corev1.PodSpec, c corev1.Container, dir string) (env map[string]string, refs []string) {
	env = map[string]string{}
	secret := func(name string) map[string]string {
		refs = append(refs, name)
		s := o.secrets[name]
		if s == nil {
			p.add("%s: Secret %s is not in the build", what, generatedName(name))
			return nil
		}
		m := map[string]string{}
		for k, v := range s.Data {
			m[k] = string(v)
		}
		for k, v := range s.StringData {
			m[k] = v
		}
		return m
	}
	configMap := func(name string) map[string]string {
		cm := o.configMaps[name]
		if cm == nil {
			p.add("%s: ConfigMap %s is not in the build", what, name)
			return nil
		}
		return cm.Data
	}
	for _, from := range c.EnvFrom {
		var m map[string]string
		switch {
		case from.ConfigMapRef != nil:
			m = configMap(from.ConfigMapRef.Name)
		case from.SecretRef != nil:
			m = secret(from.SecretRef.Name)
		}
		for k, v := range m {
			env[from.Prefix+k] = v
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			v, ok := secret(ref.Name)[ref.Key]
			if !ok {
				p.add("%s: %s reads key %s of Secret %s, which has no such key", what, e.Name, ref.Key, generatedName(ref.Name))
			}
			env[e.Name] = v
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			v, ok := configMap(ref.Name)[ref.Key]
			if !ok {
				p.add("%s: %s reads key %s of ConfigMap %s, which has no such key", what, e.Name, ref.Key, ref.Name)
			}
			env[e.Name] = v
		default:
			p.add("%s: %s: only values, Secrets and ConfigMaps are checked", what, e.Name)
		}
	}
	// The files the container sees, by path.
	mounted := map[string]string{}
	for _, m := range c.VolumeMounts {
		i := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		if i < 0 {
			p.add("%s: mount %s of no volume", what, m.Name)
			continue
		}
		v := pod.Volumes[i]
		var sources []map[string]string
		switch {
		case v.Secret != nil:
			sources = append(sources, secret(v.Secret.SecretName))
		case v.ConfigMap != nil:
			sources = append(sources, configMap(v.ConfigMap.Name))
		case v.Projected != nil:
			for _, s := range v.Projected.Sources {
				switch {
				case s.Secret != nil:
					sources = append(sources, secret(s.Secret.Name))
				case s.ConfigMap != nil:
					sources = append(sources, configMap(s.ConfigMap.Name))
				}
			}
		}
		for _, src := range sources {
			for k, data := range src {
				mounted[path.Join(m.MountPath, k)] = data
			}
		}
	}
	for name, v := range env {
		if !strings.HasPrefix(v, "/") {
			continue
		}
		data, ok := mounted[v]
		if !ok {
			p.add("%s: %s=%s is no file the pod mounts", what, name, v)
			continue
		}
		local := filepath.Join(dir, what, filepath.FromSlash(v))
		if err := os.MkdirAll(filepath.Dir(local), 0o755); err != nil {
			p.add("%v", err)
		}
		if err := os.WriteFile(local, []byte(data), 0o600); err != nil {
			p.add("%v", err)
		}
		env[name] = local
	}
	return env, refs
}

// loadServiceConfig is what the service makes of env, as service.Main
// reads it: service.LoadConfig and tracing.LoadConfig.
func loadServiceConfig(p *problems, what string, spec service.Spec, env map[string]string) (service.Config, bool) {
	for name := range env {
		if !slices.Contains(service.EnvNames, name) && !slices.Contains(tracing.EnvNames, name) {
			p.add("%s: %s is not a variable the service reads (service.EnvNames, tracing.EnvNames)", what, name)
		}
	}
	cfg, err := service.LoadConfig(service.NewEnvFrom(env), spec.Name, spec.DefaultPort)
	if err != nil {
		p.add("%s: %s refuses its environment: %v", what, spec.Name, err)
		return cfg, false
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	if _, err := tracing.LoadConfig(lookup, spec.Name); err != nil {
		p.add("%s: tracing settings refused: %v", what, err)
	}
	return cfg, true
}

// checkSecurity holds a pod to the restricted Pod Security Standard and the
// image: non-root as the Dockerfile's user, no privilege, read-only root.
func checkSecurity(p *problems, what string, pod corev1.PodSpec) {
	sc := pod.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser != k8sUID {
		p.add("%s: pod securityContext must set runAsNonRoot and runAsUser %d (the image's user)", what, k8sUID)
	}
	if sc == nil || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		p.add("%s: pod seccompProfile must be RuntimeDefault", what)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		p.add("%s: automountServiceAccountToken must be false: the services do not call the API server", what)
	}
	for _, c := range pod.Containers {
		cs := c.SecurityContext
		if cs == nil || cs.ReadOnlyRootFilesystem == nil || !*cs.ReadOnlyRootFilesystem {
			p.add("%s container: readOnlyRootFilesystem must be true (the services write no file)", what)
		}
		if cs == nil || cs.AllowPrivilegeEscalation == nil || *cs.AllowPrivilegeEscalation {
			p.add("%s container: allowPrivilegeEscalation must be false", what)
		}
		if cs == nil || cs.Capabilities == nil || !slices.Contains(cs.Capabilities.Drop, "ALL") {
			p.add("%s container: capabilities must drop ALL", what)
		}
		if cs != nil && cs.Privileged != nil && *cs.Privileged {
			p.add("%s container: privileged", what)
		}
		for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			req, lim := c.Resources.Requests[res], c.Resources.Limits[res]
			if req.IsZero() {
				p.add("%s: no %s request", what, res)
			}
			if lim.IsZero() {
				p.add("%s: no %s limit", what, res)
			} else if req.Cmp(lim) > 0 {
				p.add("%s: %s request %s above its limit %s", what, res, req.String(), lim.String())
			}
		}
	}
}

// portNumber resolves a probe's or Service's port against the container's.
func portNumber(c corev1.Container, port intstr.IntOrString) int {
	if port.Type == intstr.Int {
		return port.IntValue()
	}
	for _, cp := range c.Ports {
		if cp.Name == port.StrVal {
			return int(cp.ContainerPort)
		}
	}
	return 0
}

func checkProbe(p *problems, what, kind string, c corev1.Container, probe *corev1.Probe, wantPath string, wantPort int) {
	if probe == nil || probe.HTTPGet == nil {
		p.add("%s: no %s probe over HTTP", what, kind)
		return
	}
	got := portNumber(c, probe.HTTPGet.Port)
	if probe.HTTPGet.Path != wantPath || got != wantPort {
		p.add("%s: %s probe GET %s on port %d, want %s on %d", what, kind, probe.HTTPGet.Path, got, wantPath, wantPort)
	}
}

// onlyContainer returns a pod's one container.
func onlyContainer(p *problems, what string, pod corev1.PodSpec) (corev1.Container, bool) {
	if len(pod.Containers) != 1 || len(pod.InitContainers) != 0 {
		p.add("%s: want exactly one container, have %d (and %d init)", what, len(pod.Containers), len(pod.InitContainers))
		return corev1.Container{}, false
	}
	return pod.Containers[0], true
}

func matches(p *problems, what string, sel *metav1.LabelSelector, set map[string]string) bool {
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		p.add("%s: selector: %v", what, err)
		return false
	}
	return !s.Empty() && s.Matches(labels.Set(set))
}

func checkK8sDeployments(p *problems, _ map[string][]byte, o *k8sObjects, f k8sFacts) {
	for _, spec := range specs {
		d := o.deployments[spec.Name]
		if d == nil {
			continue // checkK8sEveryService
		}
		what := spec.Name + ": Deployment"
		pod := d.Spec.Template.Spec
		if !matches(p, what, d.Spec.Selector, d.Spec.Template.Labels) {
			p.add("%s: its selector does not select its pods", what)
		}
		c, ok := onlyContainer(p, what, pod)
		if !ok {
			continue
		}
		if want := "usagebilling/" + spec.Name + ":dev"; c.Image != want {
			p.add("%s: image %s, want %s (compose's; set another tag in %s's images)", what, c.Image, want, k8sKustomize)
		}
		if len(c.Command) > 0 || !(len(c.Args) == 0 || slices.Equal(c.Args, []string{"serve"})) {
			p.add("%s: command %v args %v: want the image's entrypoint, serving", what, c.Command, c.Args)
		}
		if !slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool {
			return cp.Name == "http" && int(cp.ContainerPort) == spec.DefaultPort
		}) {
			p.add("%s: no container port named http on %d", what, spec.DefaultPort)
		}
		checkProbe(p, what, "readiness", c, c.ReadinessProbe, "/readyz", spec.DefaultPort)
		checkProbe(p, what, "liveness", c, c.LivenessProbe, "/healthz", spec.DefaultPort)
		checkSecurity(p, what, pod)

		env, refs := podEnv(p, what, o, pod, c, f.keysDir)
		cfg, ok := loadServiceConfig(p, what, spec, env)
		if !ok {
			continue
		}
		host, port, err := net.SplitHostPort(cfg.HTTPAddr)
		if err != nil || port != strconv.Itoa(spec.DefaultPort) || (host != "" && host != "0.0.0.0" && host != "::") {
			p.add("%s: listens on %q, want every interface on %d (the kubelet probes the pod's address)", what, cfg.HTTPAddr, spec.DefaultPort)
		}
		if cfg.DevKey {
			p.add("%s: AUTH_DEV_KEY: the published development key, never in a cluster", what)
		}
		if cfg.DatabaseMigrateURL != "" {
			p.add("%s: given DATABASE_MIGRATE_URL: only the migration Job has the owner's URL", what)
		}
		if cfg.ConsumerGroup != spec.Name {
			p.add("%s: consumer group %q, want %q (the dashboard's lag panel)", what, cfg.ConsumerGroup, spec.Name)
		}
		if g := d.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || float64(*g) <= cfg.Shutdown.Seconds() {
			p.add("%s: terminationGracePeriodSeconds must exceed SHUTDOWN_TIMEOUT (%s)", what, cfg.Shutdown)
		}
		// No Secret it reads holds an owner's URL.
		for _, name := range refs {
			if s := o.secrets[name]; s != nil {
				if _, ok := s.Data["DATABASE_MIGRATE_URL"]; ok {
					p.add("%s reads Secret %s, which holds the owner's DATABASE_MIGRATE_URL", what, generatedName(name))
				}
			}
		}
		checkK8sServiceURLs(p, what, o, env["SERVICE_URLS"])

		svc := o.services[spec.Name]
		if svc == nil {
			continue
		}
		if !matches(p, spec.Name+": Service", &metav1.LabelSelector{MatchLabels: svc.Spec.Selector}, d.Spec.Template.Labels) {
			p.add("%s: Service does not select the Deployment's pods", spec.Name)
		}
		if job := o.jobs[spec.Name+"-migrate"]; job != nil && matches(p, spec.Name, &metav1.LabelSelector{MatchLabels: svc.Spec.Selector}, job.Spec.Template.Labels) {
			p.add("%s: Service selects the migration Job's pod too", spec.Name)
		}
		if len(svc.Spec.Ports) != 1 || int(svc.Spec.Ports[0].Port) != spec.DefaultPort || portNumber(c, svc.Spec.Ports[0].TargetPort) != spec.DefaultPort {
			p.add("%s: Service ports %+v, want %d to the container's %d", spec.Name, svc.Spec.Ports, spec.DefaultPort, spec.DefaultPort)
		}
	}
}

// generatedName is a generated object's name without the hash suffix
// kustomize adds: the name its generator in kustomization.yaml gives.
func generatedName(name string) string { return hashSuffix.ReplaceAllString(name, "") }

var hashSuffix = regexp.MustCompile(`-[a-z0-9]{10}$`)

// checkK8sServiceURLs: SERVICE_URLS names every service at its Service.
func checkK8sServiceURLs(p *problems, what string, o *k8sObjects, value string) {
	got := map[string]string{}
	for _, part := range strings.Split(value, ",") {
		name, raw, _ := strings.Cut(strings.TrimSpace(part), "=")
		got[name] = raw
	}
	for _, spec := range specs {
		want := fmt.Sprintf("http://%s:%d", spec.Name, spec.DefaultPort)
		if got[spec.Name] != want {
			p.add("%s: SERVICE_URLS has %s=%q, want %s", what, spec.Name, got[spec.Name], want)
		}
		if o.services[spec.Name] == nil {
			p.add("%s: SERVICE_URLS names %s, which has no Service", what, spec.Name)
		}
	}
	if len(got) != len(specs) {
		p.add("%s: SERVICE_URLS names %d services, want %d", what, len(got), len(specs))
	}
}

// dbUser returns a database URL's database and user.
func dbUser(rawURL string) (db, user string) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", ""
	}
	return strings.TrimPrefix(u.Path, "/"), u.User.Username()
}

func checkK8sJobs(p *problems, _ map[string][]byte, o *k8sObjects, f k8sFacts) {
	for _, spec := range specs {
		job, d := o.jobs[spec.Name+"-migrate"], o.deployments[spec.Name]
		if job == nil || d == nil {
			continue
		}
		what := job.Name
		pod := job.Spec.Template.Spec
		c, ok := onlyContainer(p, what, pod)
		if !ok {
			continue
		}
		if dc := d.Spec.Template.Spec.Containers; len(dc) > 0 && c.Image != dc[0].Image {
			p.add("%s: image %s, want the Deployment's %s", what, c.Image, dc[0].Image)
		}
		if len(c.Command) > 0 || !slices.Equal(c.Args, []string{"migrate"}) {
			p.add("%s: args %v, want [migrate] (command %v, want the image's entrypoint)", what, c.Args, c.Command)
		}
		if pod.RestartPolicy != corev1.RestartPolicyNever && pod.RestartPolicy != corev1.RestartPolicyOnFailure {
			p.add("%s: restartPolicy %q", what, pod.RestartPolicy)
		}
		if job.Spec.BackoffLimit == nil {
			p.add("%s: no backoffLimit", what)
		}
		checkSecurity(p, what, pod)
		env, _ := podEnv(p, what, o, pod, c, f.keysDir)
		m, ok := loadServiceConfig(p, what, spec, env)
		if !ok {
			continue
		}
		if m.DatabaseMigrateURL == "" {
			p.add("%s: DATABASE_MIGRATE_URL is not set: migrate would run as the runtime role", what)
			continue
		}
		denv, _ := podEnv(p, what, o, d.Spec.Template.Spec, d.Spec.Template.Spec.Containers[0], f.keysDir)
		runDB, runUser := dbUser(denv["DATABASE_URL"])
		migDB, owner := dbUser(m.DatabaseMigrateURL)
		if _, grantee := dbUser(m.DatabaseURL); grantee != runUser {
			p.add("%s grants %q, but %s runs as %q", what, grantee, spec.Name, runUser)
		}
		if migDB != runDB {
			p.add("%s migrates database %q, %s uses %q", what, migDB, spec.Name, runDB)
		}
		if owner == runUser {
			p.add("%s: DATABASE_MIGRATE_URL is the role the Deployment runs as, %q: want the owner for migrate and a DML-only role for the service", what, runUser)
		}
	}
}

func checkK8sScaling(p *problems, _ map[string][]byte, o *k8sObjects, f k8sFacts) {
	for _, spec := range specs {
		d := o.deployments[spec.Name]
		if d == nil {
			continue
		}
		what := spec.Name + ": Deployment"
		minReplicas := int32(0)
		hpa := o.hpas[spec.Name]
		switch {
		case f.consumers[spec.Name] && hpa == nil:
			p.add("%s: no HorizontalPodAutoscaler, though its consumer reads domain topics", spec.Name)
		case hpa != nil:
			ref := hpa.Spec.ScaleTargetRef
			if ref.Kind != "Deployment" || ref.Name != d.Name || ref.APIVersion != "apps/v1" {
				p.add("%s: HorizontalPodAutoscaler scales %s %s", spec.Name, ref.Kind, ref.Name)
			}
			if d.Spec.Replicas != nil {
				p.add("%s sets replicas, which every apply would reset under its HorizontalPodAutoscaler", what)
			}
			if hpa.Spec.MinReplicas == nil || *hpa.Spec.MinReplicas < 2 {
				p.add("%s: HorizontalPodAutoscaler minReplicas below 2", spec.Name)
			} else {
				minReplicas = *hpa.Spec.MinReplicas
			}
			if int(hpa.Spec.MaxReplicas) > f.partitions {
				p.add("%s: HorizontalPodAutoscaler maxReplicas %d above the %d partitions per topic: the extra consumers idle", spec.Name, hpa.Spec.MaxReplicas, f.partitions)
			}
			if len(hpa.Spec.Metrics) == 0 {
				p.add("%s: HorizontalPodAutoscaler has no metric", spec.Name)
			}
		default:
			if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
				p.add("%s: fewer than 2 replicas and no autoscaler", what)
			} else {
				minReplicas = *d.Spec.Replicas
			}
		}
		pdb := o.pdbs[spec.Name]
		if pdb == nil {
			continue
		}
		if !matches(p, spec.Name+": PodDisruptionBudget", pdb.Spec.Selector, d.Spec.Template.Labels) {
			p.add("%s: PodDisruptionBudget does not select the Deployment's pods", spec.Name)
		}
		switch {
		case pdb.Spec.MinAvailable != nil && pdb.Spec.MinAvailable.Type == intstr.Int:
			if n := pdb.Spec.MinAvailable.IntValue(); n < 1 || int32(n) >= minReplicas {
				p.add("%s: PodDisruptionBudget minAvailable %d with %d replicas: want at least 1 and fewer than the replicas, or no node drains", spec.Name, n, minReplicas)
			}
		case pdb.Spec.MaxUnavailable == nil && pdb.Spec.MinAvailable == nil:
			p.add("%s: PodDisruptionBudget sets neither minAvailable nor maxUnavailable", spec.Name)
		}
	}
}

// egressAllowed reports whether the policies selecting a pod with podLabels
// let it reach a peer on proto/port; peerOK judges each peer of a rule (a
// rule with no peers reaches everything, which peerOK(nil) judges).
func egressAllowed(p *problems, pols []*networkingv1.NetworkPolicy, podLabels map[string]string, proto corev1.Protocol, port int, peerOK func(*networkingv1.NetworkPolicyPeer) bool) bool {
	for _, pol := range pols {
		if !slices.Contains(pol.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) || !selectsPod(p, pol, podLabels) {
			continue
		}
		for _, r := range pol.Spec.Egress {
			if !portAllowed(r.Ports, proto, port) {
				continue
			}
			if len(r.To) == 0 && peerOK(nil) {
				return true
			}
			for i := range r.To {
				if peerOK(&r.To[i]) {
					return true
				}
			}
		}
	}
	return false
}

func selectsPod(p *problems, pol *networkingv1.NetworkPolicy, podLabels map[string]string) bool {
	s, err := metav1.LabelSelectorAsSelector(&pol.Spec.PodSelector)
	if err != nil {
		p.add("NetworkPolicy %s: %v", pol.Name, err)
		return false
	}
	return s.Matches(labels.Set(podLabels))
}

func portAllowed(ports []networkingv1.NetworkPolicyPort, proto corev1.Protocol, port int) bool {
	if len(ports) == 0 {
		return true
	}
	for _, pp := range ports {
		pr := corev1.ProtocolTCP
		if pp.Protocol != nil {
			pr = *pp.Protocol
		}
		if pr != proto {
			continue
		}
		if pp.Port == nil {
			return true
		}
		lo, hi := pp.Port.IntValue(), pp.Port.IntValue()
		if pp.EndPort != nil {
			hi = int(*pp.EndPort)
		}
		if port >= lo && port <= hi {
			return true
		}
	}
	return false
}

// ipPeer accepts a peer that is an address block holding ip (nil: any block).
func ipPeer(ip net.IP) func(*networkingv1.NetworkPolicyPeer) bool {
	return func(peer *networkingv1.NetworkPolicyPeer) bool {
		if peer == nil {
			return ip != nil
		}
		if peer.IPBlock == nil {
			return false
		}
		if ip == nil {
			return true
		}
		if _, n, err := net.ParseCIDR(peer.IPBlock.CIDR); err != nil || !n.Contains(ip) {
			return false
		}
		for _, ex := range peer.IPBlock.Except {
			if _, n, err := net.ParseCIDR(ex); err == nil && n.Contains(ip) {
				return false
			}
		}
		return true
	}
}

// dnsPeer accepts the cluster DNS (kube-dns in kube-system).
func dnsPeer(peer *networkingv1.NetworkPolicyPeer) bool {
	return peer != nil && peer.NamespaceSelector != nil && peer.PodSelector != nil &&
		peer.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] == "kube-system" &&
		peer.PodSelector.MatchLabels["k8s-app"] == "kube-dns"
}

// podPeer accepts a peer selecting pods with podLabels in the namespace.
func podPeer(p *problems, podLabels map[string]string) func(*networkingv1.NetworkPolicyPeer) bool {
	return func(peer *networkingv1.NetworkPolicyPeer) bool {
		return peer != nil && peer.PodSelector != nil && peer.NamespaceSelector == nil && peer.IPBlock == nil &&
			matches(p, "NetworkPolicy peer", peer.PodSelector, podLabels)
	}
}

func checkK8sNetworkPolicies(p *problems, _ map[string][]byte, o *k8sObjects, f k8sFacts) {
	pols := o.policies
	if !slices.ContainsFunc(pols, func(pol *networkingv1.NetworkPolicy) bool {
		s := pol.Spec
		return len(s.PodSelector.MatchLabels) == 0 && len(s.PodSelector.MatchExpressions) == 0 &&
			slices.Contains(s.PolicyTypes, networkingv1.PolicyTypeIngress) && slices.Contains(s.PolicyTypes, networkingv1.PolicyTypeEgress) &&
			len(s.Ingress) == 0 && len(s.Egress) == 0
	}) {
		p.add("no default-deny NetworkPolicy (every pod, Ingress and Egress, no rule)")
	}
	public := net.ParseIP("203.0.113.10") // an address outside the private ranges
	metadata := net.ParseIP("169.254.169.254")
	for _, spec := range specs {
		d, job := o.deployments[spec.Name], o.jobs[spec.Name+"-migrate"]
		if d == nil || job == nil || len(d.Spec.Template.Spec.Containers) == 0 {
			continue
		}
		var q problems // configuration problems are the other checks'
		env, _ := podEnv(&q, spec.Name, o, d.Spec.Template.Spec, d.Spec.Template.Spec.Containers[0], f.keysDir)
		cfg, ok := loadServiceConfig(&q, spec.Name, spec, env)
		if !ok {
			p.add("%s: no configuration to check the network policies against", spec.Name)
			continue
		}
		pl := d.Spec.Template.Labels
		// Ingress to the HTTP port, from anywhere.
		open := false
		for _, pol := range pols {
			if !slices.Contains(pol.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) || !selectsPod(p, pol, pl) {
				continue
			}
			for _, r := range pol.Spec.Ingress {
				open = open || (len(r.From) == 0 && portAllowed(r.Ports, corev1.ProtocolTCP, spec.DefaultPort))
			}
		}
		if !open {
			p.add("%s: no ingress to TCP %d", spec.Name, spec.DefaultPort)
		}
		_, dbPort := dbAddrOf(cfg.DatabaseURL)
		for _, pod := range []struct {
			what   string
			labels map[string]string
		}{{spec.Name, pl}, {job.Name, job.Spec.Template.Labels}} {
			for _, proto := range []corev1.Protocol{corev1.ProtocolUDP, corev1.ProtocolTCP} {
				if !egressAllowed(p, pols, pod.labels, proto, 53, dnsPeer) {
					p.add("%s: no egress to the cluster DNS on %s 53", pod.what, proto)
				}
			}
			if !egressAllowed(p, pols, pod.labels, corev1.ProtocolTCP, dbPort, ipPeer(nil)) {
				p.add("%s: no egress to its PostgreSQL on TCP %d", pod.what, dbPort)
			}
		}
		if egressAllowed(p, pols, job.Spec.Template.Labels, corev1.ProtocolTCP, 9092, ipPeer(nil)) {
			p.add("%s: egress to Kafka: migrate needs PostgreSQL only", job.Name)
		}
		for _, b := range cfg.Brokers {
			_, port, err := net.SplitHostPort(b)
			n, _ := strconv.Atoi(port)
			if err != nil || !egressAllowed(p, pols, pl, corev1.ProtocolTCP, n, ipPeer(nil)) {
				p.add("%s: no egress to Kafka on TCP %s (KAFKA_BROKERS %s)", spec.Name, port, b)
			}
		}
		// Webhooks: invoice reaches public addresses, never the metadata
		// service; nothing else reaches the internet.
		webhooks := egressAllowed(p, pols, pl, corev1.ProtocolTCP, 443, ipPeer(public))
		switch {
		case spec.Name == "invoice" && !webhooks:
			p.add("invoice: no egress to webhook endpoints (TCP 443 of a public address)")
		case spec.Name != "invoice" && webhooks:
			p.add("%s: egress to the internet, which it never calls", spec.Name)
		}
		for _, port := range []int{80, 443} {
			if egressAllowed(p, pols, pl, corev1.ProtocolTCP, port, ipPeer(metadata)) {
				p.add("%s: egress to 169.254.169.254:%d, the cloud metadata service", spec.Name, port)
			}
		}
		// Query calls the others' internal endpoints; no one else calls.
		for _, other := range specs {
			od := o.deployments[other.Name]
			if od == nil || other.Name == spec.Name {
				continue
			}
			allowed := egressAllowed(p, pols, pl, corev1.ProtocolTCP, other.DefaultPort, podPeer(p, od.Spec.Template.Labels))
			if spec.Name == "query" && !allowed {
				p.add("query: no egress to %s on TCP %d (SERVICE_URLS)", other.Name, other.DefaultPort)
			}
			if spec.Name != "query" && allowed {
				p.add("%s: egress to %s, which it never calls", spec.Name, other.Name)
			}
		}
	}
}

// dbAddrOf returns a database URL's host and port (5432 by default).
func dbAddrOf(rawURL string) (string, int) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", 0
	}
	if u.Port() == "" {
		return u.Hostname(), 5432
	}
	n, _ := strconv.Atoi(u.Port())
	return u.Hostname(), n
}
