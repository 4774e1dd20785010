package app_test

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	bt "github.com/usagebilling/billing/services/billing/internal/billingtest"
)

// A charge, once rated, is never edited, deleted or truncated, by billing
// or by anyone with a connection: each statement fails with an integrity
// violation (23000) and the charge stays as it was (migration 0010).
func TestChargesAndAdjustmentsAreImmutable(t *testing.T) {
	t.Parallel()
	pool := bt.NewPool(t)
	svc := newClock(jan10).service(pool)
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, pool, ib)
	bt.Decide(t, pool, ib, priceV1("acme").Raw(t))
	bt.Decide(t, pool, ib, usageAt("acme", 0, "3", jan10).Raw(t))
	// An adjustment as billing would write it (insert is what it does).
	if _, err := pool.Exec(t.Context(), `
		INSERT INTO adjustment (adjustment_id, event_id, tenant_id, correction_of, amount, currency, reason, period, actor)
		SELECT gen_random_uuid(), gen_random_uuid(), tenant_id, charge_id, -1, currency, 'r', period, 'test' FROM charge WHERE tenant_id = 'acme'`); err != nil {
		t.Fatal(err)
	}
	const state = `SELECT (SELECT row_to_json(c)::text FROM charge c WHERE tenant_id = 'acme') ||
		(SELECT row_to_json(a)::text FROM adjustment a WHERE tenant_id = 'acme')`
	var before string
	if err := pool.QueryRow(t.Context(), state).Scan(&before); err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		`UPDATE charge SET amount = amount * 2, quantity = quantity * 2 WHERE tenant_id = 'acme'`,
		`UPDATE charge SET period = '2026-02' WHERE tenant_id = 'acme'`,
		`DELETE FROM charge WHERE tenant_id = 'acme'`,
		`TRUNCATE charge CASCADE`,
		`UPDATE adjustment SET amount = -100 WHERE tenant_id = 'acme'`,
		`DELETE FROM adjustment WHERE tenant_id = 'acme'`,
		`TRUNCATE adjustment`,
	} {
		_, err := pool.Exec(t.Context(), sql)
		var pg *pgconn.PgError
		if !errors.As(err, &pg) || pg.Code != "23000" {
			t.Errorf("%s: %v, want an integrity violation (23000)", sql, err)
		}
	}
	var after string
	if err := pool.QueryRow(t.Context(), state).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("the charge or its adjustment changed:\n%s\n%s", before, after)
	}
}
