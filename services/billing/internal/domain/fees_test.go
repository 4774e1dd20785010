package domain

import (
	"fmt"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/events"
)

func dec(s string) decimal.Decimal { return decimal.RequireFromString(s) }

func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// summary is a currency's fee lines as "kind plan/version code days/n amount".
func summary(ls map[string][]events.FeeLine) []string {
	var out []string
	for _, cur := range []string{"USD", "KRW", "BHD"} {
		for _, l := range ls[cur] {
			out = append(out, fmt.Sprintf("%s %s %s/%d %s %d/%d %s", cur, l.Kind, l.PlanCode, l.PlanVersion, l.FeeCode, l.Days, l.PeriodDays, l.Amount))
		}
	}
	return out
}

// Fixed fees and minimum spend are prorated by whole days of the tenant's
// zone, a day belonging to what was in effect at its start (DESIGN.md
// section 3a), on its edges: a day at its first instant or after it, months
// of 28 to 31 days, zones east and west of UTC, a version mid-period.
func TestFeeLinesProrateByWholeDays(t *testing.T) {
	utc, seoul, la := time.UTC, zone(t, "Asia/Seoul"), zone(t, "America/Los_Angeles")
	base := []events.PlanFee{{Code: "base", Name: "Base", Amount: dec("49.00")}}
	pro := func(v int64, eff time.Time, fees []events.PlanFee, min string) FeePlanVersion {
		p := FeePlanVersion{Code: "pro", Version: v, Currency: "USD", EffectiveAt: eff, Fees: fees}
		if min != "" {
			m := dec(min)
			p.MinimumSpend = &m
		}
		return p
	}
	starter := FeePlanVersion{Code: "starter", Version: 1, Currency: "USD", EffectiveAt: time.Date(2025, 1, 1, 0, 0, 0, 0, utc),
		Fees: []events.PlanFee{{Code: "base", Amount: dec("10.00")}}}
	early := time.Date(2025, 1, 1, 0, 0, 0, 0, utc)
	at := func(loc *time.Location, y int, m time.Month, d, h, min, s int) time.Time {
		return time.Date(y, m, d, h, min, s, 0, loc)
	}
	open := func(plan string, from time.Time) SubscriptionSpan {
		return SubscriptionSpan{PlanCode: plan, StartsAt: from}
	}
	change := func(from, to string, at time.Time) []SubscriptionSpan {
		return []SubscriptionSpan{{PlanCode: from, StartsAt: early, EndsAt: at}, {PlanCode: to, StartsAt: at}}
	}
	tests := []struct {
		name     string
		period   string
		loc      *time.Location
		subs     []SubscriptionSpan
		versions []FeePlanVersion
		charged  map[PlanKey]decimal.Decimal
		want     []string
	}{
		{"the whole month", "2026-01", utc, []SubscriptionSpan{open("pro", early)}, []FeePlanVersion{pro(1, early, base, "")}, nil,
			[]string{"USD fixed_fee pro/1 base 31/31 49"}},
		{"a start on the last day at its start", "2026-01", utc, []SubscriptionSpan{open("pro", at(utc, 2026, 1, 31, 0, 0, 0))},
			[]FeePlanVersion{pro(1, early, base, "")}, nil, []string{"USD fixed_fee pro/1 base 1/31 1.58"}}, // 49/31 = 1.5806
		{"a start on the last day after its start bills nothing", "2026-01", utc, []SubscriptionSpan{open("pro", at(utc, 2026, 1, 31, 0, 0, 1))},
			[]FeePlanVersion{pro(1, early, base, "")}, nil, nil},
		{"a change at 23:59:59: the new plan from the next day", "2026-01", utc, change("starter", "pro", at(utc, 2026, 1, 16, 23, 59, 59)),
			[]FeePlanVersion{starter, pro(1, early, base, "")}, nil,
			[]string{"USD fixed_fee pro/1 base 15/31 23.71", "USD fixed_fee starter/1 base 16/31 5.16"}}, // 49*15/31 = 23.709; 10*16/31 = 5.161
		{"a change at 00:00:00: the new plan from that day", "2026-01", utc, change("starter", "pro", at(utc, 2026, 1, 16, 0, 0, 0)),
			[]FeePlanVersion{starter, pro(1, early, base, "")}, nil,
			[]string{"USD fixed_fee pro/1 base 16/31 25.29", "USD fixed_fee starter/1 base 15/31 4.84"}}, // 49*16/31 = 25.290; 10*15/31 = 4.838
		{"February of 28 days", "2027-02", utc, []SubscriptionSpan{open("pro", at(utc, 2027, 2, 15, 0, 0, 0))},
			[]FeePlanVersion{pro(1, early, base, "")}, nil, []string{"USD fixed_fee pro/1 base 14/28 24.5"}},
		{"February of 29 days", "2028-02", utc, []SubscriptionSpan{open("pro", at(utc, 2028, 2, 15, 0, 0, 0))},
			[]FeePlanVersion{pro(1, early, base, "")}, nil, []string{"USD fixed_fee pro/1 base 15/29 25.34"}}, // 49*15/29 = 25.345 -> 25.34
		{"April of 30 days", "2026-04", utc, []SubscriptionSpan{open("pro", at(utc, 2026, 4, 30, 0, 0, 0))},
			[]FeePlanVersion{pro(1, early, base, "")}, nil, []string{"USD fixed_fee pro/1 base 1/30 1.63"}}, // 1.6333
		{"a tenant east of UTC: its midnight is 15:00 UTC the day before", "2026-01", seoul,
			[]SubscriptionSpan{open("pro", time.Date(2026, 1, 16, 15, 0, 0, 0, utc))}, // the 17th, 00:00 in Seoul
			[]FeePlanVersion{pro(1, early, base, "")}, nil, []string{"USD fixed_fee pro/1 base 15/31 23.71"}},
		{"a tenant west of UTC: 08:00 UTC is its midnight", "2026-01", la,
			[]SubscriptionSpan{open("pro", time.Date(2026, 1, 16, 8, 0, 0, 0, utc))}, // the 16th, 00:00 in Los Angeles
			[]FeePlanVersion{pro(1, early, base, "")}, nil, []string{"USD fixed_fee pro/1 base 16/31 25.29"}},
		{"the same instant is after Seoul's midnight", "2026-01", seoul,
			[]SubscriptionSpan{open("pro", time.Date(2026, 1, 16, 8, 0, 0, 0, utc))}, // the 16th, 17:00 in Seoul
			[]FeePlanVersion{pro(1, early, base, "")}, nil, []string{"USD fixed_fee pro/1 base 15/31 23.71"}},
		{"a daylight saving change does not move the days", "2026-03", la, []SubscriptionSpan{open("pro", early)},
			[]FeePlanVersion{pro(1, early, base, "")}, nil, []string{"USD fixed_fee pro/1 base 31/31 49"}},
		{"a plan version published mid-period", "2026-01", utc, []SubscriptionSpan{open("pro", early)},
			[]FeePlanVersion{pro(1, early, base, ""), pro(2, at(utc, 2026, 1, 10, 12, 0, 0), []events.PlanFee{{Code: "base", Amount: dec("59.00")}}, "")}, nil,
			[]string{"USD fixed_fee pro/1 base 10/31 15.81", "USD fixed_fee pro/2 base 21/31 39.97"}}, // 49*10/31 = 15.806; 59*21/31 = 39.968
		{"a version before the plan's first is no plan", "2026-01", utc, []SubscriptionSpan{open("pro", early)},
			[]FeePlanVersion{pro(1, at(utc, 2026, 1, 30, 0, 0, 0), base, "")}, nil, []string{"USD fixed_fee pro/1 base 2/31 3.16"}},
		{"half a cent rounds to even", "2027-02", utc, []SubscriptionSpan{open("pro", at(utc, 2027, 2, 15, 0, 0, 0))},
			[]FeePlanVersion{pro(1, early, []events.PlanFee{{Code: "a", Amount: dec("0.01")}, {Code: "b", Amount: dec("0.03")}}, "")}, nil,
			[]string{"USD fixed_fee pro/1 a 14/28 0", "USD fixed_fee pro/1 b 14/28 0.02"}},
		{"exponent 0", "2027-02", utc, []SubscriptionSpan{open("won", at(utc, 2027, 2, 15, 0, 0, 0))},
			[]FeePlanVersion{{Code: "won", Version: 1, Currency: "KRW", EffectiveAt: early, Fees: []events.PlanFee{{Code: "a", Amount: dec("1")}, {Code: "b", Amount: dec("3")}}}},
			nil, []string{"KRW fixed_fee won/1 a 14/28 0", "KRW fixed_fee won/1 b 14/28 2"}},
		{"exponent 3", "2027-02", utc, []SubscriptionSpan{open("dinar", at(utc, 2027, 2, 15, 0, 0, 0))},
			[]FeePlanVersion{{Code: "dinar", Version: 1, Currency: "BHD", EffectiveAt: early, Fees: []events.PlanFee{{Code: "a", Amount: dec("0.001")}, {Code: "b", Amount: dec("0.003")}}}},
			nil, []string{"BHD fixed_fee dinar/1 a 14/28 0", "BHD fixed_fee dinar/1 b 14/28 0.002"}},
		{"a minimum spend trues up what fees and charges leave short", "2026-01", utc, []SubscriptionSpan{open("pro", early)},
			[]FeePlanVersion{pro(1, early, base, "100")}, map[PlanKey]decimal.Decimal{{"pro", 1}: dec("30.123")},
			[]string{"USD fixed_fee pro/1 base 31/31 49", "USD minimum_true_up pro/1  31/31 20.877"}},
		{"no true-up when they reach it", "2026-01", utc, []SubscriptionSpan{open("pro", early)},
			[]FeePlanVersion{pro(1, early, base, "100")}, map[PlanKey]decimal.Decimal{{"pro", 1}: dec("51")}, []string{"USD fixed_fee pro/1 base 31/31 49"}},
		{"a prorated minimum", "2026-01", utc, []SubscriptionSpan{open("pro", at(utc, 2026, 1, 17, 0, 0, 0))},
			[]FeePlanVersion{pro(1, early, nil, "31")}, nil, []string{"USD minimum_true_up pro/1  15/31 15"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			days, err := PeriodDays(tt.period, tt.loc)
			if err != nil {
				t.Fatal(err)
			}
			got, err := FeeLines(days, tt.subs, tt.versions, tt.charged)
			if err != nil {
				t.Fatal(err)
			}
			if s := summary(got); fmt.Sprint(s) != fmt.Sprint(tt.want) {
				t.Fatalf("lines\n %q\nwant\n %q", s, tt.want)
			}
		})
	}
}
