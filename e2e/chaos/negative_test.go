//go:build chaos

package chaos_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/e2e/chaos"
)

// negativeControl shows that the checks can fail: after a clean run (which
// reconciles), one charge row is deleted and another duplicated directly in
// billing's database, and the reconciliation must fail naming both.
//
// Billing cannot write a second charge for one usage fact while
// charge_origin's unique constraints stand (charge_usage_event_id_key,
// charge_usage_id_key; charge itself is partitioned by month, decision
// 0025 (facts by month)): the corruption writes a copy straight into
// charge, past them, under a new charge id (a UUIDv7, so it lands in this
// month's partition) and event id. It runs last on its stack: the database
// is left corrupted.
func negativeControl(t *testing.T, h *chaos.Harness) {
	ctx := t.Context()
	sc := chaos.Scenario{
		Key: "neg", Title: "negative control", Load: chaos.LoadConfig{
			Facts: int(600 * scale()), Duration: 10 * time.Second, Workers: 4, MaxBatch: 40, DuplicateRate: 0.03,
			PriceChanges: []chaos.PriceChange{{At: 0.2, Lead: 4 * time.Second}},
		},
	}
	row, run, err := h.RunScenario(ctx, sc)
	row.Scenario = "neg clean run"
	addRow(row)
	if err != nil {
		t.Fatalf("clean run stopped: %v", err)
	}
	if err := run.Recon.Err(); err != nil || row.Verdict != "pass" {
		t.Fatalf("the clean run must reconcile before the corruption: %v %v", err, row.Problems)
	}

	tenant := run.Tenants[0]
	billing := h.DB["billing"]
	pick := func(offset int) (chargeID, eventID, usageEventID string) {
		t.Helper()
		err := billing.QueryRow(ctx, `
			SELECT charge_id::text, event_id::text, usage_event_id::text FROM charge c
			WHERE tenant_id = $1 AND NOT EXISTS (SELECT 1 FROM adjustment a WHERE a.correction_of = c.charge_id)
			ORDER BY charge_id OFFSET $2 LIMIT 1`, tenant, offset).Scan(&chargeID, &eventID, &usageEventID)
		if err != nil {
			t.Fatal(err)
		}
		return
	}
	delCharge, delEvent, delUsage := pick(3)
	dupOf, _, dupUsage := pick(7)
	tx, err := billing.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	// Behind billing's back: as the table's owner, past the trigger that
	// keeps charges immutable.
	if _, err := tx.Exec(ctx, `ALTER TABLE charge DISABLE TRIGGER charge_immutable`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM charge WHERE charge_id = $1::uuid`, delCharge); err != nil {
		t.Fatal(err)
	}
	var newCharge string
	err = tx.QueryRow(ctx, `
		INSERT INTO charge (charge_id, event_id, usage_event_id, usage_id, tenant_id, meter_code, currency, quantity,
		                    unit_price, price_version, amount, period, late, occurred_at)
		SELECT $2::uuid, gen_random_uuid(), usage_event_id, usage_id, tenant_id, meter_code, currency, quantity,
		       unit_price, price_version, amount, period, late, occurred_at
		FROM charge WHERE charge_id = $1::uuid
		RETURNING charge_id::text`, dupOf, uuid.Must(uuid.NewV7()).String()).Scan(&newCharge)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("deleted charge %s (usage event %s, ChargeRated %s); copied charge %s of usage event %s as %s",
		delCharge, delUsage, delEvent, dupOf, dupUsage, newCharge)

	// Both reconciliations must catch it: the chaos suite's, which holds
	// every row in memory, and the streaming one the soak uses.
	for _, rc := range []struct {
		name      string
		reconcile func(context.Context, map[string]*pgxpool.Pool, []string, *chaos.Ledger) (*chaos.Reconciliation, error)
	}{{"Reconcile", chaos.Reconcile}, {"ReconcileStream", chaos.ReconcileStream}} {
		t.Run(rc.name, func(t *testing.T) {
			rec, err := rc.reconcile(ctx, h.DB, run.Tenants, run.Ledger)
			corrupted(t, rec, err, rc.name, row.Facts, map[string]string{
				"the usage fact whose charge was deleted":         delUsage,
				"the deleted charge's event (its invoice charge)": delEvent,
				"the usage fact charged twice":                    dupUsage,
				"the original of the duplicated charge":           dupOf,
				"the duplicate charge":                            newCharge,
			}, []string{"charge " + delCharge + " deleted: named as usage event " + delUsage + " without a charge",
				"charge " + dupOf + " copied as " + newCharge + ": named as usage event " + dupUsage + " with 2 charges"})
		})
	}
}

// corrupted requires a reconciliation of the corrupted database to fail
// naming every id of want.
func corrupted(t *testing.T, rec *chaos.Reconciliation, err error, name string, facts int, want map[string]string, notes []string) {
	if err != nil {
		t.Fatal(err)
	}
	failure := rec.Err()
	bad := &chaos.Row{Scenario: "neg after corrupting billing (" + name + ")", Facts: facts, Reconciled: true,
		Lost: len(rec.Lost), Duplicated: len(rec.Duplicated), Mismatched: len(rec.Mismatch)}
	if failure == nil {
		bad.Verdict = "FAIL"
		addRow(bad)
		t.Fatalf("%s passed with a charge deleted and another duplicated", name)
	}
	t.Logf("%s fails as it must:\n%v", name, failure)
	msg := failure.Error()
	for what, id := range want {
		if !strings.Contains(msg, id) {
			t.Errorf("%s's failure does not name %s (%s)", name, what, id)
		}
	}
	bad.Verdict = "fails, as it must"
	bad.Notes = notes
	addRow(bad)
}
