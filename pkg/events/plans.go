package events

import (
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/pricing"
)

// TypePlanPublished is the event type of PlanPublished.
const TypePlanPublished = "PlanPublished"

// AggregatePlan is one plan of the catalog; id = its code; version = the
// plan version. Of tenant CatalogTenant: a plan is shared by the tenants
// subscribed to it.
const AggregatePlan = "plan"

// PlanShard is the schedule shard of the catalog's plans, one past the
// tenants' shards (0 to ScheduleShards-1): plan versions are numbered and
// proven by its watermarks exactly as a tenant shard's price versions are
// (decision 0021), so a plan version applies to every subscriber from its
// effectiveAt and a rater knows when no other version can still appear.
const PlanShard int32 = ScheduleShards

// Limits of a plan version, so its PlanPublished stays far under the
// envelope's 64 KiB whatever a plan holds.
const (
	MaxPlanFees    = 20
	MaxPlanCharges = 50
)

// PlanFee is one fixed fee of a plan version: amount per period, in the
// plan's currency, in whole minor units.
type PlanFee struct {
	Code   string          `json:"code"`
	Name   string          `json:"name"`
	Amount decimal.Decimal `json:"amount"`
}

// PlanCharge is one usage charge of a plan version: a pricing function for
// a catalog meter's facts, optionally for those whose properties equal
// Dimensions (section 3a's dimension pricing, among the version's charges
// of that meter).
type PlanCharge struct {
	MeterCode  string            `json:"meterCode"`
	Dimensions map[string]string `json:"dimensions,omitempty"`
	pricing.Pricing
}

// PlanPublished: a catalog-admin published a version of a plan (section
// 3a). Versions of a code are numbered 1, 2, ... and take effect in
// version order from EffectiveAt, never before their publication nor at or
// before a watermark of PlanShard already published. ScheduleSeq and
// KnownThrough are the version's place in PlanShard and the shard's
// watermark with it, as PriceActivated's are in a tenant shard.
type PlanPublished struct {
	PlanID       uuid.UUID        `json:"planId"`
	Code         string           `json:"code"`
	Name         string           `json:"name"`
	Currency     string           `json:"currency"`
	Version      int64            `json:"version"`
	FixedFees    []PlanFee        `json:"fixedFees,omitempty"`
	Charges      []PlanCharge     `json:"charges,omitempty"`
	MinimumSpend *decimal.Decimal `json:"minimumSpend,omitempty"`
	EffectiveAt  time.Time        `json:"effectiveAt"`
	ScheduleSeq  int64            `json:"scheduleSeq"`
	KnownThrough time.Time        `json:"knownThrough,omitzero"`
	Actor        string           `json:"actor,omitempty"`
}

// Type is the event type of a PlanPublished.
func (PlanPublished) Type() string { return TypePlanPublished }

// Validate checks the payload's own rules.
func (p PlanPublished) Validate() error {
	return first(
		need(p.PlanID != uuid.Nil, "planId"),
		need(p.Code != "", "code"),
		need(p.Name != "", "name"),
		currencyOK(p.Currency),
		need(p.Version >= 1, "version"),
		need(len(p.FixedFees) <= MaxPlanFees, "fixedFees"),
		need(feesOK(p.FixedFees), "fixedFees"),
		need(len(p.Charges) <= MaxPlanCharges, "charges"),
		need(chargesOK(p.Charges), "charges"),
		need(p.MinimumSpend == nil || !p.MinimumSpend.IsNegative(), "minimumSpend"),
		need(!p.EffectiveAt.IsZero(), "effectiveAt"),
		need(p.ScheduleSeq >= 1, "scheduleSeq"),
	)
}

func feesOK(fs []PlanFee) bool {
	for _, f := range fs {
		if f.Code == "" || f.Name == "" || f.Amount.IsNegative() {
			return false
		}
	}
	return true
}

func chargesOK(cs []PlanCharge) bool {
	for _, c := range cs {
		if c.MeterCode == "" || !dimensionsOK(c.Dimensions) || c.Pricing.Validate() != nil {
			return false
		}
	}
	return true
}
