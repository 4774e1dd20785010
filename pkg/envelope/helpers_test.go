package envelope_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/usagebilling/billing/pkg/envelope"
)

// usageV1 is the first schema of the test event: no source.
type usageV1 struct {
	Quantity string `json:"quantity"`
	Unit     string `json:"unit"`
}

// usageV2 added the source system.
type usageV2 struct {
	Quantity string `json:"quantity"`
	Unit     string `json:"unit"`
	Source   string `json:"source"`
}

// Validate names the failing field, as payload types are meant to.
func (u usageV2) Validate() error {
	switch {
	case u.Quantity == "":
		return envelope.FieldError{Field: "quantity", Err: errors.New("required")}
	case strings.HasPrefix(u.Quantity, "-"):
		return &envelope.FieldError{Field: "quantity", Err: errors.New("negative")}
	case u.Unit == "bad":
		return errors.New("unit and source do not go together")
	}
	return nil
}

// price has a pointer-receiver Validate and a free-form attribute map.
type price struct {
	Amount string         `json:"amount"`
	Attrs  map[string]any `json:"attrs,omitempty"`
}

// Validate rejects an empty amount.
func (p *price) Validate() error {
	if p.Amount == "" {
		return envelope.FieldError{Field: "amount", Err: errors.New("required")}
	}
	return nil
}

const (
	usageType = "UsageAccepted"
	priceType = "PriceActivated"
)

// newRegistry knows UsageAccepted v1 (upcast) and v2, PriceActivated v1, a
// type with only an upcaster, and upcasters that fail.
func newRegistry() *envelope.Registry {
	r := envelope.NewRegistry()
	envelope.Register[usageV2](r, usageType, 2)
	r.Upcast(usageType, 1, addSource)
	envelope.Register[price](r, priceType, 1)
	r.Upcast("Orphan", 1, addSource)
	envelope.Register[usageV2](r, "Flaky", 2)
	r.Upcast("Flaky", 1, func(p json.RawMessage) (json.RawMessage, error) {
		switch {
		case bytes.Contains(p, []byte(`"fail-field"`)):
			return nil, envelope.FieldError{Field: "unit", Err: errors.New("cannot upcast")}
		case bytes.Contains(p, []byte(`"fail"`)):
			return nil, errors.New("cannot upcast")
		case bytes.Contains(p, []byte(`"array"`)):
			return json.RawMessage(`[1]`), nil
		}
		return addSource(p)
	})
	return r
}

// addSource upgrades usage v1 to v2.
func addSource(p json.RawMessage) (json.RawMessage, error) {
	var m map[string]any
	if err := json.Unmarshal(p, &m); err != nil {
		return nil, fmt.Errorf("upcast usage: %w", err)
	}
	m["source"] = "legacy"
	return json.Marshal(m)
}

func testMeta() envelope.Meta {
	return envelope.Meta{
		EventType:        usageType,
		SchemaVersion:    2,
		TenantID:         "acme-01",
		AggregateType:    "UsageFact",
		AggregateID:      "api:evt-42",
		AggregateVersion: 1,
		OccurredAt:       time.Date(2026, 11, 3, 10, 4, 5, 123456789, time.FixedZone("KST", 9*3600)),
		Producer:         "usage",
		CorrelationID:    "req-7",
		CausationID:      "0190f4f2-6a8e-7c3a-9d1e-2b3c4d5e6f70",
		Traceparent:      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	}
}

// newEnvelope builds a valid envelope for meta m.
func newEnvelope(t testing.TB, m envelope.Meta, payload any) envelope.Envelope {
	t.Helper()
	e, err := envelope.New(m, payload)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return e
}

// validRaw is a valid UsageAccepted v2 envelope.
func validRaw(t testing.TB) []byte {
	t.Helper()
	return marshal(t, newEnvelope(t, testMeta(), usageV2{Quantity: "12.5", Unit: "call", Source: "api"}))
}

func marshal(t testing.TB, e envelope.Envelope) []byte {
	t.Helper()
	raw, err := e.Marshal()
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	return raw
}

// encodingJSON is e as encoding/json writes it without HTML escaping,
// with an empty payload: what Marshal's own writer must reproduce byte for
// byte around the payload. (The payload itself Marshal writes as its
// canonical bytes; encoding/json's escapes inside it vary with the Go
// release, go1.27 writing U+2028 as \u2028, and are not the envelope's
// to choose.)
func encodingJSON(t testing.TB, e envelope.Envelope) []byte {
	t.Helper()
	e.Payload = json.RawMessage(`{}`)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(e); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// sameAsEncodingJSON fails t unless out, Marshal's output for e, is
// encodingJSON(e) with e's canonical payload in place of the empty one.
func sameAsEncodingJSON(t testing.TB, name string, e envelope.Envelope, out []byte) {
	t.Helper()
	canon, err := envelope.Canonical(e.Payload)
	if err != nil {
		t.Fatal(err)
	}
	want := bytes.Replace(encodingJSON(t, e), []byte(`"payload":{}`), append([]byte(`"payload":`), canon...), 1)
	if !bytes.Equal(out, want) {
		t.Fatalf("%s: Marshal wrote\n%s\nencoding/json writes (with the canonical payload)\n%s", name, out, want)
	}
}

// mutate decodes raw into a map, lets fn change it and encodes it again.
func mutate(t testing.TB, raw []byte, fn func(m map[string]any)) []byte {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("decode test envelope: %v", err)
	}
	fn(m)
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatalf("encode test envelope: %v", err)
	}
	return out
}

// setPayload replaces the payload and its digest.
func setPayload(t testing.TB, payload string) func(m map[string]any) {
	t.Helper()
	digest, err := envelope.Digest([]byte(payload))
	if err != nil {
		t.Fatalf("Digest(%s): %v", payload, err)
	}
	return func(m map[string]any) {
		m["payload"] = json.RawMessage(payload)
		m["payloadDigest"] = digest
	}
}

// diffEnvelope describes the first difference between two envelopes, "" if
// none.
func diffEnvelope(got, want envelope.Envelope) string {
	switch {
	case got.EventID != want.EventID:
		return fmt.Sprintf("EventID %s, want %s", got.EventID, want.EventID)
	case !got.OccurredAt.Equal(want.OccurredAt):
		return fmt.Sprintf("OccurredAt %v, want %v", got.OccurredAt, want.OccurredAt)
	case !got.RecordedAt.Equal(want.RecordedAt):
		return fmt.Sprintf("RecordedAt %v, want %v", got.RecordedAt, want.RecordedAt)
	case !bytes.Equal(got.Payload, want.Payload):
		return fmt.Sprintf("Payload %s, want %s", got.Payload, want.Payload)
	}
	got.OccurredAt, got.RecordedAt, got.Payload = want.OccurredAt, want.RecordedAt, want.Payload
	if fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", want) {
		return fmt.Sprintf("got %+v, want %+v", got, want)
	}
	return ""
}
