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

// The business bounds: 18 digits before the point, 12 after, for
// quantities; a price of 38 nines times a quantity of 38 nines (a 76-digit
// charge) cannot be asked for.
func TestBounds(t *testing.T) {
	for s, code := range map[string]string{
		"999999999999999999":              "",
		"999999999999999999.999999999999": "",
		"0.000000000001":                  "",
		"1.500000000000000":               "", // trailing zeros do not count
		"1000000000000000000":             CodeOutOfRange,
		strings.Repeat("9", 38):           CodeOutOfRange,
		"0.0000000000001":                 CodeTooPrecise,
	} {
		_, err := ParseQuantity(s)
		if got := BoundsCode(err); got != code || (code == "" && err != nil) {
			t.Errorf("ParseQuantity(%q): %v (code %q), want code %q", s, err, got, code)
		}
	}
	if _, err := ParseQuantity("-1"); err == nil || BoundsCode(err) != "" {
		t.Errorf("a negative quantity: %v", err)
	}
	d, _ := Parse("-" + strings.Repeat("9", 19))
	if err := CheckRange(d); BoundsCode(err) != CodeOutOfRange {
		t.Errorf("a negative amount of 19 digits: %v", err)
	}
}
