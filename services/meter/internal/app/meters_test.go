package app_test

import (
	"context"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/pgmigrate"
	"github.com/usagebilling/billing/services/meter"
	"github.com/usagebilling/billing/services/meter/internal/app"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// beforeCatalog is the meter's schema as it stood before the meter catalog
// (migrations 0001 to 0003), with the shared sets.
var beforeCatalog = pgtest.Template{
	Name: "meter_before_catalog",
	Migrate: func(_ context.Context, url string) error {
		sets := meter.Spec.Sets()
		own := sets[len(sets)-1]
		old := fstest.MapFS{}
		err := fs.WalkDir(own.FS, ".", func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".sql") || path >= "0004" {
				return err
			}
			b, err := fs.ReadFile(own.FS, path)
			old[path] = &fstest.MapFile{Data: b}
			return err
		})
		if err != nil {
			return err
		}
		own.FS = old
		return pgmigrate.Up(url, append(sets[:len(sets)-1:len(sets)-1], own)...)
	},
}

// The catalog migration implies a sum meter without dimensions for each
// meter code priced before it, unpublished; the background work publishes
// their MeterDefined once, and later prices of those codes imply nothing.
func TestCatalogMigrationImpliesMetersOfExistingPrices(t *testing.T) {
	url := pgtest.NewDB(t, beforeCatalog)
	ctx := t.Context()
	exec := func(sql string) {
		t.Helper()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`INSERT INTO price_series (tenant_id, meter_code, currency, last_version) VALUES
		('t1', 'api_calls', 'USD', 2), ('t2', 'api_calls', 'EUR', 1), ('t1', 'storage', 'USD', 1)`)
	exec(`INSERT INTO price (price_id, tenant_id, meter_code, currency, version, unit_price, effective_at, activated_at, event_id, actor) VALUES
		(gen_random_uuid(), 't1', 'api_calls', 'USD', 1, 1, now(), now(), gen_random_uuid(), 'admin'),
		(gen_random_uuid(), 't1', 'api_calls', 'USD', 2, 2, now(), now(), gen_random_uuid(), 'admin'),
		(gen_random_uuid(), 't2', 'api_calls', 'EUR', 1, 1, now(), now(), gen_random_uuid(), 'admin'),
		(gen_random_uuid(), 't1', 'storage', 'USD', 1, 1, now(), now(), gen_random_uuid(), 'admin')`)
	if err := pgmigrate.Up(url, meter.Spec.Sets()...); err != nil {
		t.Fatalf("migrate up: %v", err)
	}
	db, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM meter WHERE implied AND aggregation = 'sum' AND dimensions = '{}'
		AND name = code AND event_type = code AND event_id IS NULL`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d unpublished implied meters (%v), want api_calls and storage", n, err)
	}
	if err := db.QueryRow(ctx, `SELECT count(*) FROM price WHERE dimensions = '{}'`).Scan(&n); err != nil || n != 4 {
		t.Fatalf("%d prices without dimensions (%v), want 4", n, err)
	}

	a := app.New(app.Deps{Pool: db}, app.Config{})
	if got, err := a.PublishPendingMeters(ctx); err != nil || got != 2 {
		t.Fatalf("published %d (%v), want 2", got, err)
	}
	if got, err := a.PublishPendingMeters(ctx); err != nil || got != 0 {
		t.Fatalf("published %d again (%v), want 0", got, err)
	}
	evs := published(t, db)
	if len(evs) != 0 {
		t.Fatalf("%d price events, want none", len(evs))
	}
	defs := meterDefinitions(t, db)
	if len(defs) != 2 || defs[0].Code != "api_calls" || defs[1].Code != "storage" {
		t.Fatalf("MeterDefined %+v, want api_calls and storage", defs)
	}
	for _, d := range defs {
		if !d.Implied || d.Aggregation != "sum" || d.EventType != d.Code || d.Name != d.Code || len(d.Dimensions) != 0 {
			t.Fatalf("MeterDefined %+v", d)
		}
		m, err := a.GetMeter(ctx, d.Code)
		if err != nil || m.EventID == nil || !m.DefinedAt.Equal(d.DefinedAt) {
			t.Fatalf("meter %s: %+v %v", d.Code, m, err)
		}
	}
	// Its event recorded, the definition is immutable again.
	if _, err := db.Exec(ctx, `UPDATE meter SET event_id = gen_random_uuid()`); err == nil || !strings.Contains(err.Error(), "immutable") {
		t.Fatalf("event id rewritten: %v", err)
	}
	if err := activate(t, a, "after", time.Time{}); err != nil {
		t.Fatal(err)
	}
	if defs := meterDefinitions(t, db); len(defs) != 2 {
		t.Fatalf("%d MeterDefined after a price of an implied meter, want 2", len(defs))
	}
}

// meterDefinitions are the MeterDefined events in meter's outbox, in
// append order.
func meterDefinitions(t *testing.T, pool *pgxpool.Pool) []events.MeterDefined {
	t.Helper()
	var out []events.MeterDefined
	for _, d := range outbox(t, pool) {
		if md, ok := d.Payload.(events.MeterDefined); ok {
			if d.Envelope.TenantID != events.CatalogTenant || d.Envelope.AggregateID != md.Code {
				t.Fatalf("MeterDefined of %s on %s/%s", md.Code, d.Envelope.TenantID, d.Envelope.AggregateID)
			}
			out = append(out, md)
		}
	}
	return out
}
