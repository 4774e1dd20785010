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
	"github.com/usagebilling/billing/services/billing"
	"github.com/usagebilling/billing/services/billing/migrations"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// uuid7At is a UUIDv7 of instant t, as uuid.NewV7 makes at t.
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

// migratedTo is a new database with the shared schemas and billing's
// migrations up to version, and a connection to it (closed at the test's
// end).
func migratedTo(t *testing.T, version int) (string, *pgx.Conn) {
	t.Helper()
	url := pgtest.MigratedTo(t, version, billing.Spec.Sets()...)
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return url, conn
}

// insertCharges inserts n charges rated at the given instants (charge ids
// of then), as the schema before 0016 takes them; their usage event ids.
func insertCharges(t *testing.T, conn *pgx.Conn, prefix string, ats []time.Time) []uuid.UUID {
	t.Helper()
	var ids, evs, uevs, uids []uuid.UUID
	var qs []decimal.Decimal
	for i, at := range ats {
		ids = append(ids, uuid7At(t, at))
		evs = append(evs, uuid7At(t, at))
		uevs = append(uevs, uuid7At(t, at))
		uids = append(uids, uuid7At(t, at))
		qs = append(qs, decimal.RequireFromString(strconv.Itoa(i)+".5"))
	}
	_, err := conn.Exec(t.Context(), `
		INSERT INTO charge (charge_id, event_id, usage_event_id, usage_id, tenant_id, meter_code, currency,
		                    quantity, unit_price, price_version, amount, period, late, occurred_at,
		                    source_system, source_event_id)
		SELECT u.id, u.ev, u.uev, u.uid, 't1', 'api', 'USD', u.q, 0.25, 1, u.q * 0.25,
		       to_char(u.at AT TIME ZONE 'UTC', 'YYYY-MM'), false, u.at, 'gw', $6 || u.n
		FROM (SELECT unnest($1::uuid[]) AS id, unnest($2::uuid[]) AS ev, unnest($3::uuid[]) AS uev,
		             unnest($4::uuid[]) AS uid, unnest($5::numeric[]) AS q, unnest($7::timestamptz[]) AS at,
		             generate_series(1, cardinality($1::uuid[])) AS n) AS u`,
		ids, evs, uevs, uids, qs, prefix, ats)
	if err != nil {
		t.Fatalf("insert charges the old way: %v", err)
	}
	return uevs
}

func count(t *testing.T, conn *pgx.Conn, sql string) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(t.Context(), sql).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// A database with charges (one corrected by an adjustment) migrated to
// charges by month: nothing lost, the adjustment still points at its
// charge, and the origin of every charge, from before step 1 and from
// between steps 1 and 2, still refuses a second charge.
func TestMigrateExistingCharges(t *testing.T) {
	url, conn := migratedTo(t, 15)
	sets := billing.Spec.Sets()

	now := time.Now().UTC()
	var ats []time.Time
	for i := range 300 { // rated over the three months before this one
		ats = append(ats, now.AddDate(0, -1-i%3, 0))
	}
	before := insertCharges(t, conn, "b-", ats)
	if _, err := conn.Exec(t.Context(), `
		INSERT INTO adjustment (adjustment_id, event_id, tenant_id, correction_of, amount, currency, reason, period, actor)
		SELECT gen_random_uuid(), gen_random_uuid(), tenant_id, charge_id, -0.1, currency, 'test', period, 'test'
		FROM charge ORDER BY charge_id LIMIT 1`); err != nil {
		t.Fatal(err)
	}
	if err := pgmigrate.Up(url, pgtest.UpTo(t, migrations.Set, 16)); err != nil {
		t.Fatalf("up to 0016: %v", err)
	}
	ats = ats[:0]
	for i := range 100 { // rated between the steps
		ats = append(ats, now.Add(-time.Duration(i)*time.Minute))
	}
	between := insertCharges(t, conn, "w-", ats)
	var total decimal.Decimal
	if err := conn.QueryRow(t.Context(), `SELECT sum(amount) FROM charge`).Scan(&total); err != nil {
		t.Fatal(err)
	}
	if err := pgmigrate.Up(url, sets...); err != nil {
		t.Fatalf("up: %v", err)
	}

	if n := count(t, conn, `SELECT count(*) FROM charge`); n != 400 {
		t.Fatalf("%d charges after the migration, want 400", n)
	}
	var sum decimal.Decimal
	if err := conn.QueryRow(t.Context(), `SELECT sum(amount) FROM charge`).Scan(&sum); err != nil || !sum.Equal(total) {
		t.Fatalf("charges sum to %s (%v) after the migration, %s before", sum, err, total)
	}
	if n := count(t, conn, `SELECT count(*) FROM charge_legacy`); n != 400 {
		t.Fatalf("%d charges in the first partition, want 400", n)
	}
	if n := count(t, conn, `SELECT count(*) FROM adjustment a JOIN charge c ON c.charge_id = a.correction_of`); n != 1 {
		t.Fatalf("%d adjustments find their charge, want 1", n)
	}
	if n := count(t, conn, `SELECT count(*) FROM pg_constraint WHERE conname = 'adjustment_correction_of_fkey'
	                        AND convalidated AND confrelid = 'charge'::regclass`); n != 1 {
		t.Fatal("the adjustments' foreign key is not a validated one on charge")
	}
	if n := count(t, conn, `SELECT count(*) FROM charge_origin o JOIN charge c USING (charge_id)
	                        WHERE (o.tenant_id, o.usage_id, o.usage_event_id, o.event_id) = (c.tenant_id, c.usage_id, c.usage_event_id, c.event_id)`); n != 400 {
		t.Fatalf("%d origins name their charges, want 400", n)
	}
	// A fact of either kind charged again, its charge in a month partition.
	later := now.AddDate(0, 2, 0)
	for i, uev := range []uuid.UUID{before[7], between[7]} {
		_, err := conn.Exec(t.Context(), `INSERT INTO charge_origin (tenant_id, usage_id, usage_event_id, event_id, charge_id)
			VALUES ('t1', $1, $2, $3, $4)`, uuid7At(t, later), uev, uuid7At(t, later), uuid7At(t, later))
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.ConstraintName != "charge_usage_event_id_key" {
			t.Fatalf("origin %d charged again: %v, want a violation of charge_usage_event_id_key", i, err)
		}
	}
	// The charges stay immutable, through the parent and in the partition.
	for _, q := range []string{`UPDATE charge SET quantity = 1`, `DELETE FROM charge_legacy`} {
		var pgErr *pgconn.PgError
		if _, err := conn.Exec(t.Context(), q); !errors.As(err, &pgErr) || pgErr.Code != "23000" {
			t.Fatalf("%s: %v, want refused (23000)", q, err)
		}
	}
}
