package app_test

import (
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/usagebilling/billing/services/query/internal/db"
	"github.com/usagebilling/billing/services/query/internal/querytest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// Every read of projected_event by tenant goes through an index that
// leads to its rows, whether the events are the ones that come once per
// fact or the few others: with 1,500 usage facts and their charges in each
// of two tenants' month beside a handful of adjustments, invoices,
// correction notes and closed periods, each read of a page (100 rows)
// reads at most a few pages' worth of rows, where a scan would read the
// 6,000 per-fact events. And projected_event_tenant_idx, which serves the
// other types, holds no entry of the per-fact ones (docs/cpu-per-fact.md,
// step 22): its partition's index stays at its metapage and one leaf.
func TestTenantReadsFindTheirRowsByIndex(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, querytest.Template)
	const facts, limit = 1500, 100
	if _, err := pool.Exec(ctx, `
		WITH u AS (
		    SELECT gen_random_uuid() AS id, t AS tenant_id, g
		    FROM unnest(ARRAY['acme', 'other']) t CROSS JOIN generate_series(1, $1::int) g
		), usage AS (
		    INSERT INTO projected_event (event_id, event_type, tenant_id, aggregate_type, aggregate_id, aggregate_version,
		                                 occurred_at, subject_id, period, meter_code, currency, quantity, payload)
		    SELECT u.id, 'UsageAccepted', u.tenant_id, 'UsageFact', u.id::text, 1, '2026-11-03T10:00:00Z', gen_random_uuid(),
		           '2026-11', 'calls', 'USD', 1, '{}'
		    FROM u
		)
		INSERT INTO projected_event (event_id, event_type, tenant_id, aggregate_type, aggregate_id, aggregate_version,
		                             occurred_at, subject_id, origin_event_id, period, meter_code, currency,
		                             quantity, unit_price, amount, payload)
		SELECT gen_random_uuid(), 'ChargeRated', u.tenant_id, 'Charge', gen_random_uuid()::text, 1, '2026-11-03T10:00:00Z',
		       gen_random_uuid(), u.id, '2026-11', 'calls', 'USD', 1, 0.001, 0.001,
		       jsonb_build_object('late', u.g <= 5, 'occurredAt', '2026-10-30T10:00:00Z')
		FROM u`, facts); err != nil {
		t.Fatal(err)
	}
	invoice := uuid.New()
	if _, err := pool.Exec(ctx, `
		INSERT INTO projected_event (event_id, event_type, tenant_id, aggregate_type, aggregate_id, aggregate_version,
		                             occurred_at, subject_id, origin_event_id, period, currency, amount, payload)
		SELECT gen_random_uuid(), o.event_type, 'acme', 'Other', gen_random_uuid()::text, 1, '2026-11-03T10:00:00Z',
		       CASE WHEN o.event_type = 'InvoiceIssued' THEN gen_random_uuid() END,
		       CASE WHEN o.event_type = 'InvoiceCorrectionIssued' THEN gen_random_uuid() END,
		       o.period, 'USD', 1, o.payload
		FROM (VALUES ('AdjustmentPosted', '2026-11', '{}'::jsonb), ('AdjustmentPosted', '2026-11', '{}'),
		             ('InvoiceIssued', '2026-11', '{}'), ('InvoiceIssued', '2026-10', '{}'),
		             ('InvoiceCorrectionIssued', '2026-11', jsonb_build_object('invoiceId', $1::uuid)),
		             ('BillingPeriodClosed', '2026-10', '{"periodEnd": "2026-11-01T00:00:00Z"}'),
		             ('BillingPeriodClosed', '2026-09', '{"periodEnd": "2026-10-01T00:00:00Z"}')) o(event_type, period, payload)`,
		invoice); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE projected_event`); err != nil {
		t.Fatal(err)
	}

	q := func(rec *pgtest.Recorder) *db.Queries { return db.New(rec) }
	reads := map[string]func(rec *pgtest.Recorder) error{
		"ReconciliationUsage": func(rec *pgtest.Recorder) error {
			_, err := q(rec).ReconciliationUsage(ctx, db.ReconciliationUsageParams{TenantID: "acme", Period: "2026-11", RowLimit: limit})
			return err
		},
		"ReconciliationCharges": func(rec *pgtest.Recorder) error {
			_, err := q(rec).ReconciliationCharges(ctx, db.ReconciliationChargesParams{TenantID: "acme", Period: "2026-11", RowLimit: limit})
			return err
		},
		"ReconciliationChargeObservations": func(rec *pgtest.Recorder) error {
			_, err := q(rec).ReconciliationChargeObservations(ctx, db.ReconciliationChargeObservationsParams{TenantID: "acme", Period: "2026-11", RowLimit: limit})
			return err
		},
		"ChargeFacts": func(rec *pgtest.Recorder) error {
			_, err := q(rec).ChargeFacts(ctx, db.ChargeFactsParams{TenantID: "acme", Period: "2026-11", Dimensions: []byte("{}"), RowLimit: limit})
			return err
		},
		"LateCharges": func(rec *pgtest.Recorder) error {
			_, err := q(rec).LateCharges(ctx, db.LateChargesParams{TenantID: "acme", Period: "2026-11", RowLimit: limit})
			return err
		},
		"ReconciliationAdjustments": func(rec *pgtest.Recorder) error {
			_, err := q(rec).ReconciliationAdjustments(ctx, db.ReconciliationAdjustmentsParams{TenantID: "acme", Period: "2026-11", RowLimit: limit})
			return err
		},
		"ReconciliationInvoices": func(rec *pgtest.Recorder) error {
			_, err := q(rec).ReconciliationInvoices(ctx, db.ReconciliationInvoicesParams{TenantID: "acme", Period: "2026-11", RowLimit: limit})
			return err
		},
		"ReconciliationCorrections": func(rec *pgtest.Recorder) error {
			_, err := q(rec).ReconciliationCorrections(ctx, db.ReconciliationCorrectionsParams{TenantID: "acme", Period: "2026-11", RowLimit: limit})
			return err
		},
	}
	projected := func(rel string) bool { return strings.HasPrefix(rel, "projected_event") }
	for name, read := range reads {
		plan := pgtest.Explain(t, pool, read)
		if n := plan.RowsRead(t, projected); n > 3*limit {
			t.Errorf("%s read %v rows of projected_event for a page of %d, want at most %d of the %d per-fact events: %s",
				name, n, limit, 3*limit, 4*facts, plan)
		}
	}

	var pages int64
	if err := pool.QueryRow(ctx, `
		SELECT pg_relation_size(i.inhrelid) / current_setting('block_size')::int
		FROM pg_inherits i
		WHERE i.inhparent = 'projected_event_tenant_idx'::regclass
		  AND i.inhrelid = (SELECT c.oid FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid
		                    WHERE x.indrelid = 'projected_event_default'::regclass
		                      AND c.oid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'projected_event_tenant_idx'::regclass))`).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if pages > 2 {
		t.Errorf("projected_event_tenant_idx on the default partition has %d pages after %d per-fact events and 7 others, want at most 2: it indexes the per-fact events", pages, 4*facts)
	}
}
