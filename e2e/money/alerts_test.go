package money

import (
	"testing"
	"time"
)

// The model's alert decisions (decision 0022): told the first time a point
// finds the figure at the threshold or above, once per period however the
// figure falls and rises again, "may" when only some of what touched a
// figure that can fall would have reached it, never for a deleted alert;
// and each mutation changes exactly the prediction it names.
func TestModelDecidesAlerts(t *testing.T) {
	defer func(m string) { mutation = m }(mutation)
	for _, tc := range []struct {
		mutation string
		// the deliveries of both alerts in January after the exact
		// crossing, and the spend alert's after the drop and rise
		exact, afterRise int
		deletedTold      bool
	}{
		{"", 1, 1, false},
		{"alert-strictly-above", 0, 1, false},
		{"alert-retold-after-drop", 1, 2, false},
		{"alert-after-delete", 1, 1, true},
	} {
		mutation = tc.mutation
		created := time.Date(2027, 1, 3, 0, 0, 0, 0, time.UTC)
		tn := newTenant("alerts", created, nil)
		tn.Series["api_calls"] = &Series{Meter: "api_calls", Currency: "USD",
			Versions: []Version{{N: 1, Eff: created, Pricing: Pricing{Model: Unit, UnitPrice: dec("1")}}}}
		spend := &Alert{ID: "s", Kind: "spend", Currency: "USD", Threshold: dec("10"), Periods: map[string]*alertPeriod{}}
		usage := &Alert{ID: "u", Kind: "usage", Meter: "api_calls", Threshold: dec("10"), Periods: map[string]*alertPeriod{}}
		tn.Alerts = []*Alert{spend, usage}
		r := &runner{}
		n := 0
		fact := func(p, qty string) {
			n++
			tn.Facts = append(tn.Facts, &Fact{SourceEventID: p + qty, Meter: "api_calls", Currency: "USD", Qty: dec(qty),
				At: created, Period: p, Version: 1, EventID: string(rune('a' + n))})
		}
		credit := func(p, amount string) {
			tn.Adjs = append(tn.Adjs, &Adjustment{Period: p, Currency: "USD", Amount: dec(amount)})
		}
		point := func() {
			r.decideAlerts(tn)
			tn.seenFacts, tn.seenAdjs = len(tn.Facts), len(tn.Adjs)
		}
		told := func(a *Alert, p string) int {
			if a.Periods[p] == nil {
				return 0
			}
			return a.Periods[p].Told
		}
		name := tc.mutation
		if name == "" {
			name = "the model"
		}
		fact("2027-01", "4")
		point()
		if told(spend, "2027-01") != 0 {
			t.Errorf("%s: told at 4 of 10", name)
		}
		fact("2027-01", "6") // exactly 10
		point()
		if s, u := told(spend, "2027-01"), told(usage, "2027-01"); s != tc.exact || u != tc.exact {
			t.Errorf("%s: spend and usage alerts told %d and %d times at exactly the threshold, want %d", name, s, u, tc.exact)
		}
		credit("2027-01", "-5") // 5: below
		point()
		fact("2027-01", "7") // 12: above again (the usage figure 17)
		point()
		if got := told(spend, "2027-01"); got != tc.afterRise {
			t.Errorf("%s: %d deliveries after a drop and a rise, want %d", name, got, tc.afterRise)
		}
		// February: a fact to 12 and a credit to 7 between two points: invoice
		// may have applied the fact alone
		fact("2027-02", "12")
		credit("2027-02", "-5")
		point()
		if st := spend.Periods["2027-02"]; st == nil || st.Told != 0 || !st.May {
			t.Errorf("%s: February's spend alert %+v, want may, not certain", name, st)
		}
		if told(usage, "2027-02") != 1 {
			t.Errorf("%s: usage alert not told at 12 of 10 in February", name)
		}
		usage.Deleted = true
		fact("2027-03", "20")
		point()
		if got := told(usage, "2027-03") > 0; got != tc.deletedTold {
			t.Errorf("%s: a deleted alert told %v, want %v", name, got, tc.deletedTold)
		}
	}
}
