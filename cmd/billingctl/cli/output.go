package cli

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
)

// column is a table column: its header and the item's field (a dotted path
// into nested objects).
type column struct {
	header string
	field  string
}

func col(header, field string) column { return column{header, field} }

// printJSON prints v indented.
func (c *Client) printJSON(v any) error {
	e := json.NewEncoder(c.out)
	e.SetIndent("", "  ")
	e.SetEscapeHTML(false)
	return e.Encode(v)
}

// table prints rows under the columns' headers, aligned.
func (c *Client) table(rows []map[string]any, cols ...column) {
	w := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	hs := make([]string, len(cols))
	for i, k := range cols {
		hs[i] = k.header
	}
	fmt.Fprintln(w, strings.Join(hs, "\t"))
	for _, r := range rows {
		vs := make([]string, len(cols))
		for i, k := range cols {
			vs[i] = text(field(r, k.field))
		}
		fmt.Fprintln(w, strings.Join(vs, "\t"))
	}
	w.Flush()
}

// object prints one object: as JSON, or as "field  value" lines of the
// given fields (every top-level field, sorted, when none are given).
func (c *Client) object(v map[string]any, fields ...string) error {
	if c.json {
		return c.printJSON(v)
	}
	if len(fields) == 0 {
		for k := range v {
			fields = append(fields, k)
		}
		sort.Strings(fields)
	}
	w := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	for _, f := range fields {
		fmt.Fprintf(w, "%s\t%s\n", f, text(field(v, f)))
	}
	w.Flush()
	return nil
}

// field is the value at a dotted path of v, nil when absent.
func field(v map[string]any, path string) any {
	var cur any = v
	for _, p := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[p]
	}
	return cur
}

// text renders a JSON value for a table cell: strings and numbers as they
// are (decimal strings stay exact), absent as "-", a map as k=v pairs, a
// list of scalars comma separated, anything else compact JSON.
func text(v any) string {
	switch x := v.(type) {
	case nil:
		return "-"
	case string:
		if x == "" {
			return "-"
		}
		return x
	case json.Number:
		return x.String()
	case bool:
		return fmt.Sprint(x)
	case map[string]any:
		if len(x) == 0 {
			return "-"
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + "=" + text(x[k])
		}
		return strings.Join(parts, " ")
	case []any:
		if len(x) == 0 {
			return "-"
		}
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = text(e)
		}
		return strings.Join(parts, ", ")
	default:
		raw, _ := json.Marshal(x)
		return string(raw)
	}
}
