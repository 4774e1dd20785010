package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/services/invoice/internal/db"
	. "github.com/usagebilling/billing/services/invoice/internal/invoicetest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// recorder is a db.DBTX that keeps the statement a query would send and
// sends nothing: the test runs it under EXPLAIN itself.
type recorder struct {
	sql  string
	args []any
}

var errRecorded = errors.New("recorded, not sent")

func (r *recorder) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	r.sql, r.args = sql, args
	return pgconn.CommandTag{}, errRecorded
}

func (r *recorder) Query(_ context.Context, sql string, args ...any) (pgx.Rows, error) {
	r.sql, r.args = sql, args
	return nil, errRecorded
}

func (r *recorder) QueryRow(_ context.Context, sql string, args ...any) pgx.Row {
	r.sql, r.args = sql, args
	return errRow{}
}

type errRow struct{}

func (errRow) Scan(...any) error { return errRecorded }

// rowsRead is how many rows the plan's nodes read from relation, loops
// included, in an EXPLAIN (ANALYZE, FORMAT JSON) answer.
func rowsRead(t *testing.T, plan []byte, relation string) float64 {
	t.Helper()
	var doc []struct{ Plan map[string]any }
	if err := json.Unmarshal(plan, &doc); err != nil || len(doc) != 1 {
		t.Fatalf("explain: %v %s", err, plan)
	}
	var walk func(n map[string]any) float64
	walk = func(n map[string]any) float64 {
		var sum float64
		if n["Relation Name"] == relation {
			rows, _ := n["Actual Rows"].(float64)
			loops, _ := n["Actual Loops"].(float64)
			sum += rows * loops
		}
		children, _ := n["Plans"].([]any)
		for _, c := range children {
			if m, ok := c.(map[string]any); ok {
				sum += walk(m)
			}
		}
		return sum
	}
	return walk(doc[0].Plan)
}

// Deciding a correction note reads the invoice's running totals, not every
// earlier note: with 40 notes the statement that decides the 41st reads at
// most one row of invoice_correction (the note of the adjustment itself, a
// redelivery), and its figures are those of the 40 notes.
func TestDecidingACorrectionDoesNotRescanTheEarlierOnes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	p := NewPeriod(t, "acme", "2026-11")
	envs := []envelope.Envelope{p.Charge("USD", "1", "100"), p.Close()}
	for range 40 {
		envs = append(envs, p.Adjustment("USD", "-1"))
	}
	for i, d := range Decide(t, pool, ib, envs...) {
		if d.Outcome != "applied" {
			t.Fatalf("event %d: %s", i, d.Outcome)
		}
	}
	inv := invoices(t, pool, "acme", "2026-11")["USD"]
	if len(inv.Corrections) != 40 {
		t.Fatalf("%d correction notes, want 40", len(inv.Corrections))
	}
	invoiceID := inv.InvoiceID
	last := envs[len(envs)-1].EventID

	for _, tc := range []struct {
		name      string
		origin    uuid.UUID
		corrected string
	}{
		{"a new adjustment", uuid.New(), "-40"},
		{"the last one again (a redelivery: decided as the first time)", last, "-39"},
	} {
		params := db.IssuedInvoiceStateParams{InvoiceID: invoiceID, OriginEventID: tc.origin}
		got, err := db.New(pool).IssuedInvoiceState(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Total.Equal(D("100")) || !got.Corrected.Equal(D(tc.corrected)) || got.NextVersion != 42 {
			t.Errorf("%s: total %s corrected %s next version %d, want 100, %s, 42", tc.name, got.Total, got.Corrected, got.NextVersion, tc.corrected)
		}
		var rec recorder
		if _, err := db.New(&rec).IssuedInvoiceState(ctx, params); !errors.Is(err, errRecorded) {
			t.Fatalf("recorder: %v", err)
		}
		var plan []byte
		if err := pool.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+rec.sql, rec.args...).Scan(&plan); err != nil {
			t.Fatal(err)
		}
		if n := rowsRead(t, plan, "invoice_correction"); n > 1 {
			t.Errorf("%s: the statement read %v rows of invoice_correction, want at most 1 whatever the notes: %s", tc.name, n, fmt.Sprint(string(plan)))
		}
	}
}
