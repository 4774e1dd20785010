package domain

import (
	"time"

	"github.com/usagebilling/billing/pkg/rule"
)

// Codes of the subscriptions' refusals.
const (
	// CodeUnknownPlan: billing holds no version of the plan (never
	// published, or its PlanPublished not yet replicated).
	CodeUnknownPlan = "unknown_plan"
	// CodeBackdated: a subscription starting or ending before now.
	CodeBackdated = "backdated"
	// CodeSchedulePublished: a start or end at or before what raters have
	// been told of the tenant's schedule (decision 0021).
	CodeSchedulePublished = "schedule_already_published"
	// CodeSubscriptionOverlap: another subscription starts at or after the
	// new one's start (end it first).
	CodeSubscriptionOverlap = "subscription_overlap"
	// CodeSubscriptionEnded: the subscription already ended.
	CodeSubscriptionEnded = "subscription_ended"
	// CodeSubscriptionNotFound: no subscription of that id for the tenant.
	CodeSubscriptionNotFound = "subscription_not_found"
	// CodeLimitExceeded refuses what would pass one of a tenant's limits:
	// subscriptions of a period (BILLING_MAX_SUBSCRIPTIONS), adjustments
	// of one period (BILLING_MAX_ADJUSTMENTS).
	CodeLimitExceeded = "limit_exceeded"
)

// SubscriptionTime is when a subscription starts or ends (at) given now
// and what raters were told of the tenant's schedule (knownThrough; the
// epoch when nothing): at itself, or (zero) the first instant it may be —
// now, or right after knownThrough. Never before now (backdated), never at
// or before knownThrough: raters may have priced facts up to it without
// the change. what names the time in the errors ("startsAt", "endsAt").
func SubscriptionTime(what string, at, now, knownThrough time.Time) (time.Time, error) {
	now = rule.Instant(now)
	earliest := now
	if !knownThrough.Before(earliest) {
		earliest = rule.Instant(knownThrough).Add(time.Microsecond)
	}
	if at.IsZero() {
		return earliest, nil
	}
	at = rule.Instant(at)
	if at.Before(now) {
		return time.Time{}, errorf(rule.Unprocessable, CodeBackdated,
			"%s %s is before now (%s): a subscription is never backdated", what,
			at.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano))
	}
	if !at.After(knownThrough) {
		return time.Time{}, errorf(rule.Unprocessable, CodeSchedulePublished,
			"%s %s is not after %s, the time through which this tenant's prices are already known to raters: "+
				"choose a later time, or omit %s for the earliest (%s)", what, at.Format(time.RFC3339Nano),
			knownThrough.UTC().Format(time.RFC3339Nano), what, earliest.Format(time.RFC3339Nano))
	}
	return at, nil
}

// UnknownPlan refuses a subscription to a plan billing holds no version of.
func UnknownPlan(code string) error {
	return errorf(rule.Unprocessable, CodeUnknownPlan,
		"billing holds no version of plan %q: publish it (POST /v1/plans on meter) and retry once it has reached billing", code)
}

// SubscriptionOverlap refuses a subscription that would overlap one
// starting at or after it.
func SubscriptionOverlap(other string, startsAt time.Time) error {
	return errorf(rule.Conflict, CodeSubscriptionOverlap,
		"subscription %s starts at %s, at or after this one: end it first", other, startsAt.UTC().Format(time.RFC3339Nano))
}

// SubscriptionLimitExceeded refuses a subscription that would give a
// tenant more than max subscriptions in effect in its current period or
// later.
func SubscriptionLimitExceeded(tenantID string, max int) error {
	return errorf(rule.Unprocessable, CodeLimitExceeded,
		"tenant %s has %d subscriptions in effect in the current period or scheduled (one ended in the period counts until it ends), the most it may have (BILLING_MAX_SUBSCRIPTIONS): end a scheduled one, or subscribe in the next period",
		tenantID, max)
}

// SubscriptionEnded refuses to end a subscription whose end already passed.
func SubscriptionEnded(id string, endsAt time.Time) error {
	return errorf(rule.Conflict, CodeSubscriptionEnded,
		"subscription %s ended at %s", id, endsAt.UTC().Format(time.RFC3339Nano))
}

// SubscriptionNotFound refuses a subscription id the tenant does not have.
func SubscriptionNotFound(id string) error {
	return errorf(rule.NotFound, CodeSubscriptionNotFound, "no subscription %s for this tenant", id)
}

// EndsBeforeStart refuses an end at or before the subscription's start.
func EndsBeforeStart(endsAt, startsAt time.Time) error {
	return errorf(rule.Unprocessable, "ends_before_start", "endsAt %s is not after the subscription's startsAt %s",
		endsAt.UTC().Format(time.RFC3339Nano), startsAt.UTC().Format(time.RFC3339Nano))
}
