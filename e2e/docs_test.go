package e2e

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/usagebilling/billing/cmd/billingctl/cli"
)

// The checks of this file read the repository's text and nothing else: no
// network, no build, no service. They keep what a reader is told true:
//
//   - TestDocsCommands: every `make <target>` in the README, the docs and
//     the decision records names a target of the Makefile, every relative link leads to a file
//     (and heading) that exists, every repository path in code names a
//     file or directory that exists, and every `billingctl <command>` in
//     the README, docs/ and the services' READMEs names a command it has;
//   - TestDecisionReferences: every "decision NNNN" and "decisions/NNNN" in
//     the code, its comments and the docs names a record of docs/decisions,
//     and a reference that gives the record's subject in parentheses,
//     "decision 0011 (price schedule watermark)", gives words of its title.

// repoRoot is the repository's root, seen from the e2e module.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.work")); err != nil {
		t.Fatalf("the repository's root: %v", err)
	}
	return root
}

// docFiles are the pages a reader follows: the README, docs/*.md, the
// decision records, and the README of deploy/ and of each service.
func docFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	for _, pattern := range []string{"README.md", "docs/*.md", "docs/decisions/*.md", "deploy/README.md", "deploy/*/README.md", "services/*/README.md"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 3 {
		t.Fatalf("found only %v", files)
	}
	return files
}

func TestDocsCommands(t *testing.T) {
	root := repoRoot(t)
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := makeTargets(string(makefile))
	ignored := gitIgnored(t, root)
	for _, f := range docFiles(t, root) {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		for _, p := range checkDoc(root, rel, string(text), targets, ignored) {
			t.Errorf("%s", p)
		}
	}
}

// TestDocsCommandsFindWhatIsMissing runs the checks of TestDocsCommands on
// a made-up page, so they are seen failing for a target, a link, an anchor,
// a path and a billingctl command that do not exist.
func TestDocsCommandsFindWhatIsMissing(t *testing.T) {
	root := repoRoot(t)
	targets := makeTargets("demo: ## the demo\n\tgo run .\ntest: check ## all\nPKGS := x\n.PHONY: lint\n")
	page := "# Title\n\n## Run it\n\n`make demo`, `make test`, `make lint` and `GOFLAGS=-x make nosuchtarget ARGS=1`.\n\n" +
		"```sh\nmake demo   # fine\nmake gone\n```\n\n" +
		"[here](#run-it), [there](#no-such-heading), [file](docs/no-such-page.md), [ok](Makefile)\n\n" +
		"`pkg/outbox` is there; `pkg/no-such-package/x.go` is not; `services/*/sqlc.yaml` matches; `bin/demo` is made.\n\n" +
		"```sh\nbin/billingctl usage send usage.csv\nbillingctl invoice frobnicate <id>; billingctl help\ngo install ./cmd/billingctl   # (or: the billingctl binary)\n```\n"
	got := checkDoc(root, "README.md", page, targets, []string{"bin"})
	want := []string{
		"README.md:5: `make nosuchtarget`: no such target in the Makefile",
		"README.md:9: `make gone`: no such target in the Makefile",
		"README.md:12: link #no-such-heading: no such heading in README.md",
		"README.md:12: link docs/no-such-page.md: no such file",
		"README.md:14: path pkg/no-such-package/x.go: no such file or directory",
		"README.md:18: `billingctl invoice frobnicate`: no such command",
	}
	if !slices.Equal(got, want) {
		t.Errorf("problems found:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

var (
	// A rule's targets: "name other: deps", not "NAME := value".
	ruleRE  = regexp.MustCompile(`(?m)^([A-Za-z0-9_.-]+(?:[ \t]+[A-Za-z0-9_.-]+)*)[ \t]*:(?:[^=]|$)`)
	phonyRE = regexp.MustCompile(`(?m)^\.PHONY:(.*)$`)
	// `make target`, after flags and VAR=value arguments; compose-* is a
	// prefix that some target must have.
	makeRE = regexp.MustCompile(`(?:^|[\s;&|(])make((?:\s+(?:-\S+|[A-Z_][A-Z0-9_]*=\S*))*)\s+([a-z][a-z0-9-]*\*?)`)
	// A code span or a fenced block.
	fenceRE = regexp.MustCompile("(?ms)^[ \t]*```[^\n]*\n.*?^[ \t]*```[ \t]*$")
	spanRE  = regexp.MustCompile("`[^`\n]+`")
	// A markdown link or image: [text](target).
	linkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// A repository path in code: it starts at a top-level entry.
	pathRE = regexp.MustCompile(`^(?:\./)?((?:pkg|services|e2e|deploy|docs|\.ci)/[A-Za-z0-9_./*-]*|Makefile|go\.work|staticcheck\.conf|README\.md)$`)
	// `billingctl <command>`, also as bin/billingctl: the words after it.
	billingctlRE = regexp.MustCompile(`(?:^|[\s;&|(/])billingctl((?:[ \t]+[a-z][a-z-]*)+)`)
	headingRE    = regexp.MustCompile(`(?m)^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$`)
)

func makeTargets(makefile string) map[string]bool {
	targets := map[string]bool{}
	for _, m := range ruleRE.FindAllStringSubmatch(makefile, -1) {
		for _, name := range strings.Fields(m[1]) {
			targets[name] = true
		}
	}
	for _, m := range phonyRE.FindAllStringSubmatch(makefile, -1) {
		for _, name := range strings.Fields(m[1]) {
			targets[name] = true
		}
	}
	return targets
}

// gitIgnored lists the paths the .gitignore files name from their own
// directory ("/bin/" in the root, "/secrets/" in deploy/k8s): made at run
// time, so a page may name them before they exist.
func gitIgnored(t *testing.T, root string) []string {
	t.Helper()
	var paths []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.Name() != ".gitignore" {
			return nil
		}
		text, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		dir, _ := filepath.Rel(root, filepath.Dir(p))
		for _, line := range strings.Split(string(text), "\n") {
			if line = strings.TrimSpace(line); strings.HasPrefix(line, "/") {
				paths = append(paths, filepath.ToSlash(filepath.Join(dir, strings.Trim(line, "/"))))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return paths
}

// checkDoc returns the problems of one page, rel being its path from the
// repository's root: each "file:line: what".
func checkDoc(root, rel, text string, targets map[string]bool, ignored []string) []string {
	type problem struct {
		line int
		what string
	}
	var found []problem
	report := func(offset int, format string, args ...any) {
		line := strings.Count(text[:offset], "\n") + 1
		found = append(found, problem{line, fmt.Sprintf("%s:%d: %s", rel, line, fmt.Sprintf(format, args...))})
	}
	dir := filepath.Dir(rel)

	// The code of the page: fenced blocks, then code spans outside them.
	type code struct {
		offset int
		text   string
	}
	var codes []code
	fences := fenceRE.FindAllStringIndex(text, -1)
	for _, f := range fences {
		codes = append(codes, code{f[0], text[f[0]:f[1]]})
	}
	inFence := func(i int) bool {
		for _, f := range fences {
			if i >= f[0] && i < f[1] {
				return true
			}
		}
		return false
	}
	for _, s := range spanRE.FindAllStringIndex(text, -1) {
		if !inFence(s[0]) {
			codes = append(codes, code{s[0], strings.Trim(text[s[0]:s[1]], "`")})
		}
	}
	slices.SortFunc(codes, func(a, b code) int { return a.offset - b.offset })

	for _, c := range codes {
		for _, m := range makeRE.FindAllStringSubmatchIndex(c.text, -1) {
			name := c.text[m[4]:m[5]]
			if !hasTarget(targets, name) {
				report(c.offset+m[4], "`make %s`: no such target in the Makefile", name)
			}
		}
		for _, m := range billingctlRE.FindAllStringSubmatchIndex(withoutComments(c.text), -1) {
			if !checksCommands(rel) {
				break
			}
			words := strings.Fields(c.text[m[2]:m[3]])
			if !cli.IsCommand(words[:min(len(words), 2)]...) {
				report(c.offset+m[2], "`billingctl %s`: no such command", strings.Join(words[:min(len(words), 2)], " "))
			}
		}
		for _, field := range strings.Fields(c.text) {
			field = strings.TrimRight(field, ",;:.)'\"")
			field = strings.TrimLeft(field, "('\"")
			m := pathRE.FindStringSubmatch(field)
			if m == nil || isIgnored(m[1], ignored) {
				continue
			}
			if !pathExists(filepath.Join(root, m[1])) {
				report(c.offset+strings.Index(c.text, field), "path %s: no such file or directory", m[1])
			}
		}
	}

	for _, m := range linkRE.FindAllStringSubmatchIndex(text, -1) {
		target := text[m[2]:m[3]]
		if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") || inFence(m[0]) {
			continue
		}
		file, anchor, _ := strings.Cut(target, "#")
		path := rel
		if file != "" {
			path = filepath.Join(dir, file)
			if isIgnored(filepath.ToSlash(path), ignored) {
				continue
			}
			if !pathExists(filepath.Join(root, path)) {
				report(m[2], "link %s: no such file", target)
				continue
			}
		}
		if anchor == "" || !strings.HasSuffix(path, ".md") {
			continue
		}
		page := text
		if path != rel {
			b, err := os.ReadFile(filepath.Join(root, path))
			if err != nil {
				report(m[2], "link %s: %v", target, err)
				continue
			}
			page = string(b)
		}
		if !slices.Contains(headingAnchors(page), anchor) {
			report(m[2], "link %s: no such heading in %s", target, filepath.ToSlash(path))
		}
	}
	slices.SortStableFunc(found, func(a, b problem) int { return a.line - b.line })
	problems := make([]string, len(found))
	for i, p := range found {
		problems[i] = p.what
	}
	return problems
}

// withoutComments blanks out the shell comments of code (from a # after
// a blank to the end of its line), keeping every offset: a comment's words
// are prose ("the billingctl binary"), not a command.
func withoutComments(code string) string {
	b := []byte(code)
	for i := 0; i < len(b); i++ {
		if b[i] == '#' && (i == 0 || b[i-1] == ' ' || b[i-1] == '\t' || b[i-1] == '\n') {
			for ; i < len(b) && b[i] != '\n'; i++ {
				b[i] = ' '
			}
		}
	}
	return string(b)
}

// checksCommands tells whether the billingctl commands of page rel are
// checked: the README's, the docs pages' and the services' READMEs', what a
// user follows.
func checksCommands(rel string) bool {
	rel = filepath.ToSlash(rel)
	return rel == "README.md" || path.Dir(rel) == "docs" || strings.HasPrefix(rel, "services/") && path.Base(rel) == "README.md"
}

func hasTarget(targets map[string]bool, name string) bool {
	prefix, glob := strings.CutSuffix(name, "*")
	if !glob {
		return targets[name]
	}
	for t := range targets {
		if strings.HasPrefix(t, prefix) {
			return true
		}
	}
	return false
}

func isIgnored(path string, ignored []string) bool {
	path = strings.TrimPrefix(filepath.ToSlash(path), "./")
	for _, p := range ignored {
		if path == p || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	return false
}

func pathExists(path string) bool {
	if strings.Contains(path, "*") {
		m, _ := filepath.Glob(path)
		return len(m) > 0
	}
	_, err := os.Stat(path)
	return err == nil
}

// headingAnchors are the anchors GitHub gives a page's headings: lower
// case, punctuation dropped, spaces as hyphens, "-1" and on for repeats.
func headingAnchors(page string) []string {
	page = fenceRE.ReplaceAllString(page, "")
	var anchors []string
	seen := map[string]int{}
	for _, m := range headingRE.FindAllStringSubmatch(page, -1) {
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			anchors = append(anchors, fmt.Sprintf("%s-%d", a, n))
		} else {
			anchors = append(anchors, a)
		}
		seen[a]++
	}
	return anchors
}

func TestDecisionReferences(t *testing.T) {
	root := repoRoot(t)
	records := decisionRecords(t, root)
	ignored := gitIgnored(t, root)
	n := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == filepath.Join("e2e", "docs_test.go") { // its own tests' made-up references
			return nil
		}
		if d.IsDir() {
			if d.Name() == ".git" || d.Name() == "node_modules" || isIgnored(rel, ignored) {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(p) {
		case ".go", ".md", ".sh", ".yaml", ".yml", ".sql", ".conf":
		default:
			if d.Name() != "Makefile" && filepath.Dir(rel) != ".ci" {
				return nil
			}
		}
		text, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		problems, refs := checkDecisionRefs(rel, string(text), records)
		n += refs
		if filepath.Ext(p) != ".md" {
			problems = append(problems, trackerHistory(rel, string(text))...)
		}
		for _, problem := range problems {
			t.Errorf("%s", problem)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 20 {
		t.Errorf("found only %d references to decisions: is the pattern still right?", n)
	}
}

// trackerRef is a comment citing the tracker ("issue 10 item 6"): code says
// what it does and why, history lives in commits and decision records.
var trackerRef = regexp.MustCompile(`(?i)\bissues? #?[0-9]+`)

// trackerHistory lists the lines of a code file that cite the tracker.
func trackerHistory(rel, text string) []string {
	var out []string
	for i, line := range strings.Split(text, "\n") {
		if m := trackerRef.FindString(line); m != "" {
			out = append(out, fmt.Sprintf("%s:%d: %q cites the tracker; say what the code does and why", rel, i+1, m))
		}
	}
	return out
}

func TestTrackerHistoryFindsCitations(t *testing.T) {
	text := "// fine: a decision record\n// issue 10 item 6 asked for this\n# see Issue #27\nx := issues // no number\n"
	if got := trackerHistory("f.go", text); len(got) != 2 {
		t.Fatalf("found %d citations, want 2: %q", len(got), got)
	}
}

// TestDecisionReferencesFindWrongOnes runs the check on made-up text.
func TestDecisionReferencesFindWrongOnes(t *testing.T) {
	records := map[string]record{
		"0009": {"0009-handler-failures-panic-and-retry-budget.md", "A handler that panics or keeps failing quarantines its event"},
		"0011": {"0011-price-schedule-watermark.md", "The rater decides the price version, from a schedule meter publishes with a watermark"},
	}
	text := "// billing decides it (decision\n// 0011 (price schedule)); see decisions 0009 and 0011,\n" +
		"// decision 0011 (docs/decisions/0011-price-schedule-watermark.md),\n" +
		"// decision 0042, decision 0009 (price watermark),\n" +
		"// docs/decisions/0011-price-schedule.md and decisions/0009-handler-failures-panic-and-retry-budget.md\n"
	got, n := checkDecisionRefs("x.go", text, records)
	want := []string{
		`x.go:4: decision 0042: no such record in docs/decisions`,
		`x.go:4: decision 0009 (price watermark): "price", "watermark" not in its title "A handler that panics or keeps failing quarantines its event"`,
		`x.go:5: decisions/0011-price-schedule: the record is 0011-price-schedule-watermark.md`,
	}
	if !slices.Equal(got, want) || n != 9 {
		t.Errorf("%d references, problems found:\n%s\nwant 9 and:\n%s", n, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

type record struct {
	file, title string
}

// decisionRecords reads docs/decisions: number -> file and title (the first
// line, "# NNNN Title", without its number).
func decisionRecords(t *testing.T, root string) map[string]record {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "docs", "decisions", "[0-9][0-9][0-9][0-9]-*.md"))
	if err != nil || len(files) == 0 {
		t.Fatalf("docs/decisions: %v %v", files, err)
	}
	records := map[string]record{}
	for _, f := range files {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(f)
		first, _, _ := strings.Cut(string(text), "\n")
		title, ok := strings.CutPrefix(first, "# "+name[:4]+" ")
		if !ok {
			t.Errorf("%s: the first line is %q, want \"# %s <title>\"", name, first, name[:4])
		}
		records[name[:4]] = record{name, title}
	}
	return records
}

var (
	// Comment markers and indentation at the start of a continued line.
	continuedRE = regexp.MustCompile(`\n[ \t]*(?://+|#+|\*|--)?[ \t]*`)
	// "decision 0011", "decisions 0008, 0010 and 0012", "Decision 0009
	// (handler failures)".
	decisionRE = regexp.MustCompile(`(?i)\bdecisions?\s+(\d{4}(?:\s*(?:,|and|/|or)\s*\d{4})*)(?:\s*\(([^()]*)\))?`)
	recordRE   = regexp.MustCompile(`decisions/(\d{4})(-[a-z0-9-]+)?`)
	numberRE   = regexp.MustCompile(`\d{4}`)
	wordRE     = regexp.MustCompile(`[A-Za-z]+`)
)

// checkDecisionRefs returns the problems of one file's references to
// decision records, and how many references it has.
func checkDecisionRefs(rel, text string, records map[string]record) ([]string, int) {
	// Lines are joined, so a reference wrapped between "decision" and its
	// number, or inside its parentheses, reads whole; each joined line
	// keeps one byte, so offsets still give line numbers.
	lines := make([]int, 0, 64) // offsets in joined of each '\n' of text
	var b strings.Builder
	last := 0
	for _, m := range continuedRE.FindAllStringIndex(text, -1) {
		b.WriteString(text[last:m[0]])
		lines = append(lines, b.Len())
		b.WriteByte(' ')
		last = m[1]
	}
	b.WriteString(text[last:])
	joined := b.String()
	lineOf := func(offset int) int {
		n, _ := slices.BinarySearch(lines, offset)
		return n + 1
	}
	var problems []string
	report := func(offset int, format string, args ...any) {
		problems = append(problems, fmt.Sprintf("%s:%d: %s", rel, lineOf(offset), fmt.Sprintf(format, args...)))
	}
	refs := 0
	for _, m := range decisionRE.FindAllStringSubmatchIndex(joined, -1) {
		numbers := numberRE.FindAllString(joined[m[2]:m[3]], -1)
		refs += len(numbers)
		for _, n := range numbers {
			if _, ok := records[n]; !ok {
				report(m[0], "decision %s: no such record in docs/decisions", n)
			}
		}
		// A parenthesis that gives the record's file is checked below.
		if m[4] < 0 || len(numbers) != 1 || recordRE.MatchString(joined[m[4]:m[5]]) {
			continue
		}
		r, ok := records[numbers[0]]
		if !ok {
			continue
		}
		if missing := wordsNotIn(joined[m[4]:m[5]], r.title); len(missing) > 0 {
			report(m[0], "decision %s (%s): %s not in its title %q", numbers[0], joined[m[4]:m[5]], strings.Join(missing, ", "), r.title)
		}
	}
	for _, m := range recordRE.FindAllStringSubmatchIndex(joined, -1) {
		refs++
		n := joined[m[2]:m[3]]
		r, ok := records[n]
		switch {
		case !ok:
			report(m[0], "decisions/%s: no such record in docs/decisions", n)
		case m[4] >= 0 && !strings.HasPrefix(r.file, n+joined[m[4]:m[5]]+"."):
			report(m[0], "decisions/%s%s: the record is %s", n, joined[m[4]:m[5]], r.file)
		}
	}
	return problems, refs
}

// wordsNotIn returns the words of words (four letters or more, quoted) that
// begin no word of title, compared by their first five letters so that
// "lock" fits "locks" and "scheduled" fits "scheduler".
func wordsNotIn(words, title string) []string {
	titleWords := wordRE.FindAllString(strings.ToLower(title), -1)
	var missing []string
	for _, w := range wordRE.FindAllString(strings.ToLower(words), -1) {
		if len(w) < 4 {
			continue
		}
		stem := w[:min(len(w), 5)]
		if !slices.ContainsFunc(titleWords, func(tw string) bool { return strings.HasPrefix(tw, stem) }) {
			missing = append(missing, fmt.Sprintf("%q", w))
		}
	}
	return missing
}
