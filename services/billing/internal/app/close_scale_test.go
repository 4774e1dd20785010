package app_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/services/billing/internal/app"
	bt "github.com/usagebilling/billing/services/billing/internal/billingtest"
	"github.com/usagebilling/billing/services/billing/internal/db"
)

// longest records the longest statement a pool ran (a pgx tracer).
type longest struct {
	mu    sync.Mutex
	took  time.Duration
	sql   string
	start sync.Map // *pgx.Conn -> started
}

// reset forgets the longest statement so far.
func (l *longest) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.took, l.sql = 0, ""
}

// String is the longest statement's time and the first line of its text.
func (l *longest) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	name, _, _ := strings.Cut(strings.TrimSpace(l.sql), "\n")
	return fmt.Sprintf("%s: %.100s", l.took.Round(time.Millisecond), name)
}

type started struct {
	at  time.Time
	sql string
}

func (l *longest) TraceQueryStart(ctx context.Context, c *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	l.start.Store(c, started{time.Now(), d.SQL})
	return ctx
}

func (l *longest) TraceQueryEnd(_ context.Context, c *pgx.Conn, _ pgx.TraceQueryEndData) {
	v, ok := l.start.LoadAndDelete(c)
	if !ok {
		return
	}
	s := v.(started)
	took := time.Since(s.at)
	l.mu.Lock()
	defer l.mu.Unlock()
	if took > l.took {
		l.took, l.sql = took, s.sql
	}
}

// scaleFacts is the number of charges an at-scale test seeds: env's value,
// else def.
func scaleFacts(t *testing.T, env string, def int) int {
	t.Helper()
	s := os.Getenv(env)
	if s == "" {
		return def
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 1 {
		t.Fatalf("%s=%q: want a number of charges", env, s)
	}
	return v
}

// seedAtScale makes a service over a pool with the services'
// statement_timeout (30 s, DB_STATEMENT_TIMEOUT's default) whose longest
// statement trace records, and n charges of tenant in January 2026: one
// rated through the inbox, then copied straight into the charge table with
// generate_series (new ids), and its line's part as batches of 500 would
// have written and folded them. It returns the service, the seeding pool
// and the tracer.
func seedAtScale(t *testing.T, tenant string, n int, clock time.Time) (*app.App, *pgxpool.Pool, *longest) {
	t.Helper()
	seed := bt.NewPool(t)
	ctx := t.Context()
	cfg, err := pgxpool.ParseConfig(seed.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["statement_timeout"] = "30000" // as pkg/service sets DB_STATEMENT_TIMEOUT
	trace := &longest{}
	cfg.ConnConfig.Tracer = trace
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	svc := app.New(app.Deps{Pool: pool, Clock: func() time.Time { return clock }}, app.Config{})
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, seed, ib)
	bt.Decide(t, seed, ib, priceV1(tenant).Raw(t), usageAt(tenant, 0, "1", jan10).Raw(t))
	began := time.Now()
	// Every column copied from the rated charge but its ids, new for each;
	// the charge id a UUIDv7 of now (random after its milliseconds), so the
	// charge lands in this month's partition (decision 0025).
	var cols, vals string
	if err := seed.QueryRow(ctx, `
		SELECT string_agg(quote_ident(column_name), ', ' ORDER BY ordinal_position),
		       string_agg(CASE WHEN column_name = 'charge_id'
		                       THEN $$(lpad(to_hex(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0')
		                               || substr(replace(gen_random_uuid()::text, '-', ''), 13))::uuid$$
		                       WHEN column_name IN ('event_id', 'usage_event_id', 'usage_id')
		                       THEN 'gen_random_uuid()' ELSE 'c.' || quote_ident(column_name) END, ', ' ORDER BY ordinal_position)
		FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = 'charge' AND is_generated = 'NEVER'`).Scan(&cols, &vals); err != nil {
		t.Fatal(err)
	}
	if _, err := seed.Exec(ctx, `INSERT INTO charge (`+cols+`) SELECT `+vals+`
		FROM charge c CROSS JOIN generate_series(2, $2) WHERE c.tenant_id = $1`, tenant, n); err != nil {
		t.Fatal(err)
	}
	// What the batches that rated them would have added to the line: a
	// part per 500 charges, folded as the last batch folds them.
	if _, err := seed.Exec(ctx, `INSERT INTO charge_line_part (tenant_id, period, meter_code, currency, plan_code,
		    price_version, dimensions_key, unpriced, aggregation, dimensions, charges, total, peak, amount, new_values,
		    has_latest, latest_at, latest_system, latest_source, latest_quantity)
		SELECT p.tenant_id, p.period, p.meter_code, p.currency, p.plan_code, p.price_version, p.dimensions_key,
		       p.unpriced, p.aggregation, p.dimensions, k.n, p.total * k.n, p.peak, p.amount * k.n, 0,
		       p.has_latest, p.latest_at, p.latest_system, p.latest_source, p.latest_quantity
		FROM charge_line_part p
		CROSS JOIN LATERAL (SELECT least(500, $2 - 1 - (b - 1) * 500) AS n
		                    FROM generate_series(1, ceil(($2 - 1) / 500.0)::int) b) k
		WHERE p.tenant_id = $1`, tenant, n); err != nil {
		t.Fatal(err)
	}
	if _, err := db.New(seed).FoldParts(ctx, db.FoldPartsParams{TenantIds: []string{tenant}, Periods: []string{"2026-01"},
		Most: app.DefaultPartsFoldAt}); err != nil {
		t.Fatal(err)
	}
	if _, err := seed.Exec(ctx, `ANALYZE charge`); err != nil {
		t.Fatal(err)
	}
	if got := bt.Count(t, seed, `SELECT count(*) FROM charge WHERE tenant_id = $1`, tenant); got != n {
		t.Fatalf("%d charges seeded, want %d", got, n)
	}
	t.Logf("seeded %d charges in %s", n, time.Since(began).Round(time.Millisecond))
	return svc, seed, trace
}

// TestCloseAtScale closes a period of CLOSE_FACTS charges of one tenant
// (default 2,000; the measured run sets 1,000,000) with the default chunk
// (10,000 charges) by the real close (step 1, the chunks, the last
// transaction). It logs the seeding, the close and its longest statement,
// and checks the close counted every charge. Figures in docs/measured.md.
func TestCloseAtScale(t *testing.T) {
	t.Parallel()
	n := scaleFacts(t, "CLOSE_FACTS", 2000)
	const tenant = "scale"
	svc, seed, trace := seedAtScale(t, tenant, n, feb3)
	trace.reset()
	began := time.Now()
	closePeriod(t, svc, tenant, "2026-01", "close-at-scale")
	t.Logf("close of %d charges in %s; longest statement %s", n, time.Since(began).Round(time.Millisecond), trace)
	closes := bt.OfType[events.BillingPeriodClosed](bt.Outbox(t, seed))
	if len(closes) != 1 || closes[0].Charges != int64(n) {
		t.Fatalf("closes %s, want one of %d charges", bt.JSON(closes), n)
	}
}

// TestOpenReadAtScale reads the open period of READ_FACTS charges of one
// tenant (default 2,000; the measured runs set 300,000 and 1,000,000) as
// the period's GET does (PeriodEstimate, summing the line's parts), twice,
// logs each read's time and longest statement, and checks the estimate is
// the charges' amounts. Figures in docs/measured.md.
func TestOpenReadAtScale(t *testing.T) {
	t.Parallel()
	n := scaleFacts(t, "READ_FACTS", 2000)
	const tenant = "scale"
	svc, seed, trace := seedAtScale(t, tenant, n, jan20)
	for i := range 2 {
		trace.reset()
		began := time.Now()
		est, err := svc.PeriodEstimate(t.Context(), tenant, "2026-01")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("read %d of the open period of %d charges in %s (estimate %s); longest statement %s", i+1, n,
			time.Since(began).Round(time.Millisecond), bt.JSON(est.Estimate), trace)
		var want decimal.Decimal
		if err := seed.QueryRow(t.Context(), `SELECT sum(amount) FROM charge WHERE tenant_id = $1`, tenant).Scan(&want); err != nil {
			t.Fatal(err)
		}
		if est.Status != "open" || len(est.Estimate) != 1 || !est.Estimate["USD"].Equal(want) {
			t.Fatalf("estimate %s, want USD %s", bt.JSON(est), want)
		}
	}
}
