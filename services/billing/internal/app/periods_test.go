package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/idempotency"
	"github.com/usagebilling/billing/services/billing/internal/app"
	bt "github.com/usagebilling/billing/services/billing/internal/billingtest"
	"github.com/usagebilling/billing/services/billing/internal/db"
	"github.com/usagebilling/billing/services/billing/internal/domain"
)

func closeRequest(tenant, period, key string) app.Request {
	path := fmt.Sprintf("/v1/tenants/%s/periods/%s/close", tenant, period)
	return app.Request{TenantID: tenant, IdempotencyKey: key, RequestHash: idempotency.RequestHash(http.MethodPost, path, nil)}
}

func closePeriod(t *testing.T, svc *app.Service, tenant, period, key string) app.Reply {
	t.Helper()
	reply, err := svc.ClosePeriod(context.Background(), closeRequest(tenant, period, key), period)
	if err != nil {
		t.Fatalf("close %s %s: %v", tenant, period, err)
	}
	var body app.CloseReply
	if err := json.Unmarshal(reply.Body, &body); err != nil || reply.Status != http.StatusAccepted ||
		body.Status != "closed" || body.Period != period {
		t.Fatalf("close reply = %d %s", reply.Status, reply.Body)
	}
	return reply
}

func adjust(t *testing.T, svc *app.Service, tenant string, chargeID uuid.UUID, amount, currency string) (app.AdjustmentReply, error) {
	t.Helper()
	a, err := domain.ParseAdjustment(domain.AdjustmentRequest{
		CorrectionOf: chargeID.String(), Amount: amount, Currency: currency, Reason: "goodwill credit",
	})
	if err != nil {
		t.Fatal(err)
	}
	key := uuid.NewString()
	reply, err := svc.PostAdjustment(context.Background(), app.Request{
		TenantID: tenant, IdempotencyKey: key, RequestHash: idempotency.RequestHash("POST", "/adj", []byte(key)),
	}, a)
	if err != nil {
		return app.AdjustmentReply{}, err
	}
	var body app.AdjustmentReply
	if reply.Status != http.StatusCreated || json.Unmarshal(reply.Body, &body) != nil {
		t.Fatalf("adjustment reply = %d %s", reply.Status, reply.Body)
	}
	return body, nil
}

func charges(t *testing.T, svc *app.Service, tenant, period string) []app.Charge {
	t.Helper()
	cs, err := svc.ListCharges(context.Background(), tenant, period)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func periodStatus(t *testing.T, pool *pgxpool.Pool, tenant, period string) (status string, version int64) {
	t.Helper()
	err := pool.QueryRow(context.Background(), `SELECT status, version FROM billing_period WHERE tenant_id = $1 AND period = $2`,
		tenant, period).Scan(&status, &version)
	if err != nil {
		t.Fatalf("period %s %s: %v", tenant, period, err)
	}
	return status, version
}

func krwPrice(tenant string) bt.Price {
	return bt.Price{Tenant: tenant, Meter: "sms", Currency: "KRW", Version: 1, UnitPrice: "13.7", EffectiveAt: jan1}
}

func TestCloseRestartedHalfway(t *testing.T) {
	t.Parallel()
	pool := bt.NewPool(t)
	svc := app.New(pool, nil)
	ib := bt.NewInbox(t, svc)
	ctx := context.Background()

	bt.Decide(t, pool, ib, priceV1("t1").Raw(t), krwPrice("t1").Raw(t),
		usageAt("t1", 1, "100", jan10).Raw(t), usageAt("t1", 1, "0.5", jan20).Raw(t), usageAt("t1", 1, "3", jan20).Raw(t),
		bt.Usage{Tenant: "t1", Meter: "sms", Currency: "KRW", PriceVersion: 1, Quantity: "3", OccurredAt: jan10}.Raw(t))
	jan := charges(t, svc, "t1", "2026-01")
	if _, err := adjust(t, svc, "t1", jan[0].ChargeID, "-0.25", "USD"); err != nil {
		t.Fatal(err)
	}

	// A close that crashed after step 1: its key claimed without an
	// answer, the period closing, nothing published.
	const key = "close-jan-1"
	req := closeRequest("t1", "2026-01", key)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := idempotency.Claim(ctx, tx, "billing.close/t1", key, req.RequestHash); err != nil {
		t.Fatal(err)
	}
	if err := db.New(tx).MarkPeriodClosing(ctx, db.MarkPeriodClosingParams{TenantID: "t1", Period: "2026-01"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := periodStatus(t, pool, "t1", "2026-01"); st != "closing" {
		t.Fatalf("status = %s", st)
	}
	// While closing, the period takes no more usage: it goes late to
	// February and is not counted by the close.
	bt.Decide(t, pool, ib, usageAt("t1", 1, "9", jan20).Raw(t))
	if feb := charges(t, svc, "t1", "2026-02"); len(feb) != 1 || !feb[0].Late {
		t.Fatalf("february = %s", bt.JSON(feb))
	}
	if n := len(bt.OfType[events.BillingPeriodClosed](bt.Outbox(t, pool))); n != 0 {
		t.Fatalf("%d closes published by a half-done close", n)
	}

	// The retry with the same key finishes the close.
	reply := closePeriod(t, svc, "t1", "2026-01", key)
	if reply.Replayed {
		t.Fatal("the retry of a crashed close was answered as a replay of nothing")
	}
	out := bt.Outbox(t, pool)
	closes := bt.OfType[events.BillingPeriodClosed](out)
	if len(closes) != 1 {
		t.Fatalf("BillingPeriodClosed = %d, want 1", len(closes))
	}
	c := closes[0]
	// USD: 100 x 0.0125 + 0.5 x 0.0125 + 3 x 0.0125 - 0.25 = 1.04375;
	// KRW: 3 x 13.7 = 41.1 (exact; rounding is the invoice's, at issue).
	if c.Period != "2026-01" || c.Charges != 4 || c.Adjustments != 1 || len(c.Totals) != 2 ||
		!c.Totals["USD"].Equal(bt.Dec(t, "1.04375")) || !c.Totals["KRW"].Equal(bt.Dec(t, "41.1")) {
		t.Fatalf("close = %s", bt.JSON(c))
	}
	last := out[len(out)-1]
	if last.Envelope.EventType != events.TypeBillingPeriodClosed || last.Envelope.AggregateVersion != 6 ||
		last.Envelope.AggregateID != "2026-01" || last.Topic != events.TopicBilling {
		t.Fatalf("close envelope = %+v", last.Envelope)
	}
	if st, v := periodStatus(t, pool, "t1", "2026-01"); st != "closed" || v != 6 {
		t.Fatalf("period = %s v%d", st, v)
	}
	// Now the same key replays the answer.
	if r := closePeriod(t, svc, "t1", "2026-01", key); !r.Replayed {
		t.Fatal("a finished close's key was not replayed")
	}

	// A close crashed after step 1 without a key of its own finishes under
	// any other key too.
	if err := db.New(pool).MarkPeriodClosing(ctx, db.MarkPeriodClosingParams{TenantID: "t1", Period: "2026-02"}); err != nil {
		t.Fatal(err)
	}
	closePeriod(t, svc, "t1", "2026-02", "close-feb")
	closes = bt.OfType[events.BillingPeriodClosed](bt.Outbox(t, pool))
	if len(closes) != 2 || closes[1].Charges != 1 || !closes[1].Totals["USD"].Equal(bt.Dec(t, "0.1125")) {
		t.Fatalf("february close = %s", bt.JSON(closes))
	}
}

func TestCloseIsIdempotent(t *testing.T) {
	t.Parallel()
	pool := bt.NewPool(t)
	svc := app.New(pool, nil)
	ib := bt.NewInbox(t, svc)
	bt.Decide(t, pool, ib, priceV1("t1").Raw(t), usageAt("t1", 1, "8", jan10).Raw(t))

	first := closePeriod(t, svc, "t1", "2026-01", "k1")
	n := len(bt.Outbox(t, pool))
	replay := closePeriod(t, svc, "t1", "2026-01", "k1")
	if !replay.Replayed || string(replay.Body) != string(first.Body) || replay.Status != first.Status {
		t.Fatalf("replay = %+v, first = %+v", replay, first)
	}
	again := closePeriod(t, svc, "t1", "2026-01", "k2")
	if again.Replayed {
		t.Fatal("a close under a new key is no replay")
	}
	if got := len(bt.Outbox(t, pool)); got != n {
		t.Fatalf("closing a closed period published %d more events", got-n)
	}
	if _, v := periodStatus(t, pool, "t1", "2026-01"); v != 2 {
		t.Fatalf("version = %d, want 2", v)
	}

	// The same key for another period is refused, and changes nothing.
	_, err := svc.ClosePeriod(context.Background(), closeRequest("t1", "2026-02", "k1"), "2026-02")
	if !errors.Is(err, app.ErrKeyReused) {
		t.Fatalf("err = %v, want key reused", err)
	}
	if n := bt.Count(t, pool, `SELECT count(*) FROM billing_period WHERE period = '2026-02'`); n != 0 {
		t.Fatal("a refused close wrote a period row")
	}

	// A period with no activity closes with zero counts at version 1.
	closePeriod(t, svc, "t1", "2025-06", "k3")
	closes := bt.OfType[events.BillingPeriodClosed](bt.Outbox(t, pool))
	empty := closes[len(closes)-1]
	if empty.Period != "2025-06" || empty.Charges != 0 || empty.Adjustments != 0 || len(empty.Totals) != 0 {
		t.Fatalf("empty close = %s", bt.JSON(empty))
	}
	if st, v := periodStatus(t, pool, "t1", "2025-06"); st != "closed" || v != 1 {
		t.Fatalf("empty period = %s v%d", st, v)
	}
}

func TestConcurrentClosesPublishOnce(t *testing.T) {
	t.Parallel()
	pool := bt.NewPool(t)
	svc := app.New(pool, nil)
	ib := bt.NewInbox(t, svc)
	bt.Decide(t, pool, ib, priceV1("t1").Raw(t), usageAt("t1", 1, "8", jan10).Raw(t))
	errs := make(chan error, 6)
	for i := range 6 {
		go func() {
			key := fmt.Sprintf("k%d", i%2) // two keys, three requests each
			_, err := svc.ClosePeriod(context.Background(), closeRequest("t1", "2026-01", key), "2026-01")
			errs <- err
		}()
	}
	for range 6 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := len(bt.OfType[events.BillingPeriodClosed](bt.Outbox(t, pool))); n != 1 {
		t.Fatalf("BillingPeriodClosed = %d, want 1", n)
	}
}

func TestAdjustments(t *testing.T) {
	t.Parallel()
	pool := bt.NewPool(t)
	svc := app.New(pool, nil)
	ib := bt.NewInbox(t, svc)
	bt.Decide(t, pool, ib, priceV1("t1").Raw(t), priceV1("t2").Raw(t),
		usageAt("t1", 1, "10", jan10).Raw(t), usageAt("t2", 1, "10", jan10).Raw(t))
	c := charges(t, svc, "t1", "2026-01")[0]
	other := charges(t, svc, "t2", "2026-01")[0]

	got, err := adjust(t, svc, "t1", c.ChargeID, "-0.05", "USD")
	if err != nil {
		t.Fatal(err)
	}
	if got.Period != "2026-01" {
		t.Fatalf("reply = %+v", got)
	}
	var correctionOf uuid.UUID
	var amount string
	if err := pool.QueryRow(context.Background(), `SELECT correction_of, amount::text FROM adjustment WHERE adjustment_id = $1`,
		got.AdjustmentID).Scan(&correctionOf, &amount); err != nil {
		t.Fatal(err)
	}
	if correctionOf != c.ChargeID || amount != "-0.05" {
		t.Fatalf("adjustment row: correction_of %s amount %s", correctionOf, amount)
	}
	out := bt.Outbox(t, pool)
	last := out[len(out)-1]
	posted, ok := last.Payload.(events.AdjustmentPosted)
	if !ok || posted.CorrectionOf != c.ChargeID || posted.AdjustmentID != got.AdjustmentID ||
		last.Envelope.EventID != got.EventID || !posted.Amount.Equal(bt.Dec(t, "-0.05")) ||
		last.Envelope.AggregateID != "2026-01" || last.Envelope.AggregateVersion != 2 || last.Envelope.TenantID != "t1" {
		t.Fatalf("published %s %+v", bt.JSON(last.Payload), last.Envelope)
	}

	before := len(out)
	for _, tc := range []struct {
		name, tenant string
		charge       uuid.UUID
		currency     string
		code         string
	}{
		{"currency mismatch", "t1", c.ChargeID, "EUR", "currency_mismatch"},
		{"unknown charge", "t1", uuid.Must(uuid.NewV7()), "USD", "charge_not_found"},
		{"another tenant's charge", "t1", other.ChargeID, "USD", "charge_not_found"},
	} {
		_, err := adjust(t, svc, tc.tenant, tc.charge, "1", tc.currency)
		var de *domain.Error
		if !errors.As(err, &de) || de.Code != tc.code {
			t.Errorf("%s: err = %v, want %s", tc.name, err, tc.code)
		}
	}
	if n := len(bt.Outbox(t, pool)); n != before {
		t.Fatalf("refused adjustments published %d events", n-before)
	}
	if n := bt.Count(t, pool, `SELECT count(*) FROM adjustment`); n != 1 {
		t.Fatalf("adjustments = %d, want 1", n)
	}
	if n := bt.Count(t, pool, `SELECT count(*) FROM idempotency_key WHERE scope LIKE 'billing.adjustment/%'`); n != 1 {
		t.Fatalf("idempotency keys = %d, want 1 (refused requests keep none)", n)
	}
}

// Every event of a (tenant, period) is the next version of its aggregate:
// charges, adjustments, the close, and adjustments after the close.
func TestPeriodAggregateVersionsAreGapFree(t *testing.T) {
	t.Parallel()
	pool := bt.NewPool(t)
	svc := app.New(pool, nil)
	ib := bt.NewInbox(t, svc)

	bt.Decide(t, pool, ib, priceV1("t1").Raw(t), priceV1("t2").Raw(t),
		usageAt("t1", 1, "1", jan10).Raw(t), usageAt("t2", 1, "1", jan10).Raw(t), usageAt("t1", 1, "2", jan10).Raw(t))
	c := charges(t, svc, "t1", "2026-01")
	if _, err := adjust(t, svc, "t1", c[0].ChargeID, "1.5", "USD"); err != nil {
		t.Fatal(err)
	}
	bt.Decide(t, pool, ib, usageAt("t1", 1, "3", jan20).Raw(t), usageAt("t1", 1, "4", feb3).Raw(t), priceV2("t1").Raw(t),
		usageAt("t1", 2, "5", jan20).Raw(t))
	if _, err := adjust(t, svc, "t1", c[1].ChargeID, "-0.01", "USD"); err != nil {
		t.Fatal(err)
	}
	closePeriod(t, svc, "t1", "2026-01", "close")
	closePeriod(t, svc, "t1", "2026-01", "close-again")
	// After the close: late usage goes to February; an adjustment of a
	// January charge stays January's, after the close.
	bt.Decide(t, pool, ib, usageAt("t1", 1, "6", jan20).Raw(t))
	if _, err := adjust(t, svc, "t1", c[0].ChargeID, "-1", "USD"); err != nil {
		t.Fatal(err)
	}

	type key struct{ tenant, period string }
	versions := map[key][]int64{}
	types := map[key][]string{}
	for _, p := range bt.Outbox(t, pool) {
		e := p.Envelope
		if e.AggregateType != events.AggregateBillingPeriod || e.Producer != "billing" {
			t.Fatalf("unexpected event %+v", e)
		}
		if e.PartitionKey != e.TenantID+"|billing_period|"+e.AggregateID {
			t.Fatalf("partition key %q", e.PartitionKey)
		}
		k := key{e.TenantID, e.AggregateID}
		versions[k] = append(versions[k], e.AggregateVersion)
		types[k] = append(types[k], e.EventType)
	}
	for k, vs := range versions {
		for i, v := range vs {
			if v != int64(i+1) {
				t.Fatalf("%v versions = %v, want 1..%d in append order", k, vs, len(vs))
			}
		}
	}
	jan := types[key{"t1", "2026-01"}]
	want := []string{"ChargeRated", "ChargeRated", "AdjustmentPosted", "ChargeRated", "ChargeRated", "AdjustmentPosted",
		"BillingPeriodClosed", "AdjustmentPosted"}
	if fmt.Sprint(jan) != fmt.Sprint(want) {
		t.Fatalf("t1 2026-01 events = %v, want %v", jan, want)
	}
	if feb := types[key{"t1", "2026-02"}]; len(feb) != 2 {
		t.Fatalf("t1 2026-02 events = %v", feb)
	}
	if t2 := versions[key{"t2", "2026-01"}]; len(t2) != 1 {
		t.Fatalf("t2 versions = %v", t2)
	}
	closes := bt.OfType[events.BillingPeriodClosed](bt.Outbox(t, pool))
	if len(closes) != 1 || closes[0].Charges != 4 || closes[0].Adjustments != 2 {
		t.Fatalf("closes = %s", bt.JSON(closes))
	}
}
