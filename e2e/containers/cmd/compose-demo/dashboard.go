package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The Grafana dashboard's panels, read from its JSON, each query run
// against Prometheus as Grafana would run it: Grafana is not in the offline
// profile (Debian does not package it), so this shows that the dashboard has
// data without it.

// exporterMetric is the one metric the dashboard takes from the Kafka
// exporter, which the offline profile does not run either.
const exporterMetric = "kafka_consumergroup_lag"

// panelQuery is one query of one panel of the dashboard.
type panelQuery struct {
	Panel, Expr string
}

// dashboardQueries reads every panel's queries from the dashboard at path,
// with its variables as Grafana resolves them for "All": $service is the
// variable's allValue, $__rate_interval a window that holds the flow.
func dashboardQueries(path string) ([]panelQuery, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	type panel struct {
		Title   string  `json:"title"`
		Panels  []panel `json:"panels"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	}
	var d struct {
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name     string `json:"name"`
				AllValue string `json:"allValue"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	vars := map[string]string{"__rate_interval": "5m"}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.AllValue
	}
	variable := regexp.MustCompile(`\$(\w+)`)
	var out []panelQuery
	var walk func([]panel) error
	walk = func(ps []panel) error {
		for _, p := range ps {
			for _, t := range p.Targets {
				var unknown []string
				expr := variable.ReplaceAllStringFunc(t.Expr, func(m string) string {
					v, ok := vars[m[1:]]
					if !ok {
						unknown = append(unknown, m)
					}
					return v
				})
				if len(unknown) > 0 {
					return fmt.Errorf("panel %q: unknown variable %s in %s", p.Title, strings.Join(unknown, ", "), t.Expr)
				}
				out = append(out, panelQuery{Panel: p.Title, Expr: expr})
			}
			if err := walk(p.Panels); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(d.Panels); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no panel queries", path)
	}
	return out, nil
}

// series is one series of an instant query's answer.
type series struct {
	Labels map[string]string
	Value  float64
}

// promQuery runs an instant query through Prometheus's HTTP API.
func promQuery(ctx context.Context, base, expr string) ([]series, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/query?query="+url.QueryEscape(expr), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("query %s: %d: %w", expr, resp.StatusCode, err)
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("query %s: %s", expr, body.Error)
	}
	if body.Data.ResultType != "vector" {
		return nil, fmt.Errorf("query %s: a %s, want a vector", expr, body.Data.ResultType)
	}
	out := make([]series, 0, len(body.Data.Result))
	for _, r := range body.Data.Result {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("query %s: value %v: %w", expr, r.Value[1], err)
		}
		out = append(out, series{Labels: r.Metric, Value: v})
	}
	return out, nil
}

// finite counts the series with a number (a quantile of no observations
// is NaN: Grafana draws nothing for it).
func finite(ss []series) int {
	n := 0
	for _, s := range ss {
		if !math.IsNaN(s.Value) && !math.IsInf(s.Value, 0) {
			n++
		}
	}
	return n
}

// checkDashboard runs the dashboard's queries against Prometheus until each
// has data (every one but the exporter's lag), or wait runs out, prints a
// table of them and returns what has no data. The scrape targets' panel
// must also show every service up.
func checkDashboard(ctx context.Context, prom, path string, wait time.Duration, progress func(string, ...any)) []string {
	queries, err := dashboardQueries(path)
	if err != nil {
		return []string{"dashboard: " + err.Error()}
	}
	progress("running the %d queries of the Grafana dashboard %s against Prometheus %s", len(queries), path, prom)
	results := make([][]series, len(queries))
	errs := make([]error, len(queries))
	missing := func() []string {
		var out []string
		for i, q := range queries {
			switch {
			case errs[i] != nil:
				out = append(out, fmt.Sprintf("dashboard panel %q: %v", q.Panel, errs[i]))
			case strings.Contains(q.Expr, exporterMetric):
			case finite(results[i]) == 0:
				out = append(out, fmt.Sprintf("dashboard panel %q has no data: %s", q.Panel, q.Expr))
			}
		}
		out = append(out, servicesDown(results, queries)...)
		return out
	}
	deadline := time.Now().Add(wait)
	var problems []string
	for {
		for i, q := range queries {
			results[i], errs[i] = promQuery(ctx, prom, q.Expr)
		}
		problems = missing()
		if len(problems) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		progress("waiting for Prometheus to scrape what the dashboard shows (%d queries without data yet)", len(problems))
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
		}
	}

	w := section("Grafana dashboard's queries, run against Prometheus (Grafana is not in the offline profile)")
	fmt.Fprintln(w, "panel\tseries with data\tvalues")
	for i, q := range queries {
		verdict := fmt.Sprint(finite(results[i]))
		switch {
		case errs[i] != nil:
			verdict = "error: " + errs[i].Error()
		case strings.Contains(q.Expr, exporterMetric) && len(results[i]) == 0:
			verdict = "none (the Kafka exporter is not in the offline profile)"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", q.Panel, verdict, values(results[i]))
	}
	w.Flush()
	return problems
}

// servicesDown reads the dashboard's scrape targets panel (the query on
// up): every service must be up.
func servicesDown(results [][]series, queries []panelQuery) []string {
	for i, q := range queries {
		if !strings.HasPrefix(q.Expr, "up{") {
			continue
		}
		up := map[string]float64{}
		for _, s := range results[i] {
			up[s.Labels["job"]] = s.Value
		}
		var out []string
		for _, name := range []string{"meter", "usage", "billing", "invoice", "query"} {
			if up[name] != 1 {
				out = append(out, fmt.Sprintf("dashboard panel %q: %s is not up in Prometheus", q.Panel, name))
			}
		}
		return out
	}
	return []string{"dashboard: no panel queries up{...}, the scrape targets"}
}

// values shows a few series of an answer as label=value pairs.
func values(ss []series) string {
	var parts []string
	for i, s := range ss {
		if i == 6 {
			parts = append(parts, fmt.Sprintf("(+%d)", len(ss)-i))
			break
		}
		var names []string
		for _, k := range []string{"job", "service", "outcome", "consumergroup", "topic"} {
			if v, ok := s.Labels[k]; ok {
				names = append(names, v)
			}
		}
		parts = append(parts, fmt.Sprintf("%s=%s", strings.Join(names, "/"), strconv.FormatFloat(s.Value, 'g', 4, 64)))
	}
	return strings.Join(parts, " ")
}
