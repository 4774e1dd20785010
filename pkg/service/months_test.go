package service

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/monthpart"
	"github.com/usagebilling/billing/pkg/outbox"
	"github.com/usagebilling/billing/pkg/pgmigrate"
	"github.com/usagebilling/billing/testkit/pgtest"
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
	for _, tb := range []monthpart.Table{inbox.EventMonths, outbox.EventMonths} {
		oldName := monthpart.MonthOf(tb.Name, old).Name
		if _, err := pool.Exec(ctx, `DROP TABLE `+oldName); err == nil {
			t.Fatalf("%s: the runtime role dropped a table itself", tb.Name)
		}
		if _, err := pool.Exec(ctx, `SELECT `+tb.DDL+`('drop', $1)`, old.Format("200601")); err == nil {
			t.Fatalf("%s: the function dropped an attached month", tb.Name)
		}
		if _, err := pool.Exec(ctx, `SELECT `+tb.DDL+`('create', '2026-1; DROP TABLE `+tb.Name+`')`); err == nil {
			t.Fatalf("%s: the function took a month that is not YYYYMM", tb.Name)
		}
		// The shared body is the owner's only through each table's
		// function: called directly, it runs with the runtime role's rights.
		if _, err := pool.Exec(ctx, `SELECT monthpart_ddl($1, 'event_id', 'detach', $2)`, tb.Name, old.Format("200601")); err == nil {
			t.Fatalf("%s: the runtime role ran the shared DDL directly", tb.Name)
		}
	}
	oldName := monthpart.MonthOf("inbox_event", old).Name
	dropped, n, err := inbox.DropMonths(ctx, pool, time.Now().Add(-14*24*time.Hour), KeepNewestAggregates)
	if err != nil || len(dropped) == 0 || dropped[0] != oldName || n != 1 {
		t.Fatalf("inbox dropped %v (%d rows), %v", dropped, n, err)
	}
	d, err := outbox.DropMonths(ctx, pool, time.Now(), 24*time.Hour)
	if err != nil || len(d.Months) == 0 || d.Months[0] != monthpart.MonthOf("outbox_event", old).Name || d.Rows != 1 {
		t.Fatalf("outbox dropped %+v, %v", d, err)
	}
}

// The migrations of both tables go down and up again with their months and
// rows, the shared DDL's set with them.
func TestMonthsGoDownAndUp(t *testing.T) {
	for _, c := range []struct {
		set    pgmigrate.Set
		table  monthpart.Table
		insert string
		// slot: a second row with the first's other columns is refused
		// within a month (the inbox's aggregate slot, unique per month).
		slot bool
	}{
		{inbox.Migrations, inbox.EventMonths, `INSERT INTO inbox_event (event_id, payload_digest, event_type, tenant_id,
			aggregate_type, aggregate_id, aggregate_version) VALUES ($1, 'd', 'T', 't1', 'usage', 'u', 1)`, true},
		{outbox.Migrations, outbox.EventMonths, `INSERT INTO outbox_event (event_id, topic, partition_key, shard,
			event_type, envelope) VALUES ($1, 't', 'k', 0, 'T', '\x00')`, false},
	} {
		t.Run(c.table.Name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			url := pgtest.NewDB(t, pgtest.Template{Name: "months-" + c.table.Name, Migrate: func(_ context.Context, url string) error {
				return pgmigrate.Up(url, c.set)
			}})
			pool, err := pgxpool.New(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			if created, err := c.table.Ensure(ctx, pool, time.Now(), 2); err != nil || len(created) != 3 {
				t.Fatalf("created %v, %v; want three months", created, err)
			}
			id := uuid.Must(uuid.NewV7())
			if _, err := pool.Exec(ctx, c.insert, id); err != nil {
				t.Fatal(err)
			}
			var part string
			if err := pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM `+c.table.Name).Scan(&part); err != nil {
				t.Fatal(err)
			}
			if want := monthpart.MonthOf(c.table.Name, time.Now()).Name; part != want {
				t.Fatalf("row in %s, want %s", part, want)
			}
			_, err = pool.Exec(ctx, c.insert, uuid.Must(uuid.NewV7()))
			var pgErr *pgconn.PgError
			if refused := errors.As(err, &pgErr) && pgErr.Code == "23505"; refused != c.slot {
				t.Fatalf("a second row of the same slot this month: %v", err)
			}
			pool.Reset()
			if err := pgmigrate.Down(url, c.set); err != nil {
				t.Fatal(err)
			}
			var fn *string
			if err := pool.QueryRow(ctx, `SELECT to_regproc('monthpart_ddl')::text`).Scan(&fn); err != nil || fn != nil {
				t.Fatalf("after down: monthpart_ddl %v, %v", fn, err)
			}
			if err := pgmigrate.Up(url, c.set); err != nil {
				t.Fatal(err)
			}
			if created, err := c.table.Ensure(ctx, pool, time.Now(), 2); err != nil || len(created) != 3 {
				t.Fatalf("up again: created %v, %v; want three months", created, err)
			}
		})
	}
}
