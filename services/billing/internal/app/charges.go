package app

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/pkg/pricing"
	"github.com/usagebilling/billing/services/billing/internal/db"
)

// Charge is a charge as the API shows it.
type Charge struct {
	ChargeID     uuid.UUID       `json:"chargeId"`
	EventID      uuid.UUID       `json:"eventId"`
	UsageEventID uuid.UUID       `json:"usageEventId"`
	UsageID      uuid.UUID       `json:"usageId"`
	MeterCode    string          `json:"meterCode"`
	Currency     string          `json:"currency"`
	Quantity     decimal.Decimal `json:"quantity"`
	UnitPrice    decimal.Decimal `json:"unitPrice"`
	PriceVersion int64           `json:"priceVersion"`
	Amount       decimal.Decimal `json:"amount"`
	Period       string          `json:"period"`
	Late         bool            `json:"late"`
	OccurredAt   time.Time       `json:"occurredAt"`
	// Model is the price version's pricing model; under another than unit
	// the charge shows no unitPrice and no amount (MarshalJSON).
	Model string `json:"model"`
	// Aggregation is its meter's; under max, latest and unique_count a
	// charge has no unitPrice and no amount of its own either.
	Aggregation string `json:"aggregation"`
	// Dimensions are the dimensions of the price that rated it (its line's
	// identity); Properties the fact's.
	Dimensions map[string]string `json:"dimensions,omitempty"`
	Properties map[string]string `json:"properties,omitempty"`
	// Unpriced: no price of its series was in effect at its occurrence
	// (priceVersion 0, no unitPrice, no amount).
	Unpriced bool `json:"unpriced"`
	// PlanCode is the plan whose charge priced it (PriceVersion is the
	// plan's version); "" for the tenant's own price.
	PlanCode string `json:"planCode,omitempty"`
}

// OwnAmount reports whether the charge has an amount of its own: priced,
// under unit pricing, of a sum or count meter.
func (c Charge) OwnAmount() bool {
	return !c.Unpriced && (c.Model == "" || c.Model == pricing.Unit) && catalog.PricedPerCharge(c.Aggregation)
}

// ChargeFilter selects the charges of a list: a period, optionally one meter
// and one of its price versions (the charges behind one invoice line).
type ChargeFilter struct {
	Period       string
	MeterCode    string // "" for every meter
	PriceVersion int64  // 0 for every version; needs MeterCode
}

// ChargePosition is the keyset position of a charge in line order: the
// cursor of a charges page.
type ChargePosition struct {
	MeterCode    string    `json:"m"`
	Currency     string    `json:"c"`
	PriceVersion int64     `json:"v"`
	ChargeID     uuid.UUID `json:"id"`
}

// Position is the charge's keyset position.
func (c Charge) Position() ChargePosition {
	return ChargePosition{MeterCode: c.MeterCode, Currency: c.Currency, PriceVersion: c.PriceVersion, ChargeID: c.ChargeID}
}

// ListCharges returns up to limit charges of a tenant matching f, in line
// order (meter, currency, price version, charge id) after position after
// (the zero position for the first page).
func (a *App) ListCharges(ctx context.Context, tenantID string, f ChargeFilter, after ChargePosition, limit int32) ([]Charge, error) {
	q := db.New(a.pool)
	var out []Charge
	add := func(c db.ListChargesRow) error {
		ch := Charge{
			ChargeID: c.ChargeID, EventID: c.EventID, UsageEventID: c.UsageEventID, UsageID: c.UsageID,
			MeterCode: c.MeterCode, Currency: c.Currency, Quantity: c.Quantity, UnitPrice: c.UnitPrice,
			PriceVersion: c.PriceVersion, Amount: c.Amount, Period: c.Period, Late: c.Late, OccurredAt: c.OccurredAt.UTC(),
			Model: c.Model, Aggregation: c.Aggregation, Unpriced: c.Unpriced, PlanCode: c.PlanCode,
		}
		if err := json.Unmarshal(c.Dimensions, &ch.Dimensions); err != nil {
			return fmt.Errorf("decode dimensions of charge %s: %w", c.ChargeID, err)
		}
		if err := json.Unmarshal(c.Properties, &ch.Properties); err != nil {
			return fmt.Errorf("decode properties of charge %s: %w", c.ChargeID, err)
		}
		if len(ch.Dimensions) == 0 {
			ch.Dimensions = nil
		}
		if len(ch.Properties) == 0 {
			ch.Properties = nil
		}
		out = append(out, ch)
		return nil
	}
	if f.MeterCode == "" {
		rows, err := q.ListCharges(ctx, db.ListChargesParams{TenantID: tenantID, Period: f.Period,
			AfterMeter: after.MeterCode, AfterCurrency: after.Currency, AfterVersion: after.PriceVersion,
			AfterCharge: after.ChargeID, RowLimit: limit})
		if err != nil {
			return nil, fmt.Errorf("list charges: %w", err)
		}
		for _, c := range rows {
			if err := add(c); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	if after.MeterCode != f.MeterCode { // the first page
		after = ChargePosition{MeterCode: f.MeterCode}
	}
	version := pgtype.Int8{Int64: f.PriceVersion, Valid: f.PriceVersion > 0}
	rows, err := q.ListMeterCharges(ctx, db.ListMeterChargesParams{TenantID: tenantID, Period: f.Period,
		MeterCode: f.MeterCode, PriceVersion: version, AfterCurrency: after.Currency, AfterVersion: after.PriceVersion,
		AfterCharge: after.ChargeID, RowLimit: limit})
	if err != nil {
		return nil, fmt.Errorf("list charges: %w", err)
	}
	for _, c := range rows {
		if err := add(db.ListChargesRow(c)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// MarshalJSON shows a charge as the charges API does (pkg/api/billingapi/openapi.yaml):
// unitPrice and amount only when it has an amount of its own (OwnAmount);
// under the other models and aggregations a charge has none (its version
// prices the line as a whole), and an unpriced one has no price.
func (c Charge) MarshalJSON() ([]byte, error) {
	type plain Charge
	if c.OwnAmount() {
		return json.Marshal(plain(c))
	}
	return json.Marshal(struct {
		plain
		UnitPrice *decimal.Decimal `json:"unitPrice,omitempty"`
		Amount    *decimal.Decimal `json:"amount,omitempty"`
	}{plain: plain(c)})
}
