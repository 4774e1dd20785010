package domain

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"
)

func TestRatingPeriod(t *testing.T) {
	for _, tc := range []struct {
		occurred string
		notOpen  []string
		want     string
		late     bool
	}{
		{"2026-11", nil, "2026-11", false},
		{"2026-11", []string{"2026-12"}, "2027-01", true}, // a later period closed: late past it
		{"2026-11", []string{"2026-11"}, "2026-12", true},
		{"2026-11", []string{"2026-11", "2026-12"}, "2027-01", true},
		{"2026-11", []string{"2026-11", "2027-01"}, "2027-02", true},
		{"2026-12", []string{"2026-12"}, "2027-01", true},
	} {
		got, late := RatingPeriod(tc.occurred, tc.notOpen)
		if got != tc.want || late != tc.late {
			t.Errorf("RatingPeriod(%s, %v) = %s, %v; want %s, %v", tc.occurred, tc.notOpen, got, late, tc.want, tc.late)
		}
	}
}

func TestAmountIsExact(t *testing.T) {
	got := Amount(decimal.RequireFromString("1000.5"), decimal.RequireFromString("0.0125"))
	if got.String() != "12.50625" {
		t.Fatalf("amount = %s", got)
	}
	got = Amount(decimal.RequireFromString("0.1"), decimal.RequireFromString("0.2"))
	if !got.Equal(decimal.RequireFromString("0.02")) {
		t.Fatalf("amount = %s", got)
	}
}

func TestClosablePeriod(t *testing.T) {
	now := time.Date(2026, 11, 29, 23, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in, code string
	}{
		{"2026-11", ""},
		{"2026-10", ""},
		{"1999-01", ""},
		{"2026-12", "period_in_future"},
		{"2027-01", "period_in_future"},
		{"2026-13", "invalid_period"},
		{"2026-1", "invalid_period"},
		{"2026-00", "invalid_period"},
		{"202611", "invalid_period"},
		{"", "invalid_period"},
		{"2026-11-01", "invalid_period"},
		{" 2026-11", "invalid_period"},
	} {
		_, err := ClosablePeriod(tc.in, now)
		if code := codeOf(err); code != tc.code {
			t.Errorf("ClosablePeriod(%q) code = %q, want %q", tc.in, code, tc.code)
		}
	}
}

func codeOf(err error) string {
	var de *Error
	if errors.As(err, &de) {
		return de.Code
	}
	if err != nil {
		return "not a domain error: " + err.Error()
	}
	return ""
}

func TestParseAdjustment(t *testing.T) {
	valid := AdjustmentRequest{CorrectionOf: "01a22984-85a2-755b-a3ef-a289f2b96b22", Amount: "-12.50", Currency: "USD", Reason: "refund"}
	with := func(f func(*AdjustmentRequest)) AdjustmentRequest { r := valid; f(&r); return r }
	for _, tc := range []struct {
		name string
		in   AdjustmentRequest
		code string
	}{
		{"valid negative", valid, ""},
		{"valid positive", with(func(r *AdjustmentRequest) { r.Amount = "3" }), ""},
		{"valid KRW", with(func(r *AdjustmentRequest) { r.Amount = "1000"; r.Currency = "KRW" }), ""},
		{"reason of 500 characters", with(func(r *AdjustmentRequest) { r.Reason = strings.Repeat("가", 500) }), ""},
		{"no correctionOf", with(func(r *AdjustmentRequest) { r.CorrectionOf = "" }), "missing_field"},
		{"no amount", with(func(r *AdjustmentRequest) { r.Amount = "" }), "missing_field"},
		{"no currency", with(func(r *AdjustmentRequest) { r.Currency = "" }), "missing_field"},
		{"blank reason", with(func(r *AdjustmentRequest) { r.Reason = "  " }), "missing_field"},
		{"correctionOf not a uuid", with(func(r *AdjustmentRequest) { r.CorrectionOf = "charge-1" }), "invalid_field"},
		{"correctionOf with braces", with(func(r *AdjustmentRequest) { r.CorrectionOf = "{01a22984-85a2-755b-a3ef-a289f2b96b22}" }), "invalid_field"},
		{"zero amount", with(func(r *AdjustmentRequest) { r.Amount = "0.00" }), "invalid_amount"},
		{"negative zero", with(func(r *AdjustmentRequest) { r.Amount = "-0" }), "invalid_amount"},
		{"exponent", with(func(r *AdjustmentRequest) { r.Amount = "1e3" }), "invalid_amount"},
		{"words", with(func(r *AdjustmentRequest) { r.Amount = "ten" }), "invalid_amount"},
		{"plus sign", with(func(r *AdjustmentRequest) { r.Amount = "+1" }), "invalid_amount"},
		{"too many digits", with(func(r *AdjustmentRequest) { r.Amount = strings.Repeat("9", 39) }), "invalid_amount"},
		{"lower-case currency", with(func(r *AdjustmentRequest) { r.Currency = "usd" }), "unknown_currency"},
		{"unknown currency", with(func(r *AdjustmentRequest) { r.Currency = "XYZ" }), "unknown_currency"},
		{"reason too long", with(func(r *AdjustmentRequest) { r.Reason = strings.Repeat("a", 501) }), "invalid_field"},
		{"finer than a cent", with(func(r *AdjustmentRequest) { r.Amount = "-0.005" }), "amount_precision"},
		{"whole cents with trailing zeros", with(func(r *AdjustmentRequest) { r.Amount = "-0.500" }), ""},
		{"half a won", with(func(r *AdjustmentRequest) { r.Amount = "-0.5"; r.Currency = "KRW" }), "amount_precision"},
		{"a fils", with(func(r *AdjustmentRequest) { r.Amount = "-0.001"; r.Currency = "BHD" }), ""},
		{"gold", with(func(r *AdjustmentRequest) { r.Currency = "XAU" }), "currency_not_invoiceable"},
		{"the testing code", with(func(r *AdjustmentRequest) { r.Currency = "XTS" }), "currency_not_invoiceable"},
		{"withdrawn currency", with(func(r *AdjustmentRequest) { r.Currency = "HRK" }), "unknown_currency"},
	} {
		_, err := ParseAdjustment(tc.in)
		if code := codeOf(err); code != tc.code {
			t.Errorf("%s: code = %q, want %q (%v)", tc.name, code, tc.code, err)
		}
	}
}

func TestCheckAdjustment(t *testing.T) {
	if err := CheckAdjustment(Adjustment{Currency: "USD"}, "USD"); err != nil {
		t.Fatal(err)
	}
	if code := codeOf(CheckAdjustment(Adjustment{Currency: "EUR"}, "USD")); code != "currency_mismatch" {
		t.Fatalf("code = %q", code)
	}
}

func TestCheckCredit(t *testing.T) {
	d := decimal.RequireFromString
	for _, tc := range []struct {
		name, amount, charged, adjusted string
		ok                              bool
	}{
		{"within the charges", "-0.40", "1", "0", true},
		{"exactly the charges", "-1", "1", "0", true},
		{"a cent over", "-1.01", "1", "0", false},
		{"what earlier credits left", "-0.5", "1", "-0.5", true},
		{"more than earlier credits left", "-0.51", "1", "-0.5", false},
		{"a debit is never refused", "5", "0", "-1", true},
		{"nothing charged", "-0.01", "0", "0", false},
	} {
		err := CheckCredit(d(tc.amount), "USD", Balance{Charged: d(tc.charged), Adjusted: d(tc.adjusted)})
		if (err == nil) != tc.ok || (err != nil && codeOf(err) != "credit_exceeds_charges") {
			t.Errorf("%s: err = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}
