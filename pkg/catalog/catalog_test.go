package catalog

import (
	"math/rand/v2"
	"regexp"
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

// TestValidKeyIsThePattern: ValidKey accepts exactly the names of section
// 3a, ^[A-Za-z0-9_.-]{1,64}$, over every byte alone and 20,000 strings drawn
// (a fixed seed) from allowed, neighbouring and multi-byte characters, of
// lengths around the limit.
func TestValidKeyIsThePattern(t *testing.T) {
	pattern := regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)
	inputs := []string{"", strings.Repeat("a", 64), strings.Repeat("a", 65)}
	for c := 0; c < 256; c++ {
		inputs = append(inputs, string([]byte{byte(c)}), "a"+string([]byte{byte(c)}))
	}
	alphabet := []string{"a", "Z", "0", "9", "_", ".", "-", "/", "@", "[", "`", "{", ":", " ", "\x00", "é", "\xff"}
	rng := rand.New(rand.NewPCG(26, 12))
	for range 20000 {
		var b strings.Builder
		for n := rng.IntN(70); n > 0; n-- {
			if rng.IntN(8) == 0 {
				b.WriteString(alphabet[rng.IntN(len(alphabet))])
			} else {
				b.WriteString(alphabet[rng.IntN(7)])
			}
		}
		inputs = append(inputs, b.String())
	}
	for _, s := range inputs {
		if got, want := ValidKey(s), pattern.MatchString(s); got != want {
			t.Fatalf("ValidKey(%q) = %v, the pattern says %v", s, got, want)
		}
	}
}

// TestValidatePropertiesNamesTheFirstInKeyOrder: with several invalid
// properties the error names the first in key order, every time whatever
// the map's order; valid ones pass, at the limits.
func TestValidatePropertiesNamesTheFirstInKeyOrder(t *testing.T) {
	ok := map[string]string{strings.Repeat("k", MaxPropertyKey): strings.Repeat("é", MaxPropertyValue), "a.b-c_D9": ""}
	if err := ValidateProperties(ok); err != nil {
		t.Fatalf("valid properties refused: %v", err)
	}
	bad := map[string]string{"zeta": "x", "m": "tab\there", "b/x": "y", "c": "fine", "d": strings.Repeat("v", MaxPropertyValue+1)}
	for range 50 {
		err := ValidateProperties(bad)
		if err == nil || err.Code != CodeInvalidProperties || !strings.Contains(err.Detail, `"b/x"`) {
			t.Fatalf("got %v, want %s naming \"b/x\", the first invalid in key order", err, CodeInvalidProperties)
		}
	}
	delete(bad, "b/x")
	if err := ValidateProperties(bad); err == nil || !strings.Contains(err.Detail, `"d"`) {
		t.Fatalf("got %v, want the value of \"d\" named", err)
	}
}
