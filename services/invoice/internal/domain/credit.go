package domain

import (
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/money"
	"github.com/usagebilling/billing/pkg/rule"
)

// Prepaid credits (DESIGN.md section 3a). A grant gives a tenant an amount
// of one currency, in whole minor units, from EffectiveAt until ExpiresAt
// (none: until used). At issue an invoice draws from the grants in effect
// at its period's end, in draw order (DrawCredits), never past its total.

// KindCredit is the kind of a credit_applied line: what one grant gave one
// invoice, a negative amount.
const KindCredit = "credit_applied"

// CreditLineID is the id of a credit line, "credit_applied/<grantId>".
func CreditLineID(grantID uuid.UUID) string { return KindCredit + "/" + grantID.String() }

// Bounds of a grant.
const (
	MaxGrantPriority     = 1000
	MaxGrantReasonLength = 500
)

// Grant statuses, as a grant's list shows them at a moment.
const (
	GrantPending = "pending" // not in effect yet
	GrantActive  = "active"  // in effect, with something left
	GrantUsed    = "used"    // nothing left
	GrantExpired = "expired" // past its expiry: what was left is void
)

// GrantRequest is POST .../credit-grants as a client sends it.
type GrantRequest struct {
	Currency, Amount, Reason string
	EffectiveAt, ExpiresAt   *time.Time
	Priority                 *int
}

// Grant is a checked grant request: EffectiveAt is set (now when the
// request had none).
type Grant struct {
	Currency    string
	Amount      decimal.Decimal
	EffectiveAt time.Time
	ExpiresAt   *time.Time
	Priority    int
	Reason      string
}

// ParseGrant checks a grant request at now: a known, invoiceable currency
// (400 unknown_currency, 422 currency_not_invoiceable); an amount above zero
// (400 invalid_amount), in whole minor units (422 amount_precision), of at
// most 18 integer digits (400 decimal_out_of_range); an expiry after the
// start and after now (422 invalid_expiry); a priority from 0 (drawn first)
// to 1000 (400 invalid_priority); a reason of 1-500 characters
// (400 missing_field, invalid_field, control_character).
func ParseGrant(r GrantRequest, now time.Time) (Grant, error) {
	for _, f := range []struct{ name, value string }{{"currency", r.Currency}, {"amount", r.Amount}, {"reason", r.Reason}} {
		if strings.TrimSpace(f.value) == "" {
			return Grant{}, rule.Errorf(rule.Invalid, "missing_field", "field %q is required", f.name)
		}
	}
	if _, err := money.Currency(r.Currency); err != nil {
		if code := money.ProblemCode(err); code == money.CodeNotInvoiceable {
			return Grant{}, rule.Errorf(rule.Unprocessable, code, "%v", err)
		}
		return Grant{}, rule.Errorf(rule.Invalid, money.CodeUnknownCurrency, "%v", err)
	}
	g := Grant{Currency: r.Currency, EffectiveAt: now.UTC().Truncate(time.Microsecond), Reason: r.Reason}
	amount, err := money.Parse(r.Amount)
	if err != nil {
		return Grant{}, rule.Errorf(rule.Invalid, "invalid_amount", "amount must be a plain decimal string such as \"500\": %v", err)
	}
	if !amount.IsPositive() {
		return Grant{}, rule.Errorf(rule.Invalid, "invalid_amount", "amount must be above zero, got %s", amount)
	}
	if err := money.CheckRange(amount); err != nil {
		return Grant{}, rule.Errorf(rule.Invalid, money.CodeOutOfRange, "amount: %v", err)
	}
	if err := money.CheckMinorUnits(amount, r.Currency); err != nil {
		return Grant{}, rule.Errorf(rule.Unprocessable, money.CodeAmountPrecision, "%v", err)
	}
	g.Amount = amount
	if r.EffectiveAt != nil {
		g.EffectiveAt = r.EffectiveAt.UTC().Truncate(time.Microsecond)
	}
	if r.ExpiresAt != nil {
		exp := r.ExpiresAt.UTC().Truncate(time.Microsecond)
		if !exp.After(g.EffectiveAt) || !exp.After(now) {
			return Grant{}, rule.Errorf(rule.Unprocessable, "invalid_expiry", "expiresAt %s must be after effectiveAt %s and after now",
				exp.Format(time.RFC3339Nano), g.EffectiveAt.Format(time.RFC3339Nano))
		}
		g.ExpiresAt = &exp
	}
	if r.Priority != nil {
		if *r.Priority < 0 || *r.Priority > MaxGrantPriority {
			return Grant{}, rule.Errorf(rule.Invalid, "invalid_priority", "priority must be from 0 (drawn first) to %d, got %d", MaxGrantPriority, *r.Priority)
		}
		g.Priority = *r.Priority
	}
	if n := utf8.RuneCountInString(r.Reason); n > MaxGrantReasonLength {
		return Grant{}, rule.Errorf(rule.Invalid, "invalid_field", "reason must be at most %d characters, got %d", MaxGrantReasonLength, n)
	}
	if e := rule.FreeText("reason", r.Reason); e != nil {
		return Grant{}, e
	}
	return g, nil
}

// GrantStatus is a grant's status at now.
func GrantStatus(balance decimal.Decimal, effectiveAt time.Time, expiresAt *time.Time, now time.Time) string {
	switch {
	case expiresAt != nil && !expiresAt.After(now):
		return GrantExpired
	case !balance.IsPositive():
		return GrantUsed
	case effectiveAt.After(now):
		return GrantPending
	}
	return GrantActive
}

// Balance is what one grant has left, in draw order.
type Balance struct {
	GrantID uuid.UUID
	Balance decimal.Decimal
}

// Draw is what an invoice takes from one grant (above zero).
type Draw struct {
	GrantID uuid.UUID
	Amount  decimal.Decimal
}

// DrawCredits is what an invoice of total draws from grants, given in draw
// order: from each in turn as much as the total still owes, never past a
// grant's balance; nothing when the total is not above zero.
func DrawCredits(total decimal.Decimal, grants []Balance) []Draw {
	var out []Draw
	owed := total
	for _, g := range grants {
		if !owed.IsPositive() {
			break
		}
		d := decimal.Min(owed, g.Balance)
		if !d.IsPositive() {
			continue
		}
		out = append(out, Draw{GrantID: g.GrantID, Amount: d})
		owed = owed.Sub(d)
	}
	return out
}
