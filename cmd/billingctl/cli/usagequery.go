package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/usagebilling/billing/pkg/auth"
)

// `usage query`: query's usage analytics, a meter's aggregation per window
// and group (GET /v1/tenants/{t}/meters/{m}/usage).
func init() {
	register(&command{name: "usage query", args: "METER", short: "a meter's usage per window (hour, day, month), grouped and filtered by dimensions", role: auth.RoleViewer, flags: usageQuery})
}

// filtersFlag collects -filter NAME:VALUE in order.
type filtersFlag [][2]string

func (f *filtersFlag) String() string { return fmt.Sprint(len(*f)) }

func (f *filtersFlag) Set(v string) error {
	name, value, ok := strings.Cut(v, ":")
	if !ok || name == "" || value == "" {
		return fmt.Errorf("want NAME:VALUE, got %q", v)
	}
	*f = append(*f, [2]string{name, value})
	return nil
}

// usageQueryParams is the query of the filters and groups: the service
// edge refuses a query parameter given twice, so the groups go in one
// groupBy (comma separated) and the filters as filter[NAME]=VALUE, one per
// dimension, with filter=NAME:VALUE for a dimension's second value (query
// takes no third: refused here).
func usageQueryParams(groupBy []string, filters filtersFlag) (url.Values, error) {
	q := url.Values{}
	if len(groupBy) > 0 {
		q.Set("groupBy", strings.Join(groupBy, ","))
	}
	if len(filters) == 1 {
		q.Set("filter", filters[0][0]+":"+filters[0][1])
		return q, nil
	}
	for _, f := range filters {
		name, value := f[0], f[1]
		switch {
		case !q.Has("filter[" + name + "]"):
			q.Set("filter["+name+"]", value)
		case !q.Has("filter"):
			q.Set("filter", name+":"+value)
		default:
			return nil, usagef("-filter: at most two values of one dimension, and only one dimension with two, go in one request (query takes each parameter once)")
		}
	}
	return q, nil
}

func usageQuery(fs *flag.FlagSet) runFunc {
	var p paging
	p.register(fs)
	var groupBy namesFlag
	var filters filtersFlag
	from := fs.String("from", "", "the start, RFC 3339, inclusive (required)")
	to := fs.String("to", "", "the end, RFC 3339, exclusive (required)")
	window := fs.String("window", "day", "the window size: hour, day or month")
	tz := fs.String("tz", "", "the IANA time zone of the windows (default: the tenant's when query knows it, else UTC)")
	fs.Var(&groupBy, "group-by", "a dimension to group by (a column of the table); repeat for several")
	fs.Var(&filters, "filter", "NAME:VALUE: only facts whose dimension NAME is VALUE; repeat (values of one dimension: any; of several: all)")
	return func(ctx context.Context, c *Client, args []string) error {
		if err := positional(args, "METER"); err != nil {
			return err
		}
		if *from == "" || *to == "" {
			return usagef("-from and -to are required (RFC 3339 times such as 2026-11-01T00:00:00Z)")
		}
		var groups []string // once each, as query reads them
		for _, g := range groupBy {
			if !slices.Contains(groups, g) {
				groups = append(groups, g)
			}
		}
		q, err := usageQueryParams(groups, filters)
		if err != nil {
			return err
		}
		q.Set("from", *from)
		q.Set("to", *to)
		q.Set("windowSize", *window)
		if *tz != "" {
			q.Set("timeZone", *tz)
		}
		head := map[string]json.RawMessage{}
		rows, next, err := c.listPages(ctx, call{service: "query", method: http.MethodGet, path: c.tenantPath("meters", args[0], "usage"), query: q},
			"rows", p, func(page map[string]json.RawMessage) {
				if len(head) == 0 {
					for k, v := range page {
						if k != "rows" && k != "next" {
							head[k] = v
						}
					}
				}
			})
		if err != nil {
			return err
		}
		if c.json {
			out := map[string]any{"rows": rows}
			if rows == nil {
				out["rows"] = []any{}
			}
			for k, v := range head {
				out[k] = v
			}
			if next != "" {
				out["next"] = next
			}
			return c.printJSON(out)
		}
		c.usageTable(head, rows, groups)
		if next != "" {
			fmt.Fprintf(c.err, "(more: -all, a larger -limit, or -cursor %s)\n", next)
		}
		return nil
	}
}

// usageTable prints the rows as FROM, TO, a column per grouped dimension
// ("(none)" for facts without it) and VALUE, under a line naming the
// meter's aggregation, window and zone.
func (c *Client) usageTable(head map[string]json.RawMessage, rows []map[string]any, groupBy []string) {
	str := func(k string) string {
		var s string
		_ = json.Unmarshal(head[k], &s)
		return s
	}
	fmt.Fprintf(c.out, "%s: %s per %s (%s)\n", str("meterCode"), str("aggregation"), str("windowSize"), str("timeZone"))
	cols := []column{col("FROM", "from"), col("TO", "to")}
	for i, name := range groupBy {
		cols = append(cols, col(strings.ToUpper(name), fmt.Sprintf("dim%d", i)))
	}
	cols = append(cols, col("VALUE", "value"))
	flat := make([]map[string]any, len(rows))
	for i, r := range rows {
		// A dimension's name may hold dots: the cells are keyed by position,
		// not by a dotted path into dimensions.
		f := map[string]any{"from": r["from"], "to": r["to"], "value": r["value"]}
		dims, _ := r["dimensions"].(map[string]any)
		for j, name := range groupBy {
			f[fmt.Sprintf("dim%d", j)] = "(none)"
			if v, ok := dims[name].(string); ok {
				f[fmt.Sprintf("dim%d", j)] = v
			}
		}
		flat[i] = f
	}
	c.table(flat, cols...)
}
