package webhook_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/usagebilling/billing/pkg/envelope"
	. "github.com/usagebilling/billing/services/invoice/internal/invoicetest"
	"github.com/usagebilling/billing/services/invoice/internal/webhook"
	"github.com/usagebilling/billing/services/invoice/internal/webhook/webhookdb"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// issue issues tenant's period with one invoice per currency (and, with
// correct, a correction note of the first), through the real inbox path,
// and returns the Webhook-Id of every invoice event published.
func issue(t *testing.T, pool *pgxpool.Pool, tenant string, correct bool, currencies ...string) []string {
	t.Helper()
	ib := NewInbox(t)
	p := NewPeriod(t, tenant, "2026-11")
	var envs []envelope.Envelope
	for _, cur := range currencies {
		envs = append(envs, p.Charge(cur, "3", "1.5"))
	}
	closed := p.Close()
	envs = append(envs, closed)
	if correct {
		envs = append(envs, p.Adjustment(currencies[0], "-1"))
	}
	Decide(t, pool, ib, envs...)
	// Billing redelivers: the inbox finds duplicates, no intent is written twice.
	Decide(t, pool, ib, envs...)
	var keys []string
	for _, d := range Published(t, pool) {
		if d.Envelope.TenantID == tenant {
			keys = append(keys, webhook.Key(&d.Envelope))
		}
	}
	want := len(currencies)
	if correct {
		want++
	}
	if len(keys) != want {
		t.Fatalf("%d invoice events published, want %d", len(keys), want)
	}
	return keys
}

func intents(t *testing.T, pool *pgxpool.Pool, status string) []webhook.Intent {
	t.Helper()
	out, err := webhook.NewStore(pool, time.Hour).List(t.Context(), webhook.Filter{Status: status, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func byKey(t *testing.T, pool *pgxpool.Pool) map[string]webhook.Intent {
	t.Helper()
	out := map[string]webhook.Intent{}
	for _, i := range intents(t, pool, "") {
		out[i.IdempotencyKey] = i
	}
	return out
}

func allIn(t *testing.T, pool *pgxpool.Pool, status string, n int) func() bool {
	return func() bool { return len(intents(t, pool, status)) == n }
}

// The transaction that issues an invoice or a correction note writes one
// intent per active endpoint, keyed by the event; redelivered events and a
// second Record of the same events write nothing more; an endpoint deleted
// before the issue gets none.
func TestIntentsAreWrittenWithTheIssue(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	a, b, gone := newReceiver(t), newReceiver(t), newReceiver(t)
	epA, epB := a.register(t, pool, "acme"), b.register(t, pool, "acme")
	epGone := gone.register(t, pool, "acme")
	newReceiver(t).register(t, pool, "other-tenant")
	if err := testEndpoints(pool).Delete(t.Context(), "acme", epGone.ID); err != nil {
		t.Fatal(err)
	}
	keys := issue(t, pool, "acme", true, "USD", "EUR")

	got := intents(t, pool, "")
	if len(got) != len(keys)*2 {
		t.Fatalf("%d intents, want %d (3 events x 2 endpoints)", len(got), len(keys)*2)
	}
	perEndpoint := map[string][]string{}
	for _, i := range got {
		if i.Status != webhook.StatusPending || i.Attempts != 0 || i.TenantID != "acme" {
			t.Fatalf("intent %+v, want pending, never tried, of acme", i)
		}
		if !i.ExpiresAt.After(i.CreatedAt) {
			t.Fatalf("intent expires %v, created %v", i.ExpiresAt, i.CreatedAt)
		}
		perEndpoint[i.EndpointID.String()] = append(perEndpoint[i.EndpointID.String()], i.IdempotencyKey)
	}
	slices.Sort(keys)
	for _, ep := range []webhook.Endpoint{epA, epB} {
		k := perEndpoint[ep.ID.String()]
		slices.Sort(k)
		if !slices.Equal(k, keys) {
			t.Fatalf("endpoint %s has keys %v, want %v", ep.ID, k, keys)
		}
	}

	// Recording the same events again (a replayed transaction) adds nothing.
	var envs []envelope.Envelope
	for _, d := range Published(t, pool) {
		envs = append(envs, d.Envelope)
	}
	if err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		return (&webhook.Recorder{TTL: time.Hour}).Record(t.Context(), tx, envs...)
	}); err != nil {
		t.Fatal(err)
	}
	if n := len(intents(t, pool, "")); n != len(keys)*2 {
		t.Fatalf("%d intents after recording again, want %d", n, len(keys)*2)
	}
}

// A close that cannot issue yet (charges missing) writes no intent: intents
// exist only with what they tell.
func TestNoIntentWithoutAnIssue(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	newReceiver(t).register(t, pool, "acme")
	ib := NewInbox(t)
	p := NewPeriod(t, "acme", "2026-11")
	p.Charge("USD", "1", "1") // counted by the close, never delivered
	Decide(t, pool, ib, p.Close())
	if n := len(intents(t, pool, "")); n != 0 {
		t.Fatalf("%d intents for a close that issued nothing", n)
	}
}

// Every invoice event reaches every endpoint with one Webhook-Id and one
// effect, whatever the endpoints do: one answers slowly, one fails twice
// before accepting, and two workers share the intents.
func TestEachInvoiceReachesEachEndpointOnceInEffect(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	slow, flaky := newReceiver(t), newReceiver(t)
	slow.setBehaviour(func(w http.ResponseWriter, r *http.Request, n int, apply func()) bool {
		time.Sleep(150 * time.Millisecond) // well within the 2s timeout
		return false
	})
	flaky.setBehaviour(func(w http.ResponseWriter, r *http.Request, n int, apply func()) bool {
		if n <= 2 {
			http.Error(w, "try later", http.StatusInternalServerError)
			return true
		}
		apply()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"erp-%s"}`, r.Header.Get("Webhook-Id"))
		return true
	})
	slow.register(t, pool, "acme")
	flaky.register(t, pool, "acme")
	keys := issue(t, pool, "acme", true, "USD", "EUR", "KRW")
	reg := prometheus.NewRegistry() // the two workers share their metrics, as in one process
	runWorkerWith(t, pool, testConfig(), reg)
	runWorkerWith(t, pool, testConfig(), reg)
	waitFor(t, "every intent accepted", allIn(t, pool, webhook.StatusAccepted, len(keys)*2))
	waitFor(t, "the oldest pending age back to 0", func() bool { return gauge(t, reg, "webhook_oldest_pending_intent_age_seconds") == 0 })
	intentCount := uint64(len(keys) * 2)
	if n := histogramCount(t, reg, "webhook_commit_to_first_attempt_seconds"); n != intentCount {
		t.Errorf("commit to first attempt observed %d times, want once per intent (%d)", n, intentCount)
	}
	if n := histogramCount(t, reg, "webhook_attempts_per_intent"); n != intentCount {
		t.Errorf("attempts per intent observed %d times, want once per intent (%d)", n, intentCount)
	}
	if n := counter(t, reg, "webhook_intents_finished_total", "status", "accepted"); n != float64(intentCount) {
		t.Errorf("%v intents finished accepted, want %d", n, intentCount)
	}
	if n := counter(t, reg, "webhook_attempts_total", "outcome", "retry"); n < float64(2*len(keys)) {
		t.Errorf("%v retried attempts, want at least the flaky receiver's %d", n, 2*len(keys))
	}

	for name, rc := range map[string]*receiver{"slow": slow, "flaky": flaky} {
		want := map[string]int{}
		for _, k := range keys {
			want[k] = 1
		}
		if got := rc.effects(); !maps.Equal(got, want) {
			t.Errorf("%s receiver's effects %v, want each of %v once", name, got, keys)
		}
		for _, d := range rc.deliveries() {
			if !d.verified {
				t.Errorf("%s receiver: a delivery of %s failed the signature check", name, d.key)
			}
			var body webhook.Body
			if err := json.Unmarshal(d.body, &body); err != nil || body.ID != d.key || body.TenantID != "acme" ||
				(body.Type != webhook.TypeInvoiceIssued && body.Type != webhook.TypeInvoiceCorrectionIssued) {
				t.Errorf("%s receiver: body %s for %s", name, d.body, d.key)
			}
		}
	}
	for _, i := range intents(t, pool, webhook.StatusAccepted) {
		// At least: a machine slow enough to miss the timeout tries again.
		want, attempts := "rcpt-"+i.IdempotencyKey, int32(1)
		if i.URL == flaky.srv.URL+"/hooks/invoices" {
			want, attempts = "erp-"+i.IdempotencyKey, 3
		}
		if i.ResponseRef != want || i.Attempts < attempts || i.LastStatusCode == nil || *i.LastStatusCode != 200 {
			t.Errorf("intent %s: ref %q, %d attempts, status %v; want %q, at least %d attempts, 200",
				i.IdempotencyKey, i.ResponseRef, i.Attempts, i.LastStatusCode, want, attempts)
		}
	}
	if n := len(flaky.deliveries()); n < len(keys)*3 {
		t.Errorf("the flaky receiver got %d requests, want at least 3 per event (%d)", n, len(keys)*3)
	}
}

// The receiver applies the effect, then answers after the client gave up:
// the worker cannot know, tries again with the same Webhook-Id, and the
// receiver's dedup keeps one effect.
func TestTimeoutAfterTheReceiverActedIsRedeliveredWithTheSameKey(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	rc := newReceiver(t)
	rc.setBehaviour(func(w http.ResponseWriter, r *http.Request, n int, apply func()) bool {
		if n == 1 {
			apply()
			<-r.Context().Done() // stall past the client's timeout
			return true
		}
		return false
	})
	rc.register(t, pool, "acme")
	keys := issue(t, pool, "acme", false, "USD")
	runWorker(t, pool, testConfig())
	waitFor(t, "the intent accepted", allIn(t, pool, webhook.StatusAccepted, 1))

	ds := rc.deliveries()
	if len(ds) < 2 || !allKey(ds, keys[0]) {
		t.Fatalf("deliveries %v, want at least two, all of %s", ds, keys[0])
	}
	if got := rc.effects(); !maps.Equal(got, map[string]int{keys[0]: 1}) {
		t.Fatalf("effects %v, want one", got)
	}
	if i := byKey(t, pool)[keys[0]]; int(i.Attempts) < len(ds) {
		t.Fatalf("intent %+v: fewer attempts than the %d deliveries", i, len(ds))
	}
}

// A 429 with Retry-After: the next attempt waits at least that long, even
// though the worker's own backoff is a few milliseconds.
func TestRetryAfterIsHonoured(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	rc := newReceiver(t)
	rc.setBehaviour(func(w http.ResponseWriter, r *http.Request, n int, apply func()) bool {
		if n == 1 {
			w.Header().Set("Retry-After", "2")
			http.Error(w, "slow down", http.StatusTooManyRequests)
			return true
		}
		return false
	})
	rc.register(t, pool, "acme")
	issue(t, pool, "acme", false, "USD")
	runWorker(t, pool, testConfig())
	waitFor(t, "the intent accepted", allIn(t, pool, webhook.StatusAccepted, 1))
	ds := rc.deliveries()
	if len(ds) < 2 {
		t.Fatalf("%d deliveries, want at least 2", len(ds))
	}
	if gap := ds[1].at.Sub(ds[0].at); gap < 2*time.Second {
		t.Fatalf("second attempt %v after the 429, before its Retry-After of 2s", gap)
	}
}

// A refusal (a 4xx other than 408, 425 and 429) is permanent: the intent
// fails after one attempt and waits for an operator.
func TestRefusalFailsPermanently(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	rc := newReceiver(t)
	rc.setBehaviour(func(w http.ResponseWriter, r *http.Request, n int, apply func()) bool {
		http.Error(w, "unknown tenant", http.StatusUnprocessableEntity)
		return true
	})
	rc.register(t, pool, "acme")
	issue(t, pool, "acme", false, "USD")
	runWorker(t, pool, testConfig())
	waitFor(t, "the intent failed", allIn(t, pool, webhook.StatusFailed, 1))
	i := intents(t, pool, webhook.StatusFailed)[0]
	if i.Attempts < 1 || i.LastStatusCode == nil || *i.LastStatusCode != 422 || i.FinishedAt == nil {
		t.Fatalf("failed intent %+v, want the attempt answered 422", i)
	}
	if n := len(rc.deliveries()); n != int(i.Attempts) {
		t.Fatalf("the receiver got %d deliveries for %d attempts: tried again after the refusal", n, i.Attempts)
	}
}

// A worker killed between the receiver's answer and recording it: its lease
// runs out, a fresh worker delivers again with the same Webhook-Id, and the
// receiver's dedup keeps one effect.
func TestWorkerKilledAfterTheCallDeliversAgainWithTheSameKey(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	rc := newReceiver(t)
	rc.register(t, pool, "acme")
	keys := issue(t, pool, "acme", false, "USD")

	called := make(chan struct{}, 1)
	stop := runWorker(t, pool, testConfig(), func(w *webhook.Worker) {
		webhook.SetCrashAfterCall(w, func(string) bool {
			select {
			case called <- struct{}{}:
			default:
			}
			return true // never record: as if killed right after the call
		})
	})
	<-called
	stop()
	if i := byKey(t, pool)[keys[0]]; i.Status != webhook.StatusLeased || i.Attempts < 1 {
		t.Fatalf("after the crash the intent is %s with %d attempts, want leased, tried", i.Status, i.Attempts)
	}
	crashed := len(rc.deliveries())
	runWorker(t, pool, testConfig())
	waitFor(t, "the intent accepted", allIn(t, pool, webhook.StatusAccepted, 1))
	ds := rc.deliveries()
	if len(ds) <= crashed || !allKey(ds, keys[0]) {
		t.Fatalf("deliveries %v (%d before the fresh worker), want more, all of %s", ds, crashed, keys[0])
	}
	if got := rc.effects(); !maps.Equal(got, map[string]int{keys[0]: 1}) {
		t.Fatalf("effects %v, want one", got)
	}
}

func allKey(ds []delivery, key string) bool {
	for _, d := range ds {
		if d.key != key {
			return false
		}
	}
	return true
}

// An endpoint down past the intent's expiry: the intent expires into the
// operator's queue; once the endpoint is back, an operator's retry delivers
// it with the same Webhook-Id. A retry of an intent not failed or expired
// changes nothing.
func TestExpiredIntentIsDeliveredByAnOperatorRetry(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	rc := newReceiver(t)
	rc.setBehaviour(func(w http.ResponseWriter, r *http.Request, n int, apply func()) bool {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return true
	})
	rc.register(t, pool, "acme")
	keys := issue(t, pool, "acme", false, "USD")
	// Shorten the intent's life as a 2-second WEBHOOK_TTL would have.
	if _, err := pool.Exec(t.Context(), `UPDATE webhook_intent SET expires_at = created_at + interval '2 seconds'`); err != nil {
		t.Fatal(err)
	}
	runWorker(t, pool, testConfig())
	waitFor(t, "the intent expired", allIn(t, pool, webhook.StatusExpired, 1))
	expired := intents(t, pool, webhook.StatusExpired)[0]
	if expired.Attempts < 1 || expired.LastStatusCode == nil || *expired.LastStatusCode != 503 {
		t.Fatalf("expired intent %+v, want attempts answered 503", expired)
	}
	tried := len(rc.deliveries())

	rc.setBehaviour(nil) // the endpoint is back
	store := webhook.NewStore(pool, time.Hour)
	outcome, status, err := store.Retry(t.Context(), expired.ID)
	if err != nil || outcome != webhook.RetryRescheduled || status != webhook.StatusPending {
		t.Fatalf("retry: %s %s %v, want rescheduled, pending", outcome, status, err)
	}
	waitFor(t, "the intent accepted", allIn(t, pool, webhook.StatusAccepted, 1))
	ds := rc.deliveries()
	if len(ds) <= tried || !allKey(ds, keys[0]) {
		t.Fatalf("deliveries %d (%d before the retry), want more, all of %s", len(ds), tried, keys[0])
	}
	if got := rc.effects(); !maps.Equal(got, map[string]int{keys[0]: 1}) {
		t.Fatalf("effects %v, want one", got)
	}
	if i := byKey(t, pool)[keys[0]]; i.OperatorRetries != 1 {
		t.Fatalf("intent %+v, want one operator retry", i)
	}
	outcome, status, err = store.Retry(t.Context(), expired.ID)
	if err != nil || outcome != webhook.RetryNotRetryable || status != webhook.StatusAccepted {
		t.Fatalf("second retry: %s %s %v, want not_retryable, accepted", outcome, status, err)
	}
	if outcome, _, _ := store.Retry(t.Context(), uuid.New()); outcome != webhook.RetryNotFound {
		t.Fatalf("retry of an unknown intent: %s", outcome)
	}
	stats, err := store.Stats(t.Context())
	if err != nil || stats.ByStatus[webhook.StatusAccepted] != 1 || stats.OldestPendingAgeSeconds != 0 {
		t.Fatalf("stats %+v, %v", stats, err)
	}
}

// A worker whose lease ran out and was taken over records nothing when its
// call finally returns: the new holder's result stands, and the stale
// result counts as lost. Both calls carried the same Webhook-Id.
func TestAStaleLeaseRecordsNothing(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, Template)
	rc := newReceiver(t)
	rc.setBehaviour(func(w http.ResponseWriter, r *http.Request, n int, apply func()) bool {
		apply()
		w.Header().Set("Webhook-Receipt", fmt.Sprintf("rcpt-%d", n))
		return true
	})
	rc.register(t, pool, "acme")
	keys := issue(t, pool, "acme", false, "USD")

	reg := prometheus.NewRegistry()
	stale, err := webhook.NewWorker(pool, testConfig(), nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	called, release := make(chan struct{}), make(chan struct{})
	webhook.SetCrashAfterCall(stale, func(string) bool {
		close(called)
		<-release // hang between the call and the recording, past the lease
		return false
	})
	done := make(chan error, 1)
	go func() { _, err := stale.Tick(t.Context()); done <- err }()
	<-called

	stop := runWorker(t, pool, testConfig())
	waitFor(t, "the new holder's result", allIn(t, pool, webhook.StatusAccepted, 1))
	stop()
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	stale.Wait() // the stale call's result, refused
	i := byKey(t, pool)[keys[0]]
	if i.Status != webhook.StatusAccepted || i.ResponseRef == "" || i.ResponseRef == "rcpt-1" || i.Attempts < 2 {
		t.Fatalf("intent %+v, want accepted with the new holder's receipt, not the stale call's rcpt-1", i)
	}
	if lost := lostAttempts(t, reg); lost != 1 {
		t.Fatalf("lost attempts %v, want 1", lost)
	}
	if ds := rc.deliveries(); len(ds) < 2 || !allKey(ds, keys[0]) {
		t.Fatalf("deliveries %v, want at least two, all of %s", ds, keys[0])
	}
}

// lostAttempts reads webhook_attempts_total{outcome="lost"} from reg.
func lostAttempts(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	return counter(t, reg, "webhook_attempts_total", "outcome", "lost")
}

// metricOf finds the metric name{label=value} (any, without a label).
func metricOf(t *testing.T, reg *prometheus.Registry, name, label, value string) *dto.Metric {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label == "" {
				return m
			}
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m
				}
			}
		}
	}
	return nil
}

func counter(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	return metricOf(t, reg, name, label, value).GetCounter().GetValue()
}

func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	return metricOf(t, reg, name, "", "").GetGauge().GetValue()
}

func histogramCount(t *testing.T, reg *prometheus.Registry, name string) uint64 {
	t.Helper()
	return metricOf(t, reg, name, "", "").GetHistogram().GetSampleCount()
}

// PurgeEnded deletes accepted intents past WEBHOOK_RETENTION and failed or
// expired ones past WEBHOOK_FAILED_RETENTION, in batches of its limit; an
// intent within its retention, and one not ended, stays.
func TestPurgeEndedKeepsWhatIsWithinItsRetention(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, Template)
	rc := newReceiver(t)
	rc.register(t, pool, "acme")
	keys := issue(t, pool, "acme", false, "USD", "EUR", "KRW", "JPY", "GBP", "CHF", "SEK")
	// Each intent ended (or not) as long ago as its name says.
	states := map[string]struct{ status, ended string }{
		keys[0]: {webhook.StatusAccepted, "8 days"}, keys[1]: {webhook.StatusAccepted, "6 days"},
		keys[2]: {webhook.StatusFailed, "31 days"}, keys[3]: {webhook.StatusExpired, "31 days"},
		keys[4]: {webhook.StatusFailed, "29 days"}, keys[5]: {webhook.StatusExpired, "29 days"},
		keys[6]: {webhook.StatusPending, ""},
	}
	for key, s := range states {
		if _, err := pool.Exec(ctx, `UPDATE webhook_intent SET status = $2,
			finished_at = CASE WHEN $3 = '' THEN NULL ELSE now() - $3::interval END WHERE idempotency_key = $1`,
			key, s.status, s.ended); err != nil {
			t.Fatal(err)
		}
	}
	cfg := webhook.DefaultConfig() // 7 days, 30 days
	q := webhookdb.New(pool)
	for i, want := range []int64{2, 1, 0} {
		if n, err := webhook.PurgeEnded(ctx, q, cfg, 2); err != nil || n != want {
			t.Fatalf("batch %d purged %d, %v; want %d", i+1, n, err, want)
		}
	}
	left := byKey(t, pool)
	for _, k := range []int{1, 4, 5, 6} {
		if _, ok := left[keys[k]]; !ok {
			t.Errorf("%s (%s %s ago) purged", keys[k], states[keys[k]].status, states[keys[k]].ended)
		}
	}
	if len(left) != 4 {
		t.Errorf("%d intents left, want 4", len(left))
	}
}

// A tenant whose ten endpoints hang holds at most WEBHOOK_TENANT_CONCURRENCY
// of a worker's slots, and another tenant's delivery goes out while those
// calls still hang: it waits for a free slot, not for the slow calls. Its
// acceptance is recorded within fairDelay of its intent becoming due: a
// bound on correctness, not a speed, since the slow calls hang 30 s and a
// delivery queued behind them would come about 30 s late. The same with a
// backlog of the hanging tenant's intents, all older, larger than the 1,000
// due intents one claim ranks (claimScan): a tenant without room is left
// out of the ranking, so the other's intent is in it.
func TestHangingEndpointsOfOneTenantDoNotHoldBackAnother(t *testing.T) {
	t.Parallel()
	for _, backlog := range []int{0, 1500} {
		t.Run(fmt.Sprintf("older backlog %d", backlog), func(t *testing.T) {
			t.Parallel()
			hangingTenantBeside(t, backlog)
		})
	}
}

func hangingTenantBeside(t *testing.T, backlog int) {
	pool := pgtest.NewPool(t, Template)
	var mu sync.Mutex
	hanging, most, ended := 0, 0, 0
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hanging++
		most = max(most, hanging)
		mu.Unlock()
		select {
		case <-release:
		case <-r.Context().Done():
		}
		mu.Lock()
		hanging--
		ended++
		mu.Unlock()
	}))
	t.Cleanup(hang.Close)
	for i := range 10 {
		if _, err := testEndpoints(pool).Create(t.Context(), "slowco", fmt.Sprintf("%s/hooks/%d", hang.URL, i), "test"); err != nil {
			t.Fatal(err)
		}
	}
	issue(t, pool, "slowco", false, "USD", "EUR", "KRW") // 30 intents
	// The backlog: copies of them, due a minute earlier.
	if backlog > 0 {
		if _, err := pool.Exec(t.Context(), `
			INSERT INTO webhook_intent (intent_id, endpoint_id, tenant_id, idempotency_key, event_id, event_type, body,
			                            created_at, not_before, expires_at)
			SELECT gen_random_uuid(), w.endpoint_id, w.tenant_id, w.idempotency_key || '/backlog/' || g, gen_random_uuid(),
			       w.event_type, w.body, w.created_at - interval '1 minute', w.not_before - interval '1 minute', w.expires_at
			FROM webhook_intent w, generate_series(1, $1::int / 30) g WHERE w.tenant_id = 'slowco'`, backlog); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM webhook_intent WHERE status = 'pending'`).Scan(&n); err != nil || n != 30+backlog {
			t.Fatalf("%d pending intents (%v), want %d", n, err, 30+backlog)
		}
	}
	fast := newReceiver(t)
	fast.register(t, pool, "acme")

	cfg := testConfig()
	cfg.Timeout, cfg.LeaseTTL = 30*time.Second, 60*time.Second // the slow calls hang all test long
	runWorker(t, pool, cfg)
	t.Cleanup(func() { close(release) }) // before the worker's stop, which waits for its calls
	state := func() (int, int, int) {
		mu.Lock()
		defer mu.Unlock()
		return hanging, most, ended
	}
	waitFor(t, "slowco's calls to take its room", func() bool { h, _, _ := state(); return h == cfg.TenantConcurrency })

	keys := issue(t, pool, "acme", false, "USD")
	waitFor(t, "acme's delivery", allIn(t, pool, webhook.StatusAccepted, 1))
	h, m, e := state()
	// Both times are the database's: not_before (the intent's insert, no
	// later than the commit that made it claimable) and the recording of
	// the 2xx.
	const fairDelay = 2 * time.Second
	accepted := intents(t, pool, webhook.StatusAccepted)[0]
	if accepted.TenantID != "acme" || accepted.FinishedAt == nil {
		t.Fatalf("the accepted intent: %+v, want acme's, finished", accepted)
	}
	took := accepted.FinishedAt.Sub(accepted.NotBefore)
	if took > fairDelay {
		t.Errorf("acme's delivery was accepted %s after it was due, more than %s: slowco's hanging calls held it back", took.Round(time.Millisecond), fairDelay)
	}
	if e != 0 || h != cfg.TenantConcurrency {
		t.Errorf("acme's delivery came after slowco's calls ended (%d ended, %d hanging): it waited for them", e, h)
	}
	if m > cfg.TenantConcurrency {
		t.Errorf("slowco held %d slots at once, more than its %d", m, cfg.TenantConcurrency)
	}
	if got := fast.effects(); len(got) != 1 || got[keys[0]] != 1 {
		t.Errorf("acme's receiver: %v", got)
	}
	t.Logf("acme's delivery accepted %s after it was due, while %d of slowco's calls hung (WEBHOOK_CONCURRENCY %d, WEBHOOK_TENANT_CONCURRENCY %d)",
		took.Round(time.Millisecond), h, cfg.Concurrency, cfg.TenantConcurrency)
}
