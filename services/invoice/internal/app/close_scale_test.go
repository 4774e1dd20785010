package app_test

import (
	"context"
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
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/services/invoice"
	"github.com/usagebilling/billing/services/invoice/internal/app"
	"github.com/usagebilling/billing/services/invoice/internal/db"
	. "github.com/usagebilling/billing/services/invoice/internal/invoicetest"
	"github.com/usagebilling/billing/testkit/pgtest"
	"github.com/usagebilling/billing/testkit/servicetest"
)

// longest records the longest statement a pool ran (a pgx tracer).
type longest struct {
	mu    sync.Mutex
	took  time.Duration
	sql   string
	start sync.Map // *pgx.Conn -> time.Time
}

func (l *longest) TraceQueryStart(ctx context.Context, c *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	l.start.Store(c, struct {
		at  time.Time
		sql string
	}{time.Now(), d.SQL})
	return ctx
}

func (l *longest) TraceQueryEnd(_ context.Context, c *pgx.Conn, _ pgx.TraceQueryEndData) {
	v, ok := l.start.LoadAndDelete(c)
	if !ok {
		return
	}
	s := v.(struct {
		at  time.Time
		sql string
	})
	took := time.Since(s.at)
	l.mu.Lock()
	defer l.mu.Unlock()
	if took > l.took {
		l.took, l.sql = took, s.sql
	}
}

// TestCloseAtScale closes a period of CLOSE_FACTS charges of one tenant
// (default 2,000; the measured run sets 1,000,000) through the inbox with
// the services' statement_timeout (30 s, DB_STATEMENT_TIMEOUT's default)
// and the default chunk (10,000 charges) and chunks per attempt: the
// charges are seeded straight into invoice_charge with generate_series,
// the close's tally computed from them in SQL, and the close decided, then
// swept until issued. It logs the seeding, each decision, the issue and
// the longest statement of the close, and checks the invoice counts every
// charge. Figures in docs/measured.md.
func TestCloseAtScale(t *testing.T) {
	t.Parallel()
	n := 2000
	if s := os.Getenv("CLOSE_FACTS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			t.Fatalf("CLOSE_FACTS=%q: want a number of charges", s)
		}
		n = v
	}
	seed := pgtest.NewPool(t, Template)
	ctx := t.Context()
	began := time.Now()
	if _, err := seed.Exec(ctx, `
		INSERT INTO invoice (invoice_id, tenant_id, period, currency) VALUES (gen_random_uuid(), 'acme', '2026-11', 'USD');
		INSERT INTO invoice_charge (origin_event_id, charge_id, usage_event_id, tenant_id, period, currency, meter_code,
		                            price_version, unit_price, quantity, amount, aggregation, dimensions_key, unpriced)
		SELECT gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), 'acme', '2026-11', 'USD', '`+Meter+`',
		       1, 0.001, 1, 0.001, 'sum', '', false
		FROM generate_series(1, `+strconv.Itoa(n)+`);
		ANALYZE invoice_charge`); err != nil {
		t.Fatal(err)
	}
	tally := events.CloseTally{AdjustmentDigest: "0"} // no adjustments
	if err := seed.QueryRow(ctx, `
		SELECT count(*), sum(amount),
		       sum(('x' || encode(substr(sha256(convert_to(origin_event_id::text, 'UTF8')), 1, 7), 'hex'))::bit(56)::bigint)::text
		FROM invoice_charge`).Scan(&tally.Charges, &tally.ChargeAmount, &tally.ChargeDigest); err != nil {
		t.Fatal(err)
	}
	t.Logf("seeded %d charges in %s", n, time.Since(began).Round(time.Millisecond))

	// The service's pool: statement_timeout as pkg/service sets it.
	cfg, err := pgxpool.ParseConfig(seed.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["statement_timeout"] = "30000"
	trace := &longest{}
	cfg.ConnConfig.Tracer = trace
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	closer := app.New(app.Deps{Pool: pool}, app.Config{})
	ib := servicetest.NewInbox(t, invoice.Spec, service.Parts{
		Topics: app.Topics, Handlers: closer.Handlers(), BatchHandlers: closer.BatchHandlers(),
	})
	p := NewPeriod(t, "acme", "2026-11")
	closed := p.CloseWith(map[string]events.CloseTally{"USD": tally})
	began = time.Now()
	ds, err := servicetest.TryDecide(ctx, pool, ib, servicetest.Messages(events.TopicBilling, Raw(t, closed)...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("decision 1: %s %s, %s", ds[0].Outcome, ds[0].Reason, time.Since(began).Round(time.Millisecond))
	for i := 2; ds[0].Outcome == inbox.OutcomeDeferred; i++ {
		if i > n/app.DefaultCloseChunk/app.DefaultCloseChunksPerAttempt+3 {
			t.Fatalf("not issued after %d decisions", i)
		}
		// Due now: the sweep's back-off is not what this measures.
		if _, err := seed.Exec(ctx, `UPDATE inbox_deferred SET next_attempt = now()`); err != nil {
			t.Fatal(err)
		}
		at := time.Now()
		if Sweep(t, pool, ib) == 1 {
			ds[0].Outcome = inbox.OutcomeApplied
		}
		t.Logf("decision %d (sweep): %s, %s", i, ds[0].Outcome, time.Since(at).Round(time.Millisecond))
	}
	name, _, _ := strings.Cut(strings.TrimSpace(trace.sql), "\n")
	t.Logf("close of %d charges issued in %s (decisions only); longest statement %s: %.100s",
		n, time.Since(began).Round(time.Millisecond), trace.took.Round(time.Millisecond), name)
	invs := invoices(t, seed, "acme", "2026-11")
	inv := invs["USD"]
	want := decimal.New(int64(n), -3)
	if inv.Status != "issued" || len(inv.Lines) == 0 || inv.Lines[0].ChargeCount != int64(n) || !inv.Total.Equal(want.RoundBank(2)) {
		t.Fatalf("invoice %+v, want %d charges, total %s", inv, n, want.RoundBank(2))
	}
}

// TestOpenReadAtScale reads an open invoice of READ_FACTS charges of one
// tenant (default 2,000; the measured runs set 300,000 and 1,000,000)
// seeded straight into invoice_charge, with the parts the charges' batches
// of 500 would have written (invoice_line_part) folded as the service folds
// them (FoldParts), through a pool with the services' statement_timeout
// (30 s), and checks the read counts every charge. It logs the read's time
// and its longest statement. Figures in docs/measured.md.
func TestOpenReadAtScale(t *testing.T) {
	t.Parallel()
	n := 2000
	if s := os.Getenv("READ_FACTS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			t.Fatalf("READ_FACTS=%q: want a number of charges", s)
		}
		n = v
	}
	seed := pgtest.NewPool(t, Template)
	ctx := t.Context()
	began := time.Now()
	if _, err := seed.Exec(ctx, `
		INSERT INTO invoice (invoice_id, tenant_id, period, currency) VALUES (gen_random_uuid(), 'acme', '2026-11', 'USD');
		INSERT INTO invoice_charge (origin_event_id, charge_id, usage_event_id, tenant_id, period, currency, meter_code,
		                            price_version, unit_price, quantity, amount, aggregation, dimensions_key, unpriced)
		SELECT gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), 'acme', '2026-11', 'USD', '`+Meter+`',
		       1, 0.001, 1, 0.001, 'sum', '', false
		FROM generate_series(1, `+strconv.Itoa(n)+`);
		INSERT INTO invoice_line_part (tenant_id, period, currency, meter_code, price_version, dimensions_key, unpriced,
		                               aggregation, unit_price, quantity, charges, amount)
		SELECT 'acme', '2026-11', 'USD', '`+Meter+`', 1, '', false, 'sum', 0.001, least(500, `+strconv.Itoa(n)+` - b), least(500, `+strconv.Itoa(n)+` - b),
		       least(500, `+strconv.Itoa(n)+` - b) * 0.001
		FROM generate_series(0, `+strconv.Itoa(n-1)+`, 500) b;
		ANALYZE invoice_charge`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.New(seed).FoldParts(ctx, db.FoldPartsParams{TenantIds: []string{"acme"}, Periods: []string{"2026-11"},
		Most: app.DefaultPartsFoldAt}); err != nil {
		t.Fatal(err)
	}
	t.Logf("seeded %d charges in %s", n, time.Since(began).Round(time.Millisecond))
	cfg, err := pgxpool.ParseConfig(seed.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["statement_timeout"] = "30000"
	trace := &longest{}
	cfg.ConnConfig.Tracer = trace
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	reader := app.New(app.Deps{Pool: pool}, app.Config{})
	began = time.Now()
	invs, err := reader.Invoices(ctx, "acme", "2026-11", nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(began)
	name, _, _ := strings.Cut(strings.TrimSpace(trace.sql), "\n")
	t.Logf("open invoice of %d charges read in %s; longest statement %s: %.100s",
		n, took.Round(time.Millisecond), trace.took.Round(time.Millisecond), name)
	want := decimal.New(int64(n), -3)
	if len(invs) != 1 || invs[0].Status != "open" || len(invs[0].Lines) != 1 || invs[0].Lines[0].ChargeCount != int64(n) ||
		!invs[0].Subtotal.Equal(want) {
		t.Fatalf("invoices %+v, want one open of %d charges, subtotal %s", invs, n, want)
	}
}
