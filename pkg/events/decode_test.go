package events_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/pricing"
)

// FuzzDecodeCanonical: whatever canonical payload the per-fact events'
// own decoders accept, they decode exactly as encoding/json does with
// Register's rules (unknown fields refused, numbers kept exact), and every
// payload of those types that encoding/json writes they accept.
func FuzzDecodeCanonical(f *testing.F) {
	id := uuid.MustParse("0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b")
	at := time.Date(2026, 12, 5, 6, 7, 8, 123456000, time.UTC)
	props := map[string]string{"region": "eu", "Zone": "z"}
	usage := events.UsageAccepted{UsageID: id, SourceSystem: "api", SourceEventID: "e-1", MeterCode: "calls",
		Quantity: decimal.RequireFromString("1.5"), OccurredAt: at, Currency: "USD", PriceVersion: 3, Properties: props}
	charge := events.ChargeRated{ChargeID: id, UsageEventID: id, UsageID: id, MeterCode: "calls", Currency: "USD",
		Quantity: decimal.RequireFromString("1.5"), UnitPrice: decimal.RequireFromString("0.2"), PriceVersion: 3,
		Amount: decimal.RequireFromString("0.3"), Period: "2026-12", Late: true, OccurredAt: at, Model: "unit",
		Aggregation: "sum", Dimensions: props, Properties: props, SourceSystem: "api", SourceEventID: "e-1",
		Value: "v", PlanCode: "pro"}
	tiered := charge
	tiered.Pricing = &pricing.Pricing{Model: pricing.Graduated, Tiers: []pricing.Tier{{UnitPrice: decimal.RequireFromString("1")}}}
	for _, p := range []any{usage, charge, tiered, events.UsageAccepted{}, events.ChargeRated{}} {
		f.Add(encode(f, p))
	}
	for _, s := range []string{
		`{"currency":"USD","quantity":1.50}`, `{"currency":null}`, `{"properties":{}}`, `{"properties":{"a":"\u00e9"}}`,
		`{"priceVersion":1.0}`, `{"priceVersion":"1"}`, `{"late":1}`, `{"usageId":"not-a-uuid"}`, `{"Currency":"USD"}`,
		`{"occurredAt":"2026-12-05T06:07:08+09:00"}`, `{"quantity":"1e3"}`, `{"extra":1}`, `{"meterCode":"caf\u00e9"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		canon, err := envelope.Canonical(data)
		if err != nil {
			return
		}
		check[events.UsageAccepted](t, canon)
		check[events.ChargeRated](t, canon)
	})
}

// TestDecodeCanonicalTakesWhatEncodingJSONWrites: the per-fact payloads as
// their producers write them are decoded by their own decoders, not handed
// to encoding/json.
func TestDecodeCanonicalTakesWhatEncodingJSONWrites(t *testing.T) {
	id := uuid.Must(uuid.NewV7())
	at := time.Now().UTC().Truncate(time.Microsecond)
	for _, p := range []interface {
		envelope.CanonicalDecoder
	}{
		&events.UsageAccepted{UsageID: id, SourceSystem: "s", SourceEventID: "e", MeterCode: "m",
			Quantity: decimal.RequireFromString("-0.000000001"), OccurredAt: at, Currency: "KRW"},
		&events.ChargeRated{ChargeID: id, UsageEventID: id, UsageID: id, MeterCode: "m", Currency: "USD",
			Quantity: decimal.RequireFromString("3"), UnitPrice: decimal.RequireFromString("0.001"),
			Amount: decimal.RequireFromString("0.003"), Period: "2026-12", OccurredAt: at},
	} {
		canon, err := envelope.Canonical(encode(t, p))
		if err != nil {
			t.Fatal(err)
		}
		fresh := reflect.New(reflect.TypeOf(p).Elem()).Interface().(envelope.CanonicalDecoder)
		if !fresh.DecodeCanonical(canon) {
			t.Fatalf("%T declined its own encoding %s", p, canon)
		}
		if !reflect.DeepEqual(fresh, p) {
			t.Fatalf("decoded %+v, want %+v", fresh, p)
		}
	}
}

// check decodes canon as T both ways; when T's own decoder takes it, the
// result must be encoding/json's.
func check[T any](t *testing.T, canon []byte) {
	t.Helper()
	var fast T
	if !any(&fast).(envelope.CanonicalDecoder).DecodeCanonical(canon) {
		return
	}
	var slow T
	dec := json.NewDecoder(bytes.NewReader(canon))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(&slow); err != nil {
		t.Fatalf("%T: own decoder took %s, encoding/json refuses it: %v", fast, canon, err)
	}
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("%T of %s:\nown decoder   %+v\nencoding/json %+v", fast, canon, fast, slow)
	}
}

func encode(t testing.TB, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}
