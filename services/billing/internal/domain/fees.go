package domain

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/money"
)

// SubscriptionSpan is a subscription's interval: from StartsAt until
// EndsAt (zero: open).
type SubscriptionSpan struct {
	PlanCode         string
	StartsAt, EndsAt time.Time
}

func (s SubscriptionSpan) holds(t time.Time) bool {
	return !s.StartsAt.After(t) && (s.EndsAt.IsZero() || s.EndsAt.After(t))
}

// FeePlanVersion is what a plan version bills per period besides its
// charges: its fixed fees and its minimum spend (nil: none).
type FeePlanVersion struct {
	Code         string
	Version      int64
	Currency     string
	EffectiveAt  time.Time
	Fees         []events.PlanFee
	MinimumSpend *decimal.Decimal
}

// PlanKey names a plan version.
type PlanKey struct {
	Code    string
	Version int64
}

// PeriodDays are the starts of the days of period (a month) in loc: 28 to
// 31 local midnights, whatever daylight saving does to their lengths.
func PeriodDays(period string, loc *time.Location) ([]time.Time, error) {
	m, err := time.Parse("2006-01", period)
	if err != nil {
		return nil, fmt.Errorf("period %q: %w", period, err)
	}
	var out []time.Time
	for d := 1; ; d++ {
		day := time.Date(m.Year(), m.Month(), d, 0, 0, 0, 0, loc)
		if day.Month() != m.Month() {
			return out, nil
		}
		out = append(out, day)
	}
}

// FeeLines are a period's fixed-fee and minimum true-up lines by currency
// (DESIGN.md section 3a): each day of the period (its start in the
// tenant's zone, days) belongs to the subscription in effect at that
// instant and to its plan's version in effect then (none: the day bills
// nothing); each version a subscription spent days on bills each fixed fee
// x days / days in the period, rounded half-even to the currency's minor
// unit, and, when its minimum spend prorated the same way is more than its
// fee lines plus charged (the period's lines priced by that version's
// charges), a minimum_true_up line of the difference. Lines are in plan,
// version, fee order, the true-up last. The whole period counts as the
// subscriptions stand, even when it is closed before its end.
func FeeLines(days []time.Time, subs []SubscriptionSpan, versions []FeePlanVersion,
	charged map[PlanKey]decimal.Decimal) (map[string][]events.FeeLine, error) {
	byCode := map[string][]FeePlanVersion{}
	for _, v := range versions {
		byCode[v.Code] = append(byCode[v.Code], v)
	}
	spent := map[PlanKey]int{}
	for _, day := range days {
		i := slices.IndexFunc(subs, func(s SubscriptionSpan) bool { return s.holds(day) })
		if i < 0 {
			continue
		}
		var in *FeePlanVersion
		for j, v := range byCode[subs[i].PlanCode] {
			if !v.EffectiveAt.After(day) && (in == nil || v.Version > in.Version) {
				in = &byCode[subs[i].PlanCode][j]
			}
		}
		if in != nil {
			spent[PlanKey{in.Code, in.Version}]++
		}
	}
	keys := make([]PlanKey, 0, len(spent))
	for k := range spent {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b PlanKey) int { return cmp.Or(cmp.Compare(a.Code, b.Code), cmp.Compare(a.Version, b.Version)) })
	out := map[string][]events.FeeLine{}
	n := len(days)
	for _, k := range keys {
		i := slices.IndexFunc(byCode[k.Code], func(v FeePlanVersion) bool { return v.Version == k.Version })
		v, d := byCode[k.Code][i], spent[k]
		billed := decimal.Zero
		for _, f := range v.Fees {
			amount, err := money.Prorate(f.Amount, d, n, v.Currency)
			if err != nil {
				return nil, err
			}
			billed = billed.Add(amount)
			out[v.Currency] = append(out[v.Currency], events.FeeLine{Kind: events.FeeKindFixed, PlanCode: k.Code,
				PlanVersion: k.Version, FeeCode: f.Code, Name: f.Name, Days: d, PeriodDays: n, Amount: amount})
		}
		if v.MinimumSpend == nil {
			continue
		}
		minimum, err := money.Prorate(*v.MinimumSpend, d, n, v.Currency)
		if err != nil {
			return nil, err
		}
		if short := minimum.Sub(billed).Sub(charged[k]); short.Sign() > 0 {
			out[v.Currency] = append(out[v.Currency], events.FeeLine{Kind: events.FeeKindTrueUp, PlanCode: k.Code,
				PlanVersion: k.Version, Days: d, PeriodDays: n, Amount: short})
		}
	}
	return out, nil
}
