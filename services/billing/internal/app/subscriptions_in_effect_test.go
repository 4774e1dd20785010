package app_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/events"
	bt "github.com/usagebilling/billing/services/billing/internal/billingtest"
	"github.com/usagebilling/billing/services/billing/internal/db"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// A read of the subscriptions in effect at or after an instant is a range
// scan of those alone (migration 0021), whatever the tenants' ended ones:
// with 2 tenants of 4,000 ended subscriptions and one open each, each such
// statement, as sqlc sends it, plans an index scan of
// subscription_tenant_in_effect (a tenant's) or subscription_in_effect
// (the close scheduler's, every tenant's), and neither a Seq Scan of
// subscription nor a scan of subscription_tenant_starts, whose start key
// cannot bound an end (the whole history). The rating statement's lookup
// of the subscription in effect at a fact's occurrence reads one row of
// subscription_tenant_starts, the latest started, and tests its end
// outside the scan: no filter on the scan, which, with the latest one
// ended, walked back through every older one.
func TestSubscriptionsInEffectAreRangeScans(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := bt.NewPool(t)
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	const ended = 4000
	// Hourly plan changes ending 120 days ago, then one open subscription:
	// the history is outside even the close scheduler's 92 days.
	opened := now.AddDate(0, 0, -120)
	if _, err := pool.Exec(ctx, `
		INSERT INTO subscription (subscription_id, tenant_id, plan_code, starts_at, ends_at, created_at, actor, ended_by)
		SELECT gen_random_uuid(), tn, 'pro', $1::timestamptz - ($2 - g) * interval '1 hour',
		       CASE WHEN g < $2 THEN $1::timestamptz - ($2 - g - 1) * interval '1 hour' END,
		       $1::timestamptz - interval '1 year', 'admin', CASE WHEN g < $2 THEN 'admin' END
		FROM unnest(ARRAY['t1', 't2']) tn, generate_series(0, $2::int) g`, opened, ended); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE subscription`); err != nil {
		t.Fatal(err)
	}
	since := now.Add(-92 * 24 * time.Hour) // the close scheduler's window (feeCandidateWindow)
	monthStart := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	nextMonth := monthStart.AddDate(0, 1, 0)
	fact := db.RateUsagesParams{ // occurring after t1's latest ended subscription's end: none in effect
		TenantIds: []string{"t1"}, MeterCodes: []string{"tokens"}, Currencies: []string{"USD"}, Periods: []string{"2025-11"},
		ChargeIds: []uuid.UUID{uuid.New()}, EventIds: []uuid.UUID{uuid.New()}, UsageEventIds: []uuid.UUID{uuid.New()},
		UsageIds: []uuid.UUID{uuid.New()}, Quantities: []decimal.Decimal{decimal.NewFromInt(1)},
		OccurredAts: []time.Time{opened.Add(-time.Minute)}, Lates: []bool{false}, Properties: []string{"{}"},
		SourceSystems: []string{"gw"}, SourceEventIds: []string{"e1"}, Shards: []int32{events.ScheduleShard("t1")},
	}
	const (
		tenantInEffect = "subscription_tenant_in_effect"
		inEffect       = "subscription_in_effect"
		byStart        = "subscription_tenant_starts"
	)
	for _, c := range []struct {
		query string
		index string // the index the plan scans subscription by
		run   func(q *db.Queries) error
	}{
		{"CountLiveSubscriptions", tenantInEffect, func(q *db.Queries) error {
			_, err := q.CountLiveSubscriptions(ctx, db.CountLiveSubscriptionsParams{TenantID: "t1", At: monthStart})
			return err
		}},
		{"SubscriptionsFrom", tenantInEffect, func(q *db.Queries) error {
			_, err := q.SubscriptionsFrom(ctx, db.SubscriptionsFromParams{TenantID: "t1", At: now})
			return err
		}},
		{"SubscriptionsDuring", tenantInEffect, func(q *db.Queries) error {
			_, err := q.SubscriptionsDuring(ctx, db.SubscriptionsDuringParams{TenantID: "t1", Since: monthStart, Until: nextMonth})
			return err
		}},
		{"PlansKnownFor", tenantInEffect, func(q *db.Queries) error {
			_, err := q.PlansKnownFor(ctx, db.PlansKnownForParams{TenantID: "t1", Since: monthStart, Until: nextMonth})
			return err
		}},
		{"TenantSubscriptionsSince", tenantInEffect, func(q *db.Queries) error {
			_, err := q.TenantSubscriptionsSince(ctx, db.TenantSubscriptionsSinceParams{TenantID: "t1", Since: since})
			return err
		}},
		{"SubscriptionsSince", inEffect, func(q *db.Queries) error {
			_, err := q.SubscriptionsSince(ctx, since)
			return err
		}},
		{"RateUsages", byStart, func(q *db.Queries) error {
			_, err := q.RateUsages(ctx, fact)
			return err
		}},
	} {
		t.Run(c.query, func(t *testing.T) {
			scans, text := subscriptionScans(t, pool, c.run)
			used := false
			for _, s := range scans {
				switch {
				case s.node == "Seq Scan":
					t.Errorf("%s reads subscription by a Seq Scan", c.query)
				case s.index == byStart && c.index != byStart:
					t.Errorf("%s scans %s: a tenant's whole history", c.query, byStart)
				case c.index == byStart && s.filter != "":
					t.Errorf("%s filters its scan of subscription on %s: walks back past the ended ones", c.query, s.filter)
				}
				used = used || s.index == c.index
			}
			if !used {
				t.Errorf("%s does not scan %s", c.query, c.index)
			}
			if t.Failed() {
				t.Logf("scans of subscription: %+v in:\n%s", scans, text)
			}
		})
	}
}

// scan is a node of a plan that reads subscription or one of its indexes.
type scan struct{ node, index, filter string }

// subscriptionScans plans, under EXPLAIN (COSTS OFF) without running it, the
// statement run sends (a sqlc query, recorded by pgtest.Recorder), and
// returns its nodes reading subscription or an index of it, and the plan
// as text.
func subscriptionScans(t *testing.T, pool *pgxpool.Pool, run func(q *db.Queries) error) ([]scan, string) {
	t.Helper()
	var rec pgtest.Recorder
	if err := run(db.New(&rec)); !errors.Is(err, pgtest.ErrRecorded) {
		t.Fatalf("recorder: %v", err)
	}
	var doc []byte
	if err := pool.QueryRow(t.Context(), "EXPLAIN (COSTS OFF, FORMAT JSON) "+rec.SQL, rec.Args...).Scan(&doc); err != nil {
		t.Fatalf("explain %s: %v", rec.SQL, err)
	}
	rows, err := pool.Query(t.Context(), "EXPLAIN (COSTS OFF) "+rec.SQL, rec.Args...)
	if err != nil {
		t.Fatalf("explain %s: %v", rec.SQL, err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	var plan []struct{ Plan map[string]any }
	if err := json.Unmarshal(doc, &plan); err != nil || len(plan) != 1 {
		t.Fatalf("explain: %v %s", err, doc)
	}
	var scans []scan
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		rel, _ := n["Relation Name"].(string)
		index, _ := n["Index Name"].(string)
		if rel == "subscription" || strings.HasPrefix(index, "subscription_") {
			node, _ := n["Node Type"].(string)
			filter, _ := n["Filter"].(string)
			scans = append(scans, scan{node: node, index: index, filter: filter})
		}
		children, _ := n["Plans"].([]any)
		for _, c := range children {
			if m, ok := c.(map[string]any); ok {
				walk(m)
			}
		}
	}
	walk(plan[0].Plan)
	if len(scans) == 0 {
		t.Fatalf("no scan of subscription in:\n%s", strings.Join(lines, "\n"))
	}
	return scans, strings.Join(lines, "\n")
}
