package operator

import (
	"context"
	"fmt"
	"time"

	"github.com/usagebilling/billing/pkg/ops"
	"github.com/usagebilling/billing/pkg/recon"
	"github.com/usagebilling/billing/services/query/internal/app"
	"github.com/usagebilling/billing/services/query/internal/domain"
)

// ReconcileTimeout bounds a reconciliation: it reads a whole period, page by
// page (a million facts takes minutes on a small machine), so the HTTP
// handlers that run one extend their request past the service's request
// timeout (HTTP_REQUEST_TIMEOUT) up to this.
const ReconcileTimeout = 15 * time.Minute

// Reconcile compares the tenant's usage facts, charges, invoice lines and
// query projection of period by origin event id, merging the services'
// reconciliation sets page by page (see domain.Reconcile). Billing names the
// months the period's charges touch; the other sets are read for those.
// Each page is its own snapshot: on a period still receiving traffic a
// mismatch can be a fact in flight, so recovery is declared on a quiet
// (closed) period.
func (o *Operator) Reconcile(ctx context.Context, tenantID, period string) (domain.Report, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops the streams' read-ahead
	months, err := o.months(ctx, tenantID, period)
	if err != nil {
		return domain.Report{}, err
	}
	local := o.local
	one := []string{period}
	src := domain.Sources{
		UsageFacts:        remoteSet[recon.UsageFact](ctx, o, "usage", recon.SetUsageFacts, tenantID, months),
		Charges:           remoteSet[recon.Charge](ctx, o, "billing", recon.SetCharges, tenantID, one),
		InvoiceCharges:    remoteSet[recon.InvoiceLine](ctx, o, "invoice", recon.SetInvoiceCharges, tenantID, months),
		QueryUsage:        localSet[recon.UsageFact](ctx, local[recon.SetUsageFacts], tenantID, months),
		QueryCharges:      localSet[recon.Charge](ctx, local[recon.SetCharges], tenantID, months),
		QueryObservations: localSet[domain.ChargeObservation](ctx, local[app.SetChargeObservations], tenantID, months),

		Adjustments:      remoteSet[recon.Adjustment](ctx, o, "billing", recon.SetAdjustments, tenantID, one),
		InvoiceLines:     remoteSet[recon.InvoiceLine](ctx, o, "invoice", recon.SetInvoiceLines, tenantID, months),
		Corrections:      remoteSet[recon.Correction](ctx, o, "invoice", recon.SetCorrections, tenantID, one),
		QueryAdjustments: localSet[recon.Adjustment](ctx, local[recon.SetAdjustments], tenantID, one),
		QueryCorrections: localSet[recon.Correction](ctx, local[recon.SetCorrections], tenantID, one),

		LineTotals:    remoteSet[recon.LineTotal](ctx, o, "invoice", recon.SetLineTotals, tenantID, months),
		QueryInvoices: localSet[recon.Invoice](ctx, local[recon.SetInvoices], tenantID, one),
		Prices:        remoteSet[recon.Price](ctx, o, "meter", recon.SetPrices, tenantID, one),
	}
	return domain.Reconcile(ctx, tenantID, period, src)
}

// months reads the months a period's reconciliation reads from billing.
func (o *Operator) months(ctx context.Context, tenantID, period string) ([]string, error) {
	var rows []recon.Month
	q := recon.Query{TenantID: tenantID, Period: period, Limit: ops.MaxLimit}
	if err := o.client.ReconciliationPage(ctx, "billing", recon.SetMonths, q, &rows); err != nil {
		return nil, fmt.Errorf("%w: billing: %w", ErrUpstream, err)
	}
	months := make([]string, len(rows))
	for i, m := range rows {
		months[i] = m.Period
	}
	return months, nil
}

// remoteSet streams a service's set of the tenant's months, merged.
func remoteSet[T recon.Row](ctx context.Context, o *Operator, service, set, tenantID string, months []string) *recon.Stream[T] {
	streams := make([]*recon.Stream[T], len(months))
	for i, m := range months {
		streams[i] = recon.Pages(ctx, func(ctx context.Context, after recon.Position, limit int) ([]T, error) {
			var rows []T
			q := recon.Query{TenantID: tenantID, Period: m, After: after, Limit: limit}
			if err := o.client.ReconciliationPage(ctx, service, set, q, &rows); err != nil {
				return nil, fmt.Errorf("%w: %s: %w", ErrUpstream, service, err)
			}
			return rows, nil
		})
	}
	return recon.Merge(streams...)
}

// localSet streams one of query's own sets of the tenant's months, merged.
func localSet[T recon.Row](ctx context.Context, read recon.SetFunc, tenantID string, months []string) *recon.Stream[T] {
	streams := make([]*recon.Stream[T], len(months))
	for i, m := range months {
		streams[i] = recon.Pages(ctx, func(ctx context.Context, after recon.Position, limit int) ([]T, error) {
			rows, err := read(ctx, recon.Query{TenantID: tenantID, Period: m, After: after, Limit: limit})
			out := make([]T, len(rows))
			for j, r := range rows {
				out[j] = r.(T)
			}
			return out, err
		})
	}
	return recon.Merge(streams...)
}
