package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/digest"
	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/idempotency"
	"github.com/usagebilling/billing/services/billing/internal/app"
	bt "github.com/usagebilling/billing/services/billing/internal/billingtest"
	"github.com/usagebilling/billing/services/billing/internal/db"
	"github.com/usagebilling/billing/services/billing/internal/domain"
)

func closeRequest(tenant string) app.Request {
	return app.Request{TenantID: tenant, Actor: "closer@" + tenant + ".example"}
}

// closeKey is the key the HTTP API gives a close of period with
// Idempotency-Key key (httpapi).
func closeKey(tenant, period, key string) *idempotency.Steps {
	path := fmt.Sprintf("/v1/tenants/%s/periods/%s/close", tenant, period)
	return &idempotency.Steps{Scope: "billing.close/" + tenant, Key: key,
		RequestHash: idempotency.RequestHash(http.MethodPost, path, nil), Status: http.StatusAccepted}
}

// tryClose closes a period as the HTTP API does and returns its reply.
func tryClose(ctx context.Context, svc *app.App, tenant, period, key string) (idempotency.Reply, error) {
	k := closeKey(tenant, period, key)
	c, err := svc.ClosePeriod(ctx, closeRequest(tenant), period, k)
	if err != nil {
		return idempotency.Reply{}, err
	}
	return k.Result(c)
}

// inKey runs a command of one transaction as the HTTP API does: under key
// in scope, its result answered with status (idempotency.Run).
func inKey[R any](ctx context.Context, svc *app.App, scope, key string, status int,
	run func(tx pgx.Tx) (R, error)) (idempotency.Reply, error) {
	var reply idempotency.Reply
	err := svc.InTx(ctx, func(tx pgx.Tx) (err error) {
		reply, err = idempotency.Run(ctx, tx, scope, key, idempotency.RequestHash("POST", "/"+scope, []byte(key)),
			func() (int, any, error) {
				r, err := run(tx)
				return status, r, err
			})
		return err
	})
	return reply, err
}

// postAdjustment posts an adjustment as the HTTP API does, under a key of
// its own.
func postAdjustment(ctx context.Context, svc *app.App, r app.Request, key string, adj domain.Adjustment) (idempotency.Reply, error) {
	return inKey(ctx, svc, "billing.adjustment/"+r.TenantID, key, http.StatusCreated, func(tx pgx.Tx) (app.AdjustmentReply, error) {
		return svc.PostAdjustment(ctx, tx, r, adj)
	})
}

func closePeriod(t *testing.T, svc *app.App, tenant, period, key string) idempotency.Reply {
	t.Helper()
	reply, err := tryClose(t.Context(), svc, tenant, period, key)
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

func adjust(t *testing.T, svc *app.App, tenant string, chargeID uuid.UUID, amount, currency string) (app.AdjustmentReply, error) {
	t.Helper()
	a, err := domain.ParseAdjustment(domain.AdjustmentRequest{
		CorrectionOf: chargeID.String(), Amount: amount, Currency: currency, Reason: "goodwill credit",
	})
	if err != nil {
		t.Fatal(err)
	}
	key := uuid.NewString()
	reply, err := postAdjustment(t.Context(), svc, app.Request{TenantID: tenant, Actor: "admin@" + tenant + ".example"}, key, a)
	if err != nil {
		return app.AdjustmentReply{}, err
	}
	var body app.AdjustmentReply
	if reply.Status != http.StatusCreated || json.Unmarshal(reply.Body, &body) != nil {
		t.Fatalf("adjustment reply = %d %s", reply.Status, reply.Body)
	}
	return body, nil
}

// charges returns every charge of a tenant's period, page by page, in line
// order.
func charges(t *testing.T, svc *app.App, tenant, period string) []app.Charge {
	t.Helper()
	return listAll(t, svc, tenant, app.ChargeFilter{Period: period}, 1000)
}

// listAll reads every page of a charges list of limit charges each.
func listAll(t *testing.T, svc *app.App, tenant string, f app.ChargeFilter, limit int32) []app.Charge {
	t.Helper()
	var all []app.Charge
	var after app.ChargePosition
	for {
		page, err := svc.ListCharges(t.Context(), tenant, f, after, limit)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page...)
		if int32(len(page)) < limit {
			return all
		}
		after = page[len(page)-1].Position()
	}
}

func periodStatus(t *testing.T, pool *pgxpool.Pool, tenant, period string) (status string, closeEventID *uuid.UUID) {
	t.Helper()
	err := pool.QueryRow(t.Context(), `SELECT status, close_event_id FROM billing_period WHERE tenant_id = $1 AND period = $2`,
		tenant, period).Scan(&status, &closeEventID)
	if err != nil {
		t.Fatalf("period %s %s: %v", tenant, period, err)
	}
	return status, closeEventID
}

// checkClose checks a published close against billing's rows: its tallies
// are the period's charges and pre-close adjustments (counts, exact sums,
// and digests equal to pkg/digest's over the event ids), and its counts
// and totals add the tallies up.
func checkClose(t *testing.T, pool *pgxpool.Pool, tenant string, c events.BillingPeriodClosed) {
	t.Helper()
	if ok, why := bt.SameTallies(c.Currencies, bt.Tallies(t, pool, tenant, c.Period)); !ok {
		t.Fatalf("close of %s %s: %s", tenant, c.Period, why)
	}
	var charges, adjustments int64
	for cur, tally := range c.Currencies {
		charges += tally.Charges
		adjustments += tally.Adjustments
		if !c.Totals[cur].Equal(tally.ChargeAmount.Add(tally.AdjustmentAmount)) {
			t.Fatalf("close of %s %s: %s total %s is not its tally's %s", tenant, c.Period, cur, c.Totals[cur], bt.JSON(tally))
		}
	}
	if c.Charges != charges || c.Adjustments != adjustments || len(c.Totals) != len(c.Currencies) {
		t.Fatalf("close of %s %s: counts %d/%d, tallies %d/%d", tenant, c.Period, c.Charges, c.Adjustments, charges, adjustments)
	}
}

// digestOf is pkg/digest over ids.
func digestOf(ids ...uuid.UUID) string {
	var s digest.Set
	for _, id := range ids {
		s.Add(id)
	}
	return s.String()
}

func krwPrice(tenant string) bt.Price {
	return bt.Price{Tenant: tenant, Meter: "sms", Currency: "KRW", Version: 1, UnitPrice: "13.7", EffectiveAt: jan1}
}

func TestCloseRestartedHalfway(t *testing.T) {
	t.Parallel()
	pool := bt.NewPool(t)
	svc := app.New(app.Deps{Pool: pool}, app.Config{})
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, pool, ib)
	ctx := t.Context()

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
	ck := closeKey("t1", "2026-01", key)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := idempotency.Claim(ctx, tx, ck.Scope, key, ck.RequestHash); err != nil {
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
	// An adjustment posted while the period is closing is posted before it
	// closed: the close counts it.
	sms := jan[len(jan)-1] // line order: api_calls, then sms
	if sms.Currency != "KRW" {
		t.Fatalf("charges = %s", bt.JSON(jan))
	}
	closing, err := adjust(t, svc, "t1", sms.ChargeID, "-1", "KRW")
	if err != nil {
		t.Fatal(err)
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
	// KRW: 3 x 13.7 - 1 = 40.1 (exact; rounding is the invoice's, at issue).
	if c.Period != "2026-01" || c.Charges != 4 || c.Adjustments != 2 || len(c.Totals) != 2 ||
		!c.Totals["USD"].Equal(bt.Dec(t, "1.04375")) || !c.Totals["KRW"].Equal(bt.Dec(t, "40.1")) {
		t.Fatalf("close = %s", bt.JSON(c))
	}
	usd, krw := c.Currencies["USD"], c.Currencies["KRW"]
	if usd.Charges != 3 || !usd.ChargeAmount.Equal(bt.Dec(t, "1.29375")) || usd.Adjustments != 1 ||
		!usd.AdjustmentAmount.Equal(bt.Dec(t, "-0.25")) ||
		krw.Charges != 1 || !krw.ChargeAmount.Equal(bt.Dec(t, "41.1")) || krw.Adjustments != 1 ||
		!krw.AdjustmentAmount.Equal(bt.Dec(t, "-1")) || krw.AdjustmentDigest != digestOf(closing.EventID) {
		t.Fatalf("close tallies = %s", bt.JSON(c.Currencies))
	}
	checkClose(t, pool, "t1", c)
	last := out[len(out)-1]
	if last.Envelope.EventType != events.TypeBillingPeriodClosed || last.Envelope.AggregateType != events.AggregateBillingPeriod ||
		last.Envelope.AggregateID != "2026-01" || last.Envelope.AggregateVersion != 1 ||
		last.Envelope.PartitionKey != "t1|billing_period|2026-01" || last.Topic != events.TopicBilling {
		t.Fatalf("close envelope = %+v", last.Envelope)
	}
	if st, id := periodStatus(t, pool, "t1", "2026-01"); st != "closed" || id == nil || *id != last.Envelope.EventID {
		t.Fatalf("period = %s, close event %v", st, id)
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
	checkClose(t, pool, "t1", closes[1])
}

func TestCloseIsIdempotent(t *testing.T) {
	t.Parallel()
	pool := bt.NewPool(t)
	svc := app.New(app.Deps{Pool: pool}, app.Config{})
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, pool, ib)
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
	closes := bt.OfType[events.BillingPeriodClosed](bt.Outbox(t, pool))
	if len(closes) != 1 || closes[0].Charges != 1 {
		t.Fatalf("closes = %s", bt.JSON(closes))
	}
	checkClose(t, pool, "t1", closes[0])

	// The same key for another period is refused, and changes nothing.
	_, err := tryClose(t.Context(), svc, "t1", "2026-02", "k1")
	if !errors.Is(err, idempotency.ErrKeyReused) {
		t.Fatalf("err = %v, want key reused", err)
	}
	if n := bt.Count(t, pool, `SELECT count(*) FROM billing_period WHERE period = '2026-02'`); n != 0 {
		t.Fatal("a refused close wrote a period row")
	}

	// A period with no activity closes with zero counts and no tallies.
	closePeriod(t, svc, "t1", "2025-06", "k3")
	out := bt.Outbox(t, pool)
	closes = bt.OfType[events.BillingPeriodClosed](out)
	empty := closes[len(closes)-1]
	if empty.Period != "2025-06" || empty.Charges != 0 || empty.Adjustments != 0 || len(empty.Totals) != 0 ||
		len(empty.Currencies) != 0 {
		t.Fatalf("empty close = %s", bt.JSON(empty))
	}
	if e := out[len(out)-1].Envelope; e.AggregateID != "2025-06" || e.AggregateVersion != 1 {
		t.Fatalf("empty close envelope = %+v", e)
	}
	if st, id := periodStatus(t, pool, "t1", "2025-06"); st != "closed" || id == nil {
		t.Fatalf("empty period = %s, close event %v", st, id)
	}
}

func TestConcurrentClosesPublishOnce(t *testing.T) {
	t.Parallel()
	pool := bt.NewPool(t)
	svc := app.New(app.Deps{Pool: pool}, app.Config{})
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, pool, ib)
	bt.Decide(t, pool, ib, priceV1("t1").Raw(t), usageAt("t1", 1, "8", jan10).Raw(t))
	errs := make(chan error, 6)
	for i := range 6 {
		go func() {
			key := fmt.Sprintf("k%d", i%2) // two keys, three requests each
			_, err := tryClose(t.Context(), svc, "t1", "2026-01", key)
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
	svc := app.New(app.Deps{Pool: pool}, app.Config{})
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, pool, ib)
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
	if err := pool.QueryRow(t.Context(), `SELECT correction_of, amount::text FROM adjustment WHERE adjustment_id = $1`,
		got.AdjustmentID).Scan(&correctionOf, &amount); err != nil {
		t.Fatal(err)
	}
	if correctionOf != c.ChargeID || amount != "-0.05" {
		t.Fatalf("adjustment row: correction_of %s amount %s", correctionOf, amount)
	}
	out := bt.Outbox(t, pool)
	last := out[len(out)-1]
	posted, ok := last.Payload.(events.AdjustmentPosted)
	if !ok || posted.CorrectionOf != c.ChargeID || posted.AdjustmentID != got.AdjustmentID || posted.Period != "2026-01" ||
		posted.AfterClose || last.Envelope.EventID != got.EventID || !posted.Amount.Equal(bt.Dec(t, "-0.05")) ||
		last.Envelope.AggregateType != events.AggregateAdjustment || last.Envelope.AggregateID != got.AdjustmentID.String() ||
		last.Envelope.AggregateVersion != 1 || last.Envelope.TenantID != "t1" ||
		last.Envelope.PartitionKey != "t1|adjustment|"+got.AdjustmentID.String() {
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

// Every event billing publishes is its own aggregate at version 1: a
// ChargeRated is charge/<chargeId>, an AdjustmentPosted
// adjustment/<adjustmentId>, a close billing_period/<period>, each keyed
// by it. Nothing orders them; the close proves what it counted by its
// tallies, and an adjustment posted after the close says so and is not
// counted.
func TestEventsAreTheirOwnAggregatesAndTheCloseTalliesThem(t *testing.T) {
	t.Parallel()
	pool := bt.NewPool(t)
	svc := app.New(app.Deps{Pool: pool}, app.Config{})
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, pool, ib)

	var usage []envelope.Envelope
	use := func(u bt.Usage) []byte {
		env, raw := u.Envelope(t)
		usage = append(usage, env)
		return raw
	}
	bt.Decide(t, pool, ib, priceV1("t1").Raw(t), priceV1("t2").Raw(t), krwPrice("t1").Raw(t),
		use(usageAt("t1", 1, "1", jan10)), use(usageAt("t2", 1, "1", jan10)), use(usageAt("t1", 1, "2", jan10)),
		use(bt.Usage{Tenant: "t1", Meter: "sms", Currency: "KRW", PriceVersion: 1, Quantity: "7", OccurredAt: jan20}))
	c := charges(t, svc, "t1", "2026-01")
	before1, err := adjust(t, svc, "t1", c[0].ChargeID, "1.5", "USD")
	if err != nil {
		t.Fatal(err)
	}
	bt.Decide(t, pool, ib, use(usageAt("t1", 1, "3", jan20)), use(usageAt("t1", 1, "4", feb3)), priceV2("t1").Raw(t),
		use(usageAt("t1", 2, "5", jan20)))
	before2, err := adjust(t, svc, "t1", c[1].ChargeID, "-0.01", "USD")
	if err != nil {
		t.Fatal(err)
	}
	closePeriod(t, svc, "t1", "2026-01", "close")
	closePeriod(t, svc, "t1", "2026-01", "close-again")
	// After the close: late usage goes to February; an adjustment of a
	// January charge stays January's, after the close, and is not counted.
	lateEnv, lateRaw := usageAt("t1", 1, "6", jan20).Envelope(t)
	usage = append(usage, lateEnv)
	bt.Decide(t, pool, ib, lateRaw)
	after, err := adjust(t, svc, "t1", c[0].ChargeID, "-1", "USD")
	if err != nil {
		t.Fatal(err)
	}
	if after.Period != "2026-01" {
		t.Fatalf("after-close adjustment reply = %+v", after)
	}

	out := bt.Outbox(t, pool)
	rated := map[uuid.UUID]events.ChargeRated{} // by usage event id
	var closes []events.BillingPeriodClosed
	var posted []events.AdjustmentPosted
	var janCharges []uuid.UUID
	for _, p := range out {
		e := p.Envelope
		if e.Producer != "billing" || e.AggregateVersion != 1 || p.Topic != events.TopicBilling ||
			e.PartitionKey != e.TenantID+"|"+e.AggregateType+"|"+e.AggregateID {
			t.Fatalf("unexpected event %+v", e)
		}
		switch v := p.Payload.(type) {
		case events.ChargeRated:
			if e.AggregateType != events.AggregateCharge || e.AggregateID != v.ChargeID.String() ||
				e.PartitionKey != e.TenantID+"|charge|"+v.ChargeID.String() || e.CausationID != v.UsageEventID.String() {
				t.Fatalf("ChargeRated %s on %+v", bt.JSON(v), e)
			}
			if _, dup := rated[v.UsageEventID]; dup {
				t.Fatalf("usage %s rated twice", v.UsageEventID)
			}
			rated[v.UsageEventID] = v
			var eventID uuid.UUID
			if err := pool.QueryRow(t.Context(), `SELECT event_id FROM charge WHERE charge_id = $1`, v.ChargeID).
				Scan(&eventID); err != nil || eventID != e.EventID {
				t.Fatalf("charge %s row event %s, published %s: %v", v.ChargeID, eventID, e.EventID, err)
			}
			if e.TenantID == "t1" && v.Period == "2026-01" {
				janCharges = append(janCharges, e.EventID)
			}
		case events.AdjustmentPosted:
			if e.AggregateType != events.AggregateAdjustment || e.AggregateID != v.AdjustmentID.String() {
				t.Fatalf("AdjustmentPosted %s on %+v", bt.JSON(v), e)
			}
			posted = append(posted, v)
		case events.BillingPeriodClosed:
			if e.AggregateType != events.AggregateBillingPeriod || e.AggregateID != v.Period {
				t.Fatalf("BillingPeriodClosed %s on %+v", bt.JSON(v), e)
			}
			closes = append(closes, v)
		default:
			t.Fatalf("unexpected payload %T", p.Payload)
		}
	}
	if len(rated) != len(usage) {
		t.Fatalf("%d ChargeRated for %d usage events", len(rated), len(usage))
	}
	for _, u := range usage {
		if _, ok := rated[u.EventID]; !ok {
			t.Fatalf("usage %s has no ChargeRated", u.EventID)
		}
	}
	if late := rated[lateEnv.EventID]; !late.Late || late.Period != "2026-02" {
		t.Fatalf("late usage rated %s", bt.JSON(late))
	}
	if len(posted) != 3 || posted[0].AfterClose || posted[1].AfterClose || !posted[2].AfterClose ||
		posted[2].AdjustmentID != after.AdjustmentID || posted[2].Period != "2026-01" {
		t.Fatalf("adjustments = %s", bt.JSON(posted))
	}
	var afterClose bool
	if err := pool.QueryRow(t.Context(), `SELECT after_close FROM adjustment WHERE adjustment_id = $1`,
		after.AdjustmentID).Scan(&afterClose); err != nil || !afterClose {
		t.Fatalf("after-close adjustment row: after_close %v, %v", afterClose, err)
	}

	// One close: January's 5 charges (USD 1 + 2 + 3 at v1, 5 at v2; KRW 7)
	// and the two adjustments posted before it, not the one after.
	if len(closes) != 1 {
		t.Fatalf("closes = %s", bt.JSON(closes))
	}
	cl := closes[0]
	usd, krw := cl.Currencies["USD"], cl.Currencies["KRW"]
	if cl.Charges != 5 || cl.Adjustments != 2 || usd.Charges != 4 || krw.Charges != 1 ||
		!usd.ChargeAmount.Equal(bt.Dec(t, "0.175")) || !krw.ChargeAmount.Equal(bt.Dec(t, "95.9")) ||
		usd.Adjustments != 2 || !usd.AdjustmentAmount.Equal(bt.Dec(t, "1.49")) || krw.Adjustments != 0 ||
		!cl.Totals["USD"].Equal(bt.Dec(t, "1.665")) {
		t.Fatalf("close = %s", bt.JSON(cl))
	}
	// The SQL digests are pkg/digest's over the published event ids.
	if usd.AdjustmentDigest != digestOf(before1.EventID, before2.EventID) ||
		krw.AdjustmentDigest != "0" {
		t.Fatalf("close digests = %s", bt.JSON(cl.Currencies))
	}
	var all digest.Set
	for _, id := range janCharges {
		all.Add(id)
	}
	usdIDs, krwIDs := chargeEventIDs(t, pool, "t1", "2026-01", "USD"), chargeEventIDs(t, pool, "t1", "2026-01", "KRW")
	if usd.ChargeDigest != digestOf(usdIDs...) || krw.ChargeDigest != digestOf(krwIDs...) ||
		digestOf(append(usdIDs, krwIDs...)...) != all.String() || all.Len() != 5 {
		t.Fatalf("charge digests %s, want USD %s KRW %s", bt.JSON(cl.Currencies), digestOf(usdIDs...), digestOf(krwIDs...))
	}
	checkClose(t, pool, "t1", cl)
}

// chargeEventIDs are the ChargeRated event ids of a period's charges in one
// currency.
func chargeEventIDs(t *testing.T, pool *pgxpool.Pool, tenant, period, currency string) []uuid.UUID {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT event_id FROM charge WHERE tenant_id = $1 AND period = $2 AND currency = $3`,
		tenant, period, currency)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}
