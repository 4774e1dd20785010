package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/shopspring/decimal"
)

// A paused gate lets no request start, and Pause returns only once the
// requests under way have ended.
func TestGatePauseWaitsForRequestsUnderWay(t *testing.T) {
	ctx := t.Context()
	g := &Gate{}
	if !g.enter(ctx) {
		t.Fatal("enter an open gate")
	}
	g.hold() // paused before the request below arrives, whenever Pause's goroutine runs
	paused := make(chan error, 1)
	go func() { paused <- g.Pause(ctx, time.Minute, t.Logf) }()
	// A request arriving while paused waits; its context ending gives up.
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	select {
	case err := <-paused:
		t.Fatalf("Pause returned (%v) while a request was under way", err)
	default:
	}
	if g.enter(short) {
		t.Fatal("a request started through a paused gate")
	}
	select {
	case err := <-paused:
		t.Fatalf("Pause returned (%v) while a request was under way", err)
	default:
	}
	g.leave()
	if err := <-paused; err != nil {
		t.Fatalf("Pause: %v", err)
	}
	g.Resume()
	if !g.enter(ctx) {
		t.Fatal("enter a resumed gate")
	}
}

// Pause gives up after its timeout, naming the requests still under way.
func TestGatePauseIsBounded(t *testing.T) {
	g := &Gate{}
	g.enter(t.Context())
	if err := g.Pause(t.Context(), 100*time.Millisecond, t.Logf); err == nil {
		t.Fatal("Pause returned no error with a request still under way")
	}
}

// PeriodTotals prices each accepted fact of the period by the version in
// effect when it occurred, per currency, and leaves out the other periods'
// facts and those not accepted.
func TestLedgerPeriodTotals(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	d := decimal.RequireFromString
	l := &Ledger{Prices: []PriceRecord{
		{Tenant: "a", Meter: "api_calls", Currency: "USD", Version: 2, UnitPrice: d("0.0018"), EffectiveAt: at("2026-12-04T10:00:00Z")},
		{Tenant: "a", Meter: "api_calls", Currency: "USD", Version: 1, UnitPrice: d("0.0015"), EffectiveAt: at("2026-12-01T00:00:00Z")},
		{Tenant: "a", Meter: "storage_gb", Currency: "KRW", Version: 1, UnitPrice: d("12.5"), EffectiveAt: at("2026-12-01T00:00:00Z")},
		{Tenant: "b", Meter: "api_calls", Currency: "USD", Version: 1, UnitPrice: d("9"), EffectiveAt: at("2026-12-01T00:00:00Z")},
	}}
	l.order = []*Fact{
		{Tenant: "a", Meter: "api_calls", Quantity: d("10"), OccurredAt: at("2026-12-04T09:59:59Z"), Accepted: true},
		{Tenant: "a", Meter: "api_calls", Quantity: d("10"), OccurredAt: at("2026-12-04T10:00:00Z"), Accepted: true},
		{Tenant: "a", Meter: "storage_gb", Quantity: d("2.5"), OccurredAt: at("2026-12-05T00:00:00Z"), Accepted: true},
		{Tenant: "a", Meter: "api_calls", Quantity: d("1000"), OccurredAt: at("2026-12-05T00:00:00Z")},
		{Tenant: "a", Meter: "api_calls", Quantity: d("1000"), OccurredAt: at("2027-01-02T00:00:00Z"), Accepted: true},
		{Tenant: "b", Meter: "api_calls", Quantity: d("1000"), OccurredAt: at("2026-12-05T00:00:00Z"), Accepted: true},
	}
	got, n := l.PeriodTotals("a", "2026-12")
	if n != 3 || len(got) != 2 || !got["USD"].Equal(d("0.033")) || !got["KRW"].Equal(d("31.25")) {
		t.Fatalf("PeriodTotals = %v over %d facts, want USD 0.033 and KRW 31.25 over 3", got, n)
	}
}

// The time a gate holds the load paused does not count against the load's
// give-up deadline: a fact waiting out a soak's close is retried after it,
// not given up.
func TestGateHeldTimeMovesTheGiveUp(t *testing.T) {
	ctx := t.Context()
	g := &Gate{}
	if err := g.Pause(ctx, time.Minute, t.Logf); err != nil {
		t.Fatal(err)
	}
	if !sleepCtx(ctx, 60*time.Millisecond) { // the gate holds the load this long at least
		t.Fatal(ctx.Err())
	}
	g.Resume()
	held := g.Held()
	if held < 60*time.Millisecond {
		t.Fatalf("held %s, want at least the 60ms paused", held)
	}
	if !sleepCtx(ctx, 10*time.Millisecond) {
		t.Fatal(ctx.Err())
	}
	if g.Held() != held {
		t.Fatalf("held %s after the gate opened, want it to stay %s", g.Held(), held)
	}

	fact := &Fact{}
	giveUpAt := time.Now().Add(-30 * time.Millisecond) // passed, by less than the gate held
	paused := &Load{ledger: NewLedger(), cfg: LoadConfig{Gate: g}}
	if !paused.awaitRetry(ctx, []*Fact{fact}, giveUpAt, 0) || fact.Unresolved {
		t.Fatal("a fact the gate held was given up before the held time had passed")
	}
	open := &Load{ledger: NewLedger()}
	if open.awaitRetry(ctx, []*Fact{fact}, giveUpAt, 0) || !fact.Unresolved {
		t.Fatal("a fact past its give-up with no gate held was retried")
	}
}
