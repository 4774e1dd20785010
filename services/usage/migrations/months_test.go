package migrations_test

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/pgmigrate"
	"github.com/usagebilling/billing/services/usage"
	"github.com/usagebilling/billing/services/usage/internal/db"
	"github.com/usagebilling/billing/services/usage/internal/usagetest"
	"github.com/usagebilling/billing/services/usage/migrations"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// uuid7At is a UUIDv7 of instant t, as uuid.NewV7 makes at t: the month of
// a fact's partition is the month its usage_id was made in.
func uuid7At(t *testing.T, at time.Time) uuid.UUID {
	t.Helper()
	var u uuid.UUID
	if _, err := rand.Read(u[:]); err != nil {
		t.Fatal(err)
	}
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(at.UnixMilli()))
	copy(u[:6], ms[2:])
	u[6] = u[6]&0x0f | 0x70
	u[8] = u[8]&0x3f | 0x80
	return u
}

// fact is one usage fact to insert.
type fact struct {
	usageID  uuid.UUID
	sourceID string
	quantity string
	at       time.Time
}

// insertOld inserts facts with the statement of the schema before 0006 (an
// identity already taken skipped), as a service of that version does.
func insertOld(t *testing.T, conn *pgx.Conn, fs []fact) int64 {
	t.Helper()
	var ids, srcs, evs []string
	var qs []decimal.Decimal
	var ats []time.Time
	for _, f := range fs {
		ids = append(ids, f.usageID.String())
		srcs = append(srcs, f.sourceID)
		evs = append(evs, uuid.Must(uuid.NewV7()).String())
		qs = append(qs, decimal.RequireFromString(f.quantity))
		ats = append(ats, f.at)
	}
	tag, err := conn.Exec(t.Context(), `
		INSERT INTO usage_fact (usage_id, tenant_id, source_system, source_event_id, meter_code, quantity,
		                        occurred_at, currency, event_id, accepted_at)
		SELECT u.id, 't1', 'gw', u.src, 'api', u.q, u.at, 'USD', u.ev, u.at
		FROM (SELECT unnest($1::uuid[]) AS id, unnest($2::text[]) AS src, unnest($3::uuid[]) AS ev,
		             unnest($4::numeric[]) AS q, unnest($5::timestamptz[]) AS at) AS u
		ON CONFLICT (tenant_id, source_system, source_event_id) DO NOTHING`, ids, srcs, evs, qs, ats)
	if err != nil {
		t.Fatalf("insert facts the old way: %v", err)
	}
	return tag.RowsAffected()
}

// insertNew inserts facts with the service's statement; the usage ids it
// inserted.
func insertNew(t *testing.T, q *db.Queries, fs ...fact) ([]uuid.UUID, error) {
	t.Helper()
	p := db.InsertUsageFactsParams{TenantID: "t1", AcceptedAt: time.Now()}
	for _, f := range fs {
		p.UsageIds = append(p.UsageIds, f.usageID)
		p.SourceSystems = append(p.SourceSystems, "gw")
		p.SourceEventIds = append(p.SourceEventIds, f.sourceID)
		p.MeterCodes = append(p.MeterCodes, "api")
		p.Quantities = append(p.Quantities, decimal.RequireFromString(f.quantity))
		p.OccurredAts = append(p.OccurredAts, f.at)
		p.Currencies = append(p.Currencies, "USD")
		p.EventIds = append(p.EventIds, uuid.Must(uuid.NewV7()))
		p.Properties = append(p.Properties, "{}")
	}
	return q.InsertUsageFacts(t.Context(), p)
}

func count(t *testing.T, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, sql string) int {
	t.Helper()
	var n int
	if err := q.QueryRow(t.Context(), sql).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// A database with facts migrated to facts by month: nothing lost, every
// identity (those of facts accepted before step 1 and those accepted
// between steps 1 and 2) still refuses a second fact, and new facts go in.
func TestMigrateExistingFacts(t *testing.T) {
	url := pgtest.MigratedTo(t, 5, usage.Spec.Sets()...)
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())

	now := time.Now().UTC()
	var before, between []fact
	for i := range 300 { // over the three months before this one
		at := now.AddDate(0, -1-i%3, 0)
		before = append(before, fact{uuid7At(t, at), "b-" + strconv.Itoa(i), strconv.Itoa(i) + ".25", at})
	}
	if n := insertOld(t, conn, before); n != 300 {
		t.Fatalf("%d facts before, want 300", n)
	}
	if err := pgmigrate.Up(url, pgtest.UpTo(t, migrations.Set, 6)); err != nil {
		t.Fatalf("up to 0006: %v", err)
	}
	// A service still at the old schema accepts facts between the steps.
	for i := range 100 {
		at := now.Add(-time.Duration(i) * time.Minute)
		between = append(between, fact{uuid7At(t, at), "w-" + strconv.Itoa(i), "1", at})
	}
	if n := insertOld(t, conn, append(between, fact{uuid7At(t, now), "b-7", "9", now})); n != 100 {
		t.Fatalf("%d facts between the steps, want 100 (b-7 taken)", n)
	}
	sum := func() string {
		var s decimal.Decimal
		if err := conn.QueryRow(t.Context(), `SELECT sum(quantity) FROM usage_fact`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s.String()
	}
	total := sum()
	if err := pgmigrate.Up(url, usage.Spec.Sets()...); err != nil {
		t.Fatalf("up: %v", err)
	}

	if n := count(t, conn, `SELECT count(*) FROM usage_fact`); n != 400 {
		t.Fatalf("%d facts after the migration, want 400", n)
	}
	if s := sum(); s != total {
		t.Fatalf("quantities sum to %s after the migration, %s before", s, total)
	}
	if n := count(t, conn, `SELECT count(*) FROM usage_fact_legacy`); n != 400 {
		t.Fatalf("%d facts in the first partition, want 400", n)
	}
	if n := count(t, conn, `SELECT count(*) FROM usage_fact_source s JOIN usage_fact f USING (usage_id)
	                        WHERE (s.tenant_id, s.source_system, s.source_event_id, s.event_id) = (f.tenant_id, f.source_system, f.source_event_id, f.event_id)`); n != 400 {
		t.Fatalf("%d identities name their facts, want 400", n)
	}
	if n := count(t, conn, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'usage_fact'::regclass`); n < 3 {
		t.Fatalf("%d partitions, want the first and the months ahead", n)
	}

	q := db.New(conn)
	later := now.AddDate(0, 2, 0) // a usage id in a month partition
	ids, err := insertNew(t, q,
		fact{uuid7At(t, now), "b-1", "1.25", now},  // accepted before step 1
		fact{uuid7At(t, later), "w-5", "1", now},   // accepted between the steps
		fact{uuid7At(t, later), "new-1", "3", now}) // new
	if err != nil {
		t.Fatalf("insert after the migration: %v", err)
	}
	if len(ids) != 1 {
		t.Fatalf("inserted %d facts, want 1 (new-1): an identity of before the migration took a second fact", len(ids))
	}
	if n := count(t, conn, `SELECT count(*) FROM usage_fact`); n != 401 {
		t.Fatalf("%d facts, want 401", n)
	}
}

// One source identity is one fact whatever month its resends are accepted
// in (their usage ids in other partitions), and an event id is unique
// across months.
func TestSourceIdentityAcrossMonths(t *testing.T) {
	pool := pgtest.NewPool(t, usagetest.Template)
	q := db.New(pool)
	now := time.Now().UTC()
	thisMonth := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	next := thisMonth.AddDate(0, 1, 0)

	// Accepted in the next month (its partition is made ahead)...
	first := fact{uuid7At(t, next.Add(time.Hour)), "ev-1", "2", next.Add(-time.Hour)}
	if ids, err := insertNew(t, q, first); err != nil || len(ids) != 1 {
		t.Fatalf("first: %v %v", ids, err)
	}
	// ...sent again with other timestamps, accepted in the months around.
	for i, at := range []time.Time{next.Add(-time.Millisecond), now, thisMonth.AddDate(0, 3, 0)} {
		if ids, err := insertNew(t, q, fact{uuid7At(t, at), "ev-1", "2", at}); err != nil || len(ids) != 0 {
			t.Fatalf("resend %d (usage id of %s): inserted %v, %v; want none", i, at, ids, err)
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM usage_fact`); n != 1 {
		t.Fatalf("%d facts, want 1", n)
	}
	var part string
	if err := pool.QueryRow(t.Context(), `SELECT tableoid::regclass::text FROM usage_fact`).Scan(&part); err != nil {
		t.Fatal(err)
	}
	if want := "usage_fact_" + next.Format("2006_01"); part != want {
		t.Fatalf("fact in %s, want %s", part, want)
	}

	// An event id taken in one month is refused in another.
	var ev uuid.UUID
	if err := pool.QueryRow(t.Context(), `SELECT event_id FROM usage_fact`).Scan(&ev); err != nil {
		t.Fatal(err)
	}
	p := db.InsertUsageFactsParams{TenantID: "t1", AcceptedAt: now, UsageIds: []uuid.UUID{uuid7At(t, now)},
		SourceSystems: []string{"gw"}, SourceEventIds: []string{"ev-2"}, MeterCodes: []string{"api"},
		Quantities: []decimal.Decimal{decimal.NewFromInt(1)}, OccurredAts: []time.Time{now},
		Currencies: []string{"USD"}, EventIds: []uuid.UUID{ev}, Properties: []string{"{}"}}
	var pgErr *pgconn.PgError
	if _, err := q.InsertUsageFacts(t.Context(), p); !errors.As(err, &pgErr) || pgErr.ConstraintName != "usage_fact_source_event_id_key" {
		t.Fatalf("an event id of another month: %v, want a violation of usage_fact_source_event_id_key", err)
	}

	// Every month up to MonthsAhead after this one takes facts.
	for i := range 4 {
		at := thisMonth.AddDate(0, i, 0)
		if _, err := insertNew(t, q, fact{uuid7At(t, at), "m-" + strconv.Itoa(i), "1", at}); err != nil {
			t.Fatalf("a fact accepted %d months ahead: %v", i, err)
		}
	}
}

// A month is archived (detached) only once it is over and usage's published
// watermark cut is past its end; its facts leave usage_fact, others stay,
// and its identities still refuse a second fact.
func TestArchiveMonth(t *testing.T) {
	pool := pgtest.NewPool(t, usagetest.Template)
	q := db.New(pool)
	now := time.Now().UTC()
	old := now.AddDate(0, -2, 0) // in the first partition, which ends at this month on a new database
	if _, err := insertNew(t, q, fact{uuid7At(t, old), "old", "1", old}, fact{uuid7At(t, now), "new", "1", now}); err != nil {
		t.Fatal(err)
	}
	archive := func(at time.Time) (string, error) {
		var name string
		err := pool.QueryRow(t.Context(), `SELECT usage_fact_archive($1)`, at).Scan(&name)
		return name, err
	}
	refused := func(what string, at time.Time) {
		t.Helper()
		var pgErr *pgconn.PgError
		if _, err := archive(at); !errors.As(err, &pgErr) || pgErr.Code != "55000" {
			t.Fatalf("archive %s: %v, want refused (55000)", what, err)
		}
	}
	refused("this month", now)
	refused("a month the watermark cut has not passed", old)
	if _, err := pool.Exec(t.Context(), `UPDATE usage_watermark_cut SET through = now(), published = false`); err != nil {
		t.Fatal(err)
	}
	refused("a month whose cut is not published", old)
	if _, err := pool.Exec(t.Context(), `UPDATE usage_watermark_cut SET published = true`); err != nil {
		t.Fatal(err)
	}
	name, err := archive(old)
	if err != nil || name != "usage_fact_legacy" {
		t.Fatalf("archive: %q %v", name, err)
	}
	if n := count(t, pool, `SELECT count(*) FROM usage_fact`); n != 1 {
		t.Fatalf("%d facts left, want 1 (this month's)", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM usage_fact_legacy WHERE source_event_id = 'old'`); n != 1 {
		t.Fatalf("the archived partition holds %d of its facts, want 1", n)
	}
	if ids, err := insertNew(t, q, fact{uuid7At(t, now), "old", "1", old}); err != nil || len(ids) != 0 {
		t.Fatalf("an archived fact's identity sent again: inserted %v, %v; want none", ids, err)
	}
	if _, err := archive(old); err == nil {
		t.Fatal("archived twice")
	}
}
