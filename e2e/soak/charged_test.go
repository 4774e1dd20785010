package soak

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/usagebilling/billing/pkg/pgmigrate"
	"github.com/usagebilling/billing/services/billing"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// waitCharged asks billing's real schema about a window of ids a poll and
// moves on as they are charged: 25,000 facts with two not charged (one in
// the first window, the last) are asked about in windows of 10,000 (9,999,
// 19,998, then 24,998 charged), and left at 2 when the time runs out; once
// the two are charged it returns at once.
func TestWaitChargedAsksAWindowAPoll(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, pgtest.Template{Name: "soak-billing", Migrate: func(_ context.Context, url string) error {
		return pgmigrate.Up(url, billing.Spec.Migrations...)
	}})
	ids := make([]string, 25_000)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7()).String()
	}
	charge := func(ids []string) {
		t.Helper()
		if _, err := pool.Exec(ctx, `INSERT INTO charge_origin (tenant_id, usage_id, usage_event_id, event_id, charge_id)
			SELECT 't', gen_random_uuid(), u::uuid, gen_random_uuid(), gen_random_uuid() FROM unnest($1::text[]) u`, ids); err != nil {
			t.Fatal(err)
		}
	}
	stragglers := []string{ids[3], ids[len(ids)-1]}
	charge(slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return slices.Contains(stragglers, id) }))

	var seen []int
	left, err := waitCharged(ctx, pool, ids, 2500*time.Millisecond, time.Second, func(charged, of int) {
		if of != len(ids) {
			t.Errorf("told of %d ids, want %d", of, len(ids))
		}
		seen = append(seen, charged)
	})
	if left != 2 || err == nil || !strings.Contains(err.Error(), "24998 of 25000") {
		t.Fatalf("left %d, %v; want 2 left and an error saying 24998 of 25000", left, err)
	}
	if len(seen) < 3 || !slices.Equal(seen[:3], []int{9_999, 19_998, 24_998}) {
		t.Fatalf("charged after each poll %v, want 9999, 19998, 24998 and then no more", seen)
	}
	charge(stragglers)
	if left, err := waitCharged(ctx, pool, ids, 10*time.Second, time.Second, nil); left != 0 || err != nil {
		t.Fatalf("left %d, %v once every fact is charged", left, err)
	}
}
