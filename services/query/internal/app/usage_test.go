package app_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/rule"
	"github.com/usagebilling/billing/services/query/internal/app"
	"github.com/usagebilling/billing/services/query/internal/domain"
	. "github.com/usagebilling/billing/services/query/internal/querytest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// analyticsMeter is a catalog meter of the test and its facts.
type analyticsMeter struct {
	code, aggregation, valueProperty string
	dims                             []string
}

var analyticsMeters = []analyticsMeter{
	{"tokens", catalog.Sum, "", []string{"model", "region"}},
	{"calls", catalog.Count, "", []string{"model", "region"}},
	{"peak_seats", catalog.Max, "", []string{"model", "region"}},
	{"storage", catalog.Latest, "", []string{"model", "region"}},
	{"active_users", catalog.UniqueCount, "user", []string{"model", "region"}},
}

// testFact is a fact as the test's model keeps it.
type testFact struct {
	meter string
	at    time.Time
	id    string
	qty   decimal.Decimal
	props map[string]string
}

// modelRows computes the rows of q over facts with catalog.Aggregate, by the
// rules of the analytics: windows of the zone, occurredAt in [from, to),
// filters, groups, ordered by window then group values.
func modelRows(m analyticsMeter, facts []testFact, q domain.UsageQuery, loc *time.Location) []string {
	type key struct {
		w time.Time
		g string
	}
	aggs := map[key]*catalog.Aggregate{}
	groups := map[key][]string{}
	for _, f := range facts {
		if f.meter != m.code || f.at.Before(q.From) || !f.at.Before(q.To) {
			continue
		}
		keep := true
		for d, vs := range q.Filters {
			keep = keep && slices.Contains(vs, f.props[d])
		}
		if !keep {
			continue
		}
		g := make([]string, len(q.GroupBy))
		for i, d := range q.GroupBy {
			g[i] = f.props[d]
		}
		k := key{modelWindow(f.at, q.WindowSize, loc), strings.Join(g, "\x00")}
		if aggs[k] == nil {
			aggs[k] = catalog.NewAggregate(m.aggregation)
			groups[k] = g
		}
		aggs[k].Add(catalog.Observation{Quantity: f.qty, OccurredAt: f.at, SourceSystem: "test", SourceEventID: f.id,
			Value: f.props[m.valueProperty]})
	}
	keys := make([]key, 0, len(aggs))
	for k := range aggs {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int {
		if c := a.w.Compare(b.w); c != 0 {
			return c
		}
		return slices.Compare(groups[a], groups[b])
	})
	out := make([]string, len(keys))
	for i, k := range keys {
		from, to := k.w, modelNext(k.w, q.WindowSize, loc)
		if from.Before(q.From) {
			from = q.From
		}
		if to.After(q.To) {
			to = q.To
		}
		out[i] = rowText(from, to, groups[k], aggs[k].Quantity())
	}
	return out
}

// modelWindow is the start of the window holding t: an hour of the zone's
// offset, the zone's midnight, the zone's first of the month.
func modelWindow(t time.Time, size string, loc *time.Location) time.Time {
	l := t.In(loc)
	switch size {
	case domain.WindowHour:
		_, off := l.Zone()
		shift := time.Duration(off) * time.Second
		return t.Add(shift).Truncate(time.Hour).Add(-shift)
	case domain.WindowDay:
		return time.Date(l.Year(), l.Month(), l.Day(), 0, 0, 0, 0, loc)
	default:
		return time.Date(l.Year(), l.Month(), 1, 0, 0, 0, 0, loc)
	}
}

func modelNext(w time.Time, size string, loc *time.Location) time.Time {
	l := w.In(loc)
	switch size {
	case domain.WindowHour:
		return modelWindow(w.Add(time.Hour), size, loc)
	case domain.WindowDay:
		return time.Date(l.Year(), l.Month(), l.Day()+1, 0, 0, 0, 0, loc)
	default:
		return time.Date(l.Year(), l.Month()+1, 1, 0, 0, 0, 0, loc)
	}
}

func rowText(from, to time.Time, dims []string, v decimal.Decimal) string {
	return fmt.Sprintf("%s..%s %q %s", from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339), dims, v)
}

// readAll reads every page of q, limit rows a page.
func readAll(t *testing.T, pool *pgxpool.Pool, q domain.UsageQuery, limit int) ([]string, int) {
	t.Helper()
	r := app.New(app.Deps{Pool: pool}, app.Config{})
	var out []string
	var after *domain.UsagePosition
	pages := 0
	for {
		rep, err := r.Usage(t.Context(), q, limit, after)
		if err != nil {
			t.Fatalf("usage %+v: %v", q, err)
		}
		pages++
		if len(rep.Rows) > limit {
			t.Fatalf("page of %d rows, limit %d", len(rep.Rows), limit)
		}
		for _, row := range rep.Rows {
			out = append(out, rowText(row.From, row.To, row.Dimensions, row.Value))
		}
		if rep.Next == nil {
			return out, pages
		}
		after = rep.Next
		if pages > 10000 {
			t.Fatal("pages do not end")
		}
	}
}

// analyticsFacts builds n facts of each meter between start and start+span,
// with models, regions (some facts without one) and users, quantities of two
// places and a few equal occurredAts (latest's tie-break).
func analyticsFacts(rng *rand.Rand, start time.Time, span time.Duration, n int) []testFact {
	models := []string{"gpt-4", "gpt-3.5", "claude"}
	regions := []string{"eu", "us", ""}
	var facts []testFact
	for _, m := range analyticsMeters {
		var last time.Time
		for i := range n {
			at := start.Add(time.Duration(rng.Int64N(int64(span))))
			if i%10 == 9 {
				at = last // a tie
			}
			last = at
			props := map[string]string{"model": models[rng.IntN(len(models))], "user": fmt.Sprintf("u%d", rng.IntN(40))}
			if r := regions[rng.IntN(len(regions))]; r != "" {
				props["region"] = r
			}
			facts = append(facts, testFact{meter: m.code, at: at, id: fmt.Sprintf("%s-%04d", m.code, i),
				qty: decimal.New(rng.Int64N(100000), -2), props: props})
		}
	}
	return facts
}

// TestUsageAnalyticsEveryAggregation feeds facts of a meter of each
// aggregation (some meters defined before their facts, some after, facts
// in shuffled batches so many arrive after later ones, every event twice and
// a fact again under another event id) and compares every page of queries
// at each window size, in zones of whole-hour and other offsets, grouped and
// filtered, with the model's rows.
func TestUsageAnalyticsEveryAggregation(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	rng := rand.New(rand.NewPCG(21, 6))
	// Across the end of US daylight time (2026-11-01) and a month's end.
	start := time.Date(2026, 10, 30, 0, 0, 0, 0, time.UTC)
	facts := analyticsFacts(rng, start, 4*24*time.Hour, 150)
	f := NewFeed(t, "acme")
	var evs []Event
	for _, fa := range facts {
		evs = append(evs, f.Fact(fa.meter, fa.qty.String(), fa.at, fa.id, fa.props))
	}
	rng.Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })
	var early, late []Event
	for i, m := range analyticsMeters {
		e := Meter(t, m.code, m.aggregation, m.valueProperty, m.dims...)
		if i%2 == 0 {
			early = append(early, e)
		} else {
			late = append(late, e)
		}
	}
	Decide(t, pool, ib, early...)
	for i := 0; i < len(evs); i += 40 {
		batch := evs[i:min(i+40, len(evs))]
		Decide(t, pool, ib, append(slices.Clone(batch), batch[0])...)
	}
	Decide(t, pool, ib, late...)
	// Redelivered: duplicates. The same fact under another event id: nothing.
	for _, d := range Decide(t, pool, ib, evs[:50]...) {
		if d.Outcome != inbox.OutcomeDuplicate {
			t.Fatalf("redelivery: %+v, want duplicate", d)
		}
	}
	var agains []Event
	for i := 0; i < len(facts); i += 7 {
		a := facts[i]
		agains = append(agains, f.Fact(a.meter, a.qty.String(), a.at, a.id, a.props))
	}
	Decide(t, pool, ib, agains...)

	utc, ny, kolkata := time.UTC, mustZone(t, "America/New_York"), mustZone(t, "Asia/Kolkata")
	queries := []struct {
		name string
		q    domain.UsageQuery
		loc  *time.Location
	}{
		{"hours by model", domain.UsageQuery{From: start, To: start.Add(48 * time.Hour), WindowSize: domain.WindowHour,
			GroupBy: []string{"model"}}, utc},
		{"days in New York by region and model, eu only", domain.UsageQuery{From: start, To: start.Add(96 * time.Hour),
			WindowSize: domain.WindowDay, Zone: ny, GroupBy: []string{"region", "model"},
			Filters: map[string][]string{"region": {"eu"}}}, ny},
		{"months, gpt-4 or claude", domain.UsageQuery{From: start, To: start.Add(96 * time.Hour), WindowSize: domain.WindowMonth,
			Filters: map[string][]string{"model": {"gpt-4", "claude"}}}, utc},
		{"hours in Kolkata by region", domain.UsageQuery{From: start, To: start.Add(30 * time.Hour), WindowSize: domain.WindowHour,
			Zone: kolkata, GroupBy: []string{"region"}}, kolkata},
		{"days in Kolkata", domain.UsageQuery{From: start, To: start.Add(96 * time.Hour), WindowSize: domain.WindowDay,
			Zone: kolkata}, kolkata},
		{"days", domain.UsageQuery{From: start, To: start.Add(96 * time.Hour), WindowSize: domain.WindowDay}, utc},
		{"days in New York from mid-day", domain.UsageQuery{From: start.Add(5 * time.Hour), To: start.Add(77 * time.Hour),
			WindowSize: domain.WindowDay, Zone: ny}, ny},
		{"months in New York", domain.UsageQuery{From: start, To: start.Add(96 * time.Hour), WindowSize: domain.WindowMonth, Zone: ny}, ny},
		{"days from a range off the hours", domain.UsageQuery{From: start.Add(90 * time.Minute), To: start.Add(50*time.Hour + 7*time.Minute),
			WindowSize: domain.WindowDay, GroupBy: []string{"model"}}, utc},
	}
	for _, m := range analyticsMeters {
		for _, c := range queries {
			q := c.q
			q.TenantID, q.MeterCode = "acme", m.code
			want := modelRows(m, facts, q, c.loc)
			if len(want) == 0 {
				t.Fatalf("%s %s: the model has no rows", m.code, c.name)
			}
			for _, limit := range []int{1000, 7} {
				got, _ := readAll(t, pool, q, limit)
				if !slices.Equal(got, want) {
					t.Fatalf("%s %s, limit %d:\ngot  %d rows %v\nwant %d rows %v", m.code, c.name, limit, len(got), got, len(want), want)
				}
			}
		}
	}
	var n int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM usage_fact`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != len(facts) {
		t.Fatalf("%d fact rows, want %d", n, len(facts))
	}
}

// A fact that arrives after later ones counts in the window it occurred in,
// and its hour's rollup takes it in.
func TestUsageLateFactInItsOwnWindow(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	f := NewFeed(t, "acme")
	h := time.Date(2026, 11, 3, 10, 0, 0, 0, time.UTC)
	Decide(t, pool, ib, Meter(t, "tokens", catalog.Sum, "", "model"))
	Decide(t, pool, ib, f.Fact("tokens", "5", h.Add(5*time.Hour+time.Minute), "a", map[string]string{"model": "gpt-4"}))
	Decide(t, pool, ib, f.Fact("tokens", "2", h.Add(time.Hour+time.Minute), "b", map[string]string{"model": "gpt-4"}))
	Decide(t, pool, ib, f.Fact("tokens", "1.5", h.Add(time.Hour+59*time.Minute), "c", map[string]string{"model": "gpt-4"}))
	got, _ := readAll(t, pool, domain.UsageQuery{TenantID: "acme", MeterCode: "tokens", From: h, To: h.Add(24 * time.Hour),
		WindowSize: domain.WindowHour, GroupBy: []string{"model"}}, 100)
	want := []string{
		rowText(h.Add(time.Hour), h.Add(2*time.Hour), []string{"gpt-4"}, D("3.5")),
		rowText(h.Add(5*time.Hour), h.Add(6*time.Hour), []string{"gpt-4"}, D("5")),
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// The tenant's zone (from its latest period seen ending) is the default.
func TestUsageDefaultsToTheTenantsZone(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	f := NewFeed(t, "acme")
	at := time.Date(2026, 11, 3, 23, 30, 0, 0, time.UTC) // the 4th in Tokyo
	Decide(t, pool, ib, Meter(t, "calls", catalog.Count, ""), f.PeriodEnded("2026-09", "Europe/Paris"),
		f.PeriodEnded("2026-10", "Asia/Tokyo"), f.Fact("calls", "1", at, "a", nil))
	rep, err := app.New(app.Deps{Pool: pool}, app.Config{}).Usage(t.Context(), domain.UsageQuery{TenantID: "acme", MeterCode: "calls",
		From: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), To: time.Date(2026, 11, 8, 0, 0, 0, 0, time.UTC),
		WindowSize: domain.WindowDay}, 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	tokyo := mustZone(t, "Asia/Tokyo")
	if rep.TimeZone != "Asia/Tokyo" || len(rep.Rows) != 1 || !rep.Rows[0].From.Equal(time.Date(2026, 11, 4, 0, 0, 0, 0, tokyo)) ||
		!rep.Rows[0].Value.Equal(D("1")) {
		t.Fatalf("report %+v, want one row on the 4th in Tokyo", rep)
	}
}

// A meter query does not know, a dimension it does not have and a cursor
// of another query are refused with their codes.
func TestUsageRefusals(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	Decide(t, pool, ib, Meter(t, "tokens", catalog.Sum, "", "model"))
	from := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	base := domain.UsageQuery{TenantID: "acme", MeterCode: "tokens", From: from, To: from.Add(24 * time.Hour), WindowSize: domain.WindowHour}
	r := app.New(app.Deps{Pool: pool}, app.Config{})
	for _, c := range []struct {
		name  string
		edit  func(*domain.UsageQuery)
		after *domain.UsagePosition
		code  string
	}{
		{"unknown meter", func(q *domain.UsageQuery) { q.MeterCode = "nope" }, nil, domain.CodeMeterNotFound},
		{"groupBy no dimension", func(q *domain.UsageQuery) { q.GroupBy = []string{"region"} }, nil, domain.CodeInvalidDimension},
		{"filter no dimension", func(q *domain.UsageQuery) { q.Filters = map[string][]string{"user": {"x"}} }, nil, domain.CodeInvalidDimension},
		{"window size", func(q *domain.UsageQuery) { q.WindowSize = "week" }, nil, domain.CodeInvalidWindowSize},
		{"empty range", func(q *domain.UsageQuery) { q.To = q.From }, nil, domain.CodeInvalidRange},
		{"32 days of hours", func(q *domain.UsageQuery) { q.To = q.From.Add(32 * 24 * time.Hour) }, nil, domain.CodeRangeTooLarge},
		{"367 days of days", func(q *domain.UsageQuery) { q.WindowSize, q.To = domain.WindowDay, q.From.Add(367*24*time.Hour) }, nil, domain.CodeRangeTooLarge},
		{"11 years of months", func(q *domain.UsageQuery) { q.WindowSize, q.To = domain.WindowMonth, q.From.AddDate(11, 0, 0) }, nil, domain.CodeRangeTooLarge},
		{"cursor out of the range", func(*domain.UsageQuery) {}, &domain.UsagePosition{Window: from.Add(-time.Hour), Dimensions: []string{}}, "invalid_cursor"},
		{"cursor of other groups", func(*domain.UsageQuery) {}, &domain.UsagePosition{Window: from, Dimensions: []string{"x"}}, "invalid_cursor"},
	} {
		q := base
		c.edit(&q)
		_, err := r.Usage(t.Context(), q, 10, c.after)
		var re *rule.Error
		if !errors.As(err, &re) || re.Code != c.code {
			t.Fatalf("%s: %v, want %s", c.name, err, c.code)
		}
	}
	// The longest ranges are allowed.
	for _, q := range []domain.UsageQuery{
		{TenantID: "acme", MeterCode: "tokens", From: from, To: from.Add(31 * 24 * time.Hour), WindowSize: domain.WindowHour},
		{TenantID: "acme", MeterCode: "tokens", From: from, To: from.AddDate(10, 0, 0), WindowSize: domain.WindowMonth},
	} {
		if _, err := r.Usage(t.Context(), q, 10, nil); err != nil {
			t.Fatalf("%+v: %v", q, err)
		}
	}
}

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}
