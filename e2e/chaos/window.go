package chaos

import (
	"maps"
	"slices"
	"time"

	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/events"
)

// AcceptedBetween returns the event ids of the facts accepted from from to
// to: what a fault in that window touched, without copying a long run's
// whole ledger (the soak's time to recover, e2e/soak).
func (l *Ledger) AcceptedBetween(from, to time.Time) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ids []string
	for _, f := range l.order {
		if f.Accepted && !f.AcceptedAt.Before(from) && !f.AcceptedAt.After(to) {
			ids = append(ids, f.EventID)
		}
	}
	return ids
}

// AcceptedIDsOf returns the event ids of the accepted facts of the tenants,
// in the order the facts were made.
func (l *Ledger) AcceptedIDsOf(tenants ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ids []string
	for _, f := range l.order {
		if f.Accepted && slices.Contains(tenants, f.Tenant) {
			ids = append(ids, f.EventID)
		}
	}
	return ids
}

// Periods returns, per tenant, the periods its accepted facts occurred in,
// in order, without copying the facts.
func (l *Ledger) Periods(tenants ...string) map[string][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[string]map[string]bool{}
	for _, f := range l.order {
		if !f.Accepted || (len(tenants) > 0 && !slices.Contains(tenants, f.Tenant)) {
			continue
		}
		if seen[f.Tenant] == nil {
			seen[f.Tenant] = map[string]bool{}
		}
		seen[f.Tenant][events.Period(f.OccurredAt)] = true
	}
	out := map[string][]string{}
	for t, ps := range seen {
		out[t] = slices.Sorted(maps.Keys(ps))
	}
	return out
}

// PeriodTotals returns what the ledger sent tenant for period, per
// currency: each accepted fact's quantity times the unit price of the
// latest version of its meter the ledger activated at or before the fact
// occurred, and the number of those facts. It does not copy the facts.
func (l *Ledger) PeriodTotals(tenant, period string) (map[string]decimal.Decimal, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	prices := map[string][]PriceRecord{}
	for _, p := range l.Prices {
		if p.Tenant == tenant {
			k := p.Meter + "|" + p.Currency
			prices[k] = append(prices[k], p)
		}
	}
	for _, ps := range prices {
		slices.SortFunc(ps, func(a, b PriceRecord) int { return a.EffectiveAt.Compare(b.EffectiveAt) })
	}
	out, n := map[string]decimal.Decimal{}, 0
	for _, f := range l.order {
		if !f.Accepted || f.Tenant != tenant || events.Period(f.OccurredAt) != period {
			continue
		}
		n++
		cur := currencyOf(f.Meter)
		var unit *decimal.Decimal
		for _, p := range prices[f.Meter+"|"+cur] {
			if p.EffectiveAt.After(f.OccurredAt) {
				break
			}
			unit = &p.UnitPrice
		}
		if unit == nil {
			continue // no price in effect: the reconciliation reports it
		}
		out[cur] = out[cur].Add(f.Quantity.Mul(*unit))
	}
	return out, n
}

func currencyOf(meter string) string {
	for _, m := range Meters {
		if m.Code == meter {
			return m.Currency
		}
	}
	return ""
}
