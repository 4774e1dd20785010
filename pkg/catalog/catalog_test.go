package catalog

import (
	"strings"
	"testing"
)

// A Key is stored in PostgreSQL text columns (billing's and query's lines):
// it must hold no NUL, and it must tell dimension sets apart.
func TestKeyIsStorableAndCanonical(t *testing.T) {
	a := Key(map[string]string{"region": "eu", "model": "gpt-4"})
	b := Key(map[string]string{"model": "gpt-4", "region": "eu"})
	if a != b {
		t.Fatalf("Key depends on map order: %q, %q", a, b)
	}
	if strings.ContainsRune(a, 0) {
		t.Fatalf("Key %q holds NUL, which PostgreSQL text cannot store", a)
	}
	if Key(map[string]string{"model": "a", "region": "b"}) == Key(map[string]string{"model": "a=region", "x": "b"}) {
		t.Fatal("two dimension sets have one Key")
	}
	if Key(nil) != "" {
		t.Fatalf("Key(nil) = %q", Key(nil))
	}
}

// Choose takes the most specific match, the smaller Key among equals.
func TestChoose(t *testing.T) {
	cands := []map[string]string{nil, {"model": "gpt-4"}, {"model": "gpt-4", "region": "eu"}, {"region": "us"}}
	for _, c := range []struct {
		props map[string]string
		want  int
	}{
		{map[string]string{"model": "gpt-4", "region": "eu"}, 2},
		{map[string]string{"model": "gpt-4", "region": "us"}, 1},
		{map[string]string{"model": "claude", "region": "us"}, 3},
		{map[string]string{"model": "claude"}, 0},
	} {
		if got := Choose(cands, c.props); got != c.want {
			t.Errorf("Choose(%v) = %d, want %d", c.props, got, c.want)
		}
	}
	if Choose([]map[string]string{{"model": "x"}}, map[string]string{"model": "y"}) != -1 {
		t.Error("a price for another value matched")
	}
}
