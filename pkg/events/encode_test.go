package events_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/pricing"
)

// TestAppendCanonicalIsEncodingJSONs: the per-fact payloads' own encoders
// write exactly Canonical of encoding/json's bytes, over 20,000 payloads
// drawn at random (a fixed seed) with every optional member present and
// absent and strings the two encoders escape differently; and they decline
// exactly what they must leave to encoding/json (a pricing, a string that
// is not valid UTF-8 or holds NUL).
func TestAppendCanonicalIsEncodingJSONs(t *testing.T) {
	t.Parallel()
	g := payloads{rand.New(rand.NewPCG(18, 2026))}
	const n = 20000
	written := 0
	for i := range n {
		var p envelope.CanonicalEncoder
		var plain bool
		if i%2 == 0 {
			p, plain = g.usage()
		} else {
			p, plain = g.charge()
		}
		got, ok := p.AppendCanonical([]byte("prefix"))
		if ok != plain {
			t.Fatalf("%+v: AppendCanonical said %v, want %v", p, ok, plain)
		}
		if !ok {
			continue
		}
		written++
		body, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		want, err := envelope.Canonical(body)
		if err != nil {
			t.Fatalf("%+v: encoding/json's bytes are not canonicalised: %v", p, err)
		}
		if !bytes.Equal(got, append([]byte("prefix"), want...)) {
			t.Fatalf("%T wrote\n%s\nCanonical of encoding/json's is\n%s", p, got, want)
		}
	}
	if written < n/2 {
		t.Fatalf("only %d of %d payloads written by their own encoder", written, n)
	}
}

// payloads draws per-fact payloads; plain is false when the payload holds
// something its own encoder must leave to encoding/json.
type payloads struct{ r *rand.Rand }

// texts the two encoders write alike once canonicalised, though
// encoding/json escapes some (<, >, &, U+2028) and the canonical form
// others; bad are texts encoding/json alters or New refuses.
var (
	texts = []string{"", "a", "api_calls", `say "hi"`, `back\slash`, "tab\tnew\nline", "\x01\x1f", "<b>&amp;</b>",
		"\u2028\u2029", "é", "😀", "KRW", "2026-12", "\x7f"}
	bad = []string{"\xff", "nul\x00", "half \xe2\x82"}
)

func (g payloads) text(plain *bool) string {
	if g.r.IntN(60) == 0 {
		*plain = false
		return bad[g.r.IntN(len(bad))]
	}
	return texts[g.r.IntN(len(texts))]
}

func (g payloads) optional(plain *bool) string {
	if g.r.IntN(2) == 0 {
		return ""
	}
	return g.text(plain)
}

func (g payloads) decimal() decimal.Decimal {
	return decimal.New(g.r.Int64N(2_000_000_000)-1_000_000_000, int32(g.r.IntN(16)-12))
}

func (g payloads) time() time.Time {
	at := time.Unix(g.r.Int64N(4_000_000_000), g.r.Int64N(1_000_000_000))
	switch g.r.IntN(3) {
	case 0:
		return at.UTC()
	case 1:
		return at.In(time.FixedZone("", 9*3600))
	default:
		return at.Truncate(time.Second).In(time.FixedZone("", -(3*3600 + 30*60)))
	}
}

func (g payloads) id() uuid.UUID {
	var u uuid.UUID
	for i := range u {
		u[i] = byte(g.r.Uint32())
	}
	return u
}

func (g payloads) strings(plain *bool) map[string]string {
	switch g.r.IntN(4) {
	case 0:
		return nil
	case 1:
		return map[string]string{}
	}
	m := map[string]string{}
	for i := range g.r.IntN(20) + 1 {
		m[fmt.Sprintf("%s%d", g.text(plain), i)] = g.text(plain)
	}
	return m
}

func (g payloads) usage() (events.UsageAccepted, bool) {
	plain := true
	p := events.UsageAccepted{
		Currency: g.text(&plain), MeterCode: g.text(&plain), OccurredAt: g.time(),
		Properties: g.strings(&plain), Quantity: g.decimal(), SourceEventID: g.text(&plain),
		SourceSystem: g.text(&plain), UsageID: g.id(),
	}
	if g.r.IntN(2) == 0 {
		p.PriceVersion = g.r.Int64N(1000) - 10
	}
	return p, plain
}

func (g payloads) charge() (events.ChargeRated, bool) {
	plain := true
	p := events.ChargeRated{
		Aggregation: g.optional(&plain), Amount: g.decimal(), ChargeID: g.id(), Currency: g.text(&plain),
		Dimensions: g.strings(&plain), Late: g.r.IntN(2) == 0, MeterCode: g.text(&plain), Model: g.optional(&plain),
		OccurredAt: g.time(), Period: g.text(&plain), PlanCode: g.optional(&plain), PriceVersion: g.r.Int64N(100),
		Properties: g.strings(&plain), Quantity: g.decimal(), SourceEventID: g.optional(&plain),
		SourceSystem: g.optional(&plain), UnitPrice: g.decimal(), Unpriced: g.r.IntN(2) == 0,
		UsageEventID: g.id(), UsageID: g.id(), Value: g.optional(&plain),
	}
	if g.r.IntN(20) == 0 {
		pr := pricing.UnitPricing(decimal.New(1, -3))
		p.Pricing = &pr
		plain = false
	}
	return p, plain
}

// perFactPayloads are the two events every fact makes, as usage and
// billing build them (properties and dimensions included).
func perFactPayloads() []struct {
	name string
	p    events.Payload
} {
	at := time.Date(2026, 12, 6, 10, 0, 0, 123456000, time.UTC)
	id := uuid.Must(uuid.NewV7())
	props := map[string]string{"region": "eu-west-1", "tier": "gold"}
	return []struct {
		name string
		p    events.Payload
	}{
		{"usage", events.UsageAccepted{UsageID: id, SourceSystem: "load", SourceEventID: "run-1-123", MeterCode: "api_calls",
			Quantity: decimal.RequireFromString("12.25"), OccurredAt: at, Currency: "USD", PriceVersion: 2, Properties: props}},
		{"charge", events.ChargeRated{ChargeID: id, UsageEventID: id, UsageID: id, MeterCode: "api_calls", Currency: "USD",
			Quantity: decimal.RequireFromString("12.25"), UnitPrice: decimal.RequireFromString("0.001"),
			Amount: decimal.RequireFromString("0.01225"), Period: "2026-12", OccurredAt: at, PriceVersion: 2,
			Properties: props, Dimensions: map[string]string{"region": "eu-west-1"}, SourceSystem: "load", SourceEventID: "run-1-123"}},
	}
}

func perFactMeta() events.Meta {
	return events.Meta{Producer: "bench", TenantID: "t1", AggregateID: uuid.Must(uuid.NewV7()).String(),
		OccurredAt: time.Date(2026, 12, 6, 10, 0, 0, 123456000, time.UTC)}
}

// BenchmarkNewPerFact measures events.New for the two events every fact
// makes; -benchmem shows the allocations.
func BenchmarkNewPerFact(b *testing.B) {
	for _, c := range perFactPayloads() {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			m := perFactMeta()
			for b.Loop() {
				if _, err := events.New(c.p, m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodePerFact measures what every consumer does with each of
// the two events every fact makes: Registry.Decode of the record's value
// (the envelope's checks, its digest, the payload decoded and validated).
// The usage event carries its request's correlation id, and the charge is
// caused by it, as in the running system.
func BenchmarkDecodePerFact(b *testing.B) {
	r := envelope.NewRegistry()
	events.Register(r)
	ps := perFactPayloads()
	m := perFactMeta()
	m.CorrelationID = uuid.Must(uuid.NewV7()).String()
	usage, err := events.New(ps[0].p, m)
	if err != nil {
		b.Fatal(err)
	}
	m.CorrelationID = ""
	charge, err := events.Caused(&usage, ps[1].p, m)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		e    envelope.Envelope
	}{{ps[0].name, usage}, {ps[1].name, charge}} {
		b.Run(c.name, func(b *testing.B) {
			raw, err := c.e.Marshal()
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.Decode(raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
