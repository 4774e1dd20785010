package pgtest

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Recorder is a sqlc DBTX (Exec, Query, QueryRow) that keeps the statement
// a query would send and sends nothing: every call answers ErrRecorded.
type Recorder struct {
	SQL  string
	Args []any
}

// ErrRecorded is what a Recorder answers: the statement was kept, not sent.
var ErrRecorded = errors.New("recorded, not sent")

// Exec records sql.
func (r *Recorder) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	r.SQL, r.Args = sql, args
	return pgconn.CommandTag{}, ErrRecorded
}

// Query records sql.
func (r *Recorder) Query(_ context.Context, sql string, args ...any) (pgx.Rows, error) {
	r.SQL, r.Args = sql, args
	return nil, ErrRecorded
}

// QueryRow records sql.
func (r *Recorder) QueryRow(_ context.Context, sql string, args ...any) pgx.Row {
	r.SQL, r.Args = sql, args
	return errRow{}
}

type errRow struct{}

func (errRow) Scan(...any) error { return ErrRecorded }

// Plan is an EXPLAIN (ANALYZE, FORMAT JSON) answer.
type Plan []byte

// Explain runs, under EXPLAIN (ANALYZE, FORMAT JSON) on pool, the statement
// run sends through rec (a sqlc query over it: db.New(rec).Query(...)),
// which run must answer with the ErrRecorded it got.
func Explain(t testing.TB, pool *pgxpool.Pool, run func(rec *Recorder) error) Plan {
	t.Helper()
	var rec Recorder
	if err := run(&rec); !errors.Is(err, ErrRecorded) {
		t.Fatalf("recorder: %v", err)
	}
	var plan []byte
	if err := pool.QueryRow(t.Context(), "EXPLAIN (ANALYZE, FORMAT JSON) "+rec.SQL, rec.Args...).Scan(&plan); err != nil {
		t.Fatalf("explain %s: %v", rec.SQL, err)
	}
	return plan
}

// RowsRead is how many rows the plan's nodes read from the relations
// (tables, partitions) match accepts, loops included: the rows each scan
// gave and the rows its filter or an index recheck removed.
func (p Plan) RowsRead(t testing.TB, match func(relation string) bool) float64 {
	t.Helper()
	var doc []struct{ Plan map[string]any }
	if err := json.Unmarshal(p, &doc); err != nil || len(doc) != 1 {
		t.Fatalf("explain: %v %s", err, p)
	}
	var walk func(n map[string]any) float64
	walk = func(n map[string]any) float64 {
		var sum float64
		if rel, ok := n["Relation Name"].(string); ok && match(rel) {
			rows, _ := n["Actual Rows"].(float64)
			filtered, _ := n["Rows Removed by Filter"].(float64)
			rechecked, _ := n["Rows Removed by Index Recheck"].(float64)
			loops, _ := n["Actual Loops"].(float64)
			sum += (rows + filtered + rechecked) * loops
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

// Relation matches the relation named name.
func Relation(name string) func(string) bool {
	return func(relation string) bool { return relation == name }
}
