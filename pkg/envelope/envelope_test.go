package envelope_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/usagebilling/billing/pkg/envelope"
)

func TestRoundTrip(t *testing.T) {
	m := testMeta()
	want := usageV2{Quantity: "12.5", Unit: "call <&> \u2028", Source: "api"}
	e := newEnvelope(t, m, want)

	if e.EventID.Version() != 7 {
		t.Errorf("EventID version = %d, want 7", e.EventID.Version())
	}
	if got := e.PartitionKey; got != "acme-01|UsageFact|api:evt-42" {
		t.Errorf("PartitionKey = %q", got)
	}
	if !e.OccurredAt.Equal(m.OccurredAt.Truncate(time.Microsecond)) || e.OccurredAt.Location() != time.UTC {
		t.Errorf("OccurredAt = %v, want %v in UTC", e.OccurredAt, m.OccurredAt.Truncate(time.Microsecond))
	}
	if e.RecordedAt.Nanosecond()%1000 != 0 || e.RecordedAt.Location() != time.UTC {
		t.Errorf("RecordedAt = %v, want UTC truncated to microseconds", e.RecordedAt)
	}
	if d, err := envelope.Digest(e.Payload); err != nil || d != e.PayloadDigest {
		t.Errorf("Digest(Payload) = %q, %v; want %q", d, err, e.PayloadDigest)
	}

	raw := marshal(t, e)
	// HTML characters are not escaped; U+2028 may be (encoding/json escapes
	// it inside a RawMessage from Go 1.27 on): either way the payload decodes
	// to the same canonical bytes, which the digest is over.
	if !bytes.Contains(raw, []byte(`"unit":"call <&> `+"\u2028"+`"`)) && !bytes.Contains(raw, []byte(`"unit":"call <&> \u2028"`)) {
		t.Errorf("Marshal escaped the payload: %s", raw)
	}
	d, err := newRegistry().Decode(raw)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if diff := diffEnvelope(d.Envelope, e); diff != "" {
		t.Errorf("Decode(Marshal(e)).Envelope: %s", diff)
	}
	if d.Payload != any(want) {
		t.Errorf("Payload = %#v, want %#v", d.Payload, want)
	}
	if d.PayloadVersion != 2 {
		t.Errorf("PayloadVersion = %d, want 2", d.PayloadVersion)
	}
	if again := marshal(t, d.Envelope); !bytes.Equal(again, raw) {
		t.Errorf("re-marshalled envelope differs:\n got %s\nwant %s", again, raw)
	}
}

func TestDecodeUpcastsV1ToV2(t *testing.T) {
	m := testMeta()
	m.SchemaVersion = 1
	e := newEnvelope(t, m, usageV1{Quantity: "3", Unit: "call"})

	d, err := newRegistry().Decode(marshal(t, e))
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if want := (usageV2{Quantity: "3", Unit: "call", Source: "legacy"}); d.Payload != any(want) {
		t.Errorf("Payload = %#v, want %#v", d.Payload, want)
	}
	if d.PayloadVersion != 2 || d.Envelope.SchemaVersion != 1 {
		t.Errorf("PayloadVersion, SchemaVersion = %d, %d; want 2, 1", d.PayloadVersion, d.Envelope.SchemaVersion)
	}
	if !bytes.Equal(d.Envelope.Payload, e.Payload) {
		t.Errorf("Envelope.Payload = %s, want the v1 payload as sent %s", d.Envelope.Payload, e.Payload)
	}
}

func TestDecodeKeepsNumbersExact(t *testing.T) {
	m := testMeta()
	m.EventType, m.SchemaVersion = priceType, 1
	raw := marshal(t, newEnvelope(t, m, json.RawMessage(`{"amount":"0.1","attrs":{"n":12345678901234567890.5}}`)))

	d, err := newRegistry().Decode(raw)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	got := d.Payload.(price).Attrs["n"]
	if got != json.Number("12345678901234567890.5") {
		t.Errorf("attrs.n = %#v, want the json.Number as sent", got)
	}
}

func TestDigestStableUnderReorderingAndWhitespace(t *testing.T) {
	variants := []string{
		`{"quantity":"12.5","unit":"call","source":"api"}`,
		`{"source":"api","quantity":"12.5","unit":"call"}`,
		" {\n\t\"unit\" : \"call\" ,\r\n \"source\":\"api\", \"quantity\" :\"12.5\"}\n",
		`{"unit":"\u0063all","source":"a\/pi","quantity":"12.5"}`,
	}
	variants[3] = strings.Replace(variants[3], `a\/pi`, `api`, 1)
	base := validRaw(t)
	r := newRegistry()
	var first string
	for _, v := range variants {
		d, err := envelope.Digest([]byte(v))
		if err != nil {
			t.Fatalf("Digest(%s): %v", v, err)
		}
		if first == "" {
			first = d
		}
		if d != first {
			t.Errorf("Digest(%s) = %s, want %s", v, d, first)
		}
		// The same digest is accepted whatever form the payload travels in.
		raw := bytes.Replace(base, []byte(`{"quantity":"12.5","source":"api","unit":"call"}`), []byte(v), 1)
		dec, err := r.Decode(raw)
		if err != nil {
			t.Fatalf("Decode with payload %q: %v", v, err)
		}
		if got := string(dec.Envelope.Payload); got != `{"quantity":"12.5","source":"api","unit":"call"}` {
			t.Errorf("Envelope.Payload = %s, want the canonical form", got)
		}
	}
}

func TestDecodeReasons(t *testing.T) {
	base := validRaw(t)
	set := func(field string, value any) []byte {
		return mutate(t, base, func(m map[string]any) { m[field] = value })
	}
	v4 := uuid.New().String()
	badPayload := func(payload string) []byte { return mutate(t, base, setPayload(t, payload)) }
	usageV1Raw := func(payload string) []byte {
		m := testMeta()
		m.SchemaVersion = 1
		return marshal(t, newEnvelope(t, m, json.RawMessage(payload)))
	}
	flaky := func(payload string) []byte {
		m := testMeta()
		m.EventType, m.SchemaVersion = "Flaky", 1
		return marshal(t, newEnvelope(t, m, json.RawMessage(payload)))
	}
	deep := strings.Repeat(`{"a":`, envelope.MaxPayloadDepth) + "1" + strings.Repeat("}", envelope.MaxPayloadDepth)

	type testCase struct {
		name string
		raw  []byte
		want string
	}
	tests := []testCase{
		// Size and syntax.
		{"too large", append(bytes.Clone(base), bytes.Repeat([]byte(" "), envelope.MaxBytes)...), envelope.ReasonTooLarge},
		{"too large garbage", bytes.Repeat([]byte("x"), envelope.MaxBytes+1), envelope.ReasonTooLarge},
		{"empty", nil, envelope.ReasonMalformed},
		{"null", []byte("null"), envelope.ReasonMalformed},
		{"array", []byte("[]"), envelope.ReasonMalformed},
		{"string", []byte(`"x"`), envelope.ReasonMalformed},
		{"truncated", base[:len(base)-1], envelope.ReasonMalformed},
		{"trailing garbage", append(bytes.Clone(base), " x"...), envelope.ReasonMalformed},
		{"trailing object", append(bytes.Clone(base), "{}"...), envelope.ReasonMalformed},
		{"byte order mark", append([]byte("\xef\xbb\xbf"), base...), envelope.ReasonMalformed},
		{"invalid utf-8", bytes.Replace(base, []byte("usage"), []byte("us\xffge"), 1), envelope.ReasonMalformed},
		{"unknown field", set("extra", 1), envelope.ReasonMalformed},
		{"duplicate field", bytes.Replace(base, []byte(`{"eventId"`), []byte(`{"producer":"x","eventId"`), 1), envelope.ReasonMalformed},
		{"duplicate payload key", bytes.Replace(base, []byte(`"unit":"call"`), []byte(`"unit":"call","unit":"call"`), 1), envelope.ReasonMalformed},
		{"payload too deep", bytes.Replace(base, []byte(`"unit":"call"`), []byte(`"unit":`+deep), 1), envelope.ReasonMalformed},
		{"lone surrogate", bytes.Replace(base, []byte(`"unit":"call"`), []byte(`"unit":"\ud800"`), 1), envelope.ReasonMalformed},
		{"nul in string", bytes.Replace(base, []byte(`"unit":"call"`), []byte(`"unit":"\u0000"`), 1), envelope.ReasonMalformed},
		{"leading zero", bytes.Replace(base, []byte(`"aggregateVersion":1`), []byte(`"aggregateVersion":01`), 1), envelope.ReasonMalformed},

		// Field rules.
		{"eventId not a uuid", set("eventId", "nope"), envelope.InvalidField("eventId")},
		{"eventId v4", set("eventId", v4), envelope.InvalidField("eventId")},
		{"eventId uppercase", set("eventId", strings.ToUpper(newEnvelope(t, testMeta(), usageV2{}).EventID.String())), envelope.InvalidField("eventId")},
		{"eventId braces", set("eventId", "{"+newEnvelope(t, testMeta(), usageV2{}).EventID.String()+"}"), envelope.InvalidField("eventId")},
		{"eventId nil", set("eventId", uuid.Nil.String()), envelope.InvalidField("eventId")},
		{"eventId number", set("eventId", 7), envelope.InvalidField("eventId")},
		{"eventType space", set("eventType", "Usage Accepted"), envelope.InvalidField("eventType")},
		{"eventType long", set("eventType", strings.Repeat("x", envelope.MaxIDLength+1)), envelope.InvalidField("eventType")},
		{"schemaVersion zero", set("schemaVersion", 0), envelope.InvalidField("schemaVersion")},
		{"schemaVersion negative", set("schemaVersion", -2), envelope.InvalidField("schemaVersion")},
		{"schemaVersion fraction", set("schemaVersion", json.Number("2.0")), envelope.InvalidField("schemaVersion")},
		{"schemaVersion exponent", set("schemaVersion", json.Number("2e0")), envelope.InvalidField("schemaVersion")},
		{"schemaVersion string", set("schemaVersion", "2"), envelope.InvalidField("schemaVersion")},
		{"schemaVersion huge", set("schemaVersion", json.Number("2147483648")), envelope.InvalidField("schemaVersion")},
		{"tenantId space", set("tenantId", "acme corp"), envelope.InvalidField("tenantId")},
		{"tenantId pipe", set("tenantId", "a|b"), envelope.InvalidField("tenantId")},
		{"tenantId non-ascii", set("tenantId", "ténant"), envelope.InvalidField("tenantId")},
		{"tenantId long", set("tenantId", strings.Repeat("t", envelope.MaxIDLength+1)), envelope.InvalidField("tenantId")},
		{"tenantId object", set("tenantId", map[string]any{}), envelope.InvalidField("tenantId")},
		{"aggregateType pipe", set("aggregateType", "Usage|Fact"), envelope.InvalidField("aggregateType")},
		{"aggregateId pipe", set("aggregateId", "api|evt"), envelope.InvalidField("aggregateId")},
		{"aggregateId space", set("aggregateId", "api evt"), envelope.InvalidField("aggregateId")},
		{"aggregateVersion zero", set("aggregateVersion", 0), envelope.InvalidField("aggregateVersion")},
		{"aggregateVersion fraction", set("aggregateVersion", json.Number("1.0")), envelope.InvalidField("aggregateVersion")},
		{"aggregateVersion overflow", set("aggregateVersion", json.Number("9223372036854775808")), envelope.InvalidField("aggregateVersion")},
		{"wrong partition key", set("partitionKey", "acme-01|UsageFact|other"), envelope.InvalidField("partitionKey")},
		// Each part of the key checked, at the same length as the right key.
		{"partition key's tenant", set("partitionKey", "acme-02|UsageFact|api:evt-42"), envelope.InvalidField("partitionKey")},
		{"partition key's type", set("partitionKey", "acme-01|UsageFacT|api:evt-42"), envelope.InvalidField("partitionKey")},
		{"partition key's id", set("partitionKey", "acme-01|UsageFact|api:evt-43"), envelope.InvalidField("partitionKey")},
		{"partition key's separator", set("partitionKey", "acme-01:UsageFact|api:evt-42"), envelope.InvalidField("partitionKey")},
		{"partition key longer", set("partitionKey", "acme-01|UsageFact|api:evt-42|"), envelope.InvalidField("partitionKey")},
		// The edges of the character classes.
		{"tenantId dot", set("tenantId", "acme.01"), envelope.InvalidField("tenantId")},
		{"eventType pipe", set("eventType", "Usage|Accepted"), envelope.InvalidField("eventType")},
		{"aggregateType tilde", set("aggregateType", "Usage~Fact"), envelope.InvalidField("aggregateType")},
		{"aggregateId DEL", set("aggregateId", "api\x7fevt"), envelope.InvalidField("aggregateId")},
		{"producer non-ascii", set("producer", "usagé"), envelope.InvalidField("producer")},
		{"payload array", set("payload", []any{}), envelope.InvalidField("payload")},
		{"payload string", set("payload", "{}"), envelope.InvalidField("payload")},
		{"payloadDigest uppercase", set("payloadDigest", strings.Repeat("A", 64)), envelope.InvalidField("payloadDigest")},
		{"payloadDigest short", set("payloadDigest", strings.Repeat("a", 63)), envelope.InvalidField("payloadDigest")},
		{"occurredAt not a time", set("occurredAt", "yesterday"), envelope.InvalidField("occurredAt")},
		{"occurredAt date only", set("occurredAt", "2026-11-03"), envelope.InvalidField("occurredAt")},
		{"occurredAt zero time", set("occurredAt", "0001-01-01T00:00:00Z"), envelope.InvalidField("occurredAt")},
		{"occurredAt before year 1 in UTC", set("occurredAt", "0001-01-01T00:30:00+01:00"), envelope.InvalidField("occurredAt")},
		{"recordedAt number", set("recordedAt", 1), envelope.InvalidField("recordedAt")},
		{"producer space", set("producer", "usage svc"), envelope.InvalidField("producer")},
		{"correlationId number", set("correlationId", 5), envelope.InvalidField("correlationId")},
		{"causationId control", set("causationId", "a\tb"), envelope.InvalidField("causationId")},
		{"traceparent short", set("traceparent", "00-abc-01"), envelope.InvalidField("traceparent")},
		{"traceparent uppercase", set("traceparent", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"), envelope.InvalidField("traceparent")},
		{"traceparent zero trace", set("traceparent", "00-00000000000000000000000000000000-00f067aa0ba902b7-01"), envelope.InvalidField("traceparent")},
		{"traceparent version ff", set("traceparent", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), envelope.InvalidField("traceparent")},

		// Digest.
		{"digest mismatch", set("payloadDigest", strings.Repeat("0", 64)), envelope.ReasonDigestMismatch},
		{"payload changed", mutate(t, base, func(m map[string]any) {
			m["payload"] = json.RawMessage(`{"quantity":"99","unit":"call","source":"api"}`)
		}), envelope.ReasonDigestMismatch},

		// Registry.
		{"unknown type", set("eventType", "Nope"), envelope.ReasonUnknownEventType},
		{"unsupported version", set("schemaVersion", 3), envelope.ReasonUnsupportedSchema},
		{"only an upcaster", set("eventType", "Orphan"), envelope.ReasonUnsupportedSchema},
		{"upcaster-only version", mutate(t, base, func(m map[string]any) {
			m["eventType"], m["schemaVersion"] = "Orphan", 1
		}), envelope.ReasonUnsupportedSchema},
		{"version below any", mutate(t, base, func(m map[string]any) {
			m["eventType"], m["schemaVersion"] = priceType, 2
		}), envelope.ReasonUnsupportedSchema},

		// Payload decoding.
		{"payload unknown field", badPayload(`{"quantity":"1","unit":"call","source":"api","extra":1}`), envelope.InvalidField("payload")},
		{"payload wrong type", badPayload(`{"quantity":1,"unit":"call","source":"api"}`), envelope.InvalidField("payload.quantity")},
		{"payload Validate field", badPayload(`{"quantity":"","unit":"call","source":"api"}`), envelope.InvalidField("payload.quantity")},
		{"payload Validate pointer field", badPayload(`{"quantity":"-1","unit":"call","source":"api"}`), envelope.InvalidField("payload.quantity")},
		{"payload Validate plain", badPayload(`{"quantity":"1","unit":"bad","source":"api"}`), envelope.InvalidField("payload")},
		{"payload empty", badPayload(`{}`), envelope.InvalidField("payload.quantity")},
		{"upcast v1 then Validate", usageV1Raw(`{"quantity":"","unit":"call"}`), envelope.InvalidField("payload.quantity")},
		{"upcaster error", flaky(`{"quantity":"1","unit":"fail"}`), envelope.InvalidField("payload")},
		{"upcaster field error", flaky(`{"quantity":"1","unit":"fail-field"}`), envelope.InvalidField("payload.unit")},
		{"upcaster returns array", flaky(`{"quantity":"1","unit":"array"}`), envelope.InvalidField("payload")},
	}
	var required = []string{
		"eventId", "eventType", "schemaVersion", "tenantId", "aggregateType", "aggregateId",
		"aggregateVersion", "partitionKey", "payload", "payloadDigest", "occurredAt", "recordedAt", "producer",
	}
	for _, name := range required {
		tests = append(tests,
			testCase{"absent " + name, mutate(t, base, func(m map[string]any) { delete(m, name) }), envelope.MissingField(name)},
			testCase{"null " + name, set(name, nil), envelope.MissingField(name)},
		)
		if name != "schemaVersion" && name != "aggregateVersion" && name != "payload" {
			tests = append(tests, testCase{"empty " + name, set(name, ""), envelope.MissingField(name)})
		}
	}

	r := newRegistry()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := r.Decode(tt.raw)
			if err == nil {
				t.Fatalf("Decode succeeded with %+v, want %s", d.Envelope, tt.want)
			}
			got, ok := envelope.ReasonOf(err)
			if !ok {
				t.Fatalf("error %v carries no reason", err)
			}
			if got != tt.want {
				t.Errorf("reason = %q, want %q (%v)", got, tt.want, err)
			}
			if !strings.HasPrefix(err.Error(), "decode envelope: "+tt.want) {
				t.Errorf("error %q does not start with the reason", err)
			}
			if _, err2 := r.Decode(tt.raw); err2 == nil || err2.Error() != err.Error() {
				t.Errorf("second Decode gave %v, want the same error", err2)
			}
		})
	}
}

func TestDecodeAcceptsOptionalFieldsAbsentOrNull(t *testing.T) {
	base := validRaw(t)
	r := newRegistry()
	for _, name := range []string{"correlationId", "causationId", "traceparent"} {
		for _, raw := range [][]byte{
			mutate(t, base, func(m map[string]any) { delete(m, name) }),
			mutate(t, base, func(m map[string]any) { m[name] = nil }),
			mutate(t, base, func(m map[string]any) { m[name] = "" }),
		} {
			if _, err := r.Decode(raw); err != nil {
				t.Errorf("Decode without %s: %v", name, err)
			}
		}
	}
}

func TestDecodeNilAndZeroRegistry(t *testing.T) {
	raw := validRaw(t)
	var nilRegistry *envelope.Registry
	for name, r := range map[string]*envelope.Registry{"nil": nilRegistry, "zero": {}} {
		_, err := r.Decode(raw)
		if got, _ := envelope.ReasonOf(err); got != envelope.ReasonUnknownEventType {
			t.Errorf("%s registry: reason = %q, want %q", name, got, envelope.ReasonUnknownEventType)
		}
		if r.Known(usageType, 2) {
			t.Errorf("%s registry knows %s", name, usageType)
		}
	}
}

func TestKnown(t *testing.T) {
	r := newRegistry()
	tests := []struct {
		eventType string
		version   int
		want      bool
	}{
		{usageType, 1, true},
		{usageType, 2, true},
		{usageType, 3, false},
		{usageType, 0, false},
		{priceType, 1, true},
		{"Orphan", 1, false},
		{"Nope", 1, false},
	}
	for _, tt := range tests {
		if got := r.Known(tt.eventType, tt.version); got != tt.want {
			t.Errorf("Known(%s, %d) = %v, want %v", tt.eventType, tt.version, got, tt.want)
		}
	}
}

func TestRegisterPanicsOnMisconfiguration(t *testing.T) {
	tests := map[string]func(r *envelope.Registry){
		"duplicate decoder":  func(r *envelope.Registry) { envelope.Register[usageV2](r, usageType, 2) },
		"duplicate upcaster": func(r *envelope.Registry) { r.Upcast(usageType, 1, addSource) },
		"version zero":       func(r *envelope.Registry) { envelope.Register[usageV2](r, "New", 0) },
		"bad event type":     func(r *envelope.Registry) { envelope.Register[usageV2](r, "a b", 1) },
		"nil upcaster":       func(r *envelope.Registry) { r.Upcast("New", 1, nil) },
	}
	for name, fn := range tests {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			fn(newRegistry())
		})
	}
}

func TestNewRejectsBadMeta(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(m *envelope.Meta)
		payload any
		want    string
	}{
		{"no event type", func(m *envelope.Meta) { m.EventType = "" }, nil, envelope.MissingField("eventType")},
		{"no schema version", func(m *envelope.Meta) { m.SchemaVersion = 0 }, nil, envelope.MissingField("schemaVersion")},
		{"negative schema version", func(m *envelope.Meta) { m.SchemaVersion = -1 }, nil, envelope.InvalidField("schemaVersion")},
		{"bad tenant", func(m *envelope.Meta) { m.TenantID = "acme/eu" }, nil, envelope.InvalidField("tenantId")},
		{"pipe in aggregate id", func(m *envelope.Meta) { m.AggregateID = "a|b" }, nil, envelope.InvalidField("aggregateId")},
		{"no aggregate version", func(m *envelope.Meta) { m.AggregateVersion = 0 }, nil, envelope.MissingField("aggregateVersion")},
		{"no occurredAt", func(m *envelope.Meta) { m.OccurredAt = time.Time{} }, nil, envelope.MissingField("occurredAt")},
		{"no producer", func(m *envelope.Meta) { m.Producer = "" }, nil, envelope.MissingField("producer")},
		{"bad traceparent", func(m *envelope.Meta) { m.Traceparent = "garbage" }, nil, envelope.InvalidField("traceparent")},
		{"payload not an object", func(*envelope.Meta) {}, []int{1}, envelope.InvalidField("payload")},
		{"payload nil", func(*envelope.Meta) {}, struct{}{}, ""},
		{"payload unmarshalable", func(*envelope.Meta) {}, map[string]any{"c": make(chan int)}, envelope.InvalidField("payload")},
		{"payload invalid raw", func(*envelope.Meta) {}, json.RawMessage(`{"a":}`), envelope.InvalidField("payload")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := testMeta()
			tt.edit(&m)
			payload := tt.payload
			if payload == nil {
				payload = usageV2{Quantity: "1"}
			}
			_, err := envelope.New(m, payload)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				return
			}
			if got, _ := envelope.ReasonOf(err); got != tt.want {
				t.Errorf("reason = %q, want %q (%v)", got, tt.want, err)
			}
			if err != nil && !strings.HasPrefix(err.Error(), "new envelope: ") {
				t.Errorf("error %q does not start with \"new envelope: \"", err)
			}
		})
	}
}

func TestMarshalRejectsTamperedEnvelope(t *testing.T) {
	tests := []struct {
		name string
		edit func(e *envelope.Envelope)
		want string
	}{
		{"payload changed", func(e *envelope.Envelope) { e.Payload = json.RawMessage(`{"quantity":"2"}`) }, envelope.ReasonDigestMismatch},
		{"tenant changed", func(e *envelope.Envelope) { e.TenantID = "other" }, envelope.InvalidField("partitionKey")},
		{"v4 event id", func(e *envelope.Envelope) { e.EventID = uuid.New() }, envelope.InvalidField("eventId")},
		{"zero event id", func(e *envelope.Envelope) { e.EventID = uuid.Nil }, envelope.MissingField("eventId")},
		{"payload not an object", func(e *envelope.Envelope) { e.Payload = json.RawMessage(`[]`) }, envelope.InvalidField("payload")},
		{"no payload", func(e *envelope.Envelope) { e.Payload = nil }, envelope.MissingField("payload")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnvelope(t, testMeta(), usageV2{Quantity: "1"})
			tt.edit(&e)
			_, err := e.Marshal()
			if got, _ := envelope.ReasonOf(err); got != tt.want {
				t.Errorf("reason = %q, want %q (%v)", got, tt.want, err)
			}
			if err != nil && !strings.HasPrefix(err.Error(), "marshal envelope: ") {
				t.Errorf("error %q does not start with \"marshal envelope: \"", err)
			}
		})
	}
}

func TestMarshalCanonicalisesPayloadAndTimes(t *testing.T) {
	e := newEnvelope(t, testMeta(), usageV2{Quantity: "1"})
	e.Payload = json.RawMessage(" {\"unit\":\"\", \"source\":\"\",\n\"quantity\":\"1\"} ")
	e.OccurredAt = e.OccurredAt.In(time.FixedZone("X", -3600))
	raw := marshal(t, e)
	d, err := newRegistry().Decode(raw)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if got := string(d.Envelope.Payload); got != `{"quantity":"1","source":"","unit":""}` {
		t.Errorf("Payload = %s", got)
	}
	if !bytes.Contains(raw, []byte(`"occurredAt":"2026-11-03T01:04:05.123456Z"`)) {
		t.Errorf("occurredAt not in UTC: %s", raw)
	}
}

// TestAppendJSONIsEncodingJSON: Marshal writes an envelope itself, without
// encoding/json's reflection; what it writes must be byte for byte what
// encoding/json writes (without HTML escaping) around the payload, which is
// its canonical bytes, for every field's escapes, the optional fields absent
// and present, and times of any precision. FuzzDecode checks the same for
// every envelope Decode accepts.
func TestAppendJSONIsEncodingJSON(t *testing.T) {
	full := testMeta()
	bare := testMeta()
	bare.CorrelationID, bare.CausationID, bare.Traceparent = "", "", ""
	escapes := testMeta()
	escapes.AggregateID = `a"b\c<d>&e'f`
	escapes.Producer = `p"\<>&`
	escapes.CorrelationID = `c\"`
	escapes.CausationID = `~!@#$%^&*()"`
	whole := testMeta()
	whole.OccurredAt = time.Date(1, 1, 1, 0, 0, 1, 0, time.UTC)
	late := testMeta()
	late.OccurredAt = time.Date(9999, 12, 31, 10, 59, 59, 100000, time.FixedZone("W", -5*3600))
	for name, m := range map[string]envelope.Meta{"full": full, "bare": bare, "escapes": escapes, "whole seconds": whole, "late": late} {
		for _, payload := range []any{
			usageV2{Quantity: "12.5", Unit: "call", Source: "api"},
			json.RawMessage(`{"amount":"0.25","attrs":{"tier":[1,2.50,{"k":null}],"s":"<\u2028>\u0001\"\\é"}}`),
		} {
			e := newEnvelope(t, m, payload)
			sameAsEncodingJSON(t, name, e, marshal(t, e))
			e.Payload = bytes.Clone(e.Payload) // no longer the sealed bytes: canonicalised again
			sameAsEncodingJSON(t, name+", unsealed", e, marshal(t, e))
		}
	}
}

func TestDecodeErrorAndFieldError(t *testing.T) {
	detail := errors.New("boom")
	err := error(&envelope.DecodeError{Reason: envelope.ReasonMalformed, Err: detail})
	if got := err.Error(); got != "decode envelope: malformed: boom" {
		t.Errorf("Error() = %q", got)
	}
	if !errors.Is(err, detail) {
		t.Error("DecodeError does not unwrap to its detail")
	}
	if got := (&envelope.DecodeError{Reason: envelope.ReasonTooLarge}).Error(); got != "decode envelope: too_large" {
		t.Errorf("Error() without detail = %q", got)
	}
	if _, ok := envelope.ReasonOf(errors.New("x")); ok {
		t.Error("ReasonOf found a reason in a plain error")
	}
	wrapped := errors.Join(errors.New("consume"), err)
	if got, ok := envelope.ReasonOf(wrapped); !ok || got != envelope.ReasonMalformed {
		t.Errorf("ReasonOf(wrapped) = %q, %v", got, ok)
	}
	fe := envelope.FieldError{Field: "quantity", Err: detail}
	if fe.Error() != "quantity: boom" || !errors.Is(fe, detail) {
		t.Errorf("FieldError = %q, unwrap %v", fe.Error(), errors.Is(fe, detail))
	}
}

func TestPartitionKey(t *testing.T) {
	if got := envelope.PartitionKey("t", "Invoice", "inv-1"); got != "t|Invoice|inv-1" {
		t.Errorf("PartitionKey = %q", got)
	}
}

func TestValidTraceparent(t *testing.T) {
	tests := map[string]bool{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":     true,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00":     true,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01":     false,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-ext": false,
		"00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01":     false,
		"0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":     false,
		"": false,
	}
	for in, want := range tests {
		if got := envelope.ValidTraceparent(in); got != want {
			t.Errorf("ValidTraceparent(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestDecodedPayloadIsValueOfT(t *testing.T) {
	m := testMeta()
	m.EventType, m.SchemaVersion = priceType, 1
	d, err := newRegistry().Decode(marshal(t, newEnvelope(t, m, price{Amount: "1.50"})))
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if want := (price{Amount: "1.50"}); !reflect.DeepEqual(d.Payload, want) {
		t.Errorf("Payload = %#v, want %#v", d.Payload, want)
	}
}

func TestTraceparentOf(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	m := envelope.Meta{EventType: "UsageAccepted", SchemaVersion: 1, TenantID: "t1", AggregateType: "usage",
		AggregateID: "u1", AggregateVersion: 1, OccurredAt: time.Now(), Producer: "usage"}
	for _, tc := range []struct {
		name, traceparent, payload string
	}{
		{"with traceparent", tp, "x"},
		{"without", "", "x"},
		// A payload that holds the key and a traceparent-like value: only
		// the envelope's own field, the last, counts.
		{"payload mimics the field", "", `,"traceparent":"` + tp + `"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m.Traceparent = tc.traceparent
			e, err := envelope.New(m, map[string]string{"note": tc.payload})
			if err != nil {
				t.Fatal(err)
			}
			raw, err := e.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if got := envelope.TraceparentOf(raw); got != tc.traceparent {
				t.Errorf("TraceparentOf = %q, want %q", got, tc.traceparent)
			}
		})
	}
	for _, raw := range []string{"", "}", `{"traceparent":"` + tp + `"}`, `{"a":1,"traceparent":"` + tp[:54] + `x"}`} {
		if got := envelope.TraceparentOf([]byte(raw)); got != "" {
			t.Errorf("envelope.TraceparentOf(%q) = %q, want empty", raw, got)
		}
	}
}

// TestNewWithChosenEventID: New keeps an event id chosen beforehand and
// refuses one that is not a UUIDv7.
func TestNewWithChosenEventID(t *testing.T) {
	m := testMeta()
	m.EventID = uuid.Must(uuid.NewV7())
	if e := newEnvelope(t, m, usageV2{Quantity: "1", Unit: "call"}); e.EventID != m.EventID {
		t.Fatalf("event id %s, want the chosen %s", e.EventID, m.EventID)
	}
	m.EventID = uuid.New() // version 4
	_, err := envelope.New(m, usageV2{Quantity: "1", Unit: "call"})
	var derr *envelope.DecodeError
	if !errors.As(err, &derr) || derr.Reason != envelope.InvalidField("eventId") {
		t.Fatalf("New with a UUIDv4: %v, want %s", err, envelope.InvalidField("eventId"))
	}
}
