package app

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/money"
	"github.com/usagebilling/billing/pkg/pricing"
	"github.com/usagebilling/billing/services/invoice/internal/db"
	"github.com/usagebilling/billing/services/invoice/internal/domain"
)

// Producer is the envelope producer name of the events this service publishes.
const Producer = "invoice"

// OriginConstraints are the unique constraints that guard an effect's origin
// event (inbox.Options.OriginConstraints): one charge, adjustment line or
// correction per origin event, one close per tenant and period. A unique
// violation on them is a DUPLICATE; on any other (a second charge line of a
// meter and version, a second rounding line, an invoice number taken twice)
// it is a conflict, quarantined.
var OriginConstraints = []string{
	"invoice_charge_origin_key", "invoice_line_origin_key", "invoice_correction_origin_key",
	"period_close_pkey", "period_close_event_key",
}

// IssuedKey is the inbox wait key of a tenant period's issue: the close
// that issues the period's invoices provides it, and an adjustment posted
// after the close (AfterClose) that finds its invoice not issued yet waits
// for it.
func IssuedKey(tenantID, period string) string {
	return "invoice-issued/" + tenantID + "/" + period
}

// CloseKey is the wait key of a close that finds fewer charges or
// adjustments than it counted. Nothing provides it: a close waiting for a
// million charges must not be decided again by each of them. The inbox's
// periodic sweep decides it again (backing off while it stays incomplete),
// and issues the period once the last counted event is here.
func CloseKey(tenantID, period string) string {
	return "invoice-close/" + tenantID + "/" + period
}

// CloseTallyKey is the wait key of a close whose chunked tally is not done
// after the chunks one decision walks (Config.CloseChunksPerAttempt).
// Nothing provides it: the inbox's sweep decides the close again, and it
// resumes its tally where the last committed chunk left it.
func CloseTallyKey(tenantID, period string) string {
	return "invoice-close-tally/" + tenantID + "/" + period
}

// ApplyPeriodEnded records that billing's period ended and is in its grace
// period (decision 0014): the period's open invoices read as draft until
// its close issues them. Nothing is issued or numbered here. Before or
// after the close, in any order: an issued invoice stays issued.
func (a *App) ApplyPeriodEnded(ctx context.Context, tx pgx.Tx, d *envelope.Decoded, p events.BillingPeriodEnded) (inbox.Outcome, error) {
	e := &d.Envelope
	if err := checkAggregate(e, events.AggregateBillingPeriodEnd, p.Period); err != nil {
		return inbox.Outcome{}, err
	}
	err := db.New(tx).RecordPeriodEnded(ctx, db.RecordPeriodEndedParams{
		TenantID: e.TenantID, Period: p.Period, EndedAt: p.EndedAt, ClosesAt: p.ClosesAt, EventID: e.EventID,
	})
	if err != nil {
		return inbox.Outcome{}, fmt.Errorf("record end of %s %s: %w", e.TenantID, p.Period, err)
	}
	return inbox.Outcome{}, nil
}

// ApplyChargesRated records the charges, in one statement: the tenant's
// charges are decided by several consumers at once, and the charges of a
// sum or count line share no row (the line is computed from its charges,
// not counted up by each). A max or latest charge raises its line's running
// figure when it beats it, a unique_count charge adds its value to its
// line's set: rows shared by that line's charges, written by comparison and
// set union so that the line does not depend on the order of its charges.
// A charge already recorded is a duplicate (of invoice_charge_origin_key);
// one for a period closed, a permanent charge_after_issue.
func (a *App) ApplyChargesRated(ctx context.Context, tx pgx.Tx, ds []*envelope.Decoded, ps []events.ChargeRated) ([]inbox.Outcome, error) {
	n := len(ds)
	arg := db.AddChargesParams{
		OriginEventIds: make([]uuid.UUID, n), ChargeIds: make([]uuid.UUID, n), UsageEventIds: make([]uuid.UUID, n),
		TenantIds: make([]string, n),
		Periods:   make([]string, n), Currencies: make([]string, n), MeterCodes: make([]string, n),
		PriceVersions: make([]int64, n), UnitPrices: make([]decimal.Decimal, n), Quantities: make([]decimal.Decimal, n),
		Amounts: make([]decimal.Decimal, n), NewInvoiceIds: make([]uuid.UUID, n),
		Aggregations: make([]string, n), DimensionsKeys: make([]string, n), Unpriceds: make([]bool, n),
		OccurredAts: make([]time.Time, n), SourceSystems: make([]string, n), SourceEventIds: make([]string, n),
		UniqValues: make([]string, n),
	}
	for i, d := range ds {
		p := ps[i]
		e := &d.Envelope
		if err := checkAggregate(e, events.AggregateCharge, p.ChargeID.String()); err != nil {
			return nil, inbox.ItemError(i, err)
		}
		newID, err := uuid.NewV7()
		if err != nil {
			return nil, fmt.Errorf("new invoice id: %w", err)
		}
		arg.OriginEventIds[i], arg.ChargeIds[i], arg.TenantIds[i] = e.EventID, p.ChargeID, e.TenantID
		arg.UsageEventIds[i] = p.UsageEventID
		arg.Periods[i], arg.Currencies[i], arg.MeterCodes[i] = p.Period, p.Currency, p.MeterCode
		arg.PriceVersions[i], arg.UnitPrices[i], arg.Quantities[i] = p.PriceVersion, p.UnitPrice, p.Quantity
		arg.Amounts[i], arg.NewInvoiceIds[i] = p.Amount, newID
		arg.Aggregations[i], arg.DimensionsKeys[i], arg.Unpriceds[i] = aggregationOf(p), domain.LineKey(p.PlanCode, p.Dimensions), p.Unpriced
		arg.OccurredAts[i], arg.SourceSystems[i], arg.SourceEventIds[i] = p.OccurredAt, p.SourceSystem, p.SourceEventID
		arg.UniqValues[i] = p.Value
	}
	if err := recordVersionPricings(ctx, tx, ds, ps); err != nil {
		return nil, err
	}
	rows, err := db.New(tx).AddCharges(ctx, arg)
	if err != nil {
		return nil, fmt.Errorf("add %d charges: %w", n, err)
	}
	if len(rows) != n {
		return nil, fmt.Errorf("add %d charges: %d results", n, len(rows))
	}
	for i, row := range rows {
		switch {
		case row.Added:
		case row.Closed && !row.Known:
			p := ps[i]
			return nil, inbox.ItemError(i, inbox.Permanent(inbox.ReasonChargeAfterIssue,
				fmt.Errorf("charge %s for %s %s: the period is closed and its invoices issued", p.ChargeID, ds[i].Envelope.TenantID, p.Period)))
		default: // recorded before (or by a delivery committed meanwhile)
			return nil, inbox.ItemError(i, inbox.Duplicate("invoice_charge_origin_key"))
		}
	}
	if err := a.foldParts(ctx, tx, arg.TenantIds, arg.Periods); err != nil {
		return nil, err
	}
	touches := make([]touch, n)
	for i, p := range ps {
		touches[i] = touch{TenantID: ds[i].Envelope.TenantID, Period: p.Period, MeterCode: p.MeterCode, Currency: p.Currency,
			EventID: ds[i].Envelope.EventID}
	}
	if err := a.evaluateAlerts(ctx, tx, touches); err != nil {
		return nil, err
	}
	return make([]inbox.Outcome, n), nil
}

// foldParts folds the parts of the lines of the tenants' periods a batch
// touched (AddCharges writes a row per batch and line, and for unique_count
// lines one per batch in their value sets) that have more than
// Config.PartsFoldAt of them into one row, their sum (FoldParts), in the
// batch's transaction: a line's parts grow by one a batch and fold every
// PartsFoldAt batches, so what the alerts' figures and an open invoice's
// read sum is bounded by the period's lines, not its batches, and so is what
// the tables keep.
func (a *App) foldParts(ctx context.Context, tx pgx.Tx, tenantIDs, periods []string) error {
	if _, err := db.New(tx).FoldParts(ctx, db.FoldPartsParams{TenantIds: tenantIDs, Periods: periods, Most: int32(a.partsFoldAt)}); err != nil {
		return fmt.Errorf("fold the parts of %d charges' periods: %w", len(tenantIDs), err)
	}
	return nil
}

// aggregationOf is the aggregation of a charge's meter: sum for a charge
// from before the catalog.
func aggregationOf(p events.ChargeRated) string {
	if p.Aggregation == "" {
		return catalog.Sum
	}
	return p.Aggregation
}

// recordVersionPricings records the pricing the charges under another model
// than unit carry (their lines are priced by it at issue), in one statement
// when there are any.
func recordVersionPricings(ctx context.Context, tx pgx.Tx, ds []*envelope.Decoded, ps []events.ChargeRated) error {
	var arg db.RecordVersionPricingsParams
	for i, p := range ps {
		if p.Pricing == nil {
			continue
		}
		raw, err := json.Marshal(p.Pricing)
		if err != nil {
			return fmt.Errorf("encode pricing: %w", err)
		}
		arg.TenantIds, arg.Currencies = append(arg.TenantIds, ds[i].Envelope.TenantID), append(arg.Currencies, p.Currency)
		arg.MeterCodes, arg.PriceVersions = append(arg.MeterCodes, p.MeterCode), append(arg.PriceVersions, p.PriceVersion)
		arg.PriceKeys = append(arg.PriceKeys, domain.PriceKey(p.PlanCode, p.Dimensions))
		arg.Pricings = append(arg.Pricings, string(raw))
	}
	if len(arg.TenantIds) == 0 {
		return nil
	}
	if err := db.New(tx).RecordVersionPricings(ctx, arg); err != nil {
		return fmt.Errorf("record version pricings: %w", err)
	}
	return nil
}

// ApplyAdjustmentPosted makes an adjustment the close counted a line of the
// open invoice, and one posted after the close a correction note of the
// issued invoice.
func (a *App) ApplyAdjustmentPosted(ctx context.Context, tx pgx.Tx, d *envelope.Decoded, p events.AdjustmentPosted) (inbox.Outcome, error) {
	e := &d.Envelope
	if err := checkAggregate(e, events.AggregateAdjustment, p.AdjustmentID.String()); err != nil {
		return inbox.Outcome{}, err
	}
	if p.AfterClose {
		return inbox.Outcome{}, a.onAdjustmentAfterClose(ctx, tx, e, p)
	}
	newID, err := uuid.NewV7()
	if err != nil {
		return inbox.Outcome{}, fmt.Errorf("new invoice id: %w", err)
	}
	row, err := db.New(tx).AddAdjustmentLine(ctx, db.AddAdjustmentLineParams{
		TenantID: e.TenantID, Period: p.Period, Currency: p.Currency, NewInvoiceID: newID,
		OriginEventID: e.EventID, Amount: p.Amount,
	})
	switch {
	case err != nil:
		return inbox.Outcome{}, fmt.Errorf("add adjustment line of %s: %w", e.EventID, err)
	case row.Added:
		// An adjustment moves the currency's running total, in either
		// direction: one that takes it to a spend alert's threshold tells.
		return inbox.Outcome{}, a.evaluateAlerts(ctx, tx, []touch{{TenantID: e.TenantID, Period: p.Period, Currency: p.Currency,
			EventID: e.EventID}})
	case row.Closed || row.Status == domain.StatusIssued:
		return inbox.Outcome{}, inbox.Permanent(inbox.ReasonAdjustmentAfterIssue, fmt.Errorf(
			"adjustment %s for %s %s %s is counted by the close (afterClose false) but the period is closed and its invoices issued",
			p.AdjustmentID, e.TenantID, p.Period, p.Currency))
	default:
		return inbox.Outcome{}, errConcurrentInvoice
	}
}

// onAdjustmentAfterClose turns an adjustment the close did not count into a
// correction note of the issued invoice of its currency, waiting for the
// close to issue it.
func (a *App) onAdjustmentAfterClose(ctx context.Context, tx pgx.Tx, e *envelope.Envelope, p events.AdjustmentPosted) error {
	row, err := db.New(tx).FindInvoiceToCorrect(ctx, db.FindInvoiceToCorrectParams{
		TenantID: e.TenantID, Period: p.Period, Currency: p.Currency,
	})
	switch {
	case err != nil:
		return fmt.Errorf("find invoice to correct for %s: %w", e.EventID, err)
	case row.Status == domain.StatusIssued:
		return a.correct(ctx, tx, e, p, row.InvoiceID)
	case !row.Closed:
		return inbox.DeferUntil(IssuedKey(e.TenantID, p.Period))
	default:
		return inbox.Permanent(inbox.ReasonNoInvoiceToCorrect,
			fmt.Errorf("adjustment %s for %s %s: the period is closed and has no issued %s invoice", p.AdjustmentID, e.TenantID, p.Period, p.Currency))
	}
}

// errConcurrentInvoice is transient: another transaction created the invoice
// between this one's look and its insert; the next try finds it.
var errConcurrentInvoice = errors.New("invoice created concurrently, try again")

// correct turns an adjustment of an issued invoice into a correction note and
// its InvoiceCorrectionIssued, the invoice aggregate's next version. The
// issued invoice itself is not touched. Under the invoice's lock (one note
// at a time) it refuses a note finer than the minor unit or one that would
// take the invoice below zero (checkCorrection).
func (a *App) correct(ctx context.Context, tx pgx.Tx, e *envelope.Envelope, p events.AdjustmentPosted, invoiceID uuid.UUID) error {
	q := db.New(tx)
	if _, err := q.LockIssuedInvoice(ctx, invoiceID); err != nil {
		return fmt.Errorf("lock issued invoice %s: %w", invoiceID, err)
	}
	inv, err := q.IssuedInvoiceState(ctx, db.IssuedInvoiceStateParams{InvoiceID: invoiceID, OriginEventID: e.EventID})
	if err != nil {
		return fmt.Errorf("read issued invoice %s: %w", invoiceID, err)
	}
	if err := checkCorrection(p, invoiceID, inv); err != nil {
		return err
	}
	correctionID, err := uuid.NewV7()
	if err != nil {
		return fmt.Errorf("new correction id: %w", err)
	}
	now := a.now().UTC().Truncate(time.Microsecond)
	ev, err := events.Caused(e, events.InvoiceCorrectionIssued{
		CorrectionID: correctionID, InvoiceID: invoiceID, OriginEventID: e.EventID,
		Period: p.Period, Currency: p.Currency, Amount: p.Amount, IssuedAt: now,
	}, invoiceMeta(e, invoiceID, inv.NextVersion, now))
	if err != nil {
		return err
	}
	n, err := q.AddCorrection(ctx, db.AddCorrectionParams{
		CorrectionID: correctionID, InvoiceID: invoiceID, OriginEventID: e.EventID, Amount: p.Amount,
		IssuedAt: now, Version: inv.NextVersion, EventID: ev.EventID,
	})
	if err != nil {
		return fmt.Errorf("add correction of %s: %w", e.EventID, err)
	}
	if n == 0 { // the adjustment is already a line of the invoice
		a.log.WarnContext(ctx, "adjustment already invoiced as a line", "event_id", e.EventID, "invoice_id", invoiceID)
		return nil
	}
	if err := q.AddCorrectionTotal(ctx, db.AddCorrectionTotalParams{InvoiceID: invoiceID, Amount: p.Amount, Version: inv.NextVersion}); err != nil {
		return fmt.Errorf("count correction of %s into invoice %s: %w", e.EventID, invoiceID, err)
	}
	if err := a.webhooks.Record(ctx, tx, ev); err != nil {
		return err
	}
	return events.Append(ctx, tx, ev)
}

// checkCorrection maps the correction rules' verdict to the inbox's: a note
// that must never be issued is quarantined with its reason.
func checkCorrection(p events.AdjustmentPosted, invoiceID uuid.UUID, inv db.IssuedInvoiceStateRow) error {
	err := domain.CheckCorrection(p.Amount, p.Currency, inv.Total, inv.Corrected)
	var exceeds *domain.CreditExceedsInvoiceError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &exceeds):
		return inbox.Permanent(inbox.ReasonCreditExceedsCharges, fmt.Errorf("adjustment %s of invoice %s: %w", p.AdjustmentID, invoiceID, err))
	case money.ProblemCode(err) == money.CodeAmountPrecision:
		return inbox.Permanent(inbox.ReasonAmountPrecision, fmt.Errorf("adjustment %s of invoice %s: %w", p.AdjustmentID, invoiceID, err))
	default:
		return inbox.Permanent(inbox.ReasonUnknownCurrency, fmt.Errorf("adjustment %s of invoice %s: %w", p.AdjustmentID, invoiceID, err))
	}
}

// ApplyPeriodClosed records the close, proves invoice holds exactly what the
// close counted (per currency: count, exact sum and digest of the charges
// and of the adjustment lines, tallied in SQL), and issues every invoice of
// the period. It provides IssuedKey, which adjustments posted after the
// close wait for.
func (a *App) ApplyPeriodClosed(ctx context.Context, tx pgx.Tx, d *envelope.Decoded, p events.BillingPeriodClosed) (inbox.Outcome, error) {
	e := &d.Envelope
	if err := checkAggregate(e, events.AggregateBillingPeriod, p.Period); err != nil {
		return inbox.Outcome{}, err
	}
	q := db.New(tx)
	// Periods are issued in order (decision 0014): the invoices of the
	// period billing closed before this one first, so numbers and credit
	// grants follow the periods whatever order the closes arrive in.
	if prev := p.PreviousPeriod; prev != "" {
		applied, err := q.CloseApplied(ctx, db.CloseAppliedParams{TenantID: e.TenantID, Period: prev})
		if err != nil {
			return inbox.Outcome{}, fmt.Errorf("read the close of %s %s: %w", e.TenantID, prev, err)
		}
		if !applied {
			return inbox.Outcome{}, inbox.DeferUntil(IssuedKey(e.TenantID, prev))
		}
	}
	// The period's charges are tallied first, chunk by chunk, each chunk
	// committed on its own (walkCharges): this decision walks a bounded
	// number of them and, when the period is larger, sets the close aside
	// to resume where it stopped.
	done, err := a.walkCharges(ctx, tx, e.TenantID, p.Period)
	if err != nil {
		return inbox.Outcome{}, err
	}
	if !done {
		return inbox.Outcome{}, inbox.DeferUntil(CloseTallyKey(e.TenantID, p.Period))
	}
	// A second close of the same period is a unique violation here: the
	// inbox counts it as a duplicate (the period's invoices are issued).
	if err := q.RecordClose(ctx, db.RecordCloseParams{
		TenantID: e.TenantID, Period: p.Period, CloseEventID: e.EventID, ClosedAt: p.ClosedAt,
		Charges: p.Charges, Adjustments: p.Adjustments,
	}); err != nil {
		return inbox.Outcome{}, fmt.Errorf("record close of %s %s: %w", e.TenantID, p.Period, err)
	}
	for _, cur := range slices.Sorted(maps.Keys(p.Fees)) { // a currency with fees only has no invoice yet
		id, err := uuid.NewV7()
		if err != nil {
			return inbox.Outcome{}, fmt.Errorf("new invoice id: %w", err)
		}
		if err := q.EnsureInvoice(ctx, db.EnsureInvoiceParams{InvoiceID: id, TenantID: e.TenantID, Period: p.Period, Currency: cur}); err != nil {
			return inbox.Outcome{}, fmt.Errorf("open the %s invoice of %s %s: %w", cur, e.TenantID, p.Period, err)
		}
	}
	invs, have, lines, err := a.lockAndTally(ctx, q, e.TenantID, p.Period)
	if err != nil {
		return inbox.Outcome{}, err
	}
	want := make(map[string]domain.Tally, len(p.Currencies))
	for cur, t := range p.Currencies {
		want[cur] = domain.Tally(t)
	}
	if err := a.checkClose(ctx, e, p, want, have); err != nil {
		if chargesDiffer(want, have) {
			// The walk did not see the charges the close counted (some were
			// still to come, or came behind its position): the next decision
			// walks them again from the start.
			if rerr := a.resetTally(ctx, tx, e.TenantID, p.Period); rerr != nil {
				return inbox.Outcome{}, rerr
			}
		}
		return inbox.Outcome{}, err
	}

	now := a.now().UTC().Truncate(time.Microsecond)
	envs := make([]envelope.Envelope, 0, len(invs))
	for _, inv := range invs {
		if inv.Status != domain.StatusOpen {
			return inbox.Outcome{}, fmt.Errorf("invoice %s of %s %s is %s before its close", inv.InvoiceID, e.TenantID, p.Period, inv.Status)
		}
		ev, err := a.issue(ctx, q, e, p.Period, inv.InvoiceID, inv.Currency, lines[inv.Currency], want[inv.Currency],
			p.Fees[inv.Currency], p.TaxRates, periodEnd(p), now)
		if err != nil {
			return inbox.Outcome{}, err
		}
		envs = append(envs, ev)
	}
	if err := events.Append(ctx, tx, envs...); err != nil {
		return inbox.Outcome{}, err
	}
	if err := a.webhooks.Record(ctx, tx, envs...); err != nil {
		return inbox.Outcome{}, err
	}
	return inbox.Outcome{Provides: []string{IssuedKey(e.TenantID, p.Period)}}, nil
}

// maxRelocks bounds how often a close locks its period's invoices again
// because a charge created a new one meanwhile (lockAndTally); past it, the
// close waits for the sweep.
const maxRelocks = 5

// lockAndTally locks the invoices of a tenant's period and tallies what they
// hold: the charges as the chunked tally summed them (walkCharges, done
// before), the adjustment lines in the statement after the lock, whose
// snapshot sees every adjustment line whose transaction held a locked
// invoice (a foreign key share-locks it). A charge the walk did not see
// makes the tally differ from the close's (checkClose), and the close walks
// again (resetTally). A currency tallied whose invoice did not exist when
// the lock was taken is locked again, in a newer snapshot that sees the new
// invoice, until every currency tallied has its invoice locked.
func (a *App) lockAndTally(ctx context.Context, q *db.Queries, tenantID, period string) (
	[]db.LockPeriodInvoicesRow, map[string]domain.Tally, map[string][]chargeLine, error) {
	for attempt := 0; ; attempt++ {
		invs, err := q.LockPeriodInvoices(ctx, db.LockPeriodInvoicesParams{TenantID: tenantID, Period: period})
		if err != nil {
			return nil, nil, nil, fmt.Errorf("lock invoices of %s %s: %w", tenantID, period, err)
		}
		if a.afterLock != nil {
			a.afterLock()
		}
		have, lines, err := a.tally(ctx, q, tenantID, period)
		if err != nil {
			return nil, nil, nil, err
		}
		cur, ok := unlocked(invs, have)
		if ok {
			return invs, have, lines, nil
		}
		if attempt == maxRelocks {
			return nil, nil, nil, inbox.DeferUntil(CloseKey(tenantID, period))
		}
		a.log.InfoContext(ctx, "close locks its invoices again: one was created while it tallied",
			"tenant_id", tenantID, "period", period, "currency", cur)
	}
}

// unlocked returns a currency tallied in have whose invoice is not in invs.
func unlocked(invs []db.LockPeriodInvoicesRow, have map[string]domain.Tally) (string, bool) {
	for cur := range have {
		if !slices.ContainsFunc(invs, func(inv db.LockPeriodInvoicesRow) bool { return inv.Currency == cur }) {
			return cur, false
		}
	}
	return "", true
}

// chargeLine is the tally of one line's charges (currency, meter, price
// version, price dimensions, unpriced, with the line's aggregation and unit
// price): count, exact sums and the digest of their origin event ids.
type chargeLine struct {
	Currency, MeterCode, DimensionsKey, Aggregation string
	PriceVersion                                    int64
	Unpriced                                        bool
	UnitPrice, Quantity, Amount                     decimal.Decimal
	Charges                                         int64
	Digest                                          *big.Int
	// Distinct is the number of distinct values of a unique_count line.
	Distinct int64
}

// walkCharges advances the chunked tally of a tenant's period's charges
// (close_tally, close_tally_line) by up to closeChunksPerAttempt chunks of
// closeChunk charges and reports whether it is done. Each chunk is one
// transaction of its own on the pool: it locks the period's progress row,
// reads the next chunk after the recorded position (TallyChargeChunk,
// keyset order of usage_event_id and origin_event_id, one bounded
// statement), adds it to the lines' running sums and records the new
// position, and commits. A crash or a cancel loses at most the chunk in
// flight; the next decision resumes at the position. The deciding
// transaction tx waits meanwhile, for a bounded number of chunks whatever
// the period's size. An App built without a pool (tests of other rules)
// walks every chunk in tx instead.
func (a *App) walkCharges(ctx context.Context, tx pgx.Tx, tenantID, period string) (bool, error) {
	for step := 0; a.pool == nil || step < a.closeChunksPerAttempt; step++ {
		var done, read bool
		var n int64
		err := a.closeStep(ctx, tx, func(q *db.Queries) error {
			pos, err := q.LockCloseTally(ctx, db.LockCloseTallyParams{TenantID: tenantID, Period: period})
			if err != nil {
				return fmt.Errorf("lock the tally of %s %s: %w", tenantID, period, err)
			}
			if pos.Done && pos.ValuesDone {
				done = true
				return nil
			}
			if pos.Done {
				var err error
				done, err = a.valueChunk(ctx, q, tenantID, period, pos)
				return err
			}
			rows, err := q.TallyChargeChunk(ctx, db.TallyChargeChunkParams{TenantID: tenantID, Period: period,
				AfterUsage: pos.AfterUsage, AfterOrigin: pos.AfterOrigin, ChunkSize: int32(a.closeChunk)})
			if err != nil {
				return fmt.Errorf("tally charges of %s %s after %s: %w", tenantID, period, pos.AfterUsage, err)
			}
			read = true
			arg := db.AddCloseTallyLinesParams{TenantID: tenantID, Period: period}
			afterUsage, afterOrigin := pos.AfterUsage, pos.AfterOrigin
			for _, r := range rows {
				n += r.Charges
				arg.Currencies, arg.MeterCodes = append(arg.Currencies, r.Currency), append(arg.MeterCodes, r.MeterCode)
				arg.PriceVersions, arg.DimensionsKeys = append(arg.PriceVersions, r.PriceVersion), append(arg.DimensionsKeys, r.DimensionsKey)
				arg.Unpriceds, arg.Aggregations = append(arg.Unpriceds, r.Unpriced), append(arg.Aggregations, r.Aggregation)
				arg.UnitPrices, arg.ChargeCounts = append(arg.UnitPrices, r.UnitPrice), append(arg.ChargeCounts, r.Charges)
				arg.Quantities, arg.Amounts = append(arg.Quantities, r.Quantity), append(arg.Amounts, r.Amount)
				arg.Digests = append(arg.Digests, r.Digest)
				afterUsage, afterOrigin = r.LastUsage, r.LastOrigin
			}
			if len(rows) > 0 {
				if err := q.AddCloseTallyLines(ctx, arg); err != nil {
					return fmt.Errorf("add a chunk to the tally of %s %s: %w", tenantID, period, err)
				}
			}
			chargesDone := n < int64(a.closeChunk) // the distinct values are counted next
			if err := q.AdvanceCloseTally(ctx, db.AdvanceCloseTallyParams{TenantID: tenantID, Period: period,
				AfterUsage: afterUsage, AfterOrigin: afterOrigin, Done: chargesDone}); err != nil {
				return fmt.Errorf("record the tally's position of %s %s: %w", tenantID, period, err)
			}
			return nil
		})
		if err != nil {
			return false, err
		}
		if read && a.afterChunk != nil {
			a.afterChunk(n)
		}
		if done {
			return true, nil
		}
	}
	return false, nil
}

// valueChunk counts the next closeChunk distinct values of a tenant's
// period's unique_count lines (TallyValueChunk, key order of
// invoice_line_value after the recorded key), adds them to the tally's
// lines and records the key it reached, in the caller's step; it reports
// whether the values are all counted.
func (a *App) valueChunk(ctx context.Context, q *db.Queries, tenantID, period string, pos db.LockCloseTallyRow) (bool, error) {
	rows, err := q.TallyValueChunk(ctx, db.TallyValueChunkParams{TenantID: tenantID, Period: period,
		AfterCurrency: pos.ValueCurrency, AfterMeterCode: pos.ValueMeterCode, AfterPriceVersion: pos.ValuePriceVersion,
		AfterDimensionsKey: pos.ValueDimensionsKey, AfterUnpriced: pos.ValueUnpriced, AfterValue: pos.ValueValue,
		ChunkSize: int32(a.closeChunk)})
	if err != nil {
		return false, fmt.Errorf("count distinct values of %s %s: %w", tenantID, period, err)
	}
	arg := db.AddCloseTallyValuesParams{TenantID: tenantID, Period: period}
	next := db.AdvanceValueTallyParams{TenantID: tenantID, Period: period, ValueCurrency: pos.ValueCurrency,
		ValueMeterCode: pos.ValueMeterCode, ValuePriceVersion: pos.ValuePriceVersion,
		ValueDimensionsKey: pos.ValueDimensionsKey, ValueUnpriced: pos.ValueUnpriced, ValueValue: pos.ValueValue}
	var n int64
	for _, r := range rows {
		n += r.N
		arg.Currencies, arg.MeterCodes = append(arg.Currencies, r.Currency), append(arg.MeterCodes, r.MeterCode)
		arg.PriceVersions, arg.DimensionsKeys = append(arg.PriceVersions, r.PriceVersion), append(arg.DimensionsKeys, r.DimensionsKey)
		arg.Unpriceds, arg.Counts = append(arg.Unpriceds, r.Unpriced), append(arg.Counts, r.N)
		next.ValueCurrency, next.ValueMeterCode, next.ValuePriceVersion = r.LastCurrency, r.LastMeterCode, r.LastPriceVersion
		next.ValueDimensionsKey, next.ValueUnpriced, next.ValueValue = r.LastDimensionsKey, r.LastUnpriced, r.LastValue
	}
	if len(rows) > 0 {
		if err := q.AddCloseTallyValues(ctx, arg); err != nil {
			return false, fmt.Errorf("add distinct values to the tally of %s %s: %w", tenantID, period, err)
		}
	}
	next.ValuesDone = n < int64(a.closeChunk)
	if err := q.AdvanceValueTally(ctx, next); err != nil {
		return false, fmt.Errorf("record the tally's position of %s %s: %w", tenantID, period, err)
	}
	if a.afterValueChunk != nil {
		a.afterValueChunk(n)
	}
	return next.ValuesDone, nil
}

// closeStep runs fn as one step of a close's tally: in a transaction of
// its own on the pool, committed when fn returns nil; without a pool, in
// the deciding transaction tx.
func (a *App) closeStep(ctx context.Context, tx pgx.Tx, fn func(q *db.Queries) error) error {
	if a.pool == nil {
		return fn(db.New(tx))
	}
	return pgx.BeginFunc(ctx, a.pool, func(stx pgx.Tx) error { return fn(db.New(stx)) })
}

// resetTally forgets the tally of a tenant's period, in a step of its own
// (closeStep), so the next decision of its close walks the charges again.
func (a *App) resetTally(ctx context.Context, tx pgx.Tx, tenantID, period string) error {
	return a.closeStep(ctx, tx, func(q *db.Queries) error {
		arg := db.ResetCloseTallyLinesParams{TenantID: tenantID, Period: period}
		if err := q.ResetCloseTallyLines(ctx, arg); err != nil {
			return fmt.Errorf("reset the tally of %s %s: %w", tenantID, period, err)
		}
		if err := q.ResetCloseTally(ctx, db.ResetCloseTallyParams(arg)); err != nil {
			return fmt.Errorf("reset the tally of %s %s: %w", tenantID, period, err)
		}
		return nil
	})
}

// chargesDiffer reports whether the charges tallied (have) differ from
// those the close counted (want) in any currency.
func chargesDiffer(want, have map[string]domain.Tally) bool {
	for cur, w := range want {
		h := have[cur]
		if h.Charges != w.Charges || !h.ChargeAmount.Equal(w.ChargeAmount) || h.ChargeDigest != w.ChargeDigest {
			return true
		}
	}
	for cur, h := range have {
		if _, ok := want[cur]; !ok && h.Charges != 0 {
			return true
		}
	}
	return false
}

// tallyCharges reads the lines of a tenant's period's charges as the
// chunked tally summed them (walkCharges, done): O(lines). Lines come back
// in currency and line order.
func (a *App) tallyCharges(ctx context.Context, q *db.Queries, tenantID, period string) ([]*chargeLine, error) {
	rows, err := q.CloseTallyLines(ctx, db.CloseTallyLinesParams{TenantID: tenantID, Period: period})
	if err != nil {
		return nil, fmt.Errorf("read the tally of %s %s: %w", tenantID, period, err)
	}
	out := make([]*chargeLine, 0, len(rows))
	for _, r := range rows {
		digest, ok := new(big.Int).SetString(r.Digest, 10)
		if !ok {
			return nil, fmt.Errorf("tally charges of %s %s: digest %q is not an integer", tenantID, period, r.Digest)
		}
		out = append(out, &chargeLine{Currency: r.Currency, MeterCode: r.MeterCode, DimensionsKey: r.DimensionsKey,
			Aggregation: r.Aggregation, PriceVersion: r.PriceVersion, Unpriced: r.Unpriced, UnitPrice: r.UnitPrice,
			Quantity: r.Quantity, Amount: r.Amount, Charges: r.Charges, Digest: digest, Distinct: r.DistinctValues})
	}
	slices.SortFunc(out, func(x, y *chargeLine) int {
		return cmp.Or(cmp.Compare(x.Currency, y.Currency), cmp.Compare(x.MeterCode, y.MeterCode),
			cmp.Compare(x.PriceVersion, y.PriceVersion), cmp.Compare(x.DimensionsKey, y.DimensionsKey),
			boolCompare(x.Unpriced, y.Unpriced), cmp.Compare(x.Aggregation, y.Aggregation), x.UnitPrice.Cmp(y.UnitPrice))
	})
	return out, nil
}

func boolCompare(x, y bool) int {
	switch {
	case x == y:
		return 0
	case !x:
		return -1
	default:
		return 1
	}
}

// tally is what invoice holds of a tenant's period, by currency (the
// charges as the chunked tally summed them, tallyCharges), and the lines of
// its charges by currency.
func (a *App) tally(ctx context.Context, q *db.Queries, tenantID, period string) (map[string]domain.Tally, map[string][]chargeLine, error) {
	charges, err := a.tallyCharges(ctx, q, tenantID, period)
	if err != nil {
		return nil, nil, err
	}
	adjustments, err := q.TallyAdjustments(ctx, db.TallyAdjustmentsParams{TenantID: tenantID, Period: period})
	if err != nil {
		return nil, nil, fmt.Errorf("tally adjustments of %s %s: %w", tenantID, period, err)
	}
	out := make(map[string]domain.Tally)
	byCurrency := make(map[string][]chargeLine)
	digests := make(map[string]*big.Int)
	lines := make(map[string]bool, len(charges))
	for _, r := range charges {
		// A price version has one unit price, a meter one aggregation: two
		// make two lines of one id.
		line := r.Currency + " " + domain.LineID(r.MeterCode, r.PriceVersion, r.DimensionsKey, r.Unpriced)
		if lines[line] {
			return nil, nil, inbox.Permanent(inbox.ReasonPriceVersionConflict, fmt.Errorf(
				"%s %s: charges of %s carry different unit prices or aggregations", tenantID, period, line))
		}
		lines[line] = true
		byCurrency[r.Currency] = append(byCurrency[r.Currency], *r)
		t := out[r.Currency]
		t.Charges += r.Charges
		t.ChargeAmount = t.ChargeAmount.Add(r.Amount)
		// The currency's digest is the sum of its lines'.
		sum, ok := digests[r.Currency]
		if !ok {
			sum = new(big.Int)
			digests[r.Currency] = sum
		}
		sum.Add(sum, r.Digest)
		t.ChargeDigest = sum.String()
		out[r.Currency] = t
	}
	for _, r := range adjustments {
		t := out[r.Currency]
		t.Adjustments, t.AdjustmentAmount, t.AdjustmentDigest = r.Adjustments, r.Amount, r.Digest
		out[r.Currency] = t
	}
	return out, byCurrency, nil
}

// checkClose maps the close rules' verdict to the inbox's: wait for missing
// charges or adjustments, quarantine a close that can never match.
func (a *App) checkClose(ctx context.Context, e *envelope.Envelope, p events.BillingPeriodClosed, want, have map[string]domain.Tally) error {
	err := domain.CheckClose(want, have)
	var incomplete *domain.IncompleteError
	var counts *domain.CountsMismatchError
	var digests *domain.DigestMismatchError
	var totals *domain.TotalsMismatchError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &incomplete):
		a.log.InfoContext(ctx, "period close deferred: charges or adjustments still to come", "event_id", e.EventID,
			"tenant_id", e.TenantID, "period", p.Period, "detail", err.Error())
		return inbox.DeferUntil(CloseKey(e.TenantID, p.Period))
	case errors.As(err, &counts):
		return inbox.Permanent(inbox.ReasonCloseCountsMismatch, err)
	case errors.As(err, &digests):
		return inbox.Permanent(inbox.ReasonCloseDigestMismatch, err)
	case errors.As(err, &totals):
		return inbox.Permanent(inbox.ReasonCloseTotalsMismatch, err)
	default:
		return err
	}
}

// groupOf is the line group a ChargeLineSums row reads, with its version's
// pricing when recorded.
func groupOf(l db.ChargeLineSumsRow) (domain.Group, error) {
	g := domain.Group{
		MeterCode: l.MeterCode, PriceVersion: l.PriceVersion, DimensionsKey: l.DimensionsKey, Unpriced: l.Unpriced,
		Aggregation: l.Aggregation, UnitPrice: l.UnitPrice, ChargeCount: l.ChargeCount, Sum: l.Quantity, Amount: l.Amount,
		Distinct: l.DistinctValues,
	}
	if l.Figure.Valid {
		g.Figure = &l.Figure.Decimal
	}
	if l.Pricing != nil {
		p, err := pricing.Parse(l.Pricing)
		if err != nil {
			return domain.Group{}, fmt.Errorf("line %s: pricing of its version: %w", g.LineID(), err)
		}
		g.Pricing = &p
	}
	return g, nil
}

// issue issues one open invoice of a closed period whose charges and
// adjustments match the close's tally want: it materialises the charge and
// unpriced lines (one per meter, price version, price dimensions and
// unpriced, tallied by the close: tallied), computes each line's quantity by its meter's
// aggregation and prices it (domain.Group.Price: checked against its
// charges' own amounts), checks the charges' count and own amounts against
// the tally, adds the rounding line, takes the tenant's next invoice number
// and returns the InvoiceIssued to publish (ChargeLines counts the charge
// and unpriced lines, Charges their charges).
func (a *App) issue(ctx context.Context, q *db.Queries, e *envelope.Envelope, period string, invoiceID uuid.UUID,
	currency string, tallied []chargeLine, want domain.Tally, fees []events.FeeLine, rates []events.TaxRate, end, now time.Time) (envelope.Envelope, error) {
	arg := db.ChargeLineSumsParams{TenantID: e.TenantID, Period: period, Currency: currency}
	for _, l := range tallied {
		arg.MeterCodes, arg.PriceVersions = append(arg.MeterCodes, l.MeterCode), append(arg.PriceVersions, l.PriceVersion)
		arg.DimensionsKeys, arg.Unpriceds = append(arg.DimensionsKeys, l.DimensionsKey), append(arg.Unpriceds, l.Unpriced)
		arg.Aggregations, arg.UnitPrices = append(arg.Aggregations, l.Aggregation), append(arg.UnitPrices, l.UnitPrice)
		arg.Quantities, arg.ChargeCounts = append(arg.Quantities, l.Quantity), append(arg.ChargeCounts, l.Charges)
		arg.Amounts, arg.Distincts = append(arg.Amounts, l.Amount), append(arg.Distincts, l.Distinct)
	}
	sums, err := q.ChargeLineSums(ctx, arg)
	if err != nil {
		return envelope.Envelope{}, fmt.Errorf("group charge lines of %s: %w", invoiceID, err)
	}
	var charges int64
	chargeAmount, linesAmount := decimal.Zero, decimal.Zero // the charges' own amounts; the lines'
	lines := db.InsertChargeLinesParams{InvoiceID: invoiceID}
	for _, l := range sums {
		g, err := groupOf(l)
		if err != nil {
			return envelope.Envelope{}, inbox.Permanent(inbox.ReasonLineAmountMismatch, fmt.Errorf("invoice %s: %w", invoiceID, err))
		}
		line, err := g.Price(true)
		if err != nil {
			return envelope.Envelope{}, inbox.Permanent(inbox.ReasonLineAmountMismatch, fmt.Errorf("invoice %s: %w", invoiceID, err))
		}
		charges += l.ChargeCount
		chargeAmount, linesAmount = chargeAmount.Add(l.Amount), linesAmount.Add(line.Amount)
		lines.Kinds, lines.DimensionsKeys = append(lines.Kinds, g.Kind()), append(lines.DimensionsKeys, g.DimensionsKey)
		lines.MeterCodes, lines.PriceVersions = append(lines.MeterCodes, l.MeterCode), append(lines.PriceVersions, l.PriceVersion)
		lines.UnitPrices, lines.Quantities = append(lines.UnitPrices, l.UnitPrice), append(lines.Quantities, line.Quantity)
		lines.ChargeCounts, lines.Amounts = append(lines.ChargeCounts, l.ChargeCount), append(lines.Amounts, line.Amount)
	}
	if err := q.InsertChargeLines(ctx, lines); err != nil {
		return envelope.Envelope{}, fmt.Errorf("write charge lines of %s: %w", invoiceID, err)
	}
	// The lines' counts and sums must add up to the close's tally.
	if charges != want.Charges || !chargeAmount.Equal(want.ChargeAmount) {
		return envelope.Envelope{}, inbox.Permanent(inbox.ReasonCloseCountsMismatch, fmt.Errorf(
			"invoice %s: the charge lines count %d charges of %s, the close %d of %s",
			invoiceID, charges, chargeAmount, want.Charges, want.ChargeAmount))
	}

	feeAmount, err := writeFeeLines(ctx, q, e, invoiceID, fees)
	if err != nil {
		return envelope.Envelope{}, err
	}
	amounts, err := domain.Issue(linesAmount.Add(feeAmount).Add(want.AdjustmentAmount), currency, rates)
	if err != nil {
		return envelope.Envelope{}, inbox.Permanent(inbox.ReasonUnknownCurrency, err)
	}
	if !amounts.Rounding.IsZero() {
		if err := q.AddRoundingLine(ctx, db.AddRoundingLineParams{
			InvoiceID: invoiceID, OriginEventID: e.EventID, Amount: amounts.Rounding,
		}); err != nil {
			return envelope.Envelope{}, fmt.Errorf("add rounding line to %s: %w", invoiceID, err)
		}
	}
	if err := writeTaxLines(ctx, q, e, invoiceID, amounts.Taxes); err != nil {
		return envelope.Envelope{}, err
	}
	credits, err := drawCredits(ctx, q, e, invoiceID, currency, end, amounts.Total)
	if err != nil {
		return envelope.Envelope{}, err
	}
	due := amounts.Total.Add(credits)
	number, err := q.NextInvoiceNumber(ctx, e.TenantID)
	if err != nil {
		return envelope.Envelope{}, fmt.Errorf("take invoice number of %s: %w", e.TenantID, err)
	}
	ev, err := events.Caused(e, events.InvoiceIssued{
		InvoiceID: invoiceID, Number: number, Period: period, Currency: currency,
		ChargeLines: int64(len(sums)), Charges: charges, Adjustments: want.Adjustments,
		Subtotal: amounts.Subtotal, Rounding: amounts.Rounding, TaxTotal: amounts.TaxTotal, Total: amounts.Total,
		CreditsApplied: credits, AmountDue: due, IssuedAt: now,
	}, invoiceMeta(e, invoiceID, 1, now))
	if err != nil {
		return envelope.Envelope{}, err
	}
	n, err := q.IssueInvoice(ctx, db.IssueInvoiceParams{
		InvoiceID: invoiceID, Number: number, Subtotal: amounts.Subtotal, TaxTotal: amounts.TaxTotal, Total: amounts.Total,
		CreditsApplied: credits, AmountDue: due, IssuedAt: now,
		CloseEventID: e.EventID, IssuedEventID: ev.EventID,
	})
	if err != nil {
		return envelope.Envelope{}, fmt.Errorf("issue invoice %s: %w", invoiceID, err)
	}
	if n != 1 {
		return envelope.Envelope{}, fmt.Errorf("issue invoice %s: not open any more", invoiceID)
	}
	return ev, nil
}

// writeFeeLines writes the close's fixed-fee and true-up lines of the
// invoice's currency and returns what they sum to.
func writeFeeLines(ctx context.Context, q *db.Queries, e *envelope.Envelope, invoiceID uuid.UUID, fees []events.FeeLine) (decimal.Decimal, error) {
	sum := decimal.Zero
	if len(fees) == 0 {
		return sum, nil
	}
	arg := db.InsertFeeLinesParams{InvoiceID: invoiceID, OriginEventID: e.EventID}
	for _, f := range fees {
		arg.Kinds, arg.PlanCodes = append(arg.Kinds, f.Kind), append(arg.PlanCodes, f.PlanCode)
		arg.PlanVersions, arg.FeeCodes = append(arg.PlanVersions, f.PlanVersion), append(arg.FeeCodes, f.FeeCode)
		arg.FeeNames, arg.Days = append(arg.FeeNames, f.Name), append(arg.Days, int32(f.Days))
		arg.PeriodDays, arg.Amounts = append(arg.PeriodDays, int32(f.PeriodDays)), append(arg.Amounts, f.Amount)
		sum = sum.Add(f.Amount)
	}
	if err := q.InsertFeeLines(ctx, arg); err != nil {
		return decimal.Decimal{}, fmt.Errorf("write fee lines of %s: %w", invoiceID, err)
	}
	return sum, nil
}

// periodEnd is when the closed period ends in the tenant's zone, as billing
// sent it; for a close from before it did, the end of the month in UTC.
func periodEnd(p events.BillingPeriodClosed) time.Time {
	if !p.PeriodEnd.IsZero() {
		return p.PeriodEnd
	}
	start, err := events.ParsePeriod(p.Period)
	if err != nil {
		return p.ClosedAt
	}
	return start.AddDate(0, 1, 0)
}

// writeTaxLines writes the invoice's tax lines, in their rates' order.
func writeTaxLines(ctx context.Context, q *db.Queries, e *envelope.Envelope, invoiceID uuid.UUID, taxes []domain.TaxLine) error {
	if len(taxes) == 0 {
		return nil
	}
	arg := db.InsertTaxLinesParams{InvoiceID: invoiceID, OriginEventID: e.EventID}
	for _, t := range taxes {
		arg.TaxCodes, arg.TaxNames = append(arg.TaxCodes, t.Code), append(arg.TaxNames, t.Name)
		arg.TaxRates, arg.Amounts = append(arg.TaxRates, t.Rate), append(arg.Amounts, t.Amount)
	}
	if err := q.InsertTaxLines(ctx, arg); err != nil {
		return fmt.Errorf("write tax lines of %s: %w", invoiceID, err)
	}
	return nil
}

// checkAggregate refuses an event whose payload does not name the
// aggregate it belongs to.
func checkAggregate(e *envelope.Envelope, aggregateType, aggregateID string) error {
	if e.AggregateType != aggregateType || e.AggregateID != aggregateID {
		return inbox.Permanent(inbox.ReasonAggregateMismatch, fmt.Errorf("%s %s of aggregate %s/%s carries %s/%s",
			e.EventType, e.EventID, e.AggregateType, e.AggregateID, aggregateType, aggregateID))
	}
	return nil
}

// invoiceMeta is the metadata of an event of invoice invoiceID at version,
// caused by consumed event e (see events.Caused).
func invoiceMeta(e *envelope.Envelope, invoiceID uuid.UUID, version int64, at time.Time) events.Meta {
	return events.Meta{
		Producer: Producer, TenantID: e.TenantID, AggregateID: invoiceID.String(), AggregateVersion: version, OccurredAt: at,
	}
}
