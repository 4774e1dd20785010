package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/rule"
	"github.com/usagebilling/billing/services/invoice/internal/db"
	"github.com/usagebilling/billing/services/invoice/internal/domain"
	"github.com/usagebilling/billing/services/invoice/internal/webhook"
)

// Alert is a tenant's alert as the API shows it.
type Alert struct {
	AlertID   uuid.UUID       `json:"alertId"`
	TenantID  string          `json:"tenantId"`
	Kind      string          `json:"kind"`
	MeterCode string          `json:"meterCode,omitempty"`
	Currency  string          `json:"currency,omitempty"`
	Threshold decimal.Decimal `json:"threshold"`
	Actor     string          `json:"actor"`
	CreatedAt time.Time       `json:"createdAt"`
}

// AlertTriggered is the data of an alert.triggered webhook (DESIGN.md
// section 7): the alert, the period, the running figure that reached the
// threshold and when.
type AlertTriggered struct {
	AlertID   uuid.UUID       `json:"alertId"`
	TenantID  string          `json:"tenantId"`
	Period    string          `json:"period"`
	Kind      string          `json:"kind"`
	MeterCode string          `json:"meterCode,omitempty"`
	Currency  string          `json:"currency,omitempty"`
	Threshold decimal.Decimal `json:"threshold"`
	Value     decimal.Decimal `json:"value"`
	At        time.Time       `json:"at"`
}

// AlertKey is the Webhook-Id of an alert's crossing in a period: one per
// alert and period, whatever writes it again.
func AlertKey(alertID uuid.UUID, period string) string {
	return "alert_" + alertID.String() + "_" + period
}

// CreateAlert is the command to define a tenant's alert, recorded with its
// actor (the token's subject).
type CreateAlert struct {
	TenantID, Actor string
	Alert           domain.Alert
}

// ErrAlertNotFound: the tenant has no live alert with that id.
var ErrAlertNotFound = errors.New("alert not found")

// CreateAlert records an alert in tx, refused past Config.MaxAlerts live
// alerts of the tenant (422 limit_exceeded). On an error the caller must
// not commit.
func (a *App) CreateAlert(ctx context.Context, tx pgx.Tx, cmd CreateAlert) (Alert, error) {
	if cmd.Actor == "" {
		return Alert{}, ErrNoActor
	}
	q := db.New(tx)
	if err := q.LockTenantAlerts(ctx, cmd.TenantID); err != nil {
		return Alert{}, fmt.Errorf("lock the alerts of %s: %w", cmd.TenantID, err)
	}
	live, err := q.CountLiveAlerts(ctx, cmd.TenantID)
	if err != nil {
		return Alert{}, fmt.Errorf("count the alerts of %s: %w", cmd.TenantID, err)
	}
	if live >= int64(a.maxAlerts) {
		return Alert{}, rule.Errorf(rule.Unprocessable, "limit_exceeded",
			"tenant %s has %d alerts, the most it may have (INVOICE_MAX_ALERTS); delete one first", cmd.TenantID, a.maxAlerts)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return Alert{}, fmt.Errorf("new alert id: %w", err)
	}
	now := a.now().UTC().Truncate(time.Microsecond)
	al := cmd.Alert
	if err := q.InsertAlert(ctx, db.InsertAlertParams{
		AlertID: id, TenantID: cmd.TenantID, Kind: al.Kind, MeterCode: text(al.MeterCode), Currency: text(al.Currency),
		Threshold: al.Threshold, Actor: cmd.Actor, CreatedAt: now,
	}); err != nil {
		return Alert{}, fmt.Errorf("insert alert: %w", err)
	}
	return Alert{AlertID: id, TenantID: cmd.TenantID, Kind: al.Kind, MeterCode: al.MeterCode, Currency: al.Currency,
		Threshold: al.Threshold, Actor: cmd.Actor, CreatedAt: now}, nil
}

func text(s string) pgtype.Text { return pgtype.Text{String: s, Valid: s != ""} }

// AlertPosition is an alert's place in its tenant's list.
type AlertPosition struct {
	CreatedAt time.Time `json:"c"`
	AlertID   uuid.UUID `json:"i"`
}

// Alerts reads a page of a tenant's live alerts in creation order after a
// position (zero: from the first).
func (a *App) Alerts(ctx context.Context, tenantID string, after AlertPosition, limit int32) ([]Alert, error) {
	rows, err := db.New(a.pool).ListAlerts(ctx, db.ListAlertsParams{
		TenantID: tenantID, AfterCreatedAt: after.CreatedAt, AfterID: after.AlertID, MaxRows: limit,
	})
	if err != nil {
		return nil, fmt.Errorf("list alerts of %s: %w", tenantID, err)
	}
	out := make([]Alert, len(rows))
	for i, r := range rows {
		out[i] = Alert{AlertID: r.AlertID, TenantID: r.TenantID, Kind: r.Kind, MeterCode: r.MeterCode.String,
			Currency: r.Currency.String, Threshold: r.Threshold, Actor: r.Actor, CreatedAt: r.CreatedAt.UTC()}
	}
	return out, nil
}

// DeleteAlert deletes a tenant's live alert (ErrAlertNotFound when it has
// none of that id), recording who did: it is told no more; its row stays.
func (a *App) DeleteAlert(ctx context.Context, tenantID string, id uuid.UUID, actor string) error {
	if actor == "" {
		return ErrNoActor
	}
	now := a.now().UTC().Truncate(time.Microsecond)
	n, err := db.New(a.pool).DeleteAlert(ctx, db.DeleteAlertParams{
		TenantID: tenantID, AlertID: id, DeletedAt: &now, DeletedBy: text(actor),
	})
	if err != nil {
		return fmt.Errorf("delete alert %s: %w", id, err)
	}
	if n == 0 {
		return ErrAlertNotFound
	}
	return nil
}

// touch is what one applied charge or adjustment moved: a meter's period
// quantity (MeterCode, charges only) and a currency's running total.
type touch struct {
	TenantID, Period, MeterCode, Currency string
	EventID                               uuid.UUID
}

type tenantPeriod struct{ tenant, period string }

// evaluateAlerts decides, in the transaction that applied them, the alerts
// the touches may have taken to their thresholds: each pending alert
// (live, not reached in the period) of a meter or currency touched is
// locked, its running figure computed in the statements after the lock
// (which see every charge committed before), and when the figure is at or
// above its threshold one crossing of (alert, period) is recorded with its
// alert.triggered intents. A crossing recorded before (a redelivery, a
// replay, a figure that fell below and rose again) is never recorded
// twice. A batch that touches no pending alert takes no lock.
func (a *App) evaluateAlerts(ctx context.Context, tx pgx.Tx, touches []touch) error {
	if len(touches) == 0 {
		return nil
	}
	q := db.New(tx)
	pairs := map[tenantPeriod]bool{}
	var arg db.PendingAlertsParams
	// The last event touching each meter or currency of a period causes its
	// crossing.
	cause := map[string]uuid.UUID{}
	for _, t := range touches {
		tp := tenantPeriod{t.TenantID, t.Period}
		if !pairs[tp] {
			pairs[tp] = true
			arg.TenantIds, arg.Periods = append(arg.TenantIds, t.TenantID), append(arg.Periods, t.Period)
		}
		if t.MeterCode != "" {
			cause[figureKey(t.TenantID, t.Period, domain.AlertUsage, t.MeterCode)] = t.EventID
		}
		cause[figureKey(t.TenantID, t.Period, domain.AlertSpend, t.Currency)] = t.EventID
	}
	relevant := func(rows []db.PendingAlertsRow) []db.PendingAlertsRow {
		return slices.DeleteFunc(rows, func(r db.PendingAlertsRow) bool {
			_, ok := cause[figureKey(r.TenantID, r.Period, r.Kind, r.MeterCode.String+r.Currency.String)]
			return !ok
		})
	}
	pending, err := q.PendingAlerts(ctx, arg)
	if err != nil {
		return fmt.Errorf("read pending alerts: %w", err)
	}
	if pending = relevant(pending); len(pending) == 0 {
		return nil
	}
	ids := make([]uuid.UUID, 0, len(pending))
	for _, r := range pending {
		if len(ids) == 0 || ids[len(ids)-1] != r.AlertID {
			ids = append(ids, r.AlertID)
		}
	}
	locked, err := q.LockAlerts(ctx, ids)
	if err != nil {
		return fmt.Errorf("lock %d alerts: %w", len(ids), err)
	}
	// Read again after the lock: a transaction that held it may have
	// recorded a crossing meanwhile, or the alert been deleted.
	if pending, err = q.PendingAlerts(ctx, arg); err != nil {
		return fmt.Errorf("read pending alerts: %w", err)
	}
	pending = slices.DeleteFunc(relevant(pending), func(r db.PendingAlertsRow) bool { return !slices.Contains(locked, r.AlertID) })
	figures, err := runningFigures(ctx, q, pending)
	if err != nil {
		return err
	}
	now := a.now().UTC().Truncate(time.Microsecond)
	var rec db.RecordCrossingsParams
	reached := map[uuid.UUID]map[string]db.PendingAlertsRow{}
	for _, r := range pending {
		key := figureKey(r.TenantID, r.Period, r.Kind, r.MeterCode.String+r.Currency.String)
		v, ok := figures[key]
		if !ok || !domain.Reached(r.Threshold, v) {
			continue
		}
		id, err := uuid.NewV7()
		if err != nil {
			return fmt.Errorf("new crossing id: %w", err)
		}
		rec.AlertIds, rec.Periods, rec.CrossingIds = append(rec.AlertIds, r.AlertID), append(rec.Periods, r.Period), append(rec.CrossingIds, id)
		rec.TenantIds, rec.Values = append(rec.TenantIds, r.TenantID), append(rec.Values, v)
		rec.CauseEventIds = append(rec.CauseEventIds, cause[key])
		if reached[r.AlertID] == nil {
			reached[r.AlertID] = map[string]db.PendingAlertsRow{}
		}
		reached[r.AlertID][r.Period] = r
	}
	if len(rec.AlertIds) == 0 {
		return nil
	}
	rec.CrossedAt = now
	written, err := q.RecordCrossings(ctx, rec)
	if err != nil {
		return fmt.Errorf("record %d alert crossings: %w", len(rec.AlertIds), err)
	}
	notices := make([]webhook.Notice, 0, len(written))
	for _, w := range written {
		r := reached[w.AlertID][w.Period]
		data, err := json.Marshal(AlertTriggered{
			AlertID: r.AlertID, TenantID: r.TenantID, Period: r.Period, Kind: r.Kind, MeterCode: r.MeterCode.String,
			Currency: r.Currency.String, Threshold: r.Threshold,
			Value: figures[figureKey(r.TenantID, r.Period, r.Kind, r.MeterCode.String+r.Currency.String)], At: now,
		})
		if err != nil {
			return fmt.Errorf("encode alert.triggered: %w", err)
		}
		notices = append(notices, webhook.Notice{TenantID: r.TenantID, Key: AlertKey(r.AlertID, r.Period), EventID: w.CrossingID,
			EventType: webhook.TypeAlertTriggered, Type: webhook.TypeAlertTriggered, Created: now, Data: data})
	}
	return a.webhooks.RecordNotices(ctx, tx, notices...)
}

// figureKey names a running figure: a meter's period quantity (usage) or a
// currency's running total (spend) of a tenant's period.
func figureKey(tenantID, period, kind, of string) string {
	return tenantID + "\x00" + period + "\x00" + kind + "\x00" + of
}

// runningFigures computes the figures the pending alerts watch, by
// figureKey: a meter's period quantity by its aggregation over every charge
// of the period (MeterPeriodFigures, domain.MeterQuantity), a currency's
// running total the subtotal of the period's open invoice in it
// (runningTotal). Both read the batches' parts (invoice_line_part) and the
// lines' own rows, never the charges one by one; and the parts are folded
// as the charges are recorded (foldParts), so what they read is at most
// Config.PartsFoldAt + 1 rows a line, however many batches the period has
// had.
func runningFigures(ctx context.Context, q *db.Queries, pending []db.PendingAlertsRow) (map[string]decimal.Decimal, error) {
	meters := map[tenantPeriod][]string{}
	spends := map[tenantPeriod][]string{}
	seen := map[tenantPeriod]bool{}
	var order []tenantPeriod
	for _, r := range pending {
		tp := tenantPeriod{r.TenantID, r.Period}
		if !seen[tp] {
			seen[tp] = true
			order = append(order, tp)
		}
		switch {
		case r.Kind == domain.AlertSpend:
			if !slices.Contains(spends[tp], r.Currency.String) {
				spends[tp] = append(spends[tp], r.Currency.String)
			}
		case !slices.Contains(meters[tp], r.MeterCode.String):
			meters[tp] = append(meters[tp], r.MeterCode.String)
		}
	}
	out := map[string]decimal.Decimal{}
	for _, tp := range order {
		if len(meters[tp]) > 0 {
			rows, err := q.MeterPeriodFigures(ctx, db.MeterPeriodFiguresParams{TenantID: tp.tenant, Period: tp.period, MeterCodes: meters[tp]})
			if err != nil {
				return nil, fmt.Errorf("compute meter figures of %s %s: %w", tp.tenant, tp.period, err)
			}
			for _, r := range rows {
				out[figureKey(tp.tenant, tp.period, domain.AlertUsage, r.MeterCode)] = domain.MeterQuantity(domain.MeterFigure{
					Aggregation: r.Aggregation, Sum: r.Total, Charges: r.Charges, Max: r.MaxFigure, Latest: r.LatestFigure,
					Distinct: r.DistinctValues,
				})
			}
		}
		for _, cur := range spends[tp] {
			v, ok, err := runningTotal(ctx, q, tp.tenant, tp.period, cur)
			if err != nil {
				return nil, err
			}
			if ok {
				out[figureKey(tp.tenant, tp.period, domain.AlertSpend, cur)] = v
			}
		}
	}
	return out, nil
}

// runningTotal is the subtotal of the open invoice of a tenant's period in
// currency, as its read computes it: its charge and unpriced lines priced
// by their versions over their quantities so far (domain.Group.Price),
// plus its adjustment lines; false when the invoice is not open.
func runningTotal(ctx context.Context, q *db.Queries, tenantID, period, currency string) (decimal.Decimal, bool, error) {
	adj, err := q.OpenAdjustments(ctx, db.OpenAdjustmentsParams{TenantID: tenantID, Period: period, Currency: currency})
	if err != nil {
		return decimal.Decimal{}, false, fmt.Errorf("read the adjustments of %s %s %s: %w", tenantID, period, currency, err)
	}
	if !adj.Open {
		return decimal.Decimal{}, false, nil
	}
	rows, err := q.PartLineSums(ctx, db.PartLineSumsParams{TenantID: tenantID, Period: period, Currency: currency})
	if err != nil {
		return decimal.Decimal{}, false, fmt.Errorf("sum the lines of %s %s %s: %w", tenantID, period, currency, err)
	}
	total := adj.Amount
	for _, r := range rows {
		g, err := groupOf(db.ChargeLineSumsRow(r))
		if err != nil {
			return decimal.Decimal{}, false, err
		}
		line, err := g.Price(false)
		if err != nil {
			return decimal.Decimal{}, false, err
		}
		total = total.Add(line.Amount)
	}
	return total, true, nil
}
