// Package events is the public event contract between the services: topic
// names, event types, their aggregates and payloads (schema version 1). One
// table (contract.go) gives each payload type its event type, topic and
// aggregate type. A producer builds every event with New (a command's) or
// Caused (one emitted while handling another) and appends it with Append,
// on its type's topic; a consumer registers the payload types with
// Register, so both sides read one definition.
package events

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/money"
	"github.com/usagebilling/billing/pkg/pricing"
	"github.com/usagebilling/billing/pkg/rule"
)

// Topics. The names are part of the contract.
const (
	TopicMeter       = "meter.events.v1"
	TopicUsage       = "usage.events.v1"
	TopicBilling     = "billing.events.v1"
	TopicInvoice     = "invoice.events.v1"
	TopicOps         = "ops.events.v1"
	TopicOpsCommands = "ops.commands.v1"
)

// AllTopics lists every topic, for creating them.
var AllTopics = []string{TopicMeter, TopicUsage, TopicBilling, TopicInvoice, TopicOps, TopicOpsCommands}

// Event types.
const (
	TypeMeterDefined            = "MeterDefined"
	TypePriceActivated          = "PriceActivated"
	TypePriceScheduleWatermark  = "PriceScheduleWatermark"
	TypeUsageAccepted           = "UsageAccepted"
	TypeChargeRated             = "ChargeRated"
	TypeAdjustmentPosted        = "AdjustmentPosted"
	TypeBillingPeriodClosed     = "BillingPeriodClosed"
	TypeBillingPeriodEnded      = "BillingPeriodEnded"
	TypeInvoiceIssued           = "InvoiceIssued"
	TypeInvoiceCorrectionIssued = "InvoiceCorrectionIssued"
	TypeEventQuarantined        = "EventQuarantined"
	TypeRedriveRequested        = "RedriveRequested"
	TypeRedriveCompleted        = "RedriveCompleted"
)

// Aggregate types, and how their ids are formed.
const (
	// AggregateMeter is one catalog meter; id = its code; its one event is
	// MeterDefined, version 1: a meter never changes once defined. Of
	// tenant CatalogTenant.
	AggregateMeter = "meter"
	// AggregatePrice is one price series: tenant, meter and currency; id
	// PriceSeriesID(meterCode, currency); version = the price version.
	AggregatePrice = "price"
	// AggregatePriceSchedule carries the schedule's watermarks
	// (PriceScheduleWatermark), one per schedule shard (ScheduleShard).
	// Each watermark is its own aggregate at version 1, of tenant
	// ScheduleTenant, id PriceScheduleID(shard, knownThrough): a watermark
	// only raises what a consumer knows (the highest one wins), so nothing
	// orders them and a lost or quarantined one is superseded by the next.
	AggregatePriceSchedule = "price_schedule"
	// AggregateUsage is one usage fact; id = usageId; always version 1.
	AggregateUsage = "usage"
	// AggregateCharge is one charge; id = chargeId; always version 1. A
	// tenant's charges spread over every partition: nothing orders them, and
	// nothing needs to (see BillingPeriodClosed).
	AggregateCharge = "charge"
	// AggregateAdjustment is one adjustment; id = adjustmentId; always
	// version 1.
	AggregateAdjustment = "adjustment"
	// AggregateBillingPeriod is one tenant's billing period; id = "2026-11";
	// its one event is BillingPeriodClosed, version 1: a period closes once.
	AggregateBillingPeriod = "billing_period"
	// AggregateBillingPeriodEnd is the end of one tenant's billing period
	// (its grace began); id = "2026-11"; its one event is
	// BillingPeriodEnded, version 1. Apart from billing_period so that it
	// orders nothing: a close may come before or after it.
	AggregateBillingPeriodEnd = "billing_period_end"
	// AggregateInvoice is one invoice; version 1 is InvoiceIssued, each
	// InvoiceCorrectionIssued the next version.
	AggregateInvoice = "invoice"
	// AggregateOps carries operator events, each its own aggregate at version
	// 1 (see QuarantineAggregateID, RedriveAggregateID), so they need no
	// sequence shared by a service's instances and never wait for each other.
	AggregateOps = "ops"
)

// MintedAggregates are the aggregate types whose ids their producer mints as
// UUIDv7s with the aggregate's first event (usage's usageId, billing's
// chargeId and adjustmentId), never taken from a request: an event of one
// is minted after its id, which lets the inbox look for a holder of its slot
// only in the weeks since (inbox.Options.MintedAggregates, decision 0028).
// A type whose ids a client could choose must never be added.
var MintedAggregates = []string{AggregateUsage, AggregateCharge, AggregateAdjustment}

// QuarantineAggregateID is the aggregate id of the EventQuarantined a
// service publishes for the quarantined message whose raw bytes have the
// given SHA-256.
func QuarantineAggregateID(service, rawSHA256 string) string {
	return "quarantine." + service + "." + rawSHA256
}

// RedriveAggregateID is the aggregate id of a RedriveRequested; its
// RedriveCompleted uses RedriveAggregateID(id) + ".completed".
func RedriveAggregateID(redriveID uuid.UUID) string { return "redrive." + redriveID.String() }

// CatalogTenant is the tenant id of catalog events (MeterDefined): the
// catalog belongs to the installation, not to a tenant.
const CatalogTenant = "_catalog"

// OpsTenant is the tenant id of operator events that belong to no tenant.
const OpsTenant = "_ops"

// PriceSeriesID is the aggregate id of a tenant's price series.
func PriceSeriesID(meterCode, currency string) string { return meterCode + "." + currency }

// ScheduleTenant is the tenant id of the schedule's watermarks: each is
// about a shard of tenants, not one tenant.
const ScheduleTenant = "_schedule"

// ScheduleShards is the number of shards the price schedule is proven in
// (decision 0019): every tenant's series are in shard ScheduleShard(tenant),
// and meter publishes one watermark per shard however many series exist.
// Fixed: a tenant's shard must never change.
const ScheduleShards = 16

// ScheduleShard is the schedule shard of a tenant: FNV-1a (32 bits) of its
// id, modulo ScheduleShards.
func ScheduleShard(tenantID string) int32 {
	h := uint32(2166136261)
	for i := 0; i < len(tenantID); i++ {
		h ^= uint32(tenantID[i])
		h *= 16777619
	}
	return int32(h % ScheduleShards)
}

// PriceScheduleID is the aggregate id of one watermark of a schedule shard.
func PriceScheduleID(shard int32, knownThrough time.Time) string {
	return "s" + strconv.Itoa(int(shard)) + "@" + strconv.FormatInt(knownThrough.UnixMicro(), 10)
}

// MeterDefined: a catalog-admin defined a meter (section 3a), or a price
// for a meter code not in the catalog implied a sum meter without
// dimensions (Implied). A meter never changes once defined.
type MeterDefined struct {
	Code          string    `json:"code"`
	Name          string    `json:"name"`
	Aggregation   string    `json:"aggregation"`
	ValueProperty string    `json:"valueProperty,omitempty"`
	Dimensions    []string  `json:"dimensions,omitempty"`
	EventType     string    `json:"eventType"`
	DefinedAt     time.Time `json:"definedAt"`
	Implied       bool      `json:"implied,omitempty"`
	Actor         string    `json:"actor,omitempty"`
}

// Meter is the definition the event carries.
func (p MeterDefined) Meter() catalog.Meter {
	return catalog.Meter{Code: p.Code, Name: p.Name, Aggregation: p.Aggregation, ValueProperty: p.ValueProperty,
		Dimensions: p.Dimensions, EventType: p.EventType}
}

// Validate checks the payload's own rules.
func (p MeterDefined) Validate() error {
	return first(
		need(p.Meter().Validate() == nil, "meter"),
		need(p.EventType != "", "eventType"),
		need(!p.DefinedAt.IsZero(), "definedAt"),
	)
}

// PriceActivated: meter activated a price version.
type PriceActivated struct {
	PriceID     uuid.UUID       `json:"priceId"`
	MeterCode   string          `json:"meterCode"`
	Currency    string          `json:"currency"`
	UnitPrice   decimal.Decimal `json:"unitPrice"`
	EffectiveAt time.Time       `json:"effectiveAt"`
	Version     int64           `json:"version"`
	// ScheduleSeq is the activation's place in its tenant's schedule shard
	// (ScheduleShard): the shard's activations are numbered 1, 2, ... in
	// the order meter committed them, so a rater holding 1..n of them holds
	// every version a watermark naming n covers. Zero in events from before
	// the shards (decision 0019).
	ScheduleSeq int64 `json:"scheduleSeq,omitempty"`
	// KnownThrough is the shard's watermark once this activation is in:
	// every activation of the shard taking effect at or before it is this
	// one or one before it in ScheduleSeq (see PriceScheduleWatermark). Zero
	// in events of meters that published no watermark with it.
	KnownThrough time.Time `json:"knownThrough,omitzero"`
	// Model is the version's pricing model (package pricing); empty means
	// unit, as in events from before the other models. UnitPrice is the
	// unit price under unit pricing (zero under the others); Tiers,
	// PackageSize and PackagePrice are the other models' fields.
	Model        string           `json:"model,omitempty"`
	Tiers        []pricing.Tier   `json:"tiers,omitempty"`
	PackageSize  *decimal.Decimal `json:"packageSize,omitempty"`
	PackagePrice *decimal.Decimal `json:"packagePrice,omitempty"`
	// Actor is who activated the price (the token's subject); absent in
	// events from before actors were recorded.
	Actor string `json:"actor,omitempty"`
	// Dimensions are the property values this version's price applies to
	// (section 3a), none for the series' default. Every version of a series
	// (tenant, meter, currency) is one entry of the series' price sheet: the
	// entry of a dimension set in effect at t is the latest version with
	// those dimensions taking effect at or before t, and a fact takes the
	// most specific entry in effect whose values all equal its properties
	// (catalog.Choose). So the shard's watermark proves the whole sheet
	// through t, dimension prices included.
	Dimensions map[string]string `json:"dimensions,omitempty"`
}

// Validate checks the payload's own rules.
func (p PriceActivated) Validate() error {
	return first(
		need(p.PriceID != uuid.Nil, "priceId"),
		need(p.MeterCode != "", "meterCode"),
		currencyOK(p.Currency),
		need(!p.UnitPrice.IsNegative(), "unitPrice"),
		need(!p.EffectiveAt.IsZero(), "effectiveAt"),
		need(p.Version >= 1, "version"),
		need(p.ScheduleSeq >= 0, "scheduleSeq"),
		need(p.Pricing().Validate() == nil, "model"),
		need(dimensionsOK(p.Dimensions), "dimensions"),
	)
}

// Pricing is the version's pricing function.
func (p PriceActivated) Pricing() pricing.Pricing {
	switch p.Model {
	case "", pricing.Unit:
		return pricing.UnitPricing(p.UnitPrice)
	case pricing.Package:
		return pricing.Pricing{Model: p.Model, PackageSize: p.PackageSize, PackagePrice: p.PackagePrice}
	default:
		return pricing.Pricing{Model: p.Model, Tiers: p.Tiers}
	}
}

// PriceScheduleWatermark: meter states that the price schedule of every
// tenant in a schedule shard (ScheduleShard) is known through KnownThrough:
// the shard's activations 1 to Seq are every price version of those
// tenants taking effect at or before KnownThrough, and any later
// activation takes effect after it (meter refuses one that would take
// effect at or before a watermark it published). A rater may rate a fact
// of such a tenant that occurred before KnownThrough once it holds the
// shard's activations 1 to Seq, whether or not the tenant has a price for
// the fact's meter (without one, the fact is unpriced). Meter publishes
// one per shard ahead of time and again before the last one runs out,
// whether or not prices change: the cost does not grow with the series
// (decision 0019).
type PriceScheduleWatermark struct {
	Shard        int32     `json:"shard"`
	Shards       int32     `json:"shards"`
	Seq          int64     `json:"seq"`
	KnownThrough time.Time `json:"knownThrough"`
}

// Validate checks the payload's own rules.
func (p PriceScheduleWatermark) Validate() error {
	return first(
		need(p.Shards >= 1, "shards"),
		need(p.Shard >= 0 && p.Shard <= p.Shards, "shard"), // Shards itself: PlanShard
		need(p.Seq >= 0, "seq"),
		need(!p.KnownThrough.IsZero(), "knownThrough"),
	)
}

// UsageAccepted: usage accepted a usage fact. The rater (billing) decides
// its price version from its own evidence; PriceVersion is what usage
// attached before decision 0011 and is 0 (absent) in newer events. Billing
// ignores it. Its fields are in the byte order of their JSON names, so
// encoding/json writes the canonical form and New checks it where it lies
// instead of rebuilding it (one per fact; TestPerFactPayloadsAreCanonical).
type UsageAccepted struct {
	Currency   string    `json:"currency"`
	MeterCode  string    `json:"meterCode"`
	OccurredAt time.Time `json:"occurredAt"`
	// PriceVersion: see the type's comment.
	PriceVersion int64 `json:"priceVersion,omitempty"`
	// Properties are the fact's properties (section 3a limits).
	Properties    map[string]string `json:"properties,omitempty"`
	Quantity      decimal.Decimal   `json:"quantity"`
	SourceEventID string            `json:"sourceEventId"`
	SourceSystem  string            `json:"sourceSystem"`
	UsageID       uuid.UUID         `json:"usageId"`
}

// Validate checks the payload's own rules.
func (p UsageAccepted) Validate() error {
	return first(
		need(p.UsageID != uuid.Nil, "usageId"),
		need(p.SourceSystem != "", "sourceSystem"),
		need(p.SourceEventID != "", "sourceEventId"),
		need(p.MeterCode != "", "meterCode"),
		need(!p.Quantity.IsNegative(), "quantity"),
		need(!p.OccurredAt.IsZero(), "occurredAt"),
		currencyOK(p.Currency),
		need(p.PriceVersion >= 0, "priceVersion"),
		need(catalog.ValidateProperties(p.Properties) == nil, "properties"),
	)
}

// ChargeRated: billing rated one usage fact. Under unit pricing of a sum
// meter Amount = Quantity x UnitPrice, exact; of a count meter Amount =
// UnitPrice (the charge counts one). The charge's line is (meter, price
// version, Dimensions); its quantity is the meter's Aggregation over the
// line's charges (package catalog). Its fields are in the byte order of
// their JSON names, as UsageAccepted's are (one per fact).
type ChargeRated struct {
	// Aggregation is the meter's (catalog.Aggregations); empty means sum.
	// Under max, latest and unique_count no charge has an amount of its
	// own: UnitPrice and Amount are zero and Pricing prices the line.
	Aggregation string          `json:"aggregation,omitempty"`
	Amount      decimal.Decimal `json:"amount"`
	ChargeID    uuid.UUID       `json:"chargeId"`
	Currency    string          `json:"currency"`
	// Dimensions are the dimensions of the price that rated the charge
	// (part of its line's identity); none for a series' default price.
	Dimensions map[string]string `json:"dimensions,omitempty"`
	Late       bool              `json:"late"`
	MeterCode  string            `json:"meterCode"`
	// Model is the price version's pricing model; empty means unit. Under
	// unit pricing Amount is the charge's exact amount; under the others a
	// single charge has no amount of its own (UnitPrice and Amount are
	// zero): the line of its version is priced as a whole at the invoice,
	// by Pricing, which such a charge carries (at most pricing.MaxTiers
	// tiers, so the event stays small).
	Model      string    `json:"model,omitempty"`
	OccurredAt time.Time `json:"occurredAt"`
	Period     string    `json:"period"`
	// PlanCode names the plan whose charge priced it (the tenant had no
	// price of its own for the meter in effect at OccurredAt and was
	// subscribed to the plan then); PriceVersion is then the plan's
	// version. Absent for a tenant's own price and for unpriced charges.
	PlanCode     string           `json:"planCode,omitempty"`
	PriceVersion int64            `json:"priceVersion"`
	Pricing      *pricing.Pricing `json:"pricing,omitempty"`
	// Properties are the fact's.
	Properties map[string]string `json:"properties,omitempty"`
	Quantity   decimal.Decimal   `json:"quantity"`
	// SourceSystem and SourceEventID are the fact's identity: latest's
	// tie-break.
	SourceEventID string          `json:"sourceEventId,omitempty"`
	SourceSystem  string          `json:"sourceSystem,omitempty"`
	UnitPrice     decimal.Decimal `json:"unitPrice"`
	// Unpriced: no price of the series was in effect at OccurredAt
	// (section 3a). PriceVersion, UnitPrice and Amount are zero, Pricing is
	// absent; the charge is on its meter's unpriced line.
	Unpriced     bool      `json:"unpriced,omitempty"`
	UsageEventID uuid.UUID `json:"usageEventId"`
	UsageID      uuid.UUID `json:"usageId"`
	// Value is what the fact adds to a unique_count meter: its
	// valueProperty's value.
	Value string `json:"value,omitempty"`
}

// Counted is the quantity a charge's own amount is computed from: 1 under
// count, else its quantity.
func (p ChargeRated) Counted() decimal.Decimal {
	if p.Aggregation == catalog.Count {
		return decimal.NewFromInt(1)
	}
	return p.Quantity
}

// Validate checks the payload's own rules.
func (p ChargeRated) Validate() error {
	return first(
		need(p.ChargeID != uuid.Nil, "chargeId"),
		need(p.UsageEventID != uuid.Nil, "usageEventId"),
		currencyOK(p.Currency),
		need(p.Amount.Equal(p.Counted().Mul(p.UnitPrice)), "amount"),
		periodOK(p.Period),
		need(p.Aggregation == "" || slices.Contains(catalog.Aggregations, p.Aggregation), "aggregation"),
		need(catalog.ValidateProperties(p.Properties) == nil, "properties"),
		need(dimensionsOK(p.Dimensions), "dimensions"),
		p.pricingOK(),
	)
}

func (p ChargeRated) pricingOK() error {
	switch {
	case p.Unpriced:
		return need(p.PriceVersion == 0 && p.UnitPrice.IsZero() && p.Pricing == nil, "unpriced")
	case !catalog.PricedPerCharge(p.Aggregation):
		return need(p.UnitPrice.IsZero() && p.Amount.IsZero() && p.Pricing != nil && p.Pricing.Validate() == nil &&
			(p.Model == "" || p.Pricing.Model == p.Model), "pricing")
	default:
		return need(p.Model == "" || p.Model == pricing.Unit ||
			(p.Pricing != nil && p.Pricing.Model == p.Model && p.Pricing.Validate() == nil && p.Amount.IsZero()), "pricing")
	}
}

func dimensionsOK(d map[string]string) bool {
	if len(d) > catalog.MaxDimensions {
		return false
	}
	for k, v := range d {
		if !catalog.ValidKey(k) || v == "" || len(v) > 4*catalog.MaxPropertyValue {
			return false
		}
	}
	return true
}

// AdjustmentPosted: billing posted a correction of a charge. AfterClose
// says the period's close did not count it (the period was closed when it
// was posted): it corrects the issued invoice with a correction note. One
// that the close counted is a line of the period's invoice.
type AdjustmentPosted struct {
	AdjustmentID uuid.UUID       `json:"adjustmentId"`
	CorrectionOf uuid.UUID       `json:"correctionOf"`
	Amount       decimal.Decimal `json:"amount"`
	Currency     string          `json:"currency"`
	Reason       string          `json:"reason"`
	Period       string          `json:"period"`
	AfterClose   bool            `json:"afterClose,omitempty"`
	// Actor is who posted the adjustment (the token's subject); absent in
	// events from before actors were recorded.
	Actor string `json:"actor,omitempty"`
}

// Validate checks the payload's own rules.
func (p AdjustmentPosted) Validate() error {
	return first(
		need(p.AdjustmentID != uuid.Nil, "adjustmentId"),
		need(p.CorrectionOf != uuid.Nil, "correctionOf"),
		currencyOK(p.Currency),
		periodOK(p.Period),
	)
}

// BillingPeriodClosed: billing closed a tenant's period. It says what the
// period holds, per currency, so a consumer can prove its own copy complete
// without any order among the events: the charges and the adjustments the
// close counted, each as a count, an exact sum and the digest of their event
// ids (package digest). Its size depends on the number of currencies only.
type BillingPeriodClosed struct {
	Period      string                     `json:"period"`
	ClosedAt    time.Time                  `json:"closedAt"`
	Charges     int64                      `json:"charges"`
	Adjustments int64                      `json:"adjustments"`
	Totals      map[string]decimal.Decimal `json:"totals"` // by currency: charges + adjustments, exact
	Currencies  map[string]CloseTally      `json:"currencies"`
	// Actor is who closed the period (the token's subject, or the close
	// scheduler's name); absent in events from before actors were recorded.
	Actor string `json:"actor,omitempty"`
	// Fees are the period's fixed-fee and minimum true-up lines by
	// currency (DESIGN.md section 3a): billing prorates them from the
	// tenant's subscriptions and the plans' versions as they stand at the
	// close; invoice adds them to the currency's invoice (one is opened for
	// a currency with fees only). Not part of Totals, which stay what the
	// charges and adjustments sum to.
	Fees map[string][]FeeLine `json:"fees,omitempty"`
	// TaxRates are the tenant's tax rates of the period (its settings as
	// the period began): invoice adds one tax line per rate to each of the
	// period's invoices, rate x the rounded subtotal (DESIGN.md section 3a).
	TaxRates []TaxRate `json:"taxRates,omitempty"`
	// PeriodEnd is when the period ends in the tenant's zone: invoice draws
	// the credit grants in effect then. Zero in events from before it was
	// sent (the end of the month in UTC then).
	PeriodEnd time.Time `json:"periodEnd,omitzero"`
	// PreviousPeriod is the tenant's latest period closed before this one,
	// empty when none: invoice issues this period's invoices (and draws
	// credit grants for them) only after that period's, so grants are
	// drawn in period order whatever order the closes arrive in.
	PreviousPeriod string `json:"previousPeriod,omitempty"`
}

// MaxTaxRates is the most tax rates a tenant's settings hold.
// TaxRate.ok's bounds are billing's (domain.ParseTaxRates): a name of up
// to 100 characters, not bytes.
const MaxTaxRates = 5

// TaxRate is one of a tenant's tax rates: a code unique among them, a name
// for the invoice, and a rate, a decimal fraction 0 <= rate < 1 of at most
// 6 decimal places.
type TaxRate struct {
	Code string          `json:"code"`
	Name string          `json:"name"`
	Rate decimal.Decimal `json:"rate"`
}

func (r TaxRate) ok() bool {
	return r.Code != "" && len(r.Code) <= 32 && r.Name != "" && utf8.RuneCountInString(r.Name) <= 100 &&
		!r.Rate.IsNegative() && r.Rate.LessThan(decimal.NewFromInt(1)) && r.Rate.Exponent() >= -6
}

// Fee line kinds, and the most fee lines of a currency in one period: a
// day belongs to one plan version, each version has at most MaxPlanFees
// fees and one true-up.
const (
	FeeKindFixed  = "fixed_fee"
	FeeKindTrueUp = "minimum_true_up"
	MaxFeeLines   = 31 * (MaxPlanFees + 1)
)

// FeeLine is one fixed-fee or minimum true-up line of a period: a plan
// version's fee (FeeCode) or its minimum spend, prorated by the Days of the
// period's PeriodDays the tenant spent on that version, and the Amount it
// came to in the plan's currency (rounded half-even to the minor unit).
type FeeLine struct {
	Kind        string          `json:"kind"`
	PlanCode    string          `json:"planCode"`
	PlanVersion int64           `json:"planVersion"`
	FeeCode     string          `json:"feeCode,omitempty"` // fixed_fee lines
	Name        string          `json:"name,omitempty"`
	Days        int             `json:"days"`
	PeriodDays  int             `json:"periodDays"`
	Amount      decimal.Decimal `json:"amount"`
}

func (l FeeLine) ok() bool {
	return (l.Kind == FeeKindFixed && l.FeeCode != "" || l.Kind == FeeKindTrueUp && l.FeeCode == "") &&
		l.PlanCode != "" && l.PlanVersion >= 1 && l.PeriodDays >= 28 && l.PeriodDays <= 31 &&
		l.Days >= 1 && l.Days <= l.PeriodDays && l.Amount.Sign() >= 0
}

// BillingPeriodEnded: a tenant's period ended (its last instant passed in
// the period's time zone) and is in its grace period until ClosesAt, when
// billing closes it unless it was closed before (decision 0014). Invoices of
// the period are draft from it until the close issues them. A few hundred
// bytes.
type BillingPeriodEnded struct {
	Period   string    `json:"period"`
	TimeZone string    `json:"timeZone"`
	EndedAt  time.Time `json:"endedAt"`
	ClosesAt time.Time `json:"closesAt"`
}

// Validate checks the payload's own rules.
func (p BillingPeriodEnded) Validate() error {
	return first(periodOK(p.Period), need(p.TimeZone != "", "timeZone"), need(!p.EndedAt.IsZero(), "endedAt"),
		need(!p.ClosesAt.Before(p.EndedAt), "closesAt"))
}

// CloseTally is what a close counted in one currency.
type CloseTally struct {
	Charges          int64           `json:"charges"`
	ChargeAmount     decimal.Decimal `json:"chargeAmount"`
	ChargeDigest     string          `json:"chargeDigest"` // of the ChargeRated event ids
	Adjustments      int64           `json:"adjustments"`
	AdjustmentAmount decimal.Decimal `json:"adjustmentAmount"`
	AdjustmentDigest string          `json:"adjustmentDigest"` // of the AdjustmentPosted event ids
}

// Validate checks the payload's own rules: the per-currency tallies add up
// to the counts and totals.
func (p BillingPeriodClosed) Validate() error {
	errs := []error{periodOK(p.Period), need(p.Charges >= 0, "charges"), need(p.Adjustments >= 0, "adjustments"),
		need(len(p.Currencies) == len(p.Totals), "currencies")}
	var charges, adjustments int64
	for cur, t := range p.Currencies {
		errs = append(errs, currencyOK(cur), need(t.Charges >= 0 && t.Adjustments >= 0, "currencies"),
			need(digestOK(t.ChargeDigest) && digestOK(t.AdjustmentDigest), "currencies"),
			need(p.Totals[cur].Equal(t.ChargeAmount.Add(t.AdjustmentAmount)), "totals"))
		charges += t.Charges
		adjustments += t.Adjustments
	}
	errs = append(errs, need(charges == p.Charges, "charges"), need(adjustments == p.Adjustments, "adjustments"))
	if p.PreviousPeriod != "" {
		errs = append(errs, need(periodOK(p.PreviousPeriod) == nil && p.PreviousPeriod < p.Period, "previousPeriod"))
	}
	for cur, ls := range p.Fees {
		errs = append(errs, currencyOK(cur), need(len(ls) <= MaxFeeLines, "fees"))
		for _, l := range ls {
			errs = append(errs, need(l.ok(), "fees"))
		}
	}
	codes := map[string]bool{}
	errs = append(errs, need(len(p.TaxRates) <= MaxTaxRates, "taxRates"))
	for _, r := range p.TaxRates {
		errs = append(errs, need(r.ok() && !codes[r.Code], "taxRates"))
		codes[r.Code] = true
	}
	return first(errs...)
}

func digestOK(s string) bool {
	if s == "" || len(s) > 40 {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// InvoiceIssued: invoice issued the invoice of a tenant, period and currency.
// It carries the invoice's figures, not its lines (GET the invoice for
// those), so its size is the same for ten charges or ten million: ChargeLines
// is the number of lines of charges (a charge line per meter, price version
// and price dimensions; an unpriced line per meter), Charges the charges
// they aggregate, Adjustments the adjustment lines.
type InvoiceIssued struct {
	InvoiceID   uuid.UUID       `json:"invoiceId"`
	Number      int64           `json:"number"`
	Period      string          `json:"period"`
	Currency    string          `json:"currency"`
	ChargeLines int64           `json:"chargeLines"`
	Charges     int64           `json:"charges"`
	Adjustments int64           `json:"adjustments"`
	Subtotal    decimal.Decimal `json:"subtotal"`
	Rounding    decimal.Decimal `json:"rounding"`
	// TaxTotal is the sum of the tax lines (zero without tax rates):
	// Total = Subtotal + Rounding + TaxTotal.
	TaxTotal decimal.Decimal `json:"taxTotal"`
	Total    decimal.Decimal `json:"total"`
	// CreditsApplied is what the credit grants drawn at issue came to (zero
	// or negative): AmountDue = Total + CreditsApplied, never below zero.
	CreditsApplied decimal.Decimal `json:"creditsApplied"`
	AmountDue      decimal.Decimal `json:"amountDue"`
	IssuedAt       time.Time       `json:"issuedAt"`
}

// Validate checks the payload's own rules.
func (p InvoiceIssued) Validate() error {
	return first(need(p.InvoiceID != uuid.Nil, "invoiceId"), need(p.Number >= 1, "number"), periodOK(p.Period),
		currencyOK(p.Currency), need(p.ChargeLines >= 0 && p.Charges >= p.ChargeLines, "charges"),
		need(p.Adjustments >= 0, "adjustments"), need(!p.TaxTotal.IsNegative(), "taxTotal"), need(p.Total.Equal(p.Subtotal.Add(p.Rounding).Add(p.TaxTotal)), "total"),
		need(!p.CreditsApplied.IsPositive(), "creditsApplied"), need(!p.AmountDue.IsNegative(), "amountDue"),
		// Events from before credits carry neither figure.
		need(p.CreditsApplied.IsZero() && p.AmountDue.IsZero() || p.AmountDue.Equal(p.Total.Add(p.CreditsApplied)), "amountDue"))
}

// InvoiceCorrectionIssued: an adjustment arrived after the invoice was
// issued and became a correction note linked to it.
type InvoiceCorrectionIssued struct {
	CorrectionID  uuid.UUID       `json:"correctionId"`
	InvoiceID     uuid.UUID       `json:"invoiceId"`
	OriginEventID uuid.UUID       `json:"originEventId"`
	Period        string          `json:"period"`
	Currency      string          `json:"currency"`
	Amount        decimal.Decimal `json:"amount"`
	IssuedAt      time.Time       `json:"issuedAt"`
}

// Validate checks the payload's own rules.
func (p InvoiceCorrectionIssued) Validate() error {
	return first(need(p.CorrectionID != uuid.Nil, "correctionId"), need(p.InvoiceID != uuid.Nil, "invoiceId"),
		periodOK(p.Period), currencyOK(p.Currency))
}

// EventQuarantined: a consumer quarantined an event it can never process as
// it stands.
type EventQuarantined struct {
	Service       string    `json:"service"`
	EventID       string    `json:"eventId,omitempty"` // empty for bytes that are no envelope
	EventType     string    `json:"eventType,omitempty"`
	EventTenantID string    `json:"eventTenantId,omitempty"`
	Reason        string    `json:"reason"`
	Topic         string    `json:"topic"`
	Partition     int32     `json:"partition"`
	Offset        int64     `json:"offset"`
	QuarantinedAt time.Time `json:"quarantinedAt"`
	RawSHA256     string    `json:"rawSha256"` // identifies the message when it has no event id
}

// Redrive actions. Their values are older than the one word for recovery
// ("redrive") and stay as they are: they travel in RedriveRequested and
// RedriveCompleted, are stored in query's redrive audit and are shown by the
// operator API.
const (
	// ActionRedrive: decide the retained (quarantined or deferred) consumed
	// event again through today's decoders. The default.
	ActionRedrive = "redecide"
	// ActionRedriveDeadLetter: give an outbox dead letter of the service a
	// fresh set of attempts (it goes back to its relay).
	ActionRedriveDeadLetter = "release_dead_letter"
)

// Redrive outcomes besides the inbox's (applied, duplicate, deferred,
// quarantined).
const (
	OutcomeNotFound = "not_found"
	// OutcomeReleased: the dead letter is back with its relay.
	OutcomeReleased = "released"
)

// RedriveRequested: an operator asked a service to redrive an event it
// retains: a consumed event (decided again), or a dead letter of its outbox
// (sent again). Every service consumes ops.commands.v1 and acts on the requests
// addressed to it (Service).
type RedriveRequested struct {
	RedriveID uuid.UUID `json:"redriveId"`
	Service   string    `json:"service"`
	EventID   string    `json:"eventId"`
	Action    string    `json:"action,omitempty"` // ActionRedrive (default) | ActionRedriveDeadLetter
	Reason    string    `json:"reason"`
	Actor     string    `json:"actor"`
}

// RedriveCompleted: the owning service acted on a RedriveRequested.
type RedriveCompleted struct {
	RedriveID uuid.UUID `json:"redriveId"`
	Service   string    `json:"service"`
	EventID   string    `json:"eventId"`
	Action    string    `json:"action,omitempty"`
	Outcome   string    `json:"outcome"` // applied | duplicate | deferred | quarantined | not_found | released
	Reason    string    `json:"reason,omitempty"`
}

// Period returns the billing period (calendar month in UTC) of t: "2026-11".
func Period(t time.Time) string { return t.UTC().Format("2006-01") }

// ParsePeriod checks a period string, a calendar month YYYY-MM of a year
// from rule.MinYear to rule.MaxYear (1970 to 2199: "0000-01" and "9999-12"
// are no billing periods), and returns its first instant.
func ParsePeriod(s string) (time.Time, error) {
	y, m, ok := yearMonth(s)
	if !ok {
		return time.Time{}, fmt.Errorf("invalid period %q: want YYYY-MM", s)
	}
	if y < rule.MinYear || y > rule.MaxYear {
		return time.Time{}, fmt.Errorf("invalid period %q: year %d is out of range (%d to %d)", s, y, rule.MinYear, rule.MaxYear)
	}
	return time.Date(y, time.Month(m), 1, 0, 0, 0, 0, time.UTC), nil
}

// yearMonth reads "YYYY-MM", four digits of a year and a month from 01 to
// 12: what time.Parse("2006-01") reads and Period writes back unchanged
// (TestParsePeriodIsTimeParse), without a time.Parse and a Format per charge.
func yearMonth(s string) (year, month int, ok bool) {
	if len(s) != 7 || s[4] != '-' {
		return 0, 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if i == 4 {
			continue
		}
		c := s[i]
		if c < '0' || c > '9' {
			return 0, 0, false
		}
		n = n*10 + int(c-'0')
	}
	year, month = n/100, n%100
	return year, month, month >= 1 && month <= 12
}

func need(ok bool, field string) error {
	if ok {
		return nil
	}
	return envelope.FieldError{Field: field, Err: errors.New("missing or out of range")}
}

func currencyOK(code string) error {
	if _, err := money.Currency(code); err != nil {
		return envelope.FieldError{Field: "currency", Err: err}
	}
	return nil
}

func periodOK(p string) error {
	if _, err := ParsePeriod(p); err != nil {
		return envelope.FieldError{Field: "period", Err: err}
	}
	return nil
}

func first(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
