package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/network"
	"github.com/testcontainers/testcontainers-go/wait"
	"go.yaml.in/yaml/v3"

	"github.com/usagebilling/billing/e2e/containers"
	"github.com/usagebilling/billing/e2e/stack"
	"github.com/usagebilling/billing/pkg/events"
)

// composeFile is the part of deploy/compose.yaml the containers target
// reads, so that images and Dockerfiles are named in one place.
type composeFile struct {
	Services map[string]struct {
		Image string `yaml:"image"`
		Build *struct {
			Context    string `yaml:"context"`
			Dockerfile string `yaml:"dockerfile"`
		} `yaml:"build"`
		Environment map[string]string `yaml:"environment"`
	} `yaml:"services"`
}

// keysDir is where compose mounts deploy/keys (make compose-keys) in every
// service container.
const keysDir = "/keys/"

// serviceAuth is how a service container verifies tokens, as compose runs
// it: the AUTH_ variables deploy/compose.yaml gives it (AUTH_ISSUER,
// AUTH_JWKS; query's AUTH_SERVICE_KEY and AUTH_SERVICE_KEY_ID) and the files
// of deploy/keys they name under /keys, copied in (compose mounts the
// folder). The clients' issuer must be the one the services check.
func serviceAuth(t *testing.T, compose composeFile, deployDir, name, clientIssuer string) (map[string]string, []testcontainers.ContainerFile) {
	t.Helper()
	env := map[string]string{}
	var files []testcontainers.ContainerFile
	for k, v := range compose.Services[name].Environment {
		if !strings.HasPrefix(k, "AUTH_") {
			continue
		}
		env[k] = v
		if rel, ok := strings.CutPrefix(v, keysDir); ok {
			host := filepath.Join(deployDir, "keys", rel)
			if _, err := os.Stat(host); err != nil {
				t.Fatalf("%s: %s=%s: %v (run `make compose-keys`)", name, k, v, err)
			}
			// Readable by the image's non-root user, as compose-keys leaves them.
			files = append(files, testcontainers.ContainerFile{HostFilePath: host, ContainerFilePath: v, FileMode: 0o444})
		}
	}
	if env["AUTH_JWKS"] == "" || env["AUTH_ISSUER"] == "" {
		t.Fatalf("deploy/compose.yaml: service %s has no AUTH_JWKS or AUTH_ISSUER", name)
	}
	if env["AUTH_ISSUER"] != clientIssuer {
		t.Fatalf("the clients sign as issuer %q (AUTH_ISSUER), %s checks %q (deploy/compose.yaml)", clientIssuer, name, env["AUTH_ISSUER"])
	}
	return env, files
}

// startContainers runs PostgreSQL, Apache Kafka and the five services as
// Docker containers on one network (E2E_TARGET=containers), with the images
// deploy/compose.yaml names: the local ones `make compose-images` builds
// (deploy/offline/images.sh, no registry) when the engine has them, else a
// service image is built from its Dockerfile and the others pulled. Plain
// containers, not the compose module: the tests need neither toxiproxy nor
// the monitoring containers, and the compose module would bring a large
// dependency tree into the workspace. Without a Docker engine it fails,
// never skips. Where the reaper image (Ryuk) cannot be pulled, set
// TESTCONTAINERS_RYUK_DISABLED=true (`make e2e-containers` does): every
// container and the network are removed by the test's cleanup instead.
func startContainers(t *testing.T) *target {
	t.Helper()
	ctx := t.Context()
	if host := os.Getenv("DOCKER_HOST"); os.Getenv("TESTCONTAINERS_HOST_OVERRIDE") == "" && (host == "" || strings.HasPrefix(host, "unix://")) {
		// A local engine publishes the ports on this machine. Without this,
		// testcontainers-go, finding itself inside a container (a sandbox),
		// would reach them through the default gateway's address instead.
		t.Setenv("TESTCONTAINERS_HOST_OVERRIDE", "127.0.0.1")
	}
	provider, err := testcontainers.NewDockerProvider()
	if err == nil {
		err = provider.Health(ctx)
	}
	if err != nil {
		t.Fatalf("%s=containers needs a Docker engine, and none answers: %v\n"+
			"unset %s to run against the local launcher, which needs no Docker (that is what CI runs)", EnvTarget, err, EnvTarget)
	}
	signer, err := containers.Signer() // the scenario's tokens
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("signing tokens with %s", signer)

	root, err := stack.WorkspaceRoot()
	if err != nil {
		t.Fatal(err)
	}
	deployDir := filepath.Join(root, "deploy")
	raw, err := os.ReadFile(filepath.Join(deployDir, "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var compose composeFile
	if err := yaml.Unmarshal(raw, &compose); err != nil {
		t.Fatalf("parse deploy/compose.yaml: %v", err)
	}
	image := func(name string) string {
		img := compose.Services[name].Image
		if img == "" {
			t.Fatalf("deploy/compose.yaml: service %s has no image", name)
		}
		return img
	}

	nw, err := network.New(ctx)
	testcontainers.CleanupNetwork(t, nw)
	if err != nil {
		t.Fatal(err)
	}
	start := func(name, img string, opts ...testcontainers.ContainerCustomizer) (testcontainers.Container, error) {
		opts = slices.DeleteFunc(opts, func(o testcontainers.ContainerCustomizer) bool { return o == nil })
		opts = append(opts, network.WithNetwork([]string{name}, nw))
		c, err := testcontainers.Run(ctx, img, opts...)
		testcontainers.CleanupContainer(t, c)
		if err != nil {
			return c, fmt.Errorf("start container %s (%s): %w", name, img, err)
		}
		return c, nil
	}
	run := func(name, img string, opts ...testcontainers.ContainerCustomizer) testcontainers.Container {
		t.Helper()
		c, err := start(name, img, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	pg := run("postgres", image("postgres"),
		testcontainers.WithEnv(map[string]string{"POSTGRES_PASSWORD": "postgres"}),
		testcontainers.WithExposedPorts("5432/tcp"),
		// Over TCP: the init scripts run on a server listening on the unix
		// socket only, so a TCP answer means initialisation is done.
		testcontainers.WithWaitStrategyAndDeadline(3*time.Minute, wait.ForExec([]string{"pg_isready", "-h", "127.0.0.1", "-U", "postgres", "-d", "postgres"}).
			WithStartupTimeout(2*time.Minute)))
	pgAddr, err := pg.PortEndpoint(ctx, "5432/tcp", "")
	if err != nil {
		t.Fatal(err)
	}
	dbs := map[string]string{}
	createDatabases(t, ctx, "postgres://postgres:postgres@"+pgAddr+"/postgres?sslmode=disable", func(name string) {
		dbs[name] = "postgres://postgres:postgres@" + pgAddr + "/" + name + "?sslmode=disable"
	})

	kafka := run("kafka", image("kafka"),
		testcontainers.WithEnv(map[string]string{
			"CLUSTER_ID":                                             "7cV6kCxOQ8yL9tXo2mQ1rA",
			"KAFKA_NODE_ID":                                          "1",
			"KAFKA_PROCESS_ROLES":                                    "broker,controller",
			"KAFKA_CONTROLLER_QUORUM_VOTERS":                         "1@kafka:9093",
			"KAFKA_LISTENERS":                                        "PLAINTEXT://:9092,CONTROLLER://:9093",
			"KAFKA_ADVERTISED_LISTENERS":                             "PLAINTEXT://kafka:9092",
			"KAFKA_LISTENER_SECURITY_PROTOCOL_MAP":                   "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
			"KAFKA_CONTROLLER_LISTENER_NAMES":                        "CONTROLLER",
			"KAFKA_INTER_BROKER_LISTENER_NAME":                       "PLAINTEXT",
			"KAFKA_AUTO_CREATE_TOPICS_ENABLE":                        "false",
			"KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR":                 "1",
			"KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR":         "1",
			"KAFKA_TRANSACTION_STATE_LOG_MIN_ISR":                    "1",
			"KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR": "1",
			"KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR":            "1",
			"KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS":                 "0",
		}),
		// kafkatool (deploy/cmd/kafkatool): a metadata round trip.
		testcontainers.WithWaitStrategyAndDeadline(3*time.Minute, wait.ForExec([]string{"/usr/local/bin/kafkatool", "ready", "kafka:9092"}).
			WithStartupTimeout(3*time.Minute)))
	code, out, err := kafka.Exec(ctx, append([]string{"/usr/local/bin/kafkatool", "create-topics",
		"-bootstrap", "kafka:9092", "-partitions", "6"}, events.AllTopics...))
	if err != nil || code != 0 {
		b, _ := io.ReadAll(out)
		t.Fatalf("create topics: exit %d, %v: %s", code, err, b)
	}

	var serviceURLs []string
	for name, port := range stack.DefaultPorts() {
		serviceURLs = append(serviceURLs, fmt.Sprintf("%s=http://%s:%d", name, name, port))
	}
	// The five services start side by side: they never wait for each other.
	urls := map[string]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var errs []error
	for _, name := range stack.Services {
		build := compose.Services[name].Build
		if build == nil {
			t.Fatalf("deploy/compose.yaml: service %s has no build section", name)
		}
		port := fmt.Sprintf("%d/tcp", stack.DefaultPorts()[name])
		img := image(name)
		var source testcontainers.ContainerCustomizer // nil: the local image (make compose-images), as compose runs it
		if _, err := provider.Client().ImageInspect(ctx, img); err != nil {
			source = testcontainers.WithDockerfile(testcontainers.FromDockerfile{
				Context:    filepath.Join(deployDir, build.Context),
				Dockerfile: build.Dockerfile,
				KeepImage:  true,
			})
			t.Logf("%s: no local image %s: building it from %s", name, img, build.Dockerfile)
			img = ""
		}
		env, keys := serviceAuth(t, compose, deployDir, name, signer.Issuer())
		maps.Copy(env, map[string]string{
			"DATABASE_URL":  "postgres://postgres:postgres@postgres:5432/" + name + "?sslmode=disable",
			"KAFKA_BROKERS": "kafka:9092",
			// The broker on the test's own network speaks PLAINTEXT, as in
			// deploy/compose.yaml; a service refuses a remote PLAINTEXT
			// broker without this.
			"KAFKA_ALLOW_PLAINTEXT": "true",
			"HTTP_ADDR":             fmt.Sprintf(":%d", stack.DefaultPorts()[name]),
			"SERVICE_URLS":          strings.Join(serviceURLs, ","),
		})
		if k := compose.Services[name].Environment["WEBHOOK_SECRET_KEYS"]; k != "" {
			// Compose's development key: invoice refuses to store the
			// webhook signing secrets in plaintext beyond loopback.
			env["WEBHOOK_SECRET_KEYS"] = k
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := start(name, img, source,
				testcontainers.WithEnv(env),
				testcontainers.WithFiles(keys...),
				testcontainers.WithExposedPorts(port),
				testcontainers.WithWaitStrategyAndDeadline(3*time.Minute, wait.ForHTTP("/readyz").WithPort(port).WithStartupTimeout(3*time.Minute)))
			var u string
			if err == nil {
				u, err = c.PortEndpoint(ctx, port, "http")
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			urls[name] = u
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatal(errors.Join(errs...))
	}
	return &target{urls: urls, dbs: dbs}
}

// createDatabases creates one database per service on the server at url.
func createDatabases(t *testing.T, ctx context.Context, url string, created func(name string)) {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, name := range stack.Services {
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
			t.Fatalf("create database %s: %v", name, err)
		}
		created(name)
	}
}
