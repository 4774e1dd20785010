package app_test

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/services/billing/internal/app"
	bt "github.com/usagebilling/billing/services/billing/internal/billingtest"
)

// chargeInLastMonths moves the tenant's one charge (and its origin) to a
// charge_id of two months ago: as if it was rated then, into the first
// partition, which ends at this month on a new database. As the owner,
// past the trigger that keeps charges immutable.
func chargeInLastMonths(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	var id uuid.UUID
	if _, err := rand.Read(id[:]); err != nil {
		t.Fatal(err)
	}
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(time.Now().AddDate(0, -2, 0).UnixMilli()))
	copy(id[:6], ms[2:])
	id[6], id[8] = id[6]&0x0f|0x70, id[8]&0x3f|0x80
	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(t.Context()) //nolint:errcheck // after Commit a no-op
	for _, q := range []string{
		`SET LOCAL session_replication_role = replica`,
		`UPDATE charge SET charge_id = $1`,
		`UPDATE charge_origin SET charge_id = $1`,
	} {
		args := []any{id}
		if q[:3] == "SET" {
			args = nil
		}
		if _, err := tx.Exec(t.Context(), q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	var part string
	if err := pool.QueryRow(t.Context(), `SELECT tableoid::regclass::text FROM charge`).Scan(&part); err != nil || part != "charge_legacy" {
		t.Fatalf("the charge is in %q (%v), want charge_legacy", part, err)
	}
}

// A fact charged in an earlier month is not charged again in this one
// (decision 0025): its UsageAccepted redelivered once the inbox has
// forgotten it (past INBOX_RETENTION) finds its origin taken in
// charge_origin, which is not partitioned, and is absorbed as a duplicate.
func TestChargedOnceAcrossMonths(t *testing.T) {
	pool := bt.NewPool(t)
	svc := app.New(app.Deps{Pool: pool}, app.Config{})
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, pool, ib)
	bt.Decide(t, pool, ib, priceV1("t1").Raw(t))
	env, raw := usageAt("t1", 0, "7", jan10).Envelope(t)
	wantOutcomes(t, bt.Decide(t, pool, ib, raw), inbox.OutcomeApplied)
	chargeInLastMonths(t, pool)
	if _, err := pool.Exec(t.Context(), `DELETE FROM inbox_event WHERE event_id = $1`, env.EventID); err != nil {
		t.Fatal(err)
	}

	wantOutcomes(t, bt.Decide(t, pool, ib, raw), inbox.OutcomeDuplicate+":effect_exists:charge_usage_event_id_key")
	if n := bt.Count(t, pool, `SELECT count(*) FROM charge`); n != 1 {
		t.Fatalf("%d charges, want 1: the fact was charged again in another month", n)
	}
	if n := bt.Count(t, pool, `SELECT count(*) FROM charge_origin`); n != 1 {
		t.Fatalf("%d charge origins, want 1", n)
	}
}

// A month of charges is archived (detached) only once it is over and every
// charge in it is in a closed period; the charges stay immutable on every
// partition.
func TestArchiveChargeMonth(t *testing.T) {
	pool := bt.NewPool(t)
	svc := app.New(app.Deps{Pool: pool}, app.Config{})
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, pool, ib)
	bt.Decide(t, pool, ib, priceV1("t1").Raw(t))
	wantOutcomes(t, bt.Decide(t, pool, ib, usageAt("t1", 0, "7", jan10).Raw(t)), inbox.OutcomeApplied)

	// Immutable in every partition: the first, and this month's.
	var pgErr *pgconn.PgError
	for _, q := range []string{`UPDATE charge SET quantity = 8`, `DELETE FROM charge`} {
		if _, err := pool.Exec(t.Context(), q); !errors.As(err, &pgErr) || pgErr.Code != "23000" {
			t.Fatalf("%s: %v, want refused (23000)", q, err)
		}
	}
	// Every partition carries both triggers (a TRUNCATE of one is refused
	// first by the adjustments' foreign key, then by its trigger).
	if n := bt.Count(t, pool, `SELECT count(*) FROM pg_inherits i
		WHERE i.inhparent = 'charge'::regclass
		  AND (SELECT count(*) FROM pg_trigger g WHERE g.tgrelid = i.inhrelid
		       AND g.tgname IN ('charge_immutable', 'charge_not_truncated')) <> 2`); n != 0 {
		t.Fatalf("%d partitions of charge lack charge_immutable or charge_not_truncated", n)
	}
	if n := bt.Count(t, pool, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'charge'::regclass`); n < 5 {
		t.Fatalf("%d partitions, want the first and this month and three ahead", n)
	}

	chargeInLastMonths(t, pool)
	if _, err := pool.Exec(t.Context(), `UPDATE charge_legacy SET quantity = 8`); !errors.As(err, &pgErr) || pgErr.Code != "23000" {
		t.Fatalf("an update of the first partition: %v, want refused (23000)", err)
	}
	archive := func(at time.Time) (string, error) {
		var name string
		err := pool.QueryRow(t.Context(), `SELECT charge_archive($1)`, at).Scan(&name)
		return name, err
	}
	old := time.Now().AddDate(0, -2, 0)
	for what, at := range map[string]time.Time{"this month": time.Now(), "a month of an open period": old} {
		if _, err := archive(at); !errors.As(err, &pgErr) || pgErr.Code != "55000" {
			t.Fatalf("archive %s: %v, want refused (55000)", what, err)
		}
	}
	if _, err := pool.Exec(t.Context(), `INSERT INTO billing_period (tenant_id, period, status, closed_at, closed_by)
		VALUES ('t1', '2026-01', 'closed', now(), 'test')`); err != nil {
		t.Fatal(err)
	}
	if name, err := archive(old); err != nil || name != "charge_legacy" {
		t.Fatalf("archive: %q %v", name, err)
	}
	if n := bt.Count(t, pool, `SELECT count(*) FROM charge`); n != 0 {
		t.Fatalf("%d charges left in charge, want 0", n)
	}
	if n := bt.Count(t, pool, `SELECT count(*) FROM charge_legacy`); n != 1 {
		t.Fatalf("the archived partition holds %d charges, want 1", n)
	}
}
