package app_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/pricing"
	"github.com/usagebilling/billing/services/invoice/internal/app"
	"github.com/usagebilling/billing/services/invoice/internal/domain"
	. "github.com/usagebilling/billing/services/invoice/internal/invoicetest"
	"github.com/usagebilling/billing/services/invoice/internal/webhook"
	"github.com/usagebilling/billing/testkit/pgtest"
	"github.com/usagebilling/billing/testkit/servicetest"
)

// alertReceiver is a tenant's endpoint: a real HTTP server that checks
// each delivery's signature as services/invoice/README.md tells receivers
// to, and keeps what it got.
type alertReceiver struct {
	srv    *httptest.Server
	mu     sync.Mutex
	secret string
	got    []webhook.Body
	bad    int // deliveries whose signature did not verify
}

func (rc *alertReceiver) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	ts := r.Header.Get("Webhook-Timestamp")
	mac := hmac.New(sha256.New, []byte(rc.secret))
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	sec, err := strconv.ParseInt(ts, 10, 64)
	ok := err == nil && time.Since(time.Unix(sec, 0)).Abs() < 5*time.Minute &&
		hmac.Equal([]byte(r.Header.Get("Webhook-Signature")), []byte("v1="+hex.EncodeToString(mac.Sum(nil))))
	var b webhook.Body
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if !ok || json.Unmarshal(body, &b) != nil || b.ID != r.Header.Get("Webhook-Id") {
		rc.bad++
		http.Error(w, "bad delivery", http.StatusUnauthorized)
		return
	}
	rc.got = append(rc.got, b)
	w.WriteHeader(http.StatusOK)
}

// alertRig is a tenant (acme) with an endpoint served by an alertReceiver,
// billing's events decided through the real inbox path, and the real
// webhook worker delivering the intents.
type alertRig struct {
	t    *testing.T
	pool *pgxpool.Pool
	ib   *inbox.Inbox
	a    *app.App
	rc   *alertReceiver
	p    *Period
}

func newAlertRig(t *testing.T) *alertRig {
	t.Helper()
	pool := pgtest.NewPool(t, Template)
	cfg := webhook.DefaultConfig()
	cfg.PollInterval, cfg.Timeout, cfg.LeaseTTL = 10*time.Millisecond, 2*time.Second, 4*time.Second
	cfg.BackoffBase, cfg.BackoffMax = 10*time.Millisecond, 50*time.Millisecond
	cfg.AllowNets, cfg.AllowHTTP = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, true
	rc := &alertReceiver{}
	rc.srv = httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(rc.srv.Close)
	ep, err := webhook.NewEndpoints(pool, 10, webhook.NewEgress(cfg, nil), nil).Create(t.Context(), "acme", rc.srv.URL+"/hooks", "test")
	if err != nil {
		t.Fatal(err)
	}
	rc.secret = ep.Secret
	w, err := webhook.NewWorker(pool, cfg, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	now := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	return &alertRig{t: t, pool: pool, ib: NewInbox(t), rc: rc, p: NewPeriod(t, "acme", "2026-11"),
		a: app.New(app.Deps{Pool: pool, Clock: func() time.Time { return now }}, app.Config{})}
}

// alert defines an alert of acme, returning its id.
func (r *alertRig) alert(kind, meter, currency, threshold string) uuid.UUID {
	r.t.Helper()
	al, err := domain.ParseAlert(domain.AlertRequest{Kind: kind, MeterCode: meter, Currency: currency, Threshold: threshold})
	if err != nil {
		r.t.Fatal(err)
	}
	var out app.Alert
	err = r.a.InTx(r.t.Context(), func(tx pgx.Tx) (err error) {
		out, err = r.a.CreateAlert(r.t.Context(), tx, app.CreateAlert{TenantID: "acme", Actor: "admin@acme.example", Alert: al})
		return err
	})
	if err != nil {
		r.t.Fatal(err)
	}
	return out.AlertID
}

// decide decides envs as one batch, each applied.
func (r *alertRig) decide(envs ...envelope.Envelope) {
	r.t.Helper()
	want := make([]string, len(envs))
	for i := range want {
		want[i] = "applied"
	}
	wantOutcomes(r.t, Decide(r.t, r.pool, r.ib, envs...), want...)
}

// told waits until every intent written so far has been delivered and
// returns what the receiver got, sorted, as
// "<threshold> <value>" (usage) or "<currency> <threshold> <value>"
// (spend), checking each body against its alert and key.
func (r *alertRig) told() []string {
	r.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var open int
		if err := r.pool.QueryRow(r.t.Context(), `SELECT count(*) FROM webhook_intent WHERE status <> 'accepted'`).Scan(&open); err != nil {
			r.t.Fatal(err)
		}
		if open == 0 {
			break
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%d webhook intents still not accepted", open)
		}
		time.Sleep(10 * time.Millisecond) // polled: the worker records results in the database
	}
	r.rc.mu.Lock()
	defer r.rc.mu.Unlock()
	if r.rc.bad != 0 {
		r.t.Fatalf("%d deliveries failed the receiver's checks", r.rc.bad)
	}
	var out []string
	for _, b := range r.rc.got {
		var d app.AlertTriggered
		if err := json.Unmarshal(b.Data, &d); err != nil {
			r.t.Fatal(err)
		}
		if b.Type != webhook.TypeAlertTriggered || b.TenantID != "acme" || d.TenantID != "acme" || d.Period != r.p.Period ||
			b.ID != app.AlertKey(d.AlertID, d.Period) {
			r.t.Fatalf("delivery %+v, data %+v", b, d)
		}
		s := d.Threshold.String() + " " + d.Value.String()
		if d.Kind == domain.AlertSpend {
			s = d.Currency + " " + s
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

func wantTold(t *testing.T, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
		t.Fatalf("alert.triggered %q, want %q", got, want)
	}
}

// A usage alert is told when the meter's period quantity reaches its
// threshold exactly, once: not before, not again when it grows past it.
func TestAlertAtExactlyItsThreshold(t *testing.T) {
	t.Parallel()
	r := newAlertRig(t)
	r.alert("usage", Meter, "", "10")
	r.decide(r.p.Charge("USD", "4", "1"), r.p.Charge("USD", "5", "1"))
	wantTold(t, r.told())
	r.decide(r.p.Charge("USD", "1", "1"))
	wantTold(t, r.told(), "10 10")
	r.decide(r.p.Charge("USD", "3", "1"))
	wantTold(t, r.told(), "10 10")
}

// One fact over the threshold tells it with the figure it reached; a
// figure that falls below (a credit) and rises past it again in the same
// period is not told again; a spend alert watches the running subtotal,
// adjustments included.
func TestAlertOneFactOverAndBackAgain(t *testing.T) {
	t.Parallel()
	r := newAlertRig(t)
	r.alert("usage", Meter, "", "10")
	r.alert("spend", "", "USD", "20")
	r.decide(r.p.Charge("USD", "9", "2"))
	wantTold(t, r.told())
	r.decide(r.p.Charge("USD", "2", "2")) // 11 calls, USD 22
	wantTold(t, r.told(), "10 11", "USD 20 22")
	r.decide(r.p.Adjustment("USD", "-5")) // USD 17
	r.decide(r.p.Charge("USD", "3", "2")) // 14 calls, USD 23
	wantTold(t, r.told(), "10 11", "USD 20 22")
}

// One batch that takes the figure past two thresholds tells both, each with
// the figure the batch reached; an alert of another meter or currency is
// not told.
func TestAlertBatchCrossingTwoThresholds(t *testing.T) {
	t.Parallel()
	r := newAlertRig(t)
	r.alert("usage", Meter, "", "10")
	r.alert("usage", Meter, "", "20")
	r.alert("usage", "other_meter", "", "1")
	r.alert("spend", "", "EUR", "1")
	r.decide(r.p.Charge("USD", "5", "1"), r.p.Charge("USD", "8", "1"), r.p.Charge("USD", "9", "1"))
	wantTold(t, r.told(), "10 22", "20 22")
}

// A unique_count meter's period quantity is its distinct values, across
// its lines (two price versions here), not its facts.
func TestAlertUniqueCountMeter(t *testing.T) {
	t.Parallel()
	r := newAlertRig(t)
	r.alert("usage", "users", "", "3")
	user := func(version int64, v string) envelope.Envelope {
		c := events.ChargeRated{MeterCode: "users", Aggregation: "unique_count", Quantity: D("1"), UnitPrice: D("0"),
			PriceVersion: version, Value: v, OccurredAt: time.Date(2026, 11, 2, 8, 0, 0, 0, time.UTC),
			SourceSystem: "app", SourceEventID: uuid.NewString()}
		c.Pricing = &pricing.Pricing{Model: pricing.Graduated, Tiers: []pricing.Tier{{UnitPrice: D("1")}}}
		c.Model = pricing.Graduated
		return r.p.ChargeRated(c)
	}
	r.decide(user(1, "ann"), user(1, "bob"), user(2, "ann"), user(2, "bob"), user(1, "ann"))
	wantTold(t, r.told())
	r.decide(user(2, "cy"))
	wantTold(t, r.told(), "3 3")
}

// A spend alert watches the line as its version prices it: under graduated
// pricing with the first 10 free, the charges carry no amount of their
// own, and the total reaches USD 10 with the fifth call past the free tier
// at 2 each.
func TestSpendAlertThroughGraduatedTier(t *testing.T) {
	t.Parallel()
	r := newAlertRig(t)
	r.alert("spend", "", "USD", "10")
	grad := pricing.Pricing{Model: pricing.Graduated, Tiers: []pricing.Tier{{UpTo: ptr(D("10")), UnitPrice: D("0")}, {UnitPrice: D("2")}}}
	r.decide(r.p.ChargePriced("USD", Meter, 1, "8", grad), r.p.ChargePriced("USD", Meter, 1, "6", grad)) // 14: USD 8
	wantTold(t, r.told())
	r.decide(r.p.ChargePriced("USD", Meter, 1, "1", grad)) // 15: USD 10
	wantTold(t, r.told(), "USD 10 10")
}

// The charges that crossed, delivered again (alone, and in a batch with a
// new charge), and a transaction that decided the crossing but died before
// its commit, tell nothing more: one crossing and one webhook per alert and
// period.
func TestAlertNotToldTwiceUnderRedelivery(t *testing.T) {
	t.Parallel()
	r := newAlertRig(t)
	r.alert("usage", Meter, "", "10")
	first, crossing := r.p.Charge("USD", "6", "1"), r.p.Charge("USD", "6", "1")
	r.decide(first)
	// A worker that dies between the crossing and the commit: nothing of
	// it stays, the intent included.
	err := pgx.BeginFunc(t.Context(), r.pool, func(tx pgx.Tx) error {
		ds, err := r.ib.Decide(t.Context(), tx, servicetest.Messages(events.TopicBilling, Raw(t, crossing)...))
		if err != nil || len(ds) != 1 || ds[0].Outcome != inbox.OutcomeApplied {
			t.Fatalf("the crossing before the crash: %v %v", ds, err)
		}
		return errors.New("killed before the commit")
	})
	if err == nil {
		t.Fatal("the crashed transaction committed")
	}
	r.decide(crossing)
	wantOutcomes(t, Decide(t, r.pool, r.ib, crossing), "duplicate")
	wantOutcomes(t, Decide(t, r.pool, r.ib, first, crossing, r.p.Charge("USD", "1", "1")), "duplicate", "duplicate", "applied")
	wantTold(t, r.told(), "10 12")
	var crossings, intents int
	if err := r.pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM invoice_alert_crossing), (SELECT count(*) FROM webhook_intent)`).
		Scan(&crossings, &intents); err != nil {
		t.Fatal(err)
	}
	if crossings != 1 || intents != 1 {
		t.Fatalf("%d crossings and %d intents, want 1 and 1", crossings, intents)
	}
	// The figures are summed from the batches' parts: the duplicates and
	// the crashed transaction added none.
	var quantity string
	var charges int
	if err := r.pool.QueryRow(t.Context(), `SELECT sum(quantity)::text, sum(charges) FROM invoice_line_part`).Scan(&quantity, &charges); err != nil {
		t.Fatal(err)
	}
	if !D(quantity).Equal(D("13")) || charges != 3 {
		t.Fatalf("parts of %s quantity and %d charges, want 13 and 3", quantity, charges)
	}
}

// Two consumers apply charges of one tenant at once, each below the
// threshold, together past it: the second to decide waits for the first's
// lock on the alert and, in the statements after it, sees the first's
// committed charges, so the crossing is told (with the figure both reached)
// and not missed.
func TestAlertSeenAcrossConcurrentBatches(t *testing.T) {
	t.Parallel()
	r := newAlertRig(t)
	r.alert("usage", Meter, "", "13")
	r.decide(r.p.Charge("USD", "1", "1")) // the invoice exists: the two batches share no row but the alert
	ctx := t.Context()
	txA, err := r.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer txA.Rollback(ctx)
	ds, err := NewInbox(t).Decide(ctx, txA, servicetest.Messages(events.TopicBilling, Raw(t, r.p.Charge("USD", "6", "1"))...))
	if err != nil || len(ds) != 1 || ds[0].Outcome != inbox.OutcomeApplied {
		t.Fatalf("batch A: %v %v", ds, err)
	}
	// Batch B in its own transaction, while A holds its lock.
	done := make(chan error, 1)
	chargeB := r.p.Charge("USD", "6", "1")
	go func() {
		done <- pgx.BeginFunc(context.Background(), r.pool, func(tx pgx.Tx) error {
			ds, err := NewInbox(t).Decide(context.Background(), tx, servicetest.Messages(events.TopicBilling, Raw(t, chargeB)...))
			if err == nil && (len(ds) != 1 || ds[0].Outcome != inbox.OutcomeApplied) {
				err = fmt.Errorf("batch B: %v", ds)
			}
			return err
		})
	}()
	// The signal: B waits on a lock (or, wrongly, finished without).
	var finished error
	waiting := false
	for deadline := time.Now().Add(30 * time.Second); !waiting; {
		select {
		case finished = <-done:
			waiting = true // B did not wait: its figure missed A's charge
			done <- finished
		default:
			var n int
			if err := r.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			waiting = n > 0
		}
		if time.Now().After(deadline) {
			t.Fatal("batch B neither waits nor finishes")
		}
		time.Sleep(5 * time.Millisecond) // polled: only pg_stat_activity shows a backend waiting
	}
	if err := txA.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	wantTold(t, r.told(), "13 13")
}

// An adjustment line moves the running total too: one that takes it to a
// spend alert's threshold tells it, with the subtotal it reached.
func TestSpendAlertCrossedByAnAdjustment(t *testing.T) {
	t.Parallel()
	r := newAlertRig(t)
	r.alert("spend", "", "USD", "10")
	r.decide(r.p.Charge("USD", "8", "1"))
	wantTold(t, r.told())
	r.decide(r.p.Adjustment("USD", "3"))
	wantTold(t, r.told(), "USD 10 11")
}
