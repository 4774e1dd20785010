package service

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/monthpart"
	"github.com/usagebilling/billing/pkg/outbox"
	"github.com/usagebilling/billing/pkg/pgmigrate"
)

// The services run as a role that owns no table, yet keep the months of
// inbox_event and outbox_event: they create and drop partitions through the
// migrations' SECURITY DEFINER functions, which do nothing else (an attached
// month is not dropped, a month that is not YYYYMM is refused), while the
// role still cannot drop a table itself.
func TestRuntimeRoleKeepsTheMonths(t *testing.T) {
	ctx := t.Context()
	ownerURL, runtimeURL := twoRoles(t)
	sets := []pgmigrate.Set{inbox.Migrations, outbox.Migrations}
	if err := pgmigrate.Up(ownerURL, sets...); err != nil {
		t.Fatal(err)
	}
	if err := pgmigrate.Grant(ctx, ownerURL, pgmigrate.User(runtimeURL), sets...); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, runtimeURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	old := monthpart.Start(time.Now()).AddDate(0, -3, 0)
	for _, tb := range []monthpart.Table{inbox.EventMonths, outbox.EventMonths} {
		created, err := tb.Ensure(ctx, pool, old, 4)
		if err != nil || len(created) != 5 {
			t.Fatalf("%s: created %v, %v; want five months", tb.Name, created, err)
		}
	}
	id := monthpart.Bound(old.Add(time.Hour))
	id[6], id[15] = 0x70, 1
	if _, err := pool.Exec(ctx, `INSERT INTO inbox_event (event_id, payload_digest, event_type, tenant_id, aggregate_type,
		aggregate_id, aggregate_version, applied_at) VALUES ($1, 'd', 'T', 't1', 'usage', 'u', 1, $2)`, uuid.UUID(id), old); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO outbox_event (event_id, topic, partition_key, shard, event_type, envelope, published_at)
		VALUES ($1, 't', 'k', 0, 'T', '\x00', $2)`, uuid.UUID(id), old); err != nil {
		t.Fatal(err)
	}
	oldName := monthpart.MonthOf("inbox_event", old).Name
	if _, err := pool.Exec(ctx, `DROP TABLE `+oldName); err == nil {
		t.Fatal("the runtime role dropped a table itself")
	}
	if _, err := pool.Exec(ctx, `SELECT inbox_event_months('drop', $1)`, old.Format("200601")); err == nil {
		t.Fatal("the function dropped an attached month")
	}
	if _, err := pool.Exec(ctx, `SELECT inbox_event_months('create', '2026-1; DROP TABLE inbox_event')`); err == nil {
		t.Fatal("the function took a month that is not YYYYMM")
	}
	dropped, n, err := inbox.DropMonths(ctx, pool, time.Now().Add(-14*24*time.Hour), KeepNewestAggregates)
	if err != nil || len(dropped) == 0 || dropped[0] != oldName || n != 1 {
		t.Fatalf("inbox dropped %v (%d rows), %v", dropped, n, err)
	}
	d, err := outbox.DropMonths(ctx, pool, time.Now(), 24*time.Hour)
	if err != nil || len(d.Months) == 0 || d.Months[0] != monthpart.MonthOf("outbox_event", old).Name || d.Rows != 1 {
		t.Fatalf("outbox dropped %+v, %v", d, err)
	}
}
