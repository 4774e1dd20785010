package migrations_test

import (
	"testing"

	"github.com/usagebilling/billing/pkg/pgmigrate"
	"github.com/usagebilling/billing/services/billing"
)

// A database with charges of every kind of line (rated before charges by
// month, migrations 0016 and 0018, their ids of a time before this month)
// migrated to line parts
// (0020): each line's part is its charges' count, sums, peak, distinct
// values and latest charge (ties in occurrence to the larger source id),
// and the value sets are kept for the open period only (a closed one's
// are never read).
func TestLinePartsFromExistingCharges(t *testing.T) {
	url, conn := migratedTo(t, 15)
	// 30 charges a period and aggregation: quantities 1..10 three times,
	// values v0..v6, occurrences in five hours (ties broken by source id).
	if _, err := conn.Exec(t.Context(), `
		INSERT INTO charge (charge_id, event_id, usage_event_id, usage_id, tenant_id, meter_code, currency,
		                    quantity, unit_price, price_version, amount, period, late, occurred_at,
		                    source_system, source_event_id, aggregation, value)
		SELECT (lpad(to_hex(floor(extract(epoch FROM now() - interval '40 days') * 1000)::bigint), 12, '0')
		               || substr(replace(gen_random_uuid()::text, '-', ''), 13))::uuid,
		       gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), 't1', 'm_' || a, 'USD',
		       (i % 10) + 1, 0, 1, 0, p, false, (p || '-10')::timestamptz + (i % 5) * interval '1 hour',
		       'src', lpad(((i * 7) % 30)::text, 2, '0'), a, CASE WHEN a = 'unique_count' THEN 'v' || (i % 7) ELSE '' END
		FROM unnest(ARRAY['2026-01', '2026-02']) p, unnest(ARRAY['sum', 'max', 'latest', 'unique_count']) a,
		     generate_series(1, 30) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(t.Context(), `INSERT INTO billing_period (tenant_id, period, status, closed_by)
		VALUES ('t1', '2026-01', 'closed', 'system:test')`); err != nil {
		t.Fatal(err)
	}
	if err := pgmigrate.Up(url, billing.Spec.Sets()...); err != nil {
		t.Fatalf("up: %v", err)
	}
	// The parts against the charges, line by line.
	if n := count(t, conn, `
		SELECT count(*) FROM (
		    SELECT period, meter_code, count(*) AS charges, sum(quantity) AS total, max(quantity) AS peak,
		           count(DISTINCT value) FILTER (WHERE aggregation = 'unique_count') AS distinct_values,
		           (array_agg(source_event_id ORDER BY occurred_at DESC, source_event_id COLLATE "C" DESC)
		                FILTER (WHERE aggregation = 'latest'))[1] AS latest
		    FROM charge GROUP BY period, meter_code
		    EXCEPT
		    SELECT period, meter_code, charges, total, peak, new_values,
		           CASE WHEN has_latest THEN latest_source END
		    FROM charge_line_part) d`); n != 0 {
		t.Fatalf("%d lines whose part is not their charges'", n)
	}
	if n := count(t, conn, `SELECT count(*) FROM charge_line_part`); n != 8 {
		t.Fatalf("%d parts, want one for each of 8 lines", n)
	}
	if n := count(t, conn, `SELECT count(*) FROM charge_line_part WHERE meter_code = 'm_latest' AND latest_source = '28'`); n != 2 {
		t.Fatalf("%d latest lines end at source 28 (hour 4's largest id), want 2", n)
	}
	if n := count(t, conn, `SELECT count(*) FROM charge_line_value WHERE period = '2026-02'`); n != 7 {
		t.Fatalf("%d values kept for the open period, want 7", n)
	}
	if n := count(t, conn, `SELECT count(*) FROM charge_line_value WHERE period = '2026-01'`); n != 0 {
		t.Fatalf("%d values kept for the closed period, want none", n)
	}
}
