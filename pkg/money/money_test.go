package money

import (
	"testing"

	"github.com/shopspring/decimal"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
		ok   bool
	}{
		{"12.50", "12.5", true}, {"0", "0", true}, {"-3", "-3", true}, {"0.000001", "0.000001", true},
		{"", "", false}, {"1e3", "", false}, {"+1", "", false}, {"01", "", false}, {"1.", "", false},
		{".5", "", false}, {" 1", "", false}, {"NaN", "", false}, {"1,5", "", false},
		{"123456789012345678901234567890123456789", "", false},
	} {
		got, err := Parse(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("Parse(%q) error = %v, want ok=%v", tc.in, err, tc.ok)
			continue
		}
		if tc.ok && got.String() != tc.want {
			t.Errorf("Parse(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
	if _, err := ParseNonNegative("-0.01"); err == nil {
		t.Error("ParseNonNegative accepted a negative value")
	}
}

func TestCurrencyScaleAndHalfEvenRounding(t *testing.T) {
	for _, tc := range []struct{ code, in, want string }{
		{"USD", "10.005", "10"}, {"USD", "10.015", "10.02"}, {"USD", "10.0251", "10.03"},
		{"KRW", "1500.5", "1500"}, {"KRW", "1501.5", "1502"}, {"JPY", "2.5", "2"},
		{"BHD", "1.0005", "1"}, {"BHD", "1.0015", "1.002"},
		{"IQD", "1.0005", "1"}, {"IDR", "10.005", "10"}, {"COP", "0.125", "0.12"}, {"CLP", "2.5", "2"},
	} {
		d, _ := Parse(tc.in)
		got, err := Round(d, tc.code)
		if err != nil {
			t.Fatalf("Round(%s, %s): %v", tc.in, tc.code, err)
		}
		if got.String() != tc.want {
			t.Errorf("Round(%s, %s) = %s, want %s", tc.in, tc.code, got, tc.want)
		}
	}
	for _, bad := range []string{"usd", "XXXX", "ZZZ", "", "US"} {
		if _, err := Currency(bad); err == nil {
			t.Errorf("Currency(%q) accepted", bad)
		}
	}
}

// Prorate rounds amount x days / periodDays once, half to even, at the
// currency's minor unit.
func TestProrate(t *testing.T) {
	for _, c := range []struct {
		amount         string
		days, of       int
		currency, want string
	}{
		{"49.00", 15, 31, "USD", "23.71"}, {"49.00", 31, 31, "USD", "49"}, {"0.01", 14, 28, "USD", "0"},
		{"0.03", 14, 28, "USD", "0.02"}, {"-0.03", 14, 28, "USD", "-0.02"}, {"1", 14, 28, "KRW", "0"},
		{"3", 14, 28, "KRW", "2"}, {"0.003", 14, 28, "BHD", "0.002"}, {"100", 0, 30, "USD", "0"},
	} {
		got, err := Prorate(decimal.RequireFromString(c.amount), c.days, c.of, c.currency)
		if err != nil || !got.Equal(decimal.RequireFromString(c.want)) {
			t.Errorf("Prorate(%s, %d/%d, %s) = %s, %v; want %s", c.amount, c.days, c.of, c.currency, got, err, c.want)
		}
	}
	if _, err := Prorate(decimal.NewFromInt(1), 32, 31, "USD"); err == nil {
		t.Error("32 of 31 days prorated")
	}
}
