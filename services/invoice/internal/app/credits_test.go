package app_test

import (
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/services/invoice/internal/app"
	"github.com/usagebilling/billing/services/invoice/internal/domain"
	. "github.com/usagebilling/billing/services/invoice/internal/invoicetest"
	"github.com/usagebilling/billing/testkit/pgtest"
	"github.com/usagebilling/billing/testkit/servicetest"
)

// grant records a credit grant for acme at now, returning its id; key
// names it in a failure.
func grant(t *testing.T, a *app.App, key string, g domain.Grant) string {
	t.Helper()
	var out app.CreditGrant
	err := a.InTx(t.Context(), func(tx pgx.Tx) (err error) {
		out, err = a.GrantCredit(t.Context(), tx, app.GrantCredit{TenantID: "acme", Actor: "admin@acme.example", Grant: g})
		return err
	})
	if err != nil {
		t.Fatalf("grant %s: %v", key, err)
	}
	return out.GrantID.String()
}

func balances(t *testing.T, pool *pgxpool.Pool) map[string]string {
	t.Helper()
	gs, err := app.New(app.Deps{Pool: pool}, app.Config{}).CreditGrants(t.Context(), "acme", app.GrantPosition{}, 100)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, g := range gs {
		out[g.GrantID.String()] = g.Balance.String()
	}
	return out
}

// At issue an invoice draws from the grants of its currency in effect at
// its period's end: lowest priority first, then the earliest expiry (none
// last), then the oldest; never past its total; one credit_applied line
// each, after the taxes, its amount due the total less them. A grant expired
// by the period's end, one not yet in effect then, and one of another
// currency are not drawn. A close whose transaction dies before its commit
// draws nothing; a redelivered close draws nothing again; a correction note
// after issue neither draws nor gives back.
func TestCreditsDrawnAtIssue(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	now := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	a := app.New(app.Deps{Pool: pool, Clock: func() time.Time { return now }}, app.Config{})
	at := func(s string) *time.Time {
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return &tm
	}
	usd := func(amount string, priority int, expires *time.Time) domain.Grant {
		return domain.Grant{Currency: "USD", Amount: D(amount), EffectiveAt: now, ExpiresAt: expires, Priority: priority, Reason: "prepaid"}
	}
	late := usd("1000", 0, nil)
	late.EffectiveAt = *at("2026-12-05T00:00:00Z") // after November's end
	gA := grant(t, a, "a", usd("30", 5, nil))
	gC := grant(t, a, "c", usd("40", 0, nil)) // older than B, but no expiry: after it
	gB := grant(t, a, "b", usd("50", 0, at("2027-01-01T00:00:00Z")))
	gD := grant(t, a, "d", usd("1000", 0, at("2026-11-20T00:00:00Z"))) // expired at the period's end
	gE := grant(t, a, "e", late)
	gF := grant(t, a, "f", domain.Grant{Currency: "EUR", Amount: D("10"), EffectiveAt: now, Reason: "prepaid"})

	nov := NewPeriod(t, "acme", "2026-11")
	wantOutcomes(t, Decide(t, pool, ib, nov.Charge("USD", "100", "1")), "applied")
	closed := nov.CloseWithTaxes(events.TaxRate{Code: "VAT", Name: "VAT", Rate: D("0.1")})
	// A worker that dies between the draw and the commit: its transaction
	// is rolled back, the draw with it; the close delivered again draws once.
	err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		ds, err := ib.Decide(t.Context(), tx, servicetest.Messages(events.TopicBilling, Raw(t, closed)...))
		if err != nil || len(ds) != 1 || ds[0].Outcome != inbox.OutcomeApplied {
			t.Fatalf("the close before the crash: %v %v", ds, err)
		}
		return errors.New("killed before the commit")
	})
	if err == nil {
		t.Fatal("the crashed transaction committed")
	}
	wantOutcomes(t, Decide(t, pool, ib, closed), "applied")
	wantOutcomes(t, Decide(t, pool, ib, closed), "duplicate")
	inv := invoices(t, pool, "acme", "2026-11")["USD"]
	// 100 + VAT 10 = 110: B 50, C 40, then A (priority 5) 20 of its 30.
	wantLines(t, inv, "charge/api_calls/1 100/1 100", "tax/VAT 10", "credit_applied/"+gB+" -50",
		"credit_applied/"+gC+" -40", "credit_applied/"+gA+" -20")
	if !inv.Total.Equal(D("110")) || !inv.CreditsApplied.Equal(D("-110")) || !inv.AmountDue.IsZero() {
		t.Fatalf("total %s credits %s due %s, want 110, -110, 0", inv.Total, inv.CreditsApplied, inv.AmountDue)
	}
	want := map[string]string{gA: "10", gB: "0", gC: "0", gD: "1000", gE: "1000", gF: "10"}
	if got := balances(t, pool); !maps.Equal(got, want) {
		t.Fatalf("balances %v, want %v", got, want)
	}
	// A correction note after issue draws nothing and gives nothing back.
	wantOutcomes(t, Decide(t, pool, ib, nov.Adjustment("USD", "-5")), "applied")
	if got := balances(t, pool); !maps.Equal(got, want) {
		t.Fatalf("balances after a correction %v, want %v", got, want)
	}
	// December: E is in effect at its end and comes before A (priority 0).
	dec := NewPeriod(t, "acme", "2026-12")
	wantOutcomes(t, Decide(t, pool, ib, dec.Charge("USD", "15", "1"), dec.Close()), "applied", "applied")
	inv = invoices(t, pool, "acme", "2026-12")["USD"]
	wantLines(t, inv, "charge/api_calls/1 15/1 15", "credit_applied/"+gE+" -15")
	want[gE] = "985"
	if got := balances(t, pool); !maps.Equal(got, want) || !inv.AmountDue.IsZero() {
		t.Fatalf("balances %v due %s, want %v and 0", got, inv.AmountDue, want)
	}
	for _, d := range Published(t, pool) {
		if iss, ok := d.Payload.(events.InvoiceIssued); ok && (!iss.AmountDue.IsZero() || !iss.CreditsApplied.Equal(iss.Total.Neg())) {
			t.Errorf("InvoiceIssued %s: credits %s due %s of %s", iss.Period, iss.CreditsApplied, iss.AmountDue, iss.Total)
		}
	}
}

// DrawCredits never draws past the total or a balance, and nothing for a
// total of zero.
func TestDrawCreditsBounds(t *testing.T) {
	t.Parallel()
	bal := func(s ...string) []domain.Balance {
		out := make([]domain.Balance, len(s))
		for i, v := range s {
			out[i] = domain.Balance{Balance: D(v)}
		}
		return out
	}
	for _, tc := range []struct {
		total string
		have  []domain.Balance
		want  []string
	}{
		{"10", bal("3", "4", "5"), []string{"3", "4", "3"}},
		{"10", bal("30"), []string{"10"}},
		{"0", bal("30"), nil},
		{"7.5", bal("0", "2.5", "9"), []string{"2.5", "5"}},
	} {
		got := domain.DrawCredits(D(tc.total), tc.have)
		if len(got) != len(tc.want) {
			t.Fatalf("total %s: draws %v, want %v", tc.total, got, tc.want)
		}
		sum := decimal.Zero
		for i, d := range got {
			if !d.Amount.Equal(D(tc.want[i])) {
				t.Errorf("total %s: draw %d %s, want %s", tc.total, i, d.Amount, tc.want[i])
			}
			sum = sum.Add(d.Amount)
		}
		if sum.GreaterThan(D(tc.total)) {
			t.Errorf("total %s: drew %s", tc.total, sum)
		}
	}
}

// Invoices are issued in period order whatever order the closes arrive in
// (they travel on different partitions): December's close, naming November
// as the period closed before it, waits for November's; November draws the
// grant first and takes the first number.
func TestClosesIssueInPeriodOrder(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	now := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	a := app.New(app.Deps{Pool: pool, Clock: func() time.Time { return now }}, app.Config{})
	g := grant(t, a, "g", domain.Grant{Currency: "USD", Amount: D("30"), EffectiveAt: now, Reason: "prepaid"})
	nov, dec := NewPeriod(t, "acme", "2026-11"), NewPeriod(t, "acme", "2026-12")
	dec.After = "2026-11"
	wantOutcomes(t, Decide(t, pool, ib, nov.Charge("USD", "20", "1"), dec.Charge("USD", "25", "1")), "applied", "applied")
	wantOutcomes(t, Decide(t, pool, ib, dec.Close()), "deferred:missing_fact")
	if inv := invoices(t, pool, "acme", "2026-12")["USD"]; inv.Number != nil {
		t.Fatalf("December issued before November: number %d", *inv.Number)
	}
	// November's close provides what December's waits for: both applied.
	wantOutcomes(t, Decide(t, pool, ib, nov.Close()), "applied", "applied")
	novInv, decInv := invoices(t, pool, "acme", "2026-11")["USD"], invoices(t, pool, "acme", "2026-12")["USD"]
	wantLines(t, novInv, "charge/api_calls/1 20/1 20", "credit_applied/"+g+" -20")
	wantLines(t, decInv, "charge/api_calls/1 25/1 25", "credit_applied/"+g+" -10")
	if novInv.Number == nil || decInv.Number == nil || *novInv.Number >= *decInv.Number {
		t.Fatalf("numbers November %v, December %v: want November first", novInv.Number, decInv.Number)
	}
}
