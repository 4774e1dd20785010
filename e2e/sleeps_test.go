package e2e

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// sleepCall is what a sleep in a test looks like, spelt so this file's own
// text does not contain it.
const sleepCall = "time." + "Sleep("

// Every sleep in a test file, in the test tooling of testkit/ and in the
// system suites of e2e/ says why it is a sleep, on its line or the line
// above: what it polls that cannot signal, or why the delay is the point
// (docs/testing.md, "How tests wait"). A test that waits for something
// the code can tell waits for that instead.
func TestEverySleepSaysWhy(t *testing.T) {
	root := repoRoot(t)
	var bad []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "vendor" || d.Name() == "node_modules" || d.Name() == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		// Test files anywhere, and every file of the two test modules: the
		// test tooling (testkit/) and the system suites and their
		// harnesses (e2e/, whose suites build behind tags).
		testModule := strings.HasPrefix(rel, "testkit"+string(filepath.Separator)) || strings.HasPrefix(rel, "e2e"+string(filepath.Separator))
		if !strings.HasSuffix(p, "_test.go") && !testModule {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, line := range uncommentedSleeps(string(src)) {
			bad = append(bad, rel+":"+strconv.Itoa(line))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) > 0 {
		t.Errorf("sleeps without a comment saying why (on the line or the line above):\n%s", strings.Join(bad, "\n"))
	}
}

// The check finds a sleep with no comment, and accepts one with a comment on
// its line or the line above.
func TestEverySleepSaysWhyFindsABareSleep(t *testing.T) {
	src := strings.Join([]string{
		"func f() {",
		"	" + sleepCall + "time.Second)",
		"	x()",
		"	" + sleepCall + "time.Second) // the delay is the point",
		"	// polled: the broker tells no one",
		"	" + sleepCall + "time.Second)",
		"	for ; ; " + sleepCall + "time.Second) {",
		"	}",
		"}",
	}, "\n")
	if got := uncommentedSleeps(src); !slices.Equal(got, []int{2, 7}) {
		t.Fatalf("uncommented sleeps on lines %v, want [2 7]", got)
	}
}

// uncommentedSleeps returns the line numbers (from 1) of the sleeps in src
// with no comment on their line or on the line above.
func uncommentedSleeps(src string) []int {
	lines := strings.Split(src, "\n")
	var out []int
	for i, line := range lines {
		code := strings.TrimSpace(line)
		if strings.HasPrefix(code, "//") {
			continue
		}
		at := strings.Index(line, sleepCall)
		if at < 0 || strings.Contains(line[at:], "//") {
			continue
		}
		if i > 0 && strings.HasPrefix(strings.TrimSpace(lines[i-1]), "//") {
			continue
		}
		out = append(out, i+1)
	}
	return out
}
