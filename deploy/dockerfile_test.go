package deploy

import (
	"bufio"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/usagebilling/billing/pkg/service"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd  string // upper case: FROM, RUN, COPY, ...
	args string
}

func readDockerfile(t *testing.T, path string) []instruction {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []instruction
	var cur strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") || (line == "" && cur.Len() == 0) {
			continue
		}
		if l, ok := strings.CutSuffix(line, "\\"); ok {
			cur.WriteString(l + " ")
			continue
		}
		cur.WriteString(line)
		cmd, args, _ := strings.Cut(strings.TrimSpace(cur.String()), " ")
		out = append(out, instruction{strings.ToUpper(cmd), strings.Join(strings.Fields(args), " ")})
		cur.Reset()
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// stages splits instructions at each FROM.
func stages(ins []instruction) [][]instruction {
	var out [][]instruction
	for _, in := range ins {
		if in.cmd == "FROM" {
			out = append(out, nil)
		}
		if len(out) > 0 {
			out[len(out)-1] = append(out[len(out)-1], in)
		}
	}
	return out
}

// globalArgs returns the default values of the ARGs before the first FROM,
// the ones a FROM line may use.
func globalArgs(ins []instruction) map[string]string {
	args := map[string]string{}
	for _, in := range ins {
		if in.cmd == "FROM" {
			break
		}
		if in.cmd == "ARG" {
			name, value, _ := strings.Cut(in.args, "=")
			args[name] = value
		}
	}
	return args
}

// stageImage is the image (or stage) a FROM line names, with the ARG
// defaults expanded, and the stage's own name.
func stageImage(from instruction, args map[string]string) (image, name string) {
	f := strings.Fields(from.args)
	image = os.Expand(f[0], func(k string) string { return args[k] })
	if len(f) == 3 && strings.EqualFold(f[1], "AS") {
		name = f[2]
	}
	return image, name
}

// checkDockerfile checks deploy/docker/<name>.Dockerfile: a Go builder that
// builds the service's real main package statically (the source stage), a
// stage that takes the same binaries built on the host (the offline build,
// BUILD_FROM=host), a distroless or scratch final stage (the one BASE
// argument) running as non-root, the service's port, and the probe.
func checkDockerfile(t *testing.T, root string, spec service.Spec) {
	t.Helper()
	name := spec.Name
	path := filepath.Join("docker", name+".Dockerfile")
	all := readDockerfile(t, path)
	args := globalArgs(all)
	st := stages(all)
	if len(st) < 2 {
		t.Fatalf("%s: want a multi-stage build, got %d stage(s)", path, len(st))
	}
	byName := map[string][]instruction{}
	for _, stage := range st {
		if _, n := stageImage(stage[0], args); n != "" {
			byName[n] = stage
		}
	}
	build, host, final := byName["from-source"], byName["from-host"], st[len(st)-1]
	if build == nil || host == nil {
		t.Fatalf("%s: want the stages from-source and from-host (BUILD_FROM)", path)
	}
	if from, _ := stageImage(build[0], args); from != args["GO_IMAGE"] || !strings.HasPrefix(from, "golang:") {
		t.Errorf("%s: builder is %q, want the golang image of ARG GO_IMAGE", path, from)
	}
	if args["BUILD_FROM"] != "source" {
		t.Errorf("%s: ARG BUILD_FROM defaults to %q, want source (a user with registry access builds as-is)", path, args["BUILD_FROM"])
	}
	selects := false
	for _, stage := range st {
		if strings.HasPrefix(stage[0].args, "from-${BUILD_FROM} ") {
			selects = true
		}
	}
	if !selects {
		t.Errorf("%s: no `FROM from-${BUILD_FROM} AS ...` stage choosing where the binaries come from", path)
	}
	if from := strings.Fields(final[0].args)[0]; from != "${BASE}" {
		t.Errorf("%s: final stage is FROM %s, want FROM ${BASE} (the one base argument)", path, from)
	}
	for _, base := range []string{args["BASE"], "scratch"} { // the registry default and the offline base
		if !strings.HasPrefix(base, "gcr.io/distroless/static") && base != "scratch" {
			t.Errorf("%s: base %q, want distroless static or scratch", path, base)
		}
	}
	hostCopies := ""
	for _, in := range host {
		if in.cmd == "COPY" {
			hostCopies += " " + in.args
		}
	}
	for _, bin := range []string{"deploy/.build/bin/" + name, "deploy/.build/bin/probe"} {
		if !strings.Contains(hostCopies, bin+" ") {
			t.Errorf("%s: the from-host stage does not copy %s", path, bin)
		}
	}

	cmdDir := "./cmd/" + name
	var built, cgoOff bool
	for _, in := range build {
		if in.cmd == "ENV" && strings.Contains(in.args, "CGO_ENABLED=0") {
			cgoOff = true
		}
		if in.cmd != "RUN" {
			continue
		}
		for _, step := range strings.Split(in.args, "&&") {
			if strings.Contains(step, "go build") && (strings.Contains(step, " "+cmdDir+" ") || strings.HasSuffix(strings.TrimSpace(step), " "+cmdDir)) {
				built = true
				if !strings.Contains(step, "-trimpath") {
					t.Errorf("%s: %q builds without -trimpath", path, step)
				}
			}
		}
		if strings.Contains(in.args, "go build") && strings.Contains(in.args, cmdDir) && !strings.Contains(in.args, "cd /src/services/"+name+" ") {
			t.Errorf("%s: the build of %s does not run in services/%s", path, cmdDir, name)
		}
	}
	if !built {
		t.Errorf("%s: no `go build ... %s`", path, cmdDir)
	}
	if !cgoOff {
		t.Errorf("%s: CGO_ENABLED=0 is not set in the builder: the binary would not be static", path)
	}
	checkMainPackage(t, filepath.Join(root, "services", name, "cmd", name))
	checkStandaloneModule(t, filepath.Join(root, "services", name), cmdDir)

	// Every file copied from the context exists and is let through by the
	// Dockerfile's own .dockerignore.
	allowed := dockerignoreIncludes(t, path+".dockerignore")
	for _, stage := range st {
		for _, in := range stage {
			if in.cmd != "COPY" || strings.HasPrefix(in.args, "--from=") {
				continue
			}
			f := strings.Fields(in.args)
			for _, src := range f[:len(f)-1] {
				if strings.HasPrefix(src, "deploy/.build/") {
					// Made by deploy/offline/images.sh, not in the repository.
				} else if _, err := os.Stat(filepath.Join(root, src)); err != nil {
					t.Errorf("%s: COPY %s: %v", path, src, err)
				}
				if !allowed(src) {
					t.Errorf("%s: COPY %s: excluded by %s.dockerignore", path, src, path)
				}
			}
		}
	}

	// The final stage.
	binPath, probe := "", ""
	for _, in := range final {
		switch in.cmd {
		case "COPY":
			f := strings.Fields(in.args)
			switch f[len(f)-2] {
			case "/out/" + name:
				binPath = f[len(f)-1]
			case "/out/probe":
				probe = f[len(f)-1]
			}
		case "USER":
			user, _, _ := strings.Cut(in.args, ":")
			if user == "root" || user == "0" {
				t.Errorf("%s: USER %s", path, in.args)
			}
		case "EXPOSE":
			if in.args != strconv.Itoa(spec.DefaultPort) {
				t.Errorf("%s: EXPOSE %s, want %d", path, in.args, spec.DefaultPort)
			}
		case "HEALTHCHECK":
			_, cmd, _ := strings.Cut(in.args, "CMD ")
			if !strings.Contains(cmd, probePath) || !strings.Contains(cmd, "http://127.0.0.1:"+strconv.Itoa(spec.DefaultPort)+"/readyz") {
				t.Errorf("%s: HEALTHCHECK %s, want %s on port %d /readyz", path, cmd, probePath, spec.DefaultPort)
			}
		case "ENTRYPOINT":
			if binPath == "" || !strings.Contains(in.args, `"`+binPath+`"`) {
				t.Errorf("%s: ENTRYPOINT %s does not run the %s binary (%s)", path, in.args, name, binPath)
			}
		}
	}
	if !slices.ContainsFunc(final, func(in instruction) bool { return in.cmd == "USER" }) {
		t.Errorf("%s: no USER in the final stage: it would run as root", path)
	}
	if probe != probePath {
		t.Errorf("%s: the probe is at %q, want %s (compose.yaml's healthchecks run it)", path, probe, probePath)
	}
}

// checkMainPackage checks that dir holds a main package that runs the
// service.
func checkMainPackage(t *testing.T, dir string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	main := false
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.PackageClauseOnly)
		if err != nil {
			t.Fatal(err)
		}
		main = main || file.Name.Name == "main"
	}
	if !main {
		t.Errorf("%s: no main package", dir)
	}
}

// checkStandaloneModule checks that the service builds from its own go.mod
// and go.sum, as the Dockerfile does (GOWORK=off, -mod=readonly), without
// compiling anything.
func checkStandaloneModule(t *testing.T, moduleDir, pkg string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "go", "list", "-deps", pkg)
	cmd.Dir = moduleDir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Errorf("%s does not resolve from its own go.mod and go.sum, as the Dockerfile builds it (GOWORK=off; run go mod tidy there): %v\n%s", moduleDir, err, stderr.String())
	}
}

// dockerignoreIncludes reads an ignore file of the form "*" then "!path"
// lines and returns whether a context path is let through.
func dockerignoreIncludes(t *testing.T, path string) func(string) bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (BuildKit reads <Dockerfile>.dockerignore beside the Dockerfile)", err)
	}
	var include []string
	excludeAll := false
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "*":
			excludeAll = true
		case strings.HasPrefix(line, "!"):
			include = append(include, strings.TrimSuffix(strings.TrimPrefix(line, "!"), "/"))
		}
	}
	return func(src string) bool {
		if !excludeAll {
			return true
		}
		src = strings.TrimSuffix(src, "/")
		for _, inc := range include {
			if src == inc || strings.HasPrefix(src, inc+"/") {
				return true
			}
		}
		return false
	}
}

func TestProbeIsStandardLibraryOnly(t *testing.T) {
	// The Dockerfiles build cmd/probe/main.go alone, outside any module.
	f, err := parser.ParseFile(token.NewFileSet(), "cmd/probe/main.go", nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		if first, _, _ := strings.Cut(p, "/"); strings.Contains(first, ".") {
			t.Errorf("cmd/probe imports %s: the Dockerfiles build it without a module", p)
		}
	}
}

// TestDockerfileBaseImagesPinned checks that every Dockerfile names its base
// images by an explicit version tag (a digest would need a registry to
// resolve), and that the Go image is the toolchain go.work pins, so that an
// image builds with the Go that CI tests with.
func TestDockerfileBaseImagesPinned(t *testing.T) {
	work, err := os.ReadFile("../go.work")
	if err != nil {
		t.Fatal(err)
	}
	toolchain := ""
	for line := range strings.Lines(string(work)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "toolchain go"); ok {
			toolchain = v
		}
	}
	if toolchain == "" {
		t.Fatal("go.work has no toolchain line")
	}
	paths, err := filepath.Glob(filepath.Join("docker", "*.Dockerfile"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no Dockerfiles under docker/ (%v)", err)
	}
	for _, path := range paths {
		all := readDockerfile(t, path)
		args := globalArgs(all)
		if img, ok := args["GO_IMAGE"]; ok && img != "golang:"+toolchain && !strings.HasPrefix(img, "golang:"+toolchain+"-") {
			t.Errorf("%s: GO_IMAGE %s, want golang:%s (go.work's toolchain), optionally -<variant>", path, img, toolchain)
		}
		stageNames := map[string]bool{}
		for _, st := range stages(all) {
			img, name := stageImage(st[0], args)
			if name != "" {
				stageNames[name] = true
			}
			if img == "scratch" || stageNames[img] || strings.HasPrefix(img, "from-") {
				continue
			}
			// The version is in the tag (golang:1.27.3-trixie, debian:12.12-slim)
			// or, for distroless, which has no version tags, in the name
			// (static-debian12:nonroot).
			ref := img[strings.LastIndex(img, "/")+1:]
			_, tag, ok := strings.Cut(ref, ":")
			if !ok || tag == "latest" || !strings.ContainsAny(ref, "0123456789") {
				t.Errorf("%s: FROM %s has no version tag", path, img)
			}
		}
	}
}
