// Package containers runs the system as the containers of
// deploy/compose.yaml on a real Docker engine, for the tests that need real
// containers: the container chaos scenario (chaos_test.go, build tag
// containers; `make compose-chaos`) and the client of `make compose-demo`
// (cmd/compose-demo). The images are the local ones deploy/offline/images.sh
// builds; nothing is pulled or built here.
//
// The services in containers verify tokens with the keys of `make
// compose-keys` (deploy/keys/jwks.json, issuer usagebilling-compose) and
// refuse the published development key (decision 0013): every client here
// signs with auth.SignerFromEnv, to which the make targets give
// deploy/keys/issuer.pem (see Signer).
package containers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/usagebilling/billing/pkg/auth"
)

// Signer returns the clients' signer (auth.SignerFromEnv) when it is not the
// development key, which the services in containers refuse; else an error
// saying what to set. The make targets (compose-demo, e2e-containers,
// compose-chaos) set it.
func Signer() (auth.Signer, error) {
	s, err := auth.SignerFromEnv()
	if err != nil {
		return auth.Signer{}, err
	}
	if s.Dev() {
		return auth.Signer{}, errors.New("the services in containers refuse the published development key (decision 0013): " +
			"sign with the compose keys of `make compose-keys`: AUTH_SIGNING_KEY=deploy/keys/issuer.pem " +
			"AUTH_SIGNING_KEY_ID=issuer-1 AUTH_ISSUER=usagebilling-compose (the make targets set them)")
	}
	return s, nil
}

// Docker is the Docker CLI the package runs: $DOCKER, else the Debian
// docker.io package's /usr/bin/docker, else docker on PATH (as
// deploy/offline/lib.sh chooses it).
func Docker() string {
	if d := os.Getenv("DOCKER"); d != "" {
		return d
	}
	if _, err := os.Stat("/usr/bin/docker"); err == nil {
		return "/usr/bin/docker"
	}
	return "docker"
}

// Core is what the offline images run of compose.yaml: everything but the
// monitoring containers, which come from registry images.
var Core = []string{"postgres", "kafka", "topic-init", "toxiproxy", "meter", "usage", "billing", "invoice", "query"}

// Compose is one compose project of deploy/compose.yaml.
type Compose struct {
	Root    string // the repository root
	Project string
	Log     func(format string, args ...any)
}

// Run runs `docker compose -f deploy/compose.yaml -p <project> args...` and
// returns its standard output.
func (c Compose) Run(ctx context.Context, args ...string) (string, error) {
	full := append([]string{"compose", "-f", filepath.Join(c.Root, "deploy", "compose.yaml"), "-p", c.Project}, args...)
	return run(ctx, Docker(), full...)
}

func run(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w\n%s", filepath.Base(name), strings.Join(args, " "), err, lastLines(stderr.String()+stdout.String(), 30))
	}
	return stdout.String(), nil
}

// Up starts the core services from the local images and waits for every
// healthcheck (the topic job: completed).
func (c Compose) Up(ctx context.Context) error {
	args := append([]string{"up", "--detach", "--no-build", "--pull", "never", "--wait", "--wait-timeout", "300"}, Core...)
	_, err := c.Run(ctx, args...)
	return err
}

// Down removes the project's containers, network and volumes.
func (c Compose) Down(ctx context.Context) error {
	_, err := c.Run(ctx, "down", "--volumes", "--remove-orphans", "--timeout", "10")
	return err
}

// Logs returns the last lines of a service's log.
func (c Compose) Logs(ctx context.Context, service string, lines int) string {
	out, err := c.Run(ctx, "logs", "--no-log-prefix", "--tail", fmt.Sprint(lines), service)
	if err != nil {
		return err.Error()
	}
	return out
}

// ContainerID returns the id of a service's container.
func (c Compose) ContainerID(ctx context.Context, service string) (string, error) {
	out, err := c.Run(ctx, "ps", "--all", "--quiet", service)
	id := strings.TrimSpace(out)
	if err == nil && (id == "" || strings.Contains(id, "\n")) {
		err = fmt.Errorf("service %s: want one container, got %q", service, id)
	}
	return id, err
}

// State is what `docker inspect` says of a container's state.
type State struct {
	Status     string    `json:"Status"` // running, exited, restarting, ...
	Running    bool      `json:"Running"`
	ExitCode   int       `json:"ExitCode"`
	StartedAt  time.Time `json:"StartedAt"`
	FinishedAt time.Time `json:"FinishedAt"`
	Health     *struct {
		Status string `json:"Status"`
	} `json:"Health"`
}

// Healthy reports whether the container runs and its healthcheck passes.
func (s State) Healthy() bool { return s.Running && s.Health != nil && s.Health.Status == "healthy" }

// Inspect returns a container's state.
func Inspect(ctx context.Context, id string) (State, error) {
	out, err := run(ctx, Docker(), "inspect", "--format", "{{json .State}}", id)
	if err != nil {
		return State{}, err
	}
	var s State
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		return State{}, fmt.Errorf("inspect %s: %w", id, err)
	}
	return s, nil
}

// Kill sends SIGKILL to a container (docker kill), as a crash would.
func Kill(ctx context.Context, id string) error {
	_, err := run(ctx, Docker(), "kill", "--signal", "KILL", id)
	return err
}

// Start starts a stopped container again (docker start): same container,
// same volumes, same network name.
func Start(ctx context.Context, id string) error {
	_, err := run(ctx, Docker(), "start", id)
	return err
}

// WaitHealthy polls a container until its healthcheck passes.
func WaitHealthy(ctx context.Context, id string, wait time.Duration) (State, error) {
	deadline := time.Now().Add(wait)
	for {
		s, err := Inspect(ctx, id)
		if err == nil && s.Healthy() {
			return s, nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("container %s not healthy after %s: %s", id, wait, s.Status)
			}
			return s, err
		}
		select {
		case <-ctx.Done():
			return s, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
