package service

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/monthpart"
	"github.com/usagebilling/billing/pkg/monthpart/monthparttest"
	"github.com/usagebilling/billing/pkg/outbox"
	"github.com/usagebilling/billing/pkg/pgmigrate"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// The services run as a role that owns no table, yet keep the weeks of
// inbox_event and the days of outbox_event: they create and drop partitions
// through the migrations' SECURITY DEFINER functions, which do nothing else
// (an attached partition is not dropped, a suffix that is not YYYYMM or
// YYYYMMDD is refused), while the role still cannot drop a table itself.
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
	for _, tb := range []monthpart.Table{inbox.EventParts, outbox.EventParts} {
		created, err := tb.Ensure(ctx, pool, old)
		if err != nil || len(created) != 1+tb.Ahead {
			t.Fatalf("%s: created %v, %v; want %d partitions", tb.Name, created, err, 1+tb.Ahead)
		}
	}
	id := monthpart.Bound(old.Add(time.Hour))
	id[6], id[15] = 0x70, 1
	if _, err := pool.Exec(ctx, `INSERT INTO inbox_event (event_id, payload_digest, event_type, tenant_id, aggregate_type,
		aggregate_id, aggregate_version, applied_at) VALUES ($1, 'd', 'T', 't1', 'usage', 'u', 1, $2)`, uuid.UUID(id), old); err != nil {
		t.Fatal(err)
	}
	// Inserted without a pending entry: a row sent long ago.
	if _, err := pool.Exec(ctx, `INSERT INTO outbox_event (event_id, topic, partition_key, shard, event_type, envelope, created_at)
		VALUES ($1, 't', 'k', 0, 'T', '\x00', $2)`, uuid.UUID(id), old); err != nil {
		t.Fatal(err)
	}
	for _, tb := range []monthpart.Table{inbox.EventParts, outbox.EventParts} {
		oldName := tb.PartOf(old).Name
		suffix := strings.TrimPrefix(oldName, tb.Name+"_p")
		if _, err := pool.Exec(ctx, `DROP TABLE `+oldName); err == nil {
			t.Fatalf("%s: the runtime role dropped a table itself", tb.Name)
		}
		if _, err := pool.Exec(ctx, `SELECT `+tb.DDL+`('drop', $1)`, suffix); err == nil {
			t.Fatalf("%s: the function dropped an attached partition", tb.Name)
		}
		for _, bad := range []string{`2026-1; DROP TABLE ` + tb.Name, `2026120`, `202612011`} {
			if _, err := pool.Exec(ctx, `SELECT `+tb.DDL+`('create', $1)`, bad); err == nil {
				t.Fatalf("%s: the function took %q, not YYYYMM or YYYYMMDD", tb.Name, bad)
			}
		}
		// The shared body is the owner's only through each table's
		// function: called directly, it runs with the runtime role's rights.
		if _, err := pool.Exec(ctx, `SELECT monthpart_ddl($1, 'event_id', 'detach', $2)`, tb.Name, suffix); err == nil {
			t.Fatalf("%s: the runtime role ran the shared DDL directly", tb.Name)
		}
	}
	oldName := inbox.EventParts.PartOf(old).Name
	dropped, n, err := inbox.DropParts(ctx, pool, time.Now().Add(-14*24*time.Hour), KeepNewestAggregates)
	if err != nil || len(dropped) == 0 || dropped[0] != oldName || n != 1 {
		t.Fatalf("inbox dropped %v (%d rows), %v", dropped, n, err)
	}
	d, err := outbox.DropParts(ctx, pool, time.Now(), 24*time.Hour)
	if err != nil || len(d.Parts) == 0 || d.Parts[0] != outbox.EventParts.PartOf(old).Name || d.Rows != 1 {
		t.Fatalf("outbox dropped %+v, %v", d, err)
	}
}

// The migrations of both tables go down and up again with their partitions
// and rows, the shared DDL's set with them.
func TestMonthsGoDownAndUp(t *testing.T) {
	for _, c := range []struct {
		set    pgmigrate.Set
		table  monthpart.Table
		insert string
		// slot: a second row with the first's other columns is refused
		// within a partition (the inbox's aggregate slot, unique per week).
		slot bool
	}{
		{inbox.Migrations, inbox.EventParts, `INSERT INTO inbox_event (event_id, payload_digest, event_type, tenant_id,
			aggregate_type, aggregate_id, aggregate_version) VALUES ($1, 'd', 'T', 't1', 'usage', 'u', 1)`, true},
		{outbox.Migrations, outbox.EventParts, `INSERT INTO outbox_event (event_id, topic, partition_key, shard,
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
			if created, err := c.table.Ensure(ctx, pool, time.Now()); err != nil || len(created) != 1+c.table.Ahead {
				t.Fatalf("created %v, %v; want %d partitions", created, err, 1+c.table.Ahead)
			}
			id := uuid.Must(uuid.NewV7())
			if _, err := pool.Exec(ctx, c.insert, id); err != nil {
				t.Fatal(err)
			}
			var part string
			if err := pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM `+c.table.Name).Scan(&part); err != nil {
				t.Fatal(err)
			}
			if want := c.table.PartOf(time.Now()).Name; part != want {
				t.Fatalf("row in %s, want %s", part, want)
			}
			_, err = pool.Exec(ctx, c.insert, uuid.Must(uuid.NewV7()))
			var pgErr *pgconn.PgError
			if refused := errors.As(err, &pgErr) && pgErr.Code == "23505"; refused != c.slot {
				t.Fatalf("a second row of the same slot in one partition: %v", err)
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
			if created, err := c.table.Ensure(ctx, pool, time.Now()); err != nil || len(created) != 1+c.table.Ahead {
				t.Fatalf("up again: created %v, %v; want %d partitions", created, err, 1+c.table.Ahead)
			}
		})
	}
}

// A database kept by month before the tables' spans were finer keeps its
// month partitions until they age out: the week or day partitions start where
// the last month ends (for a week that began inside it, a partition for the
// week's rest, named by the month's end), an id minted after the month lands
// there, and the month is dropped by the same rule as a day or a week.
func TestMonthsGiveWayToFinerSpans(t *testing.T) {
	for _, c := range []struct {
		set    pgmigrate.Set
		table  monthpart.Table
		insert string
	}{
		{inbox.Migrations, inbox.EventParts, `INSERT INTO inbox_event (event_id, payload_digest, event_type, tenant_id,
			aggregate_type, aggregate_id, aggregate_version, applied_at) VALUES ($1, 'd', 'T', 't1', 'usage', $2, 1, $3)`},
		// Without a pending entry: rows sent.
		{outbox.Migrations, outbox.EventParts, `INSERT INTO outbox_event (event_id, topic, partition_key, shard,
			event_type, envelope, created_at) VALUES ($1, 't', $2, 0, 'T', '\x00', $3)`},
	} {
		t.Run(c.table.Name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			url := pgtest.NewDB(t, pgtest.Template{Name: "spans-" + c.table.Name, Migrate: func(_ context.Context, url string) error {
				return pgmigrate.Up(url, c.set)
			}})
			pool, err := pgxpool.New(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			// The upkeep as it was: the month of now, nothing ahead. Now is
			// the last day of a month two months ago, so that the month has
			// ended long before the real clock's retention.
			month := monthpart.Start(time.Now()).AddDate(0, -2, 0)
			now := month.AddDate(0, 1, 0).Add(-12 * time.Hour)
			byMonth := c.table
			byMonth.Span, byMonth.Ahead = monthpart.Month, 0
			if created, err := byMonth.Ensure(ctx, pool, now); err != nil || len(created) != 1 {
				t.Fatalf("the month upkeep created %v, %v", created, err)
			}
			created, err := c.table.Ensure(ctx, pool, now)
			if err != nil {
				t.Fatal(err)
			}
			parts, err := c.table.Parts(ctx, pool)
			if err != nil {
				t.Fatal(err)
			}
			// Contiguous from the month's end, through the span after now's.
			end := month.AddDate(0, 1, 0)
			wantLast := c.table.Span.Add(c.table.Span.Start(now), 1+c.table.Ahead)
			if len(parts) < 2 || parts[0].Name != monthpart.MonthOf(c.table.Name, month).Name ||
				parts[1].From != end || parts[1].Name != c.table.Name+"_p"+end.Format("20060102") ||
				!parts[len(parts)-1].To.Equal(wantLast) || len(created) != len(parts)-1 {
				t.Fatalf("partitions %+v (created %v): want the month, then from %s to %s", parts, created, end, wantLast)
			}
			for i := 1; i < len(parts); i++ {
				if !parts[i].From.Equal(parts[i-1].To) {
					t.Fatalf("partitions %+v: a gap or an overlap before %s", parts, parts[i].Name)
				}
			}
			// Rows of the month stay in it; a row minted after it lands in the
			// partition from its end.
			in, after := monthparttest.MintedAt(month.Add(time.Hour)), monthparttest.MintedAt(end.Add(time.Hour))
			for _, id := range []uuid.UUID{in, after} {
				if _, err := pool.Exec(ctx, c.insert, id, id.String(), month); err != nil {
					t.Fatal(err)
				}
			}
			for id, want := range map[uuid.UUID]string{in: parts[0].Name, after: parts[1].Name} {
				var part string
				if err := pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM `+c.table.Name+` WHERE event_id = $1`, id).Scan(&part); err != nil {
					t.Fatal(err)
				}
				if part != want {
					t.Fatalf("row %s in %s, want %s", id, part, want)
				}
			}
			// Long past every retention, every one of them is dropped, the
			// month by the same rule as the rest.
			var dropped []string
			if c.table.Name == "inbox_event" {
				dropped, _, err = inbox.DropParts(ctx, pool, time.Now().Add(-14*24*time.Hour), KeepNewestAggregates)
			} else {
				var d outbox.Dropped
				d, err = outbox.DropParts(ctx, pool, time.Now(), 24*time.Hour)
				dropped = d.Parts
			}
			if err != nil || len(dropped) != len(parts) || dropped[0] != parts[0].Name {
				t.Fatalf("dropped %v, %v; want all of %+v", dropped, err, parts)
			}
		})
	}
}
