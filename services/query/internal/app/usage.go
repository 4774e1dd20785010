package app

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/pkg/rule"
	"github.com/usagebilling/billing/services/query/internal/db"
	"github.com/usagebilling/billing/services/query/internal/domain"
)

// maxChunkWindows bounds the windows one statement of a page reads.
const maxChunkWindows = 256

// Usage answers one page of the usage analytics (see analytics.go for the
// tables): the meter's aggregation per window of q.WindowSize in q.Zone (the
// tenant's zone when nil, UTC when query knows none), per group of q.GroupBy,
// over the facts that pass q.Filters, by occurredAt in [q.From, q.To); at
// most limit rows after position after (nil: from the start). Errors:
// meter_not_found, invalid_dimension, invalid_cursor (rule errors).
//
// A page reads only the windows its rows come from: it asks for the rows of
// one window, then of two, four, ... (at most maxChunkWindows) until it has
// limit+1 rows or reaches q.To, each an index range of its hours.
func (r *Reader) Usage(ctx context.Context, q domain.UsageQuery, limit int, after *domain.UsagePosition) (domain.UsageReport, error) {
	var out domain.UsageReport
	if err := q.CheckRange(); err != nil {
		return out, err
	}
	dq := db.New(r.pool)
	m, err := dq.GetMeterDefinition(ctx, q.MeterCode)
	if errors.Is(err, pgx.ErrNoRows) {
		return out, rule.Errorf(rule.NotFound, domain.CodeMeterNotFound, "no meter %q in the catalog", q.MeterCode)
	}
	if err != nil {
		return out, fmt.Errorf("read meter %s: %w", q.MeterCode, err)
	}
	meter := meterOf(m.Code, m.Aggregation, m.ValueProperty, m.Dimensions, m.EventType)
	if err := q.CheckDimensions(meter); err != nil {
		return out, err
	}
	if q.Zone == nil {
		q.Zone = time.UTC
		name, err := dq.GetTenantZone(ctx, q.TenantID)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return out, fmt.Errorf("read the zone of %s: %w", q.TenantID, err)
		default:
			if loc, err := time.LoadLocation(name); err == nil {
				q.Zone = loc
			}
		}
	}
	out = domain.UsageReport{MeterCode: meter.Code, Aggregation: meter.Aggregation, WindowSize: q.WindowSize,
		TimeZone: q.Zone.String(), Rows: []domain.UsageRow{}}
	first := domain.WindowStart(q.From, q.WindowSize, q.Zone)
	if after != nil && (after.Window.Before(first) || !after.Window.Before(q.To) || len(after.Dimensions) != len(q.GroupBy) ||
		!domain.WindowStart(after.Window, q.WindowSize, q.Zone).Equal(after.Window)) {
		return out, rule.Errorf(rule.Invalid, "invalid_cursor", "cursor must be a next value this query returned")
	}
	plan := newUsagePlan(meter, q)
	lo, windows := first, 1
	if after != nil {
		lo = after.Window
	}
	var rows []windowRow
	for len(rows) <= limit && lo.Before(q.To) {
		hi := lo
		for range windows {
			hi = domain.NextWindow(hi, q.WindowSize, q.Zone)
		}
		if hi.After(q.To) {
			hi = q.To
		}
		got, err := plan.read(ctx, r, maxTime(lo, q.From), hi, after, limit+1-len(rows))
		if err != nil {
			return out, err
		}
		rows = append(rows, got...)
		lo, windows = hi, min(2*windows, maxChunkWindows)
	}
	if len(rows) > limit {
		rows = rows[:limit]
		last := rows[len(rows)-1]
		out.Next = &domain.UsagePosition{Window: last.window, Dimensions: last.dims}
	}
	for _, w := range rows {
		out.Rows = append(out.Rows, domain.UsageRow{From: maxTime(w.window, q.From),
			To: minTime(domain.NextWindow(w.window, q.WindowSize, q.Zone), q.To), Dimensions: w.dims, Value: w.value})
	}
	return out, nil
}

// windowRow is a row as read: its window's start, group values and value.
type windowRow struct {
	window time.Time
	dims   []string
	value  decimal.Decimal
}

// usagePlan is the statement of one query: from the hourly rollups (sum,
// count, max, latest in a zone of whole-hour offsets over a range of whole
// hours) or from the facts (unique_count, other zones and ranges). Its text
// is built from the meter's dimension positions (integers) and fixed
// fragments; every value is a parameter.
type usagePlan struct {
	sql  string
	args []any // $1..$len(args); then lo, hi, cursor window, cursor dims, limit
}

func newUsagePlan(m catalog.Meter, q domain.UsageQuery) usagePlan {
	rollup := m.Aggregation != catalog.UniqueCount && domain.WholeHours(q.Zone, q.From, q.To) &&
		q.From.Equal(q.From.Truncate(time.Hour)) && q.To.Equal(q.To.Truncate(time.Hour))
	pos := func(name string) int { return slices.Index(m.Dimensions, name) + 1 }
	args := []any{q.TenantID, q.MeterCode}
	param := func(v any) string { args = append(args, v); return "$" + strconv.Itoa(len(args)) }
	var where []string
	for _, name := range slices.Sorted(mapsKeys(q.Filters)) {
		where = append(where, fmt.Sprintf("dims[%d] = ANY(%s::text[])", pos(name), param(q.Filters[name])))
	}
	group := "ARRAY[]::text[]"
	if len(q.GroupBy) > 0 {
		parts := make([]string, len(q.GroupBy))
		for i, g := range q.GroupBy {
			parts[i] = fmt.Sprintf(`dims[%d] COLLATE "C"`, pos(g))
		}
		group = "ARRAY[" + strings.Join(parts, ", ") + "]"
	}
	var table, at, value string
	if rollup {
		table, at = "usage_hourly", "hour"
		switch m.Aggregation {
		case catalog.Count:
			value = "sum(facts)"
		case catalog.Max:
			value = "max(max)"
		case catalog.Latest:
			value = `(array_agg(latest_quantity ORDER BY latest_at DESC, latest_source_system DESC, latest_source_event_id DESC))[1]`
		default:
			value = "sum(sum)"
		}
	} else {
		table, at = "usage_fact", "occurred_at"
		switch m.Aggregation {
		case catalog.Count:
			value = "count(*)"
		case catalog.Max:
			value = "max(quantity)"
		case catalog.Latest:
			value = `(array_agg(quantity ORDER BY occurred_at DESC, source_system DESC, source_event_id DESC))[1]`
		case catalog.UniqueCount:
			value = "count(DISTINCT value)"
		default:
			value = "sum(quantity)"
		}
	}
	var window string
	switch {
	case rollup && q.WindowSize == domain.WindowHour:
		window = at // an hour of a whole-hour zone is the UTC hour
	case q.WindowSize == domain.WindowHour:
		// Hours of a zone of another offset start at its own minutes.
		zone := param(q.Zone.String())
		window = fmt.Sprintf("(date_trunc('hour', %[1]s AT TIME ZONE %[2]s::text) AT TIME ZONE %[2]s::text)", at, zone)
	default:
		window = fmt.Sprintf("date_trunc(%s::text, %s, %s::text)", param(q.WindowSize), at, param(q.Zone.String()))
	}
	n := len(args)
	cond := ""
	if len(where) > 0 {
		cond = " AND " + strings.Join(where, " AND ")
	}
	sql := fmt.Sprintf(`SELECT %[1]s AS w, %[2]s AS g, (%[3]s)::numeric AS v
FROM %[4]s
WHERE tenant_id = $1 AND meter_code = $2 AND %[5]s >= $%[6]d AND %[5]s < $%[7]d%[8]s
GROUP BY 1, 2
HAVING $%[9]d::timestamptz IS NULL OR %[1]s > $%[9]d OR (%[1]s = $%[9]d AND %[2]s > $%[10]d::text[])
ORDER BY 1, 2
LIMIT $%[11]d`, window, group, value, table, at, n+1, n+2, cond, n+3, n+4, n+5)
	return usagePlan{sql: sql, args: args}
}

// read reads the rows of windows in [lo, hi) after position after, at most
// limit.
func (p usagePlan) read(ctx context.Context, r *Reader, lo, hi time.Time, after *domain.UsagePosition, limit int) ([]windowRow, error) {
	var cw *time.Time
	cd := []string{}
	if after != nil {
		cw, cd = &after.Window, after.Dimensions
	}
	rows, err := r.pool.Query(ctx, p.sql, append(slices.Clone(p.args), lo, hi, cw, cd, limit)...)
	if err != nil {
		return nil, fmt.Errorf("read usage windows: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (windowRow, error) {
		var w windowRow
		err := row.Scan(&w.window, &w.dims, &w.value)
		return w, err
	})
	if err != nil {
		return nil, fmt.Errorf("read usage windows: %w", err)
	}
	return out, nil
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
