package inbox

import "github.com/usagebilling/billing/pkg/envelope"

// Reasons a message is quarantined, in one list: operators filter on them
// (GET /internal/v1/quarantine?reason=...) and EventQuarantined and
// RedriveCompleted carry them, so they are part of the contract and never
// change once published. A handler quarantines with Permanent(reason, err)
// and names its reason here; code elsewhere refers to these constants, never
// to the strings.
//
// Two families are built rather than listed: envelope.MissingField and
// envelope.InvalidField ("missing_field:<name>", "invalid_field:<name>"), and
// the database's "integrity_violation:<constraint>" and
// "data_exception:<sqlstate>" (see Handler).
const (
	// Decoding (the envelope package's reasons).
	ReasonMalformed         = envelope.ReasonMalformed
	ReasonTooLarge          = envelope.ReasonTooLarge
	ReasonUnknownEventType  = envelope.ReasonUnknownEventType
	ReasonUnsupportedSchema = envelope.ReasonUnsupportedSchema
	ReasonDigestMismatch    = envelope.ReasonDigestMismatch

	// The inbox's own.

	// ReasonDigestConflict: the eventId was seen before with another payload
	// digest.
	ReasonDigestConflict = "digest_conflict"
	// ReasonHandlerPanic: the handler panicked; the quarantine record's
	// detail holds the panic value and the stack (QuarantinedMessage.Detail).
	ReasonHandlerPanic = "handler_panic"
	// ReasonRetriesExhausted: the handler failed with an error the inbox
	// cannot classify (neither Permanent nor a transient database error) on
	// every one of Options.RetryBudget attempts; the detail holds the last.
	ReasonRetriesExhausted = "retries_exhausted"
	// ReasonUnexpectedPayload: the decoded payload is not the type the
	// handler was registered for (On, OnBatch).
	ReasonUnexpectedPayload = "unexpected_payload"
	// ReasonDeferredExpired: the event stayed deferred longer than the
	// maximum age (DEFERRED_MAX_AGE) without its predecessor or fact
	// arriving; ExpireDeferred moved it here. The detail names what it
	// waited for. A redrive decides it again.
	ReasonDeferredExpired = "deferred_expired"
	// ReasonUnauthorizedProducer: the event arrived on a topic its type is
	// not published on, or names a producer that does not own its type
	// (Options.Authorize): a forgery, or a producer breaking the contract.
	// Its detail names the type, producer and topic.
	ReasonUnauthorizedProducer = "unauthorized_producer"
	// ReasonPermanent: Permanent was given no reason.
	ReasonPermanent = "permanent"

	// Contract checks shared by handlers.

	// ReasonAggregateMismatch: the payload's id is not the aggregate the
	// event belongs to (a charge's charge/<chargeId>, an adjustment's
	// adjustment/<adjustmentId>, a close's billing_period/<period>, a
	// usage's usage/<usageId>).
	ReasonAggregateMismatch = "aggregate_mismatch"
	// ReasonPriceAggregateMismatch: a PriceActivated's envelope does not name
	// its price series and version (usage).
	ReasonPriceAggregateMismatch = "price_aggregate_mismatch"
	// ReasonInvalidMeterCode: a PriceActivated names an invalid meter code
	// (usage).
	ReasonInvalidMeterCode = "invalid_meter_code"
	// ReasonInvalidEventID: an ops event names an event id that is not a
	// UUID (query quarantines it; a service answers such a RedriveRequested
	// with it, outcome not_found).
	ReasonInvalidEventID = "invalid_event_id"
	// ReasonUnknownAction: a RedriveRequested names an action the service
	// does not know; it answers with this reason, outcome not_found (pkg/ops).
	ReasonUnknownAction = "unknown_action"
	// ReasonUnprojectable: the query projection cannot read the event (query).
	ReasonUnprojectable = "unprojectable"

	// Billing.

	// ReasonNoPriceInEffect: a UsageAccepted occurred before the first price
	// version of its series takes effect, although billing knows the
	// schedule through its occurrence (usage refuses such facts: a contract
	// breach).
	ReasonNoPriceInEffect = "no_price_in_effect"

	// Invoice.

	// ReasonChargeAfterIssue: a ChargeRated for a period whose invoices are
	// issued. Billing rates late usage into the next open period, so this is
	// a contract breach, never retried.
	ReasonChargeAfterIssue = "charge_after_issue"
	// ReasonAdjustmentAfterIssue: an AdjustmentPosted that says the close
	// counted it (AfterClose false) for an invoice already issued: the close
	// did not count it after all, a contract breach.
	ReasonAdjustmentAfterIssue = "adjustment_after_issue"
	// ReasonNoInvoiceToCorrect: an AdjustmentPosted after the close for a
	// currency the period has no issued invoice in.
	ReasonNoInvoiceToCorrect = "no_invoice_to_correct"
	// ReasonCloseCountsMismatch: invoice holds more charges or adjustments
	// of a currency than the close counted.
	ReasonCloseCountsMismatch = "close_counts_mismatch"
	// ReasonCloseDigestMismatch: invoice holds as many charges (or
	// adjustments) of a currency as the close counted, but not the same.
	ReasonCloseDigestMismatch = "close_digest_mismatch"
	// ReasonCloseTotalsMismatch: invoice holds the charges (or adjustments)
	// the close counted but they do not sum to the close's amount.
	ReasonCloseTotalsMismatch = "close_totals_mismatch"
	// ReasonLineAmountMismatch: a charge line's charges do not sum to the
	// line's amount under its price version's pricing.
	ReasonLineAmountMismatch = "line_amount_mismatch"
	// ReasonPriceVersionConflict: charges of one meter and price version
	// carry different unit prices (a version's prices are immutable).
	ReasonPriceVersionConflict = "price_version_conflict"
	// ReasonUnknownCurrency: an invoice's currency has no known minor unit.
	ReasonUnknownCurrency = "unknown_currency"
	// ReasonCreditExceedsCharges: a correction note would take its issued
	// invoice below zero (billing refuses such a credit at its API).
	ReasonCreditExceedsCharges = "credit_exceeds_charges"
	// ReasonAmountPrecision: a correction note finer than its currency's
	// minor unit (billing refuses such an adjustment at its API; decision
	// 0008).
	ReasonAmountPrecision = "amount_precision"
)
