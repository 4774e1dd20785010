package service

import (
	"log/slog"
	"testing"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// One pass of the service's retention with the default settings removes
// what is past its age and only that: decided events past INBOX_RETENTION
// (but the newest version of a price series), idempotency keys past
// IDEMPOTENCY_TTL, deferred events past DEFERRED_MAX_AGE, which are
// quarantined as deferred_expired, and quarantine rows redriven past
// INBOX_RETENTION (never one still quarantined); each counted in its metric.
func TestRetentionPassRemovesOnlyWhatIsPastItsAge(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, tmpl)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	count := func(sql string) int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, sql).Scan(&n); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return n
	}
	event := func(aggType, aggID string, version int, age string) {
		exec(`INSERT INTO inbox_event (event_id, payload_digest, event_type, tenant_id, aggregate_type, aggregate_id,
			aggregate_version, applied_at) VALUES ($1, 'd', 'T', 't1', $2, $3, $4, now() - $5::interval)`,
			uuid.New(), aggType, aggID, version, age)
	}
	event("usage", "old", 1, "15 days")
	event("usage", "fresh", 1, "13 days")
	event("price", "p", 1, "30 days")
	event("price", "p", 2, "30 days") // the newest of its series: kept
	exec(`INSERT INTO idempotency_key (scope, key, request_hash, created_at) VALUES
		('s', 'old', 'h', now() - interval '25 hours'), ('s', 'fresh', 'h', now() - interval '23 hours')`)
	deferred := func(age string) {
		exec(`INSERT INTO inbox_deferred (event_id, wait_key, reason, raw, payload_digest, event_type, tenant_id,
			aggregate_type, aggregate_id, aggregate_version, topic, partition, "offset", first_seen)
			VALUES ($1, 'agg/t1/x/y@1', 'version_gap', '{"eventId":"x"}', 'd', 'T', 't1', 'x', 'y', 2, 'topic', 0, 0,
			now() - $2::interval)`, uuid.New(), age)
	}
	deferred("25 hours")
	deferred("23 hours")
	quarantined := func(raw, state, redrivenAge string) {
		exec(`INSERT INTO inbox_quarantine (raw_sha256, reason, raw, topic, partition, "offset", first_seen, state, redriven_at)
			VALUES (md5($1), 'malformed', convert_to($1, 'UTF8'), 'topic', 0, 0, now() - interval '30 days', $2,
			        now() - NULLIF($3, '')::interval)`, raw, state, redrivenAge)
	}
	quarantined("redriven long ago", "redriven", "15 days")
	quarantined("redriven lately", "redriven", "13 days")
	quarantined("still quarantined", "quarantined", "")

	reg := prometheus.NewRegistry()
	log := slog.New(slog.DiscardHandler)
	ib, err := inbox.New(envelope.NewRegistry(), nil, inbox.Options{Service: "svc", Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, "postgres://unused/x")
	r, err := newRetention(pool, ib, cfg, reg, log)
	if err != nil {
		t.Fatal(err)
	}
	r.once(ctx)

	if got := count(`SELECT count(*) FROM inbox_event WHERE aggregate_id = 'old'`); got != 0 {
		t.Error("the event past INBOX_RETENTION is kept")
	}
	if got := count(`SELECT count(*) FROM inbox_event WHERE aggregate_id = 'fresh'`); got != 1 {
		t.Error("the event within INBOX_RETENTION is purged")
	}
	if got := count(`SELECT (string_agg(aggregate_version::text, ',') = '2')::int FROM inbox_event WHERE aggregate_id = 'p'`); got != 1 {
		t.Error("want price p@1 purged and p@2, the newest of its series, kept")
	}
	if got := count(`SELECT count(*) FROM idempotency_key WHERE key = 'fresh'`); got != 1 {
		t.Error("the key within IDEMPOTENCY_TTL is purged")
	}
	if got := count(`SELECT count(*) FROM idempotency_key`); got != 1 {
		t.Error("the key past IDEMPOTENCY_TTL is kept")
	}
	if got := count(`SELECT count(*) FROM inbox_deferred`); got != 1 {
		t.Errorf("%d deferred left, want the one within DEFERRED_MAX_AGE", got)
	}
	if got := count(`SELECT count(*) FROM inbox_quarantine WHERE reason = 'deferred_expired'`); got != 1 {
		t.Errorf("%d quarantined deferred_expired, want 1", got)
	}
	if got := count(`SELECT count(*) FROM inbox_quarantine WHERE reason = 'malformed'`); got != 2 {
		t.Errorf("%d malformed quarantine rows left, want 2: the one redriven within INBOX_RETENTION and the one still quarantined", got)
	}
	if got := count(`SELECT count(*) FROM inbox_quarantine WHERE raw = convert_to('redriven long ago', 'UTF8')`); got != 0 {
		t.Error("the row redriven past INBOX_RETENTION is kept")
	}
	if got := testutil.ToFloat64(r.quarantinePurged); got != 1 {
		t.Errorf("inbox_quarantine_purged_total %v", got)
	}
	if got := testutil.ToFloat64(r.keysPurged); got != 1 {
		t.Errorf("idempotency_keys_purged_total %v", got)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"inbox_events_purged_total": 2, "inbox_deferred_expired_total": 1}
	for _, mf := range mfs {
		if w, ok := want[mf.GetName()]; ok {
			if got := mf.GetMetric()[0].GetCounter().GetValue(); got != w {
				t.Errorf("%s = %v, want %v", mf.GetName(), got, w)
			}
			delete(want, mf.GetName())
		}
	}
	if len(want) > 0 {
		t.Errorf("metrics not found: %v", want)
	}
}
