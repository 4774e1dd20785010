// Package domain holds the usage service's rules: what a valid usage fact
// is, when a repeated fact is a replay and when a conflict, and which price
// version applies to it. It knows nothing of HTTP, Kafka or SQL.
package domain

import (
	"maps"
	"regexp"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/pkg/money"
	"github.com/usagebilling/billing/pkg/rule"
)

// Error is a broken rule with a stable machine-readable code (pkg/rule): a
// malformed request is rule.Invalid (400); usage that cannot be accepted as
// it stands (no price for it) rule.Unprocessable (422); an identity taken by
// a fact with other content rule.Conflict (409).
type Error = rule.Error

func newError(kind rule.Kind, code, format string, args ...any) *Error {
	return rule.Errorf(kind, code, format, args...)
}

// Codes of the errors this package returns.
const (
	CodeMissingField        = "missing_field"
	CodeInvalidField        = "invalid_field"
	CodeInvalidMeterCode    = "invalid_meter_code"
	CodeInvalidQuantity     = "invalid_quantity"
	CodeUnknownCurrency     = "unknown_currency"
	CodeOccurredInFuture    = "occurred_in_future"
	CodeUnknownMeter        = "unknown_meter"
	CodeCurrencyRequired    = "currency_required"
	CodeNoPriceInEffect     = "no_price_in_effect"
	CodeSourceEventConflict = "source_event_conflict"
	CodeSourceEventArchived = "source_event_archived"
	// The catalog's (pkg/catalog), all 400.
	CodeInvalidProperties = catalog.CodeInvalidProperties
	CodeTooManyProperties = catalog.CodeTooManyProperties
	CodeMissingValue      = catalog.CodeMissingValue
	CodeUnknownEventType  = "unknown_event_type"
)

// MaxFutureSkew is how far in the future a usage fact may have occurred
// (clock skew between the source and us).
const MaxFutureSkew = 5 * time.Minute

// MinYear and MaxYear bound the year of occurredAt: the zero time
// (0001-01-01) and far years name no billing period (rule.Time).
const (
	MinYear = rule.MinYear
	MaxYear = rule.MaxYear
)

// Limits of the identity fields.
const (
	MaxSourceSystem  = 128
	MaxSourceEventID = 256
)

var meterCodeRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// CheckMeterCode checks a meter code: 1-64 characters of A-Z a-z 0-9 _ . -
func CheckMeterCode(code string) *Error {
	if !meterCodeRE.MatchString(code) {
		return newError(rule.Invalid, CodeInvalidMeterCode, "meterCode must be 1-64 characters of A-Z a-z 0-9 _ . -, got %q", code)
	}
	return nil
}

// Request is a usage fact as sent, before any check.
type Request struct {
	SourceSystem  string
	SourceEventID string
	MeterCode     string
	Quantity      string
	OccurredAt    string
	Currency      string            // optional
	Properties    map[string]string // optional
}

// Usage is a validated usage fact, not yet accepted.
type Usage struct {
	SourceSystem  string
	SourceEventID string
	MeterCode     string
	Quantity      decimal.Decimal
	OccurredAt    time.Time         // UTC, microseconds
	Currency      string            // "" when the request named none
	Properties    map[string]string // nil when none
}

// Identity is what makes a usage fact unique within a tenant.
type Identity struct {
	SourceSystem  string
	SourceEventID string
}

// Identity returns the fact's identity.
func (u Usage) Identity() Identity { return Identity{u.SourceSystem, u.SourceEventID} }

// Parse checks a request; now bounds occurredAt.
func Parse(r Request, now time.Time) (Usage, *Error) {
	for _, f := range [][2]string{
		{"sourceSystem", r.SourceSystem}, {"sourceEventId", r.SourceEventID}, {"meterCode", r.MeterCode},
		{"quantity", r.Quantity}, {"occurredAt", r.OccurredAt},
	} {
		if f[1] == "" {
			return Usage{}, newError(rule.Invalid, CodeMissingField, "field %q is required", f[0])
		}
	}
	if err := checkID("sourceSystem", r.SourceSystem, MaxSourceSystem); err != nil {
		return Usage{}, err
	}
	if err := checkID("sourceEventId", r.SourceEventID, MaxSourceEventID); err != nil {
		return Usage{}, err
	}
	if err := CheckMeterCode(r.MeterCode); err != nil {
		return Usage{}, err
	}
	qty, err := money.ParseQuantity(r.Quantity)
	if code := money.BoundsCode(err); code != "" {
		// Business bounds: at most 18 digits before the point, 12 after.
		return Usage{}, newError(rule.Invalid, code, "quantity: %v", err)
	}
	if err != nil {
		return Usage{}, newError(rule.Invalid, CodeInvalidQuantity, "quantity %q: %v", r.Quantity, err)
	}
	if r.Currency != "" {
		if _, err := money.Currency(r.Currency); err != nil {
			code := CodeUnknownCurrency
			if money.ProblemCode(err) == money.CodeNotInvoiceable { // XTS, XXX, metals, funds
				code = money.CodeNotInvoiceable
			}
			return Usage{}, newError(rule.Invalid, code, "%v", err)
		}
	}
	if err := catalog.ValidateProperties(r.Properties); err != nil {
		return Usage{}, err
	}
	var props map[string]string
	if len(r.Properties) > 0 {
		props = maps.Clone(r.Properties)
	}
	at, terr := rule.Time("occurredAt", r.OccurredAt)
	if terr != nil {
		return Usage{}, terr
	}
	if at.After(now.Add(MaxFutureSkew)) {
		return Usage{}, newError(rule.Unprocessable, CodeOccurredInFuture, "occurredAt %s is more than %s in the future",
			at.Format(time.RFC3339Nano), MaxFutureSkew)
	}
	return Usage{
		SourceSystem: r.SourceSystem, SourceEventID: r.SourceEventID, MeterCode: r.MeterCode,
		Quantity: qty, OccurredAt: at, Currency: r.Currency, Properties: props,
	}, nil
}

// checkID checks an identity field: 1-max bytes of printable ASCII without
// spaces.
func checkID(field, s string, max int) *Error {
	if len(s) > max {
		return newError(rule.Invalid, CodeInvalidField, "field %q is longer than %d bytes", field, max)
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return newError(rule.Invalid, CodeInvalidField, "field %q must be printable ASCII without spaces", field)
		}
	}
	return nil
}

// Instant is t in UTC, truncated to microseconds (what PostgreSQL keeps).
func Instant(t time.Time) time.Time { return rule.Instant(t) }

// Fact is an accepted usage fact.
type Fact struct {
	UsageID       uuid.UUID
	TenantID      string
	SourceSystem  string
	SourceEventID string
	MeterCode     string
	Quantity      decimal.Decimal
	OccurredAt    time.Time
	Currency      string
	Properties    map[string]string // nil when none
	EventID       uuid.UUID
	AcceptedAt    time.Time
}

// Replays reports whether u, sent again with the identity of f, is the same
// usage: same meter, quantity (by value: "1.0" is "1"), occurrence time and
// properties (none and {} are the same), and the same currency when u names
// one. Otherwise it is a conflict: a fact is never overwritten.
func (u Usage) Replays(f Fact) bool {
	return u.MeterCode == f.MeterCode && u.Quantity.Equal(f.Quantity) && u.OccurredAt.Equal(f.OccurredAt) &&
		(u.Currency == "" || u.Currency == f.Currency) && maps.Equal(u.Properties, f.Properties)
}

// ConflictWith is the error for usage whose identity f holds with other
// content.
func ConflictWith(f Fact) *Error {
	return newError(rule.Conflict, CodeSourceEventConflict,
		"sourceEventId %q of sourceSystem %q was accepted before with other content (usage %s)",
		f.SourceEventID, f.SourceSystem, f.UsageID)
}

// ArchivedWith is the refusal of a source identity whose fact was accepted
// in a month since archived (decision 0025): the identity still names that
// fact, whose content is no longer here to tell a replay from a conflict.
func ArchivedWith(id Identity, usageID uuid.UUID) *Error {
	return newError(rule.Conflict, CodeSourceEventArchived,
		"sourceEventId %q of sourceSystem %q was accepted before (usage %s) in a month since archived",
		id.SourceEventID, id.SourceSystem, usageID)
}

// PriceVersion is one version of a price series, as replicated evidence.
type PriceVersion struct {
	MeterCode   string
	Currency    string
	Version     int64
	EffectiveAt time.Time
}

// Evidence is the price schedule known for some meters of a tenant.
type Evidence struct {
	byMeter map[string]map[string][]PriceVersion // meter -> currency -> versions ascending
}

// NewEvidence indexes price versions.
func NewEvidence(versions []PriceVersion) Evidence {
	e := Evidence{byMeter: map[string]map[string][]PriceVersion{}}
	for _, v := range versions {
		m := e.byMeter[v.MeterCode]
		if m == nil {
			m = map[string][]PriceVersion{}
			e.byMeter[v.MeterCode] = m
		}
		m[v.Currency] = append(m[v.Currency], v)
	}
	for _, m := range e.byMeter {
		for _, vs := range m {
			sort.Slice(vs, func(i, j int) bool { return vs[i].Version < vs[j].Version })
		}
	}
	return e
}

// Currency returns the currency u is rated in: u's own, or the meter's only
// currency when u names none. The price version is not usage's to decide
// (decisions 0011 and 0019): the rater picks it from its own evidence once
// it knows the tenant's schedule through u.OccurredAt, and rates a fact
// with no price in effect unpriced (section 3a), whether or not the tenant
// has a series of its meter, so usage accepts a fact of a catalog meter in
// any currency it names. What usage can refuse for sure, it does: a meter
// neither in the catalog nor priced for the tenant (or not in u's
// currency), and a fact that names no currency of a catalog meter the
// tenant has no price for yet, which has no currency to be rated in.
func (e Evidence) Currency(u Usage, cat Catalog) (currency string, err *Error) {
	series := e.byMeter[u.MeterCode]
	_, catalogued := cat.Meter(u.MeterCode)
	if len(series) == 0 {
		switch {
		case catalogued && u.Currency != "":
			return u.Currency, nil
		case catalogued:
			return "", newError(rule.Unprocessable, CodeNoPriceInEffect,
				"the tenant has no price for meter %q yet: name the currency its facts are billed in (they are rated unpriced until a price is in effect), or activate a price first", u.MeterCode)
		}
		return "", newError(rule.Unprocessable, CodeUnknownMeter, "meter %q is not in the catalog and no price is known for it", u.MeterCode)
	}
	currency = u.Currency
	if currency == "" {
		if len(series) > 1 {
			names := make([]string, 0, len(series))
			for c := range series {
				names = append(names, c)
			}
			sort.Strings(names)
			return "", newError(rule.Unprocessable, CodeCurrencyRequired, "meter %q is priced in %v: name the currency", u.MeterCode, names)
		}
		for c := range series {
			currency = c
		}
	}
	if _, ok := series[currency]; !ok && !catalogued {
		return "", newError(rule.Unprocessable, CodeUnknownMeter, "no price is known for meter %q in %s", u.MeterCode, currency)
	}
	return currency, nil
}
