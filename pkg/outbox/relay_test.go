package outbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/outbox"
	"github.com/usagebilling/billing/testkit/kafkatest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

func TestRolledBackTransactionLeavesNoRow(t *testing.T) {
	pool := pgtest.NewPool(t, outboxDB)
	ctx := t.Context()
	evs := newEvents(t, 3, 1)

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := outbox.Append(ctx, tx, "things", evs...); err != nil {
		t.Fatalf("append: %v", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_event`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("rolled-back transaction left %d outbox rows, want 0", n)
	}

	// The same events committed are all there, in order.
	appendEvents(t, pool, "things", evs)
	rows, err := pool.Query(ctx, `SELECT event_id::text FROM outbox_event ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 3 {
		t.Fatalf("committed 3 events, found %d rows", len(ids))
	}
	for i, id := range ids {
		if id != evs[i].EventID.String() {
			t.Errorf("row %d is %s, want %s (append order)", i, id, evs[i].EventID)
		}
	}
}

func TestBacklogIsDeliveredWhenARelayStarts(t *testing.T) {
	pool := pgtest.NewPool(t, outboxDB)
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.Topic(t, brokers, 6)
	evs := newEvents(t, 1500, 50)
	appendEvents(t, pool, topic, evs) // no relay runs yet

	reg := prometheus.NewRegistry()
	_, stop := startRelays(t, pool, 1, outbox.Config{Brokers: brokers, Registerer: reg, StatsInterval: 50 * time.Millisecond})
	waitDrained(t, pool, 60*time.Second)

	rep := checkDelivery(evs, readTopic(t, brokers, topic))
	if rep.Lost != 0 || rep.Duplicates != 0 || rep.Reordered != 0 || rep.Unknown != 0 {
		t.Fatalf("delivery: %v", rep)
	}
	if got := metricValue(t, reg, "outbox_published_total"); got != 1500 {
		t.Errorf("outbox_published_total = %v, want 1500", got)
	}
	if got := metricValue(t, reg, "outbox_commit_to_ack_seconds"); got != 1500 {
		t.Errorf("outbox_commit_to_ack_seconds observed %v sends, want 1500", got)
	}

	// Events appended while the relay runs are woken by NOTIFY and sent too.
	more := newEvents(t, 10, 10)
	appendEvents(t, pool, topic, more)
	waitDrained(t, pool, 30*time.Second)
	stop()
	if rep := checkDelivery(append(evs, more...), readTopic(t, brokers, topic)); rep.Lost != 0 || rep.Duplicates != 0 {
		t.Fatalf("after live appends: %v", rep)
	}
}

// TestFourRelaysKeepOrderPerKey drains 20,000 events with four relay
// instances at once and reads the topic back.
func TestFourRelaysKeepOrderPerKey(t *testing.T) {
	for _, keys := range []int{1, 10, 1000} {
		t.Run(fmt.Sprintf("keys=%d", keys), func(t *testing.T) {
			pool := pgtest.NewPool(t, outboxDB)
			brokers := kafkatest.Brokers(t)
			topic := kafkatest.Topic(t, brokers, 12)
			evs := newEvents(t, 20000, keys)
			appendEvents(t, pool, topic, evs)

			relays, stop := startRelays(t, pool, 4, outbox.Config{Brokers: brokers, LeaseTTL: 5 * time.Second})
			start := time.Now()
			waitDrained(t, pool, 3*time.Minute)
			took := time.Since(start)
			stop()

			rep := checkDelivery(evs, readTopic(t, brokers, topic))
			t.Logf("4 relays, %d keys: 20000 events in %v (%.0f events/s); %v",
				keys, took.Round(time.Millisecond), 20000/took.Seconds(), rep)
			if rep.Lost != 0 || rep.Reordered != 0 || rep.Unknown != 0 {
				t.Fatalf("delivery: %v", rep)
			}
			// No relay crashed, so nothing may have been sent twice.
			if rep.Duplicates != 0 {
				t.Fatalf("%d duplicates without any crash: %v", rep.Duplicates, rep)
			}
			if len(relays) != 4 {
				t.Fatalf("started %d relays", len(relays))
			}
		})
	}
}

// TestHotKeyIsSentInFullBatches guards against the design in which one hot
// key is serialised to one event per claim round: a single key's backlog must
// leave in rounds of the full batch size.
func TestHotKeyIsSentInFullBatches(t *testing.T) {
	pool := pgtest.NewPool(t, outboxDB)
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.Topic(t, brokers, 3)
	evs := newEvents(t, 2000, 1)
	appendEvents(t, pool, topic, evs)

	// The hook runs once a round, between the broker's ack and the mark.
	var rounds atomic.Int32
	outbox.SetAfterSend(func() { rounds.Add(1) })
	t.Cleanup(func() { outbox.SetAfterSend(nil) })
	_, stop := startRelays(t, pool, 1, outbox.Config{Brokers: brokers, BatchSize: 500})
	waitDrained(t, pool, 60*time.Second)
	stop()
	if rounds := rounds.Load(); rounds != 4 {
		t.Fatalf("2000 events of one key took %d rounds, want 4 rounds of 500", rounds)
	}
}

func TestMessageRefusedTooOftenBecomesADeadLetter(t *testing.T) {
	pool := pgtest.NewPool(t, outboxDB)
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.Topic(t, brokers, 3)

	// Over envelope.MaxBytes, written before Append refused such envelopes:
	// the relay refuses it every time.
	big, body := oversized(t, "big", envelope.MaxBytes)
	healthy := newEvents(t, 20, 5)
	insertRow(t, pool, topic, big, body)
	appendEvents(t, pool, topic, healthy)

	reg := prometheus.NewRegistry()
	_, stop := startRelays(t, pool, 1, outbox.Config{
		Brokers: brokers, MaxAttempts: 3, BackoffMin: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond,
		Registerer: reg, StatsInterval: 50 * time.Millisecond,
	})
	waitDrained(t, pool, 60*time.Second)
	waitFor(t, 5*time.Second, "dead letter gauge", func() (bool, string) {
		v := metricValue(t, reg, "outbox_dead_letters")
		return v == 1, fmt.Sprintf("outbox_dead_letters = %v", v)
	})
	stop()

	dead, err := outbox.ListDeadLetters(t.Context(), pool, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || dead[0].EventID != big.EventID || dead[0].Attempts != 3 || !strings.Contains(dead[0].LastError, envelope.ErrTooLarge.Error()) {
		t.Fatalf("dead letters = %+v, want the oversized event after 3 attempts with its error", dead)
	}
	if rep := checkDelivery(healthy, readTopic(t, brokers, topic)); rep.Lost != 0 || rep.Duplicates != 0 {
		t.Fatalf("healthy events behind the dead letter: %v", rep)
	}

	// Released, it is tried again (and refused again, since it is still too big).
	ok, err := outbox.RedriveDeadLetter(t.Context(), pool, big.EventID)
	if err != nil || !ok {
		t.Fatalf("release: %v %v", ok, err)
	}
	st, err := outbox.ReadStats(t.Context(), pool)
	if err != nil {
		t.Fatal(err)
	}
	if st.Pending != 1 || st.DeadLetters != 0 {
		t.Fatalf("after release: %+v, want 1 pending and no dead letter", st)
	}
}

func TestPurgeRemovesOnlyOldSentRows(t *testing.T) {
	pool := pgtest.NewPool(t, outboxDB)
	ctx := t.Context()
	appendEvents(t, pool, "things", newEvents(t, 2500, 7))
	// 2,300 old rows sent, 100 new ones sent, 50 old ones pending, 50 old
	// dead letters.
	markSent(t, pool, "(e.id <= 2400 OR e.id > 2450)")
	_, err := pool.Exec(ctx, `
		UPDATE outbox_event SET created_at = now() - interval '2 days' WHERE id <= 2300 OR id > 2400;
		UPDATE outbox_event SET dead_at = now() - interval '9 days', attempts = 10 WHERE id > 2450;`)
	if err != nil {
		t.Fatal(err)
	}
	n, err := outbox.Purge(ctx, pool, 24*time.Hour, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2300 {
		t.Fatalf("purged %d rows, want 2300", n)
	}
	st, err := outbox.ReadStats(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if st.Pending != 50 || st.DeadLetters != 50 {
		t.Fatalf("after purge: %+v, want 50 pending and 50 dead letters kept", st)
	}
}

// TestClaimQueryDoesNotScanTheBacklog fails if the claim query's cost grows
// with the backlog: it must read only about a batch, whether the backlog is
// spread over 1,000 keys (100,000 pending, 100,000 sent) or is 200,000
// pending rows of one hot key (whose skew once led the planner to walk the
// whole table in id order). It plans as the relay does: in the services'
// session (pgsession), whose random_page_cost it depends on, with the queue's
// pages not all-visible, as they never are while relays insert and delete
// entries (a transaction older than the entries holds vacuum back). Planned
// with PostgreSQL's default random_page_cost, or after a vacuum that could
// mark the pages all-visible, the claim read a shard's whole queue by a
// bitmap and sorted it, in one CI run in about eight.
func TestClaimQueryDoesNotScanTheBacklog(t *testing.T) {
	for _, tc := range []struct{ name, key, shard, sent string }{
		{"1000 keys", "'k' || (g % 1000)", "(g % 1000) % 64", "100000"},
		{"one hot key", "'hot'", "5", "0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			pool := pgtest.NewPool(t, outboxDB)
			old, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = old.Rollback(context.Background()) }()
			if _, err := old.Exec(ctx, `SET TRANSACTION ISOLATION LEVEL REPEATABLE READ; SELECT txid_current()`); err != nil {
				t.Fatal(err)
			}
			_, err = pool.Exec(ctx, `
				INSERT INTO outbox_event (event_id, topic, partition_key, shard, event_type, envelope)
				SELECT gen_random_uuid(), 'things', `+tc.key+`, `+tc.shard+`, 'x', '\x00'
				FROM generate_series(1, 200000) g;
				INSERT INTO outbox_pending (shard, id, event_id)
				SELECT shard, id, event_id FROM outbox_event WHERE id > `+tc.sent+`;
				UPDATE outbox_shard SET owner = '018f0000-0000-7000-8000-000000000001', lease_until = now() + interval '1 hour'
				WHERE shard < 16;`)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := pool.Exec(ctx, `VACUUM ANALYZE outbox_event, outbox_pending`); err != nil {
				t.Fatal(err)
			}
			var allVisible int
			if err := pool.QueryRow(ctx, `SELECT relallvisible FROM pg_class WHERE relname = 'outbox_pending'`).Scan(&allVisible); err != nil || allVisible != 0 {
				t.Fatalf("outbox_pending has %d all-visible pages (%v), want none: the test plans as a busy queue is", allVisible, err)
			}
			explainClaim(t, pool)
		})
	}
}

func explainClaim(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	shards := []int16{15, 3, 0, 1, 2, 4, 6, 7, 8, 9, 10, 11, 12, 13, 14, 5}
	const batch = 500
	var plan []map[string]any
	err := pool.QueryRow(t.Context(), "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+outbox.ClaimStatement,
		shards, batch, "018f0000-0000-7000-8000-000000000001").Scan(&plan)
	if err != nil {
		t.Fatal(err)
	}
	root := plan[0]["Plan"].(map[string]any)
	var scanned, probed float64
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		if rel, _ := n["Relation Name"].(string); rel == "outbox_pending" {
			if typ := n["Node Type"].(string); typ != "Index Scan" && typ != "Index Only Scan" {
				t.Errorf("outbox_pending read by %s, want an index scan of its primary key", typ)
			} else if idx := n["Index Name"]; idx != "outbox_pending_pkey" {
				t.Errorf("outbox_pending read through index %v, want outbox_pending_pkey", idx)
			}
			loops, _ := n["Actual Loops"].(float64)
			rows, _ := n["Actual Rows"].(float64)
			removed, _ := n["Rows Removed by Filter"].(float64)
			scanned += (rows + removed) * loops
		}
		// Each claimed entry's row is read by its key, one probe each.
		if rel, _ := n["Relation Name"].(string); strings.HasPrefix(rel, "outbox_event") {
			if typ := n["Node Type"].(string); typ != "Index Scan" {
				t.Errorf("%s read by %s, want an index scan of its primary key", rel, typ)
			}
			loops, _ := n["Actual Loops"].(float64)
			rows, _ := n["Actual Rows"].(float64)
			probed += rows * loops
		}
		children, _ := n["Plans"].([]any)
		for _, c := range children {
			walk(c.(map[string]any))
		}
	}
	walk(root)
	if got, _ := root["Actual Rows"].(float64); got != batch {
		t.Errorf("claim returned %v rows, want %d", got, batch)
	}
	// A batch, plus at most one extra row per shard visited.
	if scanned > batch+float64(len(shards)) {
		raw, _ := json.MarshalIndent(plan, "", " ")
		t.Fatalf("claim read %v pending entries for a batch of %d from the backlog:\n%s", scanned, batch, raw)
	}
	if probed > batch+float64(len(shards)) {
		raw, _ := json.MarshalIndent(plan, "", " ")
		t.Fatalf("claim read %v outbox rows for a batch of %d:\n%s", probed, batch, raw)
	}
}

// metricValue gathers reg and returns the value of the counter or gauge
// name, or the sample count of the histogram name.
func metricValue(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name || len(mf.GetMetric()) != 1 {
			continue
		}
		m := mf.GetMetric()[0]
		if m.Counter != nil {
			return m.Counter.GetValue()
		}
		if m.Histogram != nil {
			return float64(m.Histogram.GetSampleCount())
		}
		return m.Gauge.GetValue()
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

func TestMigrationsUpDownUp(t *testing.T) { pgtest.CheckUpDownUp(t, outbox.Migrations) }

// TestSentIsFencedOnTheOwner: the mark deletes the pending entries of the
// rows it names only in the shards the relay still owns; a relay whose
// lease was taken over marks nothing there, and those rows are sent again
// by the new owner.
func TestSentIsFencedOnTheOwner(t *testing.T) {
	pool := pgtest.NewPool(t, outboxDB)
	ctx := t.Context()
	evs := newEvents(t, 20, 20)
	appendEvents(t, pool, "things", evs)
	mine, theirs := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	var first int16
	if err := pool.QueryRow(ctx, `SELECT min(shard) FROM outbox_pending`).Scan(&first); err != nil {
		t.Fatal(err)
	}
	// Every shard is the relay's but the first one's, which another relay took over.
	if _, err := pool.Exec(ctx, `UPDATE outbox_shard SET owner = CASE WHEN shard = $1 THEN $3 ELSE $2 END::uuid,
		lease_until = now() + interval '1 hour'`, first, mine, theirs); err != nil {
		t.Fatal(err)
	}
	var shards []int16
	var ids []int64
	rows, err := pool.Query(ctx, `SELECT shard, id FROM outbox_pending`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s int16
		var id int64
		if err := rows.Scan(&s, &id); err != nil {
			t.Fatal(err)
		}
		shards, ids = append(shards, s), append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	kept := count(t, pool, fmt.Sprintf(`SELECT count(*) FROM outbox_pending WHERE shard = %d`, first))
	tag, err := pool.Exec(ctx, outbox.SentStatement, shards, ids, mine)
	if err != nil {
		t.Fatal(err)
	}
	if int(tag.RowsAffected()) != len(ids)-kept {
		t.Fatalf("marked %d rows sent, want the %d of the relay's shards", tag.RowsAffected(), len(ids)-kept)
	}
	if left := count(t, pool, `SELECT count(*) FROM outbox_pending`); left != kept || kept == 0 {
		t.Fatalf("%d entries left pending, want the %d of the shard taken over", left, kept)
	}
}
