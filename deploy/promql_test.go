package deploy

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// A small reader of the PromQL the dashboard uses: enough to list the metric
// names and label names an expression refers to, and to refuse what it does
// not understand rather than let a name slip by.

// promFuncs are the functions and aggregations the dashboard may call;
// label_values is Grafana's template query.
var promFuncs = map[string]bool{
	"sum": true, "max": true, "min": true, "avg": true, "count": true, "topk": true,
	"rate": true, "irate": true, "increase": true, "delta": true, "histogram_quantile": true,
	"max_over_time": true, "clamp_min": true, "abs": true, "time": true, "vector": true,
	"label_values": true,
}

// Keywords that take a list of label names in parentheses.
var labelListKeywords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

var promKeywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "inf": true, "nan": true}

// promRefs are the metric and label names an expression refers to.
type promRefs struct {
	metrics []string
	labels  []string // label names in matchers, by/without/on/ignoring lists, and label_values
}

func parsePromQL(expr string) (promRefs, error) {
	var r promRefs
	rs := []rune(expr)
	i := 0
	skipSpace := func() {
		for i < len(rs) && unicode.IsSpace(rs[i]) {
			i++
		}
	}
	ident := func() string {
		start := i
		for i < len(rs) && (rs[i] == '_' || rs[i] == ':' || unicode.IsLetter(rs[i]) || unicode.IsDigit(rs[i])) {
			i++
		}
		return string(rs[start:i])
	}
	skipString := func() error {
		q := rs[i]
		for i++; i < len(rs); i++ {
			if rs[i] == '\\' && q != '`' {
				i++
				continue
			}
			if rs[i] == q {
				i++
				return nil
			}
		}
		return fmt.Errorf("unterminated string in %q", expr)
	}
	// labelList reads "(a, b, ...)" at i.
	labelList := func() error {
		skipSpace()
		if i >= len(rs) || rs[i] != '(' {
			return fmt.Errorf("want a label list after a grouping keyword in %q", expr)
		}
		i++
		for {
			skipSpace()
			if i < len(rs) && rs[i] == ')' {
				i++
				return nil
			}
			if l := ident(); l != "" {
				r.labels = append(r.labels, l)
			} else if i < len(rs) && rs[i] == ',' {
				i++
			} else {
				return fmt.Errorf("bad label list in %q", expr)
			}
		}
	}
	for i < len(rs) {
		c := rs[i]
		switch {
		case unicode.IsSpace(c) || strings.ContainsRune("()+-*/^%,=<>!", c):
			i++
		case c == '"' || c == '\'' || c == '`':
			if err := skipString(); err != nil {
				return r, err
			}
		case c == '[': // range or subquery: durations and Grafana variables
			end := strings.IndexRune(string(rs[i:]), ']')
			if end < 0 {
				return r, fmt.Errorf("unterminated range in %q", expr)
			}
			i += len([]rune(string(rs[i:])[:end])) + 1
		case c == '{':
			i++
			for {
				skipSpace()
				if i >= len(rs) {
					return r, fmt.Errorf("unterminated matcher in %q", expr)
				}
				if rs[i] == '}' {
					i++
					break
				}
				if rs[i] == ',' {
					i++
					continue
				}
				l := ident()
				if l == "" {
					return r, fmt.Errorf("bad matcher in %q", expr)
				}
				if l == "__name__" {
					return r, fmt.Errorf("%q: select metrics by name, not by __name__", expr)
				}
				r.labels = append(r.labels, l)
				skipSpace()
				for i < len(rs) && strings.ContainsRune("=!~", rs[i]) {
					i++
				}
				skipSpace()
				if i >= len(rs) || (rs[i] != '"' && rs[i] != '\'' && rs[i] != '`') {
					return r, fmt.Errorf("bad matcher value in %q", expr)
				}
				if err := skipString(); err != nil {
					return r, err
				}
			}
		case unicode.IsDigit(c) || c == '.': // numbers and durations
			for i < len(rs) && (unicode.IsDigit(rs[i]) || unicode.IsLetter(rs[i]) || rs[i] == '.') {
				i++
			}
		case c == '$': // a Grafana variable outside a string
			i++
			ident()
		case c == '_' || c == ':' || unicode.IsLetter(c):
			word := ident()
			lower := strings.ToLower(word)
			save := i
			skipSpace()
			next := rune(0)
			if i < len(rs) {
				next = rs[i]
			}
			switch {
			case labelListKeywords[lower]:
				if next == '(' {
					if err := labelList(); err != nil {
						return r, err
					}
				}
			case promKeywords[lower]:
			case next != '(' && aggregationModifier(rs[i:]):
				// sum by (x) (...): an aggregation, its modifier first.
				if !promFuncs[word] {
					return r, fmt.Errorf("%q: unknown aggregation %s", expr, word)
				}
			case next == '(':
				if !promFuncs[word] {
					return r, fmt.Errorf("%q: unknown function %s", expr, word)
				}
				if word == "label_values" { // label_values(metric, label)
					i++
					skipSpace()
					if m := ident(); m != "" {
						r.metrics = append(r.metrics, m)
					}
					skipSpace()
					if i < len(rs) && rs[i] == ',' {
						i++
						skipSpace()
						r.labels = append(r.labels, ident())
					}
				}
			default:
				i = save
				r.metrics = append(r.metrics, word)
			}
		default:
			return r, fmt.Errorf("unexpected %q in %q", c, expr)
		}
	}
	return r, nil
}

// aggregationModifier reports whether rs starts with "by" or "without"
// and a parenthesis.
func aggregationModifier(rs []rune) bool {
	s := strings.ToLower(string(rs))
	for _, kw := range []string{"by", "without"} {
		if rest, ok := strings.CutPrefix(s, kw); ok && strings.HasPrefix(strings.TrimSpace(rest), "(") {
			return true
		}
	}
	return false
}

func TestParsePromQL(t *testing.T) {
	tests := []struct {
		expr            string
		metrics, labels []string
		wantErr         bool
	}{
		{expr: `max by (service) (outbox_pending{service=~"$service"})`,
			metrics: []string{"outbox_pending"}, labels: []string{"service", "service"}},
		{expr: `histogram_quantile(0.99, sum by (service, le) (rate(outbox_commit_to_ack_seconds_bucket{service=~"$service"}[$__rate_interval])))`,
			metrics: []string{"outbox_commit_to_ack_seconds_bucket"}, labels: []string{"service", "le", "service"}},
		{expr: `sum(rate(a_total[5m])) without (x) / on(y) group_left b`,
			metrics: []string{"a_total", "b"}, labels: []string{"x", "y"}},
		{expr: `up{job=~"meter|usage"} == 1 and bool c offset 5m`,
			metrics: []string{"up", "c"}, labels: []string{"job"}},
		{expr: `label_values(outbox_pending, service)`, metrics: []string{"outbox_pending"}, labels: []string{"service"}},
		{expr: `sum(outbox_pendng_typo)`, metrics: []string{"outbox_pendng_typo"}},
		{expr: `histogram_quantil(0.9, x)`, wantErr: true},
		{expr: `summ by (x) (y)`, wantErr: true},
		{expr: `{__name__="outbox_pending"}`, wantErr: true},
		{expr: `x{service="a`, wantErr: true},
	}
	for _, tt := range tests {
		r, err := parsePromQL(tt.expr)
		if (err != nil) != tt.wantErr {
			t.Errorf("parsePromQL(%q) error %v, want error %v", tt.expr, err, tt.wantErr)
			continue
		}
		if tt.wantErr {
			continue
		}
		if !slices.Equal(r.metrics, tt.metrics) || !slices.Equal(r.labels, tt.labels) {
			t.Errorf("parsePromQL(%q) = %v %v, want %v %v", tt.expr, r.metrics, r.labels, tt.metrics, tt.labels)
		}
	}
}
