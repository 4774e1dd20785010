// Package recon holds the rows services exchange for reconciliation by
// origin event id: what each service holds of one tenant's money flow. Each
// serves its own sets (GET /internal/v1/reconciliation/{set}, see Sets):
// usage the facts, billing the charges and adjustments, invoice the lines
// and corrections, query its projection of all of them. Every set is read
// page by page in the order of its rows' Position, so the comparison is a
// merge over ordered streams in bounded memory. The types are plain data,
// so the comparison can be domain code.
package recon

import (
	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/pricing"
)

// Invoice is an issued invoice's total as query projected it.
type Invoice struct {
	InvoiceID uuid.UUID       `json:"invoiceId"`
	Period    string          `json:"period"`
	Currency  string          `json:"currency"`
	Total     decimal.Decimal `json:"total"`
}

// UsageFact is an accepted usage fact; EventID is its UsageAccepted.
type UsageFact struct {
	EventID   uuid.UUID       `json:"eventId"`
	UsageID   uuid.UUID       `json:"usageId"`
	MeterCode string          `json:"meterCode"`
	Quantity  decimal.Decimal `json:"quantity"`
	Period    string          `json:"period"` // the month of occurredAt
}

// Charge is a rated usage fact; EventID is its ChargeRated, UsageEventID
// the UsageAccepted it rated.
type Charge struct {
	EventID      uuid.UUID       `json:"eventId"`
	UsageEventID uuid.UUID       `json:"usageEventId"`
	Currency     string          `json:"currency"`
	Quantity     decimal.Decimal `json:"quantity"`
	Amount       decimal.Decimal `json:"amount"`
	Period       string          `json:"period"` // the billing period it was rated into
	// OccurredPeriod is the period its usage occurred in, in the tenant's
	// calendar (decision 0014; billing's set only, empty in query's): the
	// period it is rated into unless Late, and an earlier one if Late.
	OccurredPeriod string `json:"occurredPeriod,omitempty"`
	Late           bool   `json:"late,omitempty"`
}

// Adjustment is a posted adjustment; EventID is its AdjustmentPosted.
type Adjustment struct {
	EventID  uuid.UUID       `json:"eventId"`
	Currency string          `json:"currency"`
	Amount   decimal.Decimal `json:"amount"`
	Period   string          `json:"period"`
}

// InvoiceLine is one origin event an invoice counts: a ChargeRated counted
// in the charge line of its meter and price version (LineID), an
// AdjustmentPosted that is its own line, or the closing event of a rounding
// line.
type InvoiceLine struct {
	InvoiceID     uuid.UUID       `json:"invoiceId"`
	Issued        bool            `json:"issued"`
	Period        string          `json:"period"`
	Currency      string          `json:"currency"`
	OriginEventID uuid.UUID       `json:"originEventId"`
	Kind          string          `json:"kind"`
	Amount        decimal.Decimal `json:"amount"`
	Quantity      decimal.Decimal `json:"quantity"` // charges only
	LineID        string          `json:"lineId"`   // the line it is counted in
	// UsageEventID is the UsageAccepted a counted charge rates (charges only).
	UsageEventID uuid.UUID `json:"usageEventId,omitzero"`
}

// Price is a price version as meter holds it: the pricing every charge line
// of the version is held to.
type Price struct {
	PriceID   uuid.UUID       `json:"priceId"`
	MeterCode string          `json:"meterCode"`
	Currency  string          `json:"currency"`
	Version   int64           `json:"version"`
	Pricing   pricing.Pricing `json:"pricing"`
	// PlanCode, for a plan version (PriceID its plan id, MeterCode and
	// Pricing empty): its Charges price the lines of its subscribers.
	PlanCode string       `json:"planCode,omitempty"`
	Charges  []PlanCharge `json:"charges,omitempty"`
	// FixedFees and MinimumSpend of a plan version: what its fixed_fee and
	// minimum_true_up lines are held to.
	FixedFees    []PlanFee        `json:"fixedFees,omitempty"`
	MinimumSpend *decimal.Decimal `json:"minimumSpend,omitempty"`
}

// PlanFee is one fixed fee of a plan version, per period.
type PlanFee struct {
	Code   string          `json:"code"`
	Amount decimal.Decimal `json:"amount"`
}

// PlanCharge is one charge of a plan version.
type PlanCharge struct {
	MeterCode  string            `json:"meterCode"`
	Dimensions map[string]string `json:"dimensions,omitempty"`
	Pricing    pricing.Pricing   `json:"pricing"`
}

// LineTotal is one aggregated line of an invoice as invoice shows it.
// LineID matches InvoiceLine.LineID of what it counts.
type LineTotal struct {
	InvoiceID    uuid.UUID       `json:"invoiceId"`
	Currency     string          `json:"currency"`
	LineID       string          `json:"lineId"`
	Kind         string          `json:"kind"`
	MeterCode    string          `json:"meterCode,omitempty"`
	PriceVersion int64           `json:"priceVersion,omitempty"`
	Quantity     decimal.Decimal `json:"quantity"`
	ChargeCount  int64           `json:"chargeCount"`
	Amount       decimal.Decimal `json:"amount"`
	// PlanCode and Dimensions: the line of a plan's charge, which its
	// pricing is looked up by (Price.Charges); none for a tenant's price.
	PlanCode   string            `json:"planCode,omitempty"`
	Dimensions map[string]string `json:"dimensions,omitempty"`
	// A fixed_fee or minimum_true_up line: its plan version (PlanCode's),
	// fee (fixed_fee) and the days of the period it is prorated by.
	PlanVersion int64  `json:"planVersion,omitempty"`
	FeeCode     string `json:"feeCode,omitempty"`
	Days        int    `json:"days,omitempty"`
	PeriodDays  int    `json:"periodDays,omitempty"`
	// A tax line: its rate, applied to the invoice's rounded subtotal.
	TaxRate *decimal.Decimal `json:"taxRate,omitempty"`
}

// Correction is a correction note of an issued invoice; OriginEventID is
// its AdjustmentPosted.
type Correction struct {
	InvoiceID     uuid.UUID       `json:"invoiceId"`
	Period        string          `json:"period"`
	OriginEventID uuid.UUID       `json:"originEventId"`
	Amount        decimal.Decimal `json:"amount"`
}
