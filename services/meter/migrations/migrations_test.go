package migrations_test

import (
	"context"
	"os"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/pgmigrate"
	"github.com/usagebilling/billing/services/meter"
	"github.com/usagebilling/billing/testkit/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// The service's own schema with the shared ones it is deployed with.
func TestUpDownUp(t *testing.T) { pgtest.CheckUpDownUp(t, meter.Spec.Sets()...) }

// Migration 0007 records each price entry (a series' dimension set) that
// the versions already activated name, once.
func TestPriceEntriesFromExistingVersions(t *testing.T) {
	url := pgtest.MigratedTo(t, 6, meter.Spec.Sets()...)
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), `
		INSERT INTO price_series (tenant_id, meter_code, currency, last_version)
		VALUES ('t1', 'api', 'USD', 3), ('t1', 'api', 'EUR', 1), ('t2', 'api', 'USD', 1);
		INSERT INTO price (price_id, tenant_id, meter_code, currency, version, unit_price, effective_at, activated_at, event_id, actor, dimensions)
		SELECT gen_random_uuid(), t, 'api', c, v, 1, now(), now(), gen_random_uuid(), 'test', d::jsonb
		FROM (VALUES ('t1', 'USD', 1, '{}'), ('t1', 'USD', 2, '{"region": "eu"}'), ('t1', 'USD', 3, '{"region":"eu"}'),
		             ('t1', 'EUR', 1, '{}'), ('t2', 'USD', 1, '{}')) AS p(t, c, v, d)`); err != nil {
		t.Fatal(err)
	}
	if err := pgmigrate.Up(url, meter.Spec.Sets()...); err != nil {
		t.Fatal(err)
	}
	rows, err := conn.Query(t.Context(), `SELECT tenant_id || ' ' || currency || ' ' || dimensions::text FROM price_entry ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`t1 EUR {}`, `t1 USD {"region": "eu"}`, `t1 USD {}`, `t2 USD {}`}
	if !slices.Equal(entries, want) {
		t.Fatalf("entries %q, want %q", entries, want)
	}
}
