package stack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// WorkspaceRoot returns the directory of the go.work that `go env GOWORK`
// finds from the current directory: the repository root.
func WorkspaceRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOWORK").Output()
	if err != nil {
		return "", fmt.Errorf("find the workspace: go env GOWORK: %w (is Go on PATH?)", err)
	}
	gowork := strings.TrimSpace(string(out))
	if gowork == "" || gowork == "off" {
		return "", errors.New("find the workspace: no go.work above the current directory; run from inside the repository or set Options.SourceDir / Options.BinDir")
	}
	return filepath.Dir(gowork), nil
}

// Build compiles the services (all of Services when none are named) from
// the workspace at src into dir/<name> with one `go build`, which shares
// the build cache and compiles in parallel.
func Build(ctx context.Context, src, dir string, services ...string) error {
	if len(services) == 0 {
		services = Services
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create binary directory: %w", err)
	}
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	for _, name := range services {
		if !slices.Contains(Services, name) {
			return fmt.Errorf("build: unknown service %q", name)
		}
		args = append(args, "./services/"+name+"/cmd/"+name)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = src
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build the services in %s: go %s: %w\n%s", src, strings.Join(args, " "), err, lastLines(out.String(), 30))
	}
	return nil
}

func checkBinaries(dir string, services []string) error {
	var missing []string
	for _, name := range services {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.IsDir() {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("binaries %v missing in %s: build them with stack.Build or leave Options.BinDir empty", missing, dir)
	}
	return nil
}
