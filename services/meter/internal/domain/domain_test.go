package domain

import (
	"errors"
	"testing"
	"time"
)

func code(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	if err != nil {
		return "?" + err.Error()
	}
	return ""
}

func TestParseActivation(t *testing.T) {
	tests := []struct {
		name                                string
		meter, currency, price, effectiveAt string
		want                                string
	}{
		{"ok", "api_calls", "USD", "0.0025", "", ""},
		{"ok with time", "api.calls-v2", "KRW", "3", "2026-11-01T00:00:00+09:00", ""},
		{"zero price", "m", "USD", "0", "", ""},
		{"missing meter", "", "USD", "1", "", CodeMissingField},
		{"missing currency", "m", "", "1", "", CodeMissingField},
		{"missing price", "m", "USD", "", "", CodeMissingField},
		{"meter with space", "api calls", "USD", "1", "", CodeInvalidMeterCode},
		{"meter with bar", "a|b", "USD", "1", "", CodeInvalidMeterCode},
		{"meter too long", string(make65()), "USD", "1", "", CodeInvalidMeterCode},
		{"lower-case currency", "m", "usd", "1", "", CodeUnknownCurrency},
		{"unknown currency", "m", "XYZ", "1", "", CodeUnknownCurrency},
		{"negative price", "m", "USD", "-1", "", CodeInvalidPrice},
		{"exponent price", "m", "USD", "1e3", "", CodeInvalidPrice},
		{"text price", "m", "USD", "ten", "", CodeInvalidPrice},
		{"bad time", "m", "USD", "1", "tomorrow", CodeInvalidField},
		{"date only", "m", "USD", "1", "2026-11-01", CodeInvalidField},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseActivation(Request{MeterCode: tt.meter, Currency: tt.currency, UnitPrice: tt.price, EffectiveAt: tt.effectiveAt})
			if got := code(err); got != tt.want {
				t.Fatalf("code = %q, want %q (err %v)", got, tt.want, err)
			}
		})
	}
}

// The pricing models' requests, and their problem codes (package pricing's,
// plus the decimals' own).
func TestParseActivationModels(t *testing.T) {
	open := TierRequest{UnitPrice: "0.01"}
	tests := []struct {
		name string
		r    Request
		want string
	}{
		{"unit by default", Request{UnitPrice: "0.5"}, ""},
		{"unit named", Request{Model: "unit", UnitPrice: "0.5"}, ""},
		{"graduated with a free allowance", Request{Model: "graduated", Tiers: []TierRequest{{UpTo: "1000", UnitPrice: "0"}, {UnitPrice: "0.01", FlatFee: "5"}}}, ""},
		{"volume", Request{Model: "volume", Tiers: []TierRequest{{UpTo: "10", UnitPrice: "1"}, open}}, ""},
		{"package", Request{Model: "package", PackageSize: "100", PackagePrice: "2.5"}, ""},
		{"unknown model", Request{Model: "tiered", UnitPrice: "1"}, "invalid_model"},
		{"tiers without a model", Request{Tiers: []TierRequest{open}}, CodeMissingField},
		{"tiers with unit", Request{UnitPrice: "1", Tiers: []TierRequest{open}}, "field_not_for_model"},
		{"graduated without tiers", Request{Model: "graduated"}, CodeMissingField},
		{"tier without unit price", Request{Model: "graduated", Tiers: []TierRequest{{FlatFee: "1"}}}, CodeMissingField},
		{"descending tiers", Request{Model: "graduated", Tiers: []TierRequest{{UpTo: "10", UnitPrice: "1"}, {UpTo: "5", UnitPrice: "1"}, open}}, "tiers_not_ascending"},
		{"last tier bounded", Request{Model: "volume", Tiers: []TierRequest{{UpTo: "10", UnitPrice: "1"}}}, "last_tier_not_open"},
		{"bad bound", Request{Model: "volume", Tiers: []TierRequest{{UpTo: "ten", UnitPrice: "1"}, open}}, "invalid_tier_bound"},
		{"negative fee", Request{Model: "graduated", Tiers: []TierRequest{{UnitPrice: "1", FlatFee: "-1"}}}, CodeInvalidPrice},
		{"package size zero", Request{Model: "package", PackageSize: "0", PackagePrice: "1"}, "invalid_package_size"},
		{"package size text", Request{Model: "package", PackageSize: "lots", PackagePrice: "1"}, "invalid_package_size"},
		{"package without price", Request{Model: "package", PackageSize: "10"}, CodeMissingField},
		{"13 decimal places", Request{UnitPrice: "0.0000000000001"}, "too_many_decimal_places"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.r.MeterCode, tt.r.Currency = "m", "USD"
			_, err := ParseActivation(tt.r)
			if got := code(err); got != tt.want {
				t.Fatalf("code = %q, want %q (err %v)", got, tt.want, err)
			}
		})
	}
}

func make65() []byte {
	b := make([]byte, 65)
	for i := range b {
		b[i] = 'm'
	}
	return b
}

func TestSchedule(t *testing.T) {
	now := time.Date(2026, 11, 5, 10, 0, 0, 0, time.UTC)
	later := now.Add(time.Hour)
	earlier := now.Add(-time.Second)
	published := now.Add(5 * time.Second)
	tests := []struct {
		name      string
		effective time.Time
		prev      *time.Time
		known     *time.Time // the published watermark
		want      time.Time
		code      string
	}{
		{"default is now", time.Time{}, nil, nil, now, ""},
		{"future", later, nil, nil, later, ""},
		{"exactly now", now, nil, nil, now, ""},
		{"backdated", earlier, nil, nil, time.Time{}, CodePriceBackdated},
		{"after previous", later, &now, nil, later, ""},
		{"same as previous", later, &later, nil, later, ""},
		{"before previous", now, &later, nil, time.Time{}, CodePriceOutOfOrder},
		{"default before a scheduled previous", time.Time{}, &later, nil, time.Time{}, CodePriceOutOfOrder},
		{"default after a past watermark", time.Time{}, &earlier, &earlier, now, ""},
		{"default just after a published watermark", time.Time{}, &earlier, &published, published.Add(time.Microsecond), ""},
		{"at the published watermark", published, &earlier, &published, time.Time{}, CodeSchedulePublished},
		{"inside the published schedule", now.Add(time.Second), &earlier, &published, time.Time{}, CodeSchedulePublished},
		{"backdated and inside the schedule", earlier, nil, &published, time.Time{}, CodePriceBackdated},
		{"after the published watermark", published.Add(time.Microsecond), &earlier, &published, published.Add(time.Microsecond), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Activation{EffectiveAt: tt.effective}.Schedule(now, tt.prev, tt.known)
			if c := code(err); c != tt.code {
				t.Fatalf("code = %q, want %q", c, tt.code)
			}
			if !got.Equal(tt.want) {
				t.Fatalf("effectiveAt = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestWatermarkNeverGoesBack(t *testing.T) {
	now := time.Date(2026, 11, 5, 10, 0, 0, 0, time.UTC)
	ahead := now.Add(time.Minute)
	if got := Watermark(now, 5*time.Second, nil); !got.Equal(now.Add(5 * time.Second)) {
		t.Fatalf("first watermark = %v, want now + lead", got)
	}
	if got := Watermark(now, 5*time.Second, &ahead); !got.Equal(ahead) {
		t.Fatalf("watermark = %v, want the one already published (%v)", got, ahead)
	}
}
