package money

import (
	"testing"
	"time"
)

// The model's draw at issue (DESIGN.md section 3a): grants in effect at
// the period's end, lowest priority first, then the earliest expiry (none
// last), then the oldest; never past the total; a later period draws what
// is left.
func TestModelDraws(t *testing.T) {
	created := time.Date(2027, 1, 3, 0, 0, 0, 0, time.UTC)
	tn := newTenant("draws", created, nil)
	tn.Series["api_calls"] = &Series{Meter: "api_calls", Currency: "USD",
		Versions: []Version{{N: 1, Eff: created, Pricing: Pricing{Model: Unit, UnitPrice: dec("1")}}}}
	for i, p := range []string{"2027-01", "2027-02"} {
		tn.Facts = append(tn.Facts, &Fact{SourceEventID: p, Meter: "api_calls", Currency: "USD", Qty: dec("10"),
			At: created.AddDate(0, i, 0), Period: p, Version: 1})
	}
	end := tn.end("2027-01")
	at := func(d time.Duration) *time.Time { x := end.Add(d); return &x }
	grant := func(id, amount string, priority int, eff time.Time, exp *time.Time) {
		tn.Grants = append(tn.Grants, &Grant{ID: id, Seq: len(tn.Grants), Currency: "USD", Amount: dec(amount), Balance: dec(amount),
			Priority: priority, EffectiveAt: eff, ExpiresAt: exp})
	}
	grant("a", "4", 1, created, nil)
	grant("expires-at-end", "9", 0, created, at(0))
	grant("b", "3", 0, created, at(time.Microsecond))
	grant("c", "5", 0, end, nil)
	grant("next", "7", 0, end.Add(time.Microsecond), nil)
	grant("eur", "50", 0, created, nil)
	tn.Grants[5].Currency = "EUR"
	for _, tc := range []struct {
		period, want, applied, due string
	}{
		{"2027-01", "b 3, c 5, a 2", "-10", "0"},
		{"2027-02", "next 7, a 2", "-9", "1"}, // what January left
	} {
		tn.period(tc.period).Closed = true
		tn.drawCredits(tc.period)
		inv := tn.expectInvoice(tc.period, "USD", true)
		got := ""
		for i, l := range inv.Credits {
			if i > 0 {
				got += ", "
			}
			got += l.GrantID + " " + l.Drawn.String()
		}
		if got != tc.want || !inv.CreditsApplied.Equal(dec(tc.applied)) || !inv.AmountDue.Equal(dec(tc.due)) {
			t.Errorf("%s: draws %s (creditsApplied %s, amountDue %s), want %s (%s, %s)", tc.period, got, inv.CreditsApplied, inv.AmountDue,
				tc.want, tc.applied, tc.due)
		}
	}
	if got := tn.Grants[0].status(end.AddDate(0, 2, 0)); got != "used" {
		t.Errorf("grant a drawn to nothing: status %s, want used", got)
	}
}
