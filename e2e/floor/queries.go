package floor

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// sqlcQuery is one named statement of a service's queries.sql, its sqlc
// parameters (@name, sqlc.arg(name), sqlc.narg(name)) turned into $n in
// order of first appearance.
type sqlcQuery struct {
	name   string
	sql    string
	params []string // params[n-1] is $n
}

// args orders named arguments as q's $n; a missing or extra name is an
// error, so a statement that changes in queries.sql fails the floor loudly.
func (q sqlcQuery) args(named map[string]any) ([]any, error) {
	out := make([]any, len(q.params))
	for i, p := range q.params {
		v, ok := named[p]
		if !ok {
			return nil, fmt.Errorf("%s: no argument for @%s", q.name, p)
		}
		out[i] = v
	}
	if len(named) != len(q.params) {
		return nil, fmt.Errorf("%s: %d arguments given, the statement takes %d (%v)", q.name, len(named), len(q.params), q.params)
	}
	return out, nil
}

var (
	nameLine = regexp.MustCompile(`(?m)^-- name: (\w+) :\w+\s*$`)
	param    = regexp.MustCompile(`sqlc\.n?arg\((\w+)\)|@(\w+)`)
)

// readQueries reads the named statements of queries.sql files under root
// (paths relative to the repository root, services/<service>/...): each as
// <service>.<Name>, and as <Name> alone when one service only has it.
func readQueries(root string, files ...string) (map[string]sqlcQuery, error) {
	out := map[string]sqlcQuery{}
	taken := map[string]int{}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return nil, fmt.Errorf("read the services' statements: %w", err)
		}
		service := strings.Split(filepath.ToSlash(f), "/")[1]
		for _, q := range parseQueries(string(b)) {
			out[service+"."+q.name] = q
			out[q.name] = q
			taken[q.name]++
		}
	}
	for name, n := range taken {
		if n > 1 {
			delete(out, name) // ambiguous: name its service
		}
	}
	return out, nil
}

// parseQueries splits a sqlc queries file into its named statements.
func parseQueries(text string) []sqlcQuery {
	locs := nameLine.FindAllStringSubmatchIndex(text, -1)
	var out []sqlcQuery
	for i, loc := range locs {
		end := len(text)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		out = append(out, compile(text[loc[2]:loc[3]], text[loc[1]:end]))
	}
	return out
}

// compile drops the comment lines of body and numbers its parameters.
func compile(name, body string) sqlcQuery {
	var lines []string
	for line := range strings.Lines(body) {
		if strings.HasPrefix(strings.TrimSpace(line), "--") {
			continue
		}
		lines = append(lines, line)
	}
	sql := strings.TrimSpace(strings.Join(lines, ""))
	sql = strings.TrimSuffix(sql, ";")
	q := sqlcQuery{name: name}
	index := map[string]int{}
	q.sql = param.ReplaceAllStringFunc(sql, func(m string) string {
		sub := param.FindStringSubmatch(m)
		p := sub[1] + sub[2]
		n, ok := index[p]
		if !ok {
			q.params = append(q.params, p)
			n = len(q.params)
			index[p] = n
		}
		return fmt.Sprintf("$%d", n)
	})
	return q
}

// repoRoot finds the repository root (the directory of go.work) from the
// working directory up.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.work above the working directory: run the floor from the repository (make floor)")
		}
		dir = parent
	}
}
