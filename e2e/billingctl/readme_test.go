package billingctl_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/usagebilling/billing/e2e/stack"
)

// readme runs the shell blocks of the README as a user of `make up` would,
// against the stack of TestBillingctl: every command as written, one shell
// for a block (its variables and exports carry on), from a copy of the
// repository's root (links to its entries, so usage.csv and bin/ land
// there, not in the working tree). A block runs unless all its commands
// are make targets of their own (make demo, test, up, load start the system
// or run suites; TestDocsCommands checks they exist). Two things differ
// from a user's shell, both said here: localhost:8081-8085 become the
// stack's ports, and BILLINGCTL_<SERVICE>_URL point billingctl there.
//
// Each command must exit 0; the commands of readmeWants must also print
// what they say, and a read (a GET, a list) is run again until it does,
// for up to 30 s: the README waits with sleeps, a loaded machine may need
// longer. A want whose command the README no longer has fails the test,
// as does a README command that no longer exists.
func readme(t *testing.T, s *stack.Stack) {
	root, err := stack.WorkspaceRoot()
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := runnableBlocks(string(text))
	if len(blocks) < 2 {
		t.Fatalf("found %d runnable shell blocks in README.md, want the curl and the billingctl walk-throughs", len(blocks))
	}
	dir := t.TempDir()
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		switch e.Name() {
		case ".git", "bin", "usage.csv":
			continue
		}
		if err := os.Symlink(filepath.Join(root, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	env := os.Environ()
	for name, u := range s.URLs() {
		env = append(env, "BILLINGCTL_"+strings.ToUpper(name)+"_URL="+u)
	}
	ports := s.URLs()
	used := map[string]bool{}
	for i, b := range blocks {
		script, cmds := readmeScript(b, used, func(line string) string {
			for name, port := range map[string]string{"meter": "8081", "usage": "8082", "billing": "8083", "invoice": "8084", "query": "8085"} {
				line = strings.ReplaceAll(line, "localhost:"+port, strings.TrimPrefix(ports[name], "http://"))
			}
			return line
		})
		sh := exec.CommandContext(t.Context(), "bash", "-c", script)
		sh.Dir, sh.Env = dir, env
		var out bytes.Buffer
		sh.Stdout, sh.Stderr = &out, &out
		err := sh.Run()
		outs := splitOutputs(out.String())
		for j, c := range cmds {
			o, ran := outs[j]
			switch {
			case !ran:
				t.Fatalf("README block %d: %q failed or did not finish (%v):\n%s", i+1, c.line, err, out.String())
			case o.code != 0:
				t.Fatalf("README block %d: %q exited %d:\n%s", i+1, c.line, o.code, o.text)
			case c.want != "" && !strings.Contains(o.text, c.want):
				t.Fatalf("README block %d: %q printed no %q:\n%s", i+1, c.line, c.want, o.text)
			}
			t.Logf("README: %s\n%s", c.line, o.text)
		}
		if err != nil {
			t.Fatalf("README block %d: %v\n%s", i+1, err, out.String())
		}
	}
	for key := range readmeWants {
		if !used[key] {
			t.Errorf("the README has no command %q any more: say what its walk-through prints now", key)
		}
	}
}

// readmeWants: a part of a README command line (its comment included) ->
// what the command prints, and whether it is a read to run again until it
// does.
var readmeWants = map[string]struct {
	want  string
	retry bool
}{
	`localhost:8081/v1/tenants/demo/prices`:                  {`"effectiveAt"`, false},
	`"localhost:8083/v1/tenants/demo/periods/$P"`:            {`"estimate":{"USD":"1.8"}`, true},
	`"localhost:8084/v1/tenants/demo/invoices?period=$P"`:    {`"status":"issued"`, true},
	`localhost:8085/v1/tenants/demo/summary`:                 {`"invoiced":{"USD":"1.8"}`, true},
	`billingctl usage send usage.csv`:                        {"1 accepted, 0 replayed, 0 refused", false},
	`billingctl period show $(date -u +%Y-%m)`:               {"USD=2.4", true},
	`billingctl invoice list                         # open`: {"open", true},
	`billingctl invoice list                         # issu`: {"issued", true},
	`billingctl help`: {"usage send", false},
}

// runnableBlocks are the README's ```sh blocks that run (see readme).
func runnableBlocks(text string) []string {
	var out []string
	for _, m := range regexp.MustCompile("(?ms)^```sh\n(.*?)^```").FindAllStringSubmatch(text, -1) {
		for _, l := range logicalLines(m[1]) {
			if !strings.HasPrefix(l, "make ") {
				out = append(out, m[1])
				break
			}
		}
	}
	return out
}

// logicalLines are a block's commands: lines joined where they end in a
// backslash, blank and comment lines left out.
func logicalLines(block string) []string {
	var out []string
	var cur strings.Builder
	for _, l := range strings.Split(block, "\n") {
		if cont, ok := strings.CutSuffix(l, `\`); ok {
			cur.WriteString(cont)
			continue
		}
		cur.WriteString(l)
		line := strings.TrimSpace(cur.String())
		cur.Reset()
		if line != "" && !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	return out
}

type readmeCmd struct{ line, want string }

// readmeScript makes a bash script of block: each command followed by a
// marker with its number and exit code, the script ending at the first
// that fails; a read with a want is run again until it prints it.
func readmeScript(block string, used map[string]bool, rewrite func(string) string) (string, []readmeCmd) {
	var b strings.Builder
	var cmds []readmeCmd
	for i, line := range logicalLines(block) {
		c := readmeCmd{line: line}
		retry := false
		for key, w := range readmeWants {
			if strings.Contains(line, key) {
				c.want, retry = w.want, w.retry
				used[key] = true
			}
		}
		cmds = append(cmds, c)
		run := rewrite(line)
		if retry {
			fmt.Fprintf(&b, "for try in $(seq 60); do out=$( {\n%s\n} 2>&1 ); rc=$?; [ $rc = 0 ] && grep -qF -- %s <<<\"$out\" && break; sleep 0.5; done; printf '%%s\\n' \"$out\"; (exit $rc)\n",
				run, shellQuote(c.want))
		} else {
			b.WriteString(run + "\n")
		}
		fmt.Fprintf(&b, "rc=$?; printf '\\n@@readme %d %%d@@\\n' $rc; [ $rc = 0 ] || exit $rc\n", i)
	}
	return b.String(), cmds
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

type cmdOutput struct {
	text string
	code int
}

var markerRE = regexp.MustCompile(`\n@@readme (\d+) (\d+)@@\n`)

// splitOutputs cuts a script's output at its markers: command number ->
// its output and exit code.
func splitOutputs(out string) map[int]cmdOutput {
	res := map[int]cmdOutput{}
	last := 0
	for _, m := range markerRE.FindAllStringSubmatchIndex(out, -1) {
		var n, code int
		fmt.Sscan(out[m[2]:m[3]], &n)
		fmt.Sscan(out[m[4]:m[5]], &code)
		res[n] = cmdOutput{text: strings.TrimSpace(out[last:m[0]]), code: code}
		last = m[1]
	}
	return res
}
