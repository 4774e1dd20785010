package domain

import (
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/pkg/rule"
)

// Window sizes of the usage analytics (DESIGN.md section 7).
const (
	WindowHour  = "hour"
	WindowDay   = "day"
	WindowMonth = "month"
)

// Stable codes of the usage analytics' refusals.
const (
	CodeMeterNotFound     = "meter_not_found"     // 404: no meter of that code in the catalog
	CodeInvalidDimension  = "invalid_dimension"   // 400: groupBy or filter names no dimension of the meter
	CodeInvalidFilter     = "invalid_filter"      // 400: a filter is not <dimension>:<value>
	CodeInvalidWindowSize = "invalid_window_size" // 400: windowSize is not hour, day or month
	CodeInvalidTimeZone   = "invalid_time_zone"   // 400: timeZone is no IANA zone name
	CodeInvalidTime       = "invalid_time"        // 400: from or to missing or not RFC 3339
	CodeInvalidRange      = "invalid_range"       // 400: from is not before to
	CodeRangeTooLarge     = "range_too_large"     // 400: more than MaxRange of windowSize
	CodeFactsArchived     = "facts_archived"      // 422: the query reads fact rows, and some of its range's were archived
)

// MaxRange is the longest range a query may ask at each window size: 31
// days of hours, 366 days of days, 10 years of months (each at most 8,784
// windows, 744 for hours).
func MaxRange(from time.Time, windowSize string) time.Time {
	switch windowSize {
	case WindowHour:
		return from.Add(31 * 24 * time.Hour)
	case WindowDay:
		return from.Add(366 * 24 * time.Hour)
	default:
		return from.AddDate(10, 0, 0)
	}
}

// UsageQuery is one usage analytics request, parsed.
type UsageQuery struct {
	TenantID   string
	MeterCode  string
	From, To   time.Time
	WindowSize string
	// Zone is the windows' time zone; nil: the tenant's (or UTC).
	Zone *time.Location
	// GroupBy are the dimensions rows are grouped by, in the order given,
	// each once.
	GroupBy []string
	// Filters keep the facts whose dimension equals one of the values named
	// for it (values of one dimension: any of them; several dimensions: all).
	Filters map[string][]string
}

// CheckRange checks the window size and the range.
func (q UsageQuery) CheckRange() *rule.Error {
	switch {
	case q.WindowSize != WindowHour && q.WindowSize != WindowDay && q.WindowSize != WindowMonth:
		return rule.Errorf(rule.Invalid, CodeInvalidWindowSize, "windowSize must be hour, day or month, not %q", q.WindowSize)
	case !q.From.Before(q.To):
		return rule.Errorf(rule.Invalid, CodeInvalidRange, "from (%s) must be before to (%s)",
			q.From.Format(time.RFC3339), q.To.Format(time.RFC3339))
	case q.To.After(MaxRange(q.From, q.WindowSize)):
		return rule.Errorf(rule.Invalid, CodeRangeTooLarge,
			"at most 31 days at hour windows, 366 days at day windows, 10 years at month windows")
	}
	return nil
}

// CheckDimensions checks that every groupBy and filter name is a dimension
// of meter m.
func (q UsageQuery) CheckDimensions(m catalog.Meter) *rule.Error {
	names := append(slices.Clone(q.GroupBy), slices.Sorted(maps.Keys(q.Filters))...)
	for _, n := range names {
		if !m.HasDimension(n) {
			dims := m.Dimensions
			if dims == nil {
				dims = []string{}
			}
			return rule.Errorf(rule.Invalid, CodeInvalidDimension, "meter %q has no dimension %q (it has %v)", m.Code, n, dims)
		}
	}
	return nil
}

// DimensionValues are a fact's values of meter m's dimensions, in the
// meter's order; "" where the fact has no such property.
func DimensionValues(m catalog.Meter, props map[string]string) []string {
	out := make([]string, len(m.Dimensions))
	for i, d := range m.Dimensions {
		out[i] = props[d]
	}
	return out
}

// UniqueValue is what a fact adds to a unique_count meter ("" for other
// meters, and for a fact without the property, which counts no value).
func UniqueValue(m catalog.Meter, props map[string]string) string {
	if m.Aggregation != catalog.UniqueCount {
		return ""
	}
	return props[m.ValueProperty]
}

// WindowStart is the start of the window of size that holds t in loc.
func WindowStart(t time.Time, size string, loc *time.Location) time.Time {
	l := t.In(loc)
	switch size {
	case WindowHour:
		// Hours are UTC's: in a zone of whole-hour offsets the same; in
		// another, the zone's own (its offset's minutes kept).
		_, off := l.Zone()
		return t.Add(time.Duration(off) * time.Second).Truncate(time.Hour).Add(-time.Duration(off) * time.Second)
	case WindowDay:
		y, mo, d := l.Date()
		return time.Date(y, mo, d, 0, 0, 0, 0, loc)
	default:
		y, mo, _ := l.Date()
		return time.Date(y, mo, 1, 0, 0, 0, 0, loc)
	}
}

// NextWindow is the start of the window after the one starting at start.
func NextWindow(start time.Time, size string, loc *time.Location) time.Time {
	switch size {
	case WindowHour:
		return WindowStart(start.Add(time.Hour), size, loc)
	case WindowDay:
		y, mo, d := start.In(loc).Date()
		return time.Date(y, mo, d+1, 0, 0, 0, 0, loc)
	default:
		y, mo, _ := start.In(loc).Date()
		return time.Date(y, mo+1, 1, 0, 0, 0, 0, loc)
	}
}

// WholeHours reports whether loc's offset is a whole number of hours
// throughout [from, to): then every window of the zone is a union of UTC
// hours, answered from the hourly rollups.
func WholeHours(loc *time.Location, from, to time.Time) bool {
	t := from.In(loc)
	for t.Before(to) {
		if _, off := t.Zone(); off%3600 != 0 {
			return false
		}
		_, end := t.ZoneBounds()
		if end.IsZero() || !end.After(t) {
			return true
		}
		t = end
	}
	return true
}

// UsageRow is one row of the usage analytics: a window (clipped to the
// query's range), the values of the groupBy dimensions ("" for a fact
// without the property) and the meter's aggregation over the window's
// facts of that group.
type UsageRow struct {
	From, To   time.Time
	Dimensions []string // in the order of UsageQuery.GroupBy
	Value      decimal.Decimal
}

// UsageReport is a page of the usage analytics.
type UsageReport struct {
	MeterCode   string
	Aggregation string
	WindowSize  string
	TimeZone    string
	Rows        []UsageRow
	// Next is the position after the page's last row (its window start and
	// group values); nil on the last page.
	Next *UsagePosition
}

// UsagePosition is a page's keyset position: the last row's window start
// and group values.
type UsagePosition struct {
	Window     time.Time `json:"w"`
	Dimensions []string  `json:"d"`
}

// ParseFilter parses one filter, <dimension>:<value> (the value may hold
// colons; it is not empty).
func ParseFilter(s string) (string, string, *rule.Error) {
	name, value, ok := strings.Cut(s, ":")
	if !ok || name == "" || value == "" {
		return "", "", rule.Errorf(rule.Invalid, CodeInvalidFilter, "a filter is <dimension>:<value>, not %q", s)
	}
	return name, value, nil
}
