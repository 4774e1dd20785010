package money

import (
	"errors"
	"strings"
	"testing"
)

// A signed zero is refused: "-0" quantities and prices are no values.
func TestParseRefusesSignedZero(t *testing.T) {
	for _, s := range []string{"-0", "-0.0", "-0.000"} {
		if _, err := Parse(s); !errors.Is(err, ErrNegativeZero) {
			t.Errorf("Parse(%q) = %v, want ErrNegativeZero", s, err)
		}
		if _, err := ParseNonNegative(s); err == nil {
			t.Errorf("ParseNonNegative(%q) accepted", s)
		}
	}
	if d, err := Parse("0.00"); err != nil || !d.IsZero() {
		t.Fatalf("0.00: %v %v", d, err)
	}
}

// FuzzParse: what Parse accepts is a plain decimal of at most MaxDigits
// digits that prints back to the same value, never a signed zero.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"12.50", "-3", "0", "-0", "1e3", "1e999999999", strings.Repeat("9", 39), "0.000001", "+1", " 1", "1.", "NaN", "-0.00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := Parse(s)
		if err != nil {
			return
		}
		if !decimalText.MatchString(s) || strings.ContainsAny(s, "eE+ ") {
			t.Fatalf("accepted %q", s)
		}
		if d.IsZero() && strings.HasPrefix(s, "-") {
			t.Fatalf("accepted the signed zero %q", s)
		}
		if back, err := Parse(d.String()); err != nil || !back.Equal(d) {
			t.Fatalf("%q -> %s does not read back: %v", s, d, err)
		}
	})
}

// FuzzCurrency: Currency accepts only circulating ISO 4217 codes, never
// XXX, XTS, metals or funds, and never anything but three capitals.
func FuzzCurrency(f *testing.F) {
	for _, s := range []string{"USD", "JPY", "XXX", "XTS", "XAU", "CLF", "usd", "US", "USDD", "\x00SD", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, code string) {
		scale, err := Currency(code)
		if err != nil {
			if ProblemCode(err) == "" {
				t.Fatalf("%q: error without a code: %v", code, err)
			}
			return
		}
		c, ok := Lookup(code)
		if !ok || c.Kind != Tender || scale < 0 || len(code) != 3 || strings.ToUpper(code) != code {
			t.Fatalf("accepted %q (%+v, scale %d)", code, c, scale)
		}
	})
}
