package envelope_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/usagebilling/billing/pkg/envelope"
)

// FuzzDecode checks that Decode never panics, that every failure carries a
// reason and gives the same reason again, and that every success marshals,
// byte for byte as encoding/json would around the canonical payload, and
// decodes again to the same envelope and payload.
func FuzzDecode(f *testing.F) {
	base := validRaw(f)
	v1 := testMeta()
	v1.SchemaVersion = 1
	price := testMeta()
	price.EventType, price.SchemaVersion = priceType, 1
	seeds := [][]byte{
		base,
		marshal(f, newEnvelope(f, v1, usageV1{Quantity: "1", Unit: "call"})),
		marshal(f, newEnvelope(f, price, json.RawMessage(`{"amount":"0.25","attrs":{"tier":[1,2.50,{"k":null}],"s":"<\u2028>"}}`))),
		mutate(f, base, func(m map[string]any) { delete(m, "traceparent"); delete(m, "correlationId") }),
		mutate(f, base, func(m map[string]any) { m["tenantId"] = "bad tenant" }),
		mutate(f, base, func(m map[string]any) { m["schemaVersion"] = 9 }),
		mutate(f, base, func(m map[string]any) { m["eventType"] = "Orphan" }),
		mutate(f, base, func(m map[string]any) { m["payloadDigest"] = strings.Repeat("0", 64) }),
		mutate(f, base, setPayload(f, `{"quantity":"","unit":"call","source":"api"}`)),
		mutate(f, base, setPayload(f, `{"quantity":5,"unit":"call","source":"api"}`)),
		append(bytes.Clone(base), "garbage"...),
		base[:len(base)/2],
		bytes.Replace(base, []byte(`"unit":"call"`), []byte(`"unit":"\ud83d\ude00\u0001"`), 1),
		[]byte(`{}`),
		[]byte(`[]`),
		[]byte(`{"eventId":null}`),
		[]byte(``),
	}
	for _, s := range seeds {
		f.Add(s)
	}
	r := newRegistry()
	f.Fuzz(func(t *testing.T, raw []byte) {
		d, err := r.Decode(raw)
		if err != nil {
			reason, ok := envelope.ReasonOf(err)
			if !ok || reason == "" {
				t.Fatalf("error without a reason: %v", err)
			}
			_, err2 := r.Decode(raw)
			if again, _ := envelope.ReasonOf(err2); again != reason {
				t.Fatalf("reason %q, then %q", reason, again)
			}
			return
		}
		out, err := d.Envelope.Marshal()
		if err != nil {
			t.Fatalf("Marshal of a decoded envelope: %v", err)
		}
		sameAsEncodingJSON(t, "a decoded envelope", d.Envelope, out)
		d2, err := r.Decode(out)
		if err != nil {
			t.Fatalf("Decode of a re-marshalled envelope: %v\n%s", err, out)
		}
		if diff := diffEnvelope(d2.Envelope, d.Envelope); diff != "" {
			t.Fatalf("re-decoded envelope differs: %s", diff)
		}
		if !reflect.DeepEqual(d2.Payload, d.Payload) || d2.PayloadVersion != d.PayloadVersion {
			t.Fatalf("re-decoded payload %#v v%d, want %#v v%d", d2.Payload, d2.PayloadVersion, d.Payload, d.PayloadVersion)
		}
	})
}

// FuzzCanonical checks that Canonical never panics, is idempotent, and
// accepts only what encoding/json also accepts.
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{`{}`, `{"b":[1,{"a":"\u00e9"}],"a":null}`, `{"a":1,"a":2}`, `{"s":"\ud800"}`, `[1]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := envelope.Canonical(in)
		if err != nil {
			return
		}
		if !json.Valid(in) {
			t.Fatalf("Canonical accepted invalid JSON %q", in)
		}
		again, err := envelope.Canonical(out)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("not idempotent: %q -> %q -> %q, %v", in, out, again, err)
		}
		var a, b any
		if json.Unmarshal(in, &a) != nil || json.Unmarshal(out, &b) != nil || !reflect.DeepEqual(a, b) {
			t.Fatalf("canonical form %q means something else than %q", out, in)
		}
	})
}

func BenchmarkDecode(b *testing.B) {
	raw := validRaw(b)
	r := newRegistry()
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Decode(raw); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeUpcast(b *testing.B) {
	m := testMeta()
	m.SchemaVersion = 1
	raw := marshal(b, newEnvelope(b, m, usageV1{Quantity: "1", Unit: "call"}))
	r := newRegistry()
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Decode(raw); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkNewMarshal(b *testing.B) {
	m := testMeta()
	payload := usageV2{Quantity: "12.5", Unit: "call", Source: "api"}
	b.ReportAllocs()
	for b.Loop() {
		e, err := envelope.New(m, payload)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := e.Marshal(); err != nil {
			b.Fatal(err)
		}
	}
}
