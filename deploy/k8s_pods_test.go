package deploy

// The checks of k8s/'s pods: each Deployment's and migration Job's
// container, environment, mounted files, security and scaling (k8s_test.go
// builds the objects).

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/usagebilling/billing/pkg/kafkaconf"
	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/pkg/tracing"
	"github.com/usagebilling/billing/services/invoice"
	"github.com/usagebilling/billing/services/query"
)

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
		if !readsEnv(spec, name) {
			p.add("%s: %s is not a variable the service reads (service.EnvNames, tracing.EnvNames, its own EnvNames)", what, name)
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
		if !slices.ContainsFunc(pod.TopologySpreadConstraints, func(c corev1.TopologySpreadConstraint) bool {
			return c.TopologyKey == "kubernetes.io/hostname" && matches(p, what, c.LabelSelector, d.Spec.Template.Labels)
		}) {
			p.add("%s: no topology spread over kubernetes.io/hostname selecting its pods: its replicas may share a node", what)
		}

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
		// Its own principal over SASL_SSL: the broker's ACLs grant each
		// service's user WRITE on its own topics only (events.Writers).
		if cfg.Kafka.Protocol != kafkaconf.SASLSSL || cfg.AllowPlaintext {
			p.add("%s: Kafka over %s (KAFKA_ALLOW_PLAINTEXT %v): want SASL_SSL, each service its own principal", what, cfg.Kafka.Protocol, cfg.AllowPlaintext)
		} else if cfg.Kafka.Username != spec.Name {
			p.add("%s: Kafka principal %q, want %q (the user the ACLs grant its topics)", what, cfg.Kafka.Username, spec.Name)
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
		checkK8sOwnSettings(p, what, spec, env, f)

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

// checkK8sOwnSettings holds the Deployments to the settings of their own a
// cluster needs, as the service reads them: invoice seals the webhook
// endpoints' signing secrets at rest (WEBHOOK_SECRET_KEYS), not with
// compose's committed key; query's console, two replicas or more behind one
// Service, signs its forms with one key from a file every replica mounts
// (QUERY_CONSOLE_CSRF_KEY_FILE) and marks its session cookie Secure, TLS
// ending in front of it (QUERY_CONSOLE_SECURE_COOKIE).
func checkK8sOwnSettings(p *problems, what string, spec service.Spec, env map[string]string, f k8sFacts) {
	switch spec.Name {
	case invoice.Spec.Name:
		sealed, err := invoice.SealsWebhookSecrets(service.NewEnvFrom(env))
		switch {
		case err != nil:
			p.add("%s: webhook settings refused: %v", what, err)
		case !sealed:
			p.add("%s: no WEBHOOK_SECRET_KEYS: the webhook endpoints' signing secrets would be stored in plaintext", what)
		case f.composeWebhookKeys != "" && strings.Contains(env["WEBHOOK_SECRET_KEYS"], f.composeWebhookKeys):
			p.add("%s: WEBHOOK_SECRET_KEYS is compose's committed development key", what)
		}
	case query.Spec.Name:
		shared, secure, err := query.ConsoleSettings(service.NewEnvFrom(env))
		if err != nil {
			p.add("%s: console settings refused: %v", what, err)
			return
		}
		if !shared {
			p.add("%s: no QUERY_CONSOLE_CSRF_KEY_FILE: each replica signs the console's forms with a key of its own, and a form posted to another is refused", what)
		}
		if !secure {
			p.add("%s: QUERY_CONSOLE_SECURE_COOKIE is not true: behind TLS ended in front, the console's session cookie would not be Secure", what)
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
