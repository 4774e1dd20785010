package floor

import (
	"slices"
	"testing"
)

func TestParseQueries(t *testing.T) {
	text := `-- name: First :many
-- A comment with @not_a_param.
SELECT a FROM t
WHERE x = @tenant_id AND y = ANY(@codes::text[]) AND z = sqlc.narg(maybe)
  AND w = @tenant_id::text;

-- name: Second :exec
SELECT pg_advisory_xact_lock(hashtextextended('usage.acceptance', 0));
`
	qs := parseQueries(text)
	if len(qs) != 2 {
		t.Fatalf("parsed %d statements, want 2", len(qs))
	}
	first := qs[0]
	wantSQL := "SELECT a FROM t\nWHERE x = $1 AND y = ANY($2::text[]) AND z = $3\n  AND w = $1::text"
	if first.name != "First" || first.sql != wantSQL {
		t.Errorf("first = %q %q, want First %q", first.name, first.sql, wantSQL)
	}
	if want := []string{"tenant_id", "codes", "maybe"}; !slices.Equal(first.params, want) {
		t.Errorf("params = %v, want %v", first.params, want)
	}
	args, err := first.args(map[string]any{"codes": 2, "maybe": 3, "tenant_id": 1})
	if err != nil || !slices.Equal(args, []any{1, 2, 3}) {
		t.Errorf("args = %v, %v; want [1 2 3]", args, err)
	}
	if _, err := first.args(map[string]any{"codes": 2, "maybe": 3}); err == nil {
		t.Error("args without tenant_id: want an error")
	}
	if _, err := first.args(map[string]any{"codes": 2, "maybe": 3, "tenant_id": 1, "extra": 4}); err == nil {
		t.Error("args with an extra name: want an error")
	}
	if qs[1].name != "Second" || len(qs[1].params) != 0 {
		t.Errorf("second = %+v, want no params", qs[1])
	}
}
