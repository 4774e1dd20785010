package app_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/money"
	"github.com/usagebilling/billing/services/query/internal/app"
	. "github.com/usagebilling/billing/services/query/internal/querytest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// want is a tenant's summary computed by the test from its own inputs.
type want struct {
	count                            int64
	qty, charged, adjusted, invoiced map[string]decimal.Decimal
	last                             time.Time
	events                           int
}

func newWant() *want {
	return &want{qty: map[string]decimal.Decimal{}, charged: map[string]decimal.Decimal{},
		adjusted: map[string]decimal.Decimal{}, invoiced: map[string]decimal.Decimal{}}
}

func (w *want) saw(e Event) Event {
	w.events++
	if at := e.Envelope.OccurredAt; at.After(w.last) {
		w.last = at
	}
	return e
}

// scenario builds a tenant's events through a whole period: prices, n usage
// facts in two meters and currencies with their charges, an adjustment, the
// close, the invoices, and an adjustment after issue with its correction.
func scenario(t *testing.T, tenant string, n int) ([]Event, *want) {
	t.Helper()
	f := NewFeed(t, tenant)
	w := newWant()
	var evs []Event
	add := func(e Event) Event { evs = append(evs, w.saw(e)); return e }
	add(f.Price("api_calls", "USD", "0.0125"))
	add(f.Price("compute_seconds", "KRW", "3.5"))
	subtotals := map[string]decimal.Decimal{}
	for i := range n {
		meter, cur, price := "api_calls", "USD", "0.0125"
		if i%3 == 2 {
			meter, cur, price = "compute_seconds", "KRW", "3.5"
		}
		qty := decimal.NewFromInt(int64(i + 1)).Div(decimal.NewFromInt(4)) // 0.25, 0.5, ...
		u := add(f.Usage(meter, cur, qty.String()))
		w.count++
		w.qty[meter] = w.qty[meter].Add(qty)
		add(f.Charge(u, "2026-11", price))
		amount := qty.Mul(D(price))
		w.charged[cur] = w.charged[cur].Add(amount)
		subtotals[cur] = subtotals[cur].Add(amount)
	}
	add(f.Adjustment("2026-11", "USD", "-0.05"))
	w.adjusted["USD"] = w.adjusted["USD"].Add(D("-0.05"))
	subtotals["USD"] = subtotals["USD"].Add(D("-0.05"))
	add(f.Close("2026-11"))
	for _, cur := range []string{"USD", "KRW"} {
		subtotal := subtotals[cur]
		total, err := money.Round(subtotal, cur)
		if err != nil {
			t.Fatal(err)
		}
		inv, id := f.Invoice("2026-11", cur, subtotal.String(), total.String())
		add(inv)
		w.invoiced[cur] = w.invoiced[cur].Add(total)
		if cur == "USD" {
			late := add(f.Adjustment("2026-11", "USD", "0.1"))
			w.adjusted["USD"] = w.adjusted["USD"].Add(D("0.1"))
			add(f.Correction(id, late, "2026-11", "USD", "0.1"))
			w.invoiced["USD"] = w.invoiced["USD"].Add(D("0.1"))
		}
	}
	return evs, w
}

func check(t *testing.T, pool *pgxpool.Pool, tenant string, w *want) {
	t.Helper()
	s, err := app.New(app.Deps{Pool: pool}, app.Config{}).Summary(t.Context(), tenant)
	if err != nil {
		t.Fatal(err)
	}
	same := func(what string, got, want map[string]decimal.Decimal) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s %s: %v, want %v", tenant, what, got, want)
		}
		for k, v := range want {
			if !got[k].Equal(v) {
				t.Fatalf("%s %s[%s]: %s, want %s", tenant, what, k, got[k], v)
			}
		}
	}
	if s.TenantID != tenant || s.UsageCount != w.count {
		t.Fatalf("%s usage count %d, want %d", tenant, s.UsageCount, w.count)
	}
	same("quantityByMeter", s.QuantityByMeter, w.qty)
	same("charged", s.Charged, w.charged)
	same("adjusted", s.Adjusted, w.adjusted)
	same("invoiced", s.Invoiced, w.invoiced)
	if s.LastEventAt == nil || !s.LastEventAt.Equal(w.last) {
		t.Fatalf("%s lastEventAt %v, want %v", tenant, s.LastEventAt, w.last)
	}
	var events int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM projected_event WHERE tenant_id = $1`,
		tenant).Scan(&events); err != nil {
		t.Fatal(err)
	}
	if events != w.events {
		t.Fatalf("%s: %d event rows, want %d", tenant, events, w.events)
	}
}

func TestSummaryEqualsTheSumsOfTheEvents(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	a, wa := scenario(t, "acme", 20)
	b, wb := scenario(t, "beta", 7)
	// Interleave the tenants, in batches, with every event delivered twice.
	var all []Event
	for i := 0; i < len(a) || i < len(b); i++ {
		if i < len(a) {
			all = append(all, a[i])
		}
		if i < len(b) {
			all = append(all, b[i])
		}
	}
	for start := 0; start < len(all); start += 9 {
		batch := append([]Event(nil), all[start:min(start+9, len(all))]...)
		Decide(t, pool, ib, append(batch, batch[0])...)
	}
	// Read midway through redelivery, then redeliver everything once more.
	check(t, pool, "acme", wa)
	for _, d := range Decide(t, pool, ib, all...) {
		if d.Outcome != inbox.OutcomeDuplicate {
			t.Fatalf("redelivery: %+v, want duplicate", d)
		}
	}
	check(t, pool, "acme", wa)
	check(t, pool, "beta", wb)
}

// Out of order (shuffled across aggregates) the inbox defers what comes
// before its predecessor; once everything arrived the summary is the same.
func TestSummaryIndependentOfOrder(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	evs, w := scenario(t, "acme", 12)
	shuffled := append([]Event(nil), evs...)
	rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	for start := 0; start < len(shuffled); start += 5 {
		Decide(t, pool, ib, shuffled[start:min(start+5, len(shuffled))]...)
		if start == 10 { // a read while events are still missing folds what is there
			if _, err := app.New(app.Deps{Pool: pool}, app.Config{}).Summary(t.Context(), "acme"); err != nil {
				t.Fatal(err)
			}
		}
	}
	var deferred int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM inbox_deferred`).Scan(&deferred); err != nil {
		t.Fatal(err)
	}
	if deferred != 0 {
		t.Fatalf("%d events still deferred", deferred)
	}
	check(t, pool, "acme", w)
}

// A projection that exists although the inbox forgot the event (its inbox row
// deleted) is a duplicate, not a second delta.
func TestProjectionIsUniqueByEventID(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	f := NewFeed(t, "acme")
	u := f.Usage("api_calls", "USD", "2")
	Decide(t, pool, ib, u)
	if _, err := pool.Exec(t.Context(), `DELETE FROM inbox_event`); err != nil {
		t.Fatal(err)
	}
	ds := Decide(t, pool, ib, u)
	if ds[0].Outcome != inbox.OutcomeDuplicate || ds[0].Reason != "effect_exists:projected_event_pkey" {
		t.Fatalf("decision %+v, want duplicate by projected_event_pkey", ds[0])
	}
	s, err := app.New(app.Deps{Pool: pool}, app.Config{}).Summary(t.Context(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	if s.UsageCount != 1 || !s.QuantityByMeter["api_calls"].Equal(D("2")) {
		t.Fatalf("summary %+v, want one usage of 2", s)
	}
}

// The same within a batch projected in one statement: the forgotten event is
// the one duplicate, the others are projected once each.
func TestProjectionDuplicateInABatch(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	f := NewFeed(t, "acme")
	old := f.Usage("api_calls", "USD", "2")
	Decide(t, pool, ib, old)
	if _, err := pool.Exec(t.Context(), `DELETE FROM inbox_event`); err != nil {
		t.Fatal(err)
	}
	evs := []Event{f.Usage("api_calls", "USD", "1"), f.Usage("api_calls", "USD", "1"), old,
		f.Usage("api_calls", "USD", "1"), f.Usage("api_calls", "USD", "1")}
	ds := Decide(t, pool, ib, evs...)
	for i, d := range ds {
		if i == 2 {
			if d.Outcome != inbox.OutcomeDuplicate || d.Reason != "effect_exists:projected_event_pkey" {
				t.Fatalf("decision %+v, want duplicate by projected_event_pkey", d)
			}
		} else if d.Outcome != inbox.OutcomeApplied {
			t.Fatalf("decision %d %+v, want applied", i, d)
		}
	}
	s, err := app.New(app.Deps{Pool: pool}, app.Config{}).Summary(t.Context(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	if s.UsageCount != 5 || !s.QuantityByMeter["api_calls"].Equal(D("6")) {
		t.Fatalf("summary %+v, want 5 usages of 6 in all", s)
	}
}

func TestUnknownTenantHasAZeroSummary(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	s, err := app.New(app.Deps{Pool: pool}, app.Config{}).Summary(t.Context(), "nobody")
	if err != nil {
		t.Fatal(err)
	}
	if s.UsageCount != 0 || len(s.QuantityByMeter)+len(s.Charged)+len(s.Adjusted)+len(s.Invoiced) != 0 || s.LastEventAt != nil {
		t.Fatalf("summary %+v, want zeros", s)
	}
}

// Every public event type has a handler (an unhandled one would be
// quarantined as unknown_event_type).
func TestEveryPublicEventTypeIsProjected(t *testing.T) {
	hs := app.New(app.Deps{}, app.Config{}).BatchHandlers()
	for _, typ := range []string{events.TypePriceActivated, events.TypeUsageAccepted, events.TypeChargeRated,
		events.TypeAdjustmentPosted, events.TypeBillingPeriodClosed, events.TypeInvoiceIssued, events.TypeInvoiceCorrectionIssued,
		events.TypePriceScheduleWatermark, events.TypeBillingPeriodEnded, events.TypeUsageAcceptedThrough} {
		if hs[typ] == nil {
			t.Errorf("no handler for %s", typ)
		}
	}
}
