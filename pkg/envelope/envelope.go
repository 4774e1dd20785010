// Package envelope defines the event envelope every service publishes through
// its outbox and consumes through its inbox, and its strict decoder.
//
// An envelope is a JSON object whose field names are a fixed contract (see
// Envelope). Its payload is a JSON object kept in canonical form (see
// Canonical) and covered by payloadDigest, so a consumer can tell a replay
// (same eventId, same digest) from a conflicting reuse of an eventId.
//
// Every envelope is at most MaxBytes encoded: New and Marshal refuse a larger
// one with an error wrapping ErrTooLarge, and Decode refuses larger input
// (ReasonTooLarge) before parsing it.
//
// Decoding is strict, and every failure is a *DecodeError whose Reason is
// machine-readable: ReasonMalformed, ReasonTooLarge, ReasonUnknownEventType,
// ReasonUnsupportedSchema, ReasonDigestMismatch, MissingField(name) or
// InvalidField(name). The same input always fails with the same reason.
//
// Field rules, shared by Decode, New and Marshal ("missing" means absent, JSON
// null or, for strings, empty):
//
//   - eventId: a UUID of version 7 and the RFC 4122 variant, in canonical
//     lowercase 8-4-4-4-12 form.
//   - eventType, aggregateType: 1 to MaxIDLength characters of
//     [A-Za-z0-9_.-].
//   - schemaVersion: an integer from 1 to 2^31-1, written without fraction or
//     exponent.
//   - tenantId: 1 to MaxIDLength characters of [A-Za-z0-9_-].
//   - aggregateId: 1 to MaxIDLength printable ASCII characters (U+0021 to
//     U+007E) other than '|', so the partition key stays unambiguous.
//   - aggregateVersion: an integer from 1 to 2^63-1.
//   - partitionKey: exactly PartitionKey(tenantId, aggregateType,
//     aggregateId).
//   - payload: a JSON object (see Canonical for what it may contain).
//   - payloadDigest: 64 lowercase hex digits, equal to Digest(payload).
//   - occurredAt, recordedAt: RFC 3339 timestamps, not the zero time, whose
//     UTC year is 1 to 9999. Decode returns them in UTC.
//   - producer: 1 to MaxIDLength printable ASCII characters.
//   - correlationId, causationId: optional; when present, like producer.
//   - traceparent: optional; when present, a W3C Trace Context version-00
//     traceparent (see ValidTraceparent).
//
// Unknown top-level fields are rejected as ReasonMalformed rather than
// InvalidField(name): a reason must not carry an arbitrary producer-chosen
// name.
package envelope

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// MaxBytes is the largest envelope, in bytes of its JSON encoding (Marshal's
// output, the Kafka record's value), that New and Marshal build and Decode
// accepts: 64 KiB, whatever a tenant's volume. It is the one size limit of the
// event pipeline; the Kafka limits (pkg/kafkaconf) are derived from it. An
// event whose data can grow with volume must be split or paged, not enlarged.
const MaxBytes = 64 << 10

// MaxIDLength is the longest tenantId, eventType, aggregateType, aggregateId,
// producer, correlationId and causationId allowed, in bytes.
const MaxIDLength = 128

// maxSchemaVersion keeps schemaVersion within 32 bits on every platform.
const maxSchemaVersion = 1<<31 - 1

// Envelope is one event as it travels through the outbox, Kafka and the inbox.
// Build one with New; Marshal and Decode check every field (see the package
// documentation for the rules).
type Envelope struct {
	// EventID identifies the event; a UUIDv7, so ids sort by creation time.
	EventID uuid.UUID `json:"eventId"`
	// EventType names the payload's type, e.g. "UsageAccepted".
	EventType string `json:"eventType"`
	// SchemaVersion is the version of the payload's schema, from 1.
	SchemaVersion int `json:"schemaVersion"`
	// TenantID is the tenant the event belongs to.
	TenantID string `json:"tenantId"`
	// AggregateType is the type of the aggregate that emitted the event.
	AggregateType string `json:"aggregateType"`
	// AggregateID identifies the aggregate within its type and tenant.
	AggregateID string `json:"aggregateId"`
	// AggregateVersion is gap-free per aggregate, starting at 1.
	AggregateVersion int64 `json:"aggregateVersion"`
	// PartitionKey is tenantId|aggregateType|aggregateId, the Kafka key.
	PartitionKey string `json:"partitionKey"`
	// Payload is the event's data: a JSON object in canonical form.
	Payload json.RawMessage `json:"payload"`
	// PayloadDigest is the lowercase hex SHA-256 of Payload's canonical bytes.
	PayloadDigest string `json:"payloadDigest"`
	// OccurredAt is when the fact happened in the domain.
	OccurredAt time.Time `json:"occurredAt"`
	// RecordedAt is when the producer built the envelope.
	RecordedAt time.Time `json:"recordedAt"`
	// Producer names the service that built the envelope.
	Producer string `json:"producer"`
	// CorrelationID ties together the events of one business flow.
	CorrelationID string `json:"correlationId,omitempty"`
	// CausationID is the id of the event or command that caused this one.
	CausationID string `json:"causationId,omitempty"`
	// Traceparent is the W3C traceparent of the producing span, when present.
	Traceparent string `json:"traceparent,omitempty"`

	// sealed is the canonical payload and its digest as New or Decode made
	// and checked them, so that Marshal need not canonicalise and hash the
	// payload again while Payload and PayloadDigest are still those (the
	// same bytes, not a copy: replace Payload rather than change its bytes
	// in place). Every consumer checks the digest again when it decodes.
	sealed seal
}

// seal is a payload in canonical form and its digest.
type seal struct {
	payload []byte
	digest  string
}

// holds reports whether payload and digest are the ones sealed.
func (s seal) holds(payload []byte, digest string) bool {
	return len(s.payload) > 0 && len(payload) == len(s.payload) && &payload[0] == &s.payload[0] &&
		digest == s.digest
}

// Meta is what New needs besides the payload.
type Meta struct {
	// EventID is optional: an id chosen before the event was built (a row
	// that records its event's id is written first); it must be a UUIDv7.
	// New makes a new one when it is zero.
	EventID uuid.UUID
	// EventType names the payload's type.
	EventType string
	// SchemaVersion is the version of the payload's schema, from 1.
	SchemaVersion int
	// TenantID is the tenant the event belongs to.
	TenantID string
	// AggregateType is the type of the aggregate that emits the event.
	AggregateType string
	// AggregateID identifies the aggregate.
	AggregateID string
	// AggregateVersion is the aggregate's version after this event, from 1.
	AggregateVersion int64
	// OccurredAt is when the fact happened; New truncates it to microseconds
	// and converts it to UTC.
	OccurredAt time.Time
	// Producer names the producing service.
	Producer string
	// CorrelationID is optional.
	CorrelationID string
	// CausationID is optional.
	CausationID string
	// Traceparent is optional; it must be valid when set (see
	// ValidTraceparent).
	Traceparent string
}

// PartitionKey returns the partition key of an aggregate:
// "<tenantID>|<aggregateType>|<aggregateID>". None of the parts may contain
// '|', so the key is unambiguous.
func PartitionKey(tenantID, aggregateType, aggregateID string) string {
	return tenantID + "|" + aggregateType + "|" + aggregateID
}

// New builds an envelope: a new UUIDv7 event id (or m.EventID), the payload marshalled with
// encoding/json (without HTML escaping) and canonicalised, or written in
// canonical form by its own CanonicalEncoder (the same bytes), its digest, the
// partition key, and RecordedAt set to now. Both times are in UTC, truncated to
// microseconds so that they survive a PostgreSQL round trip. New checks the
// result with the rules of Decode and returns a *DecodeError (whose message
// starts "new envelope:") when m or the payload breaks one; an envelope whose
// encoding is over MaxBytes is refused with ReasonTooLarge and an error that
// wraps ErrTooLarge and names the event type and the size.
func New(m Meta, payload any) (Envelope, error) {
	id := m.EventID
	if id == uuid.Nil {
		var err error
		if id, err = uuid.NewV7(); err != nil {
			return Envelope{}, fmt.Errorf("new envelope: generate event id: %w", err)
		}
	}
	e := Envelope{
		EventID:          id,
		EventType:        m.EventType,
		SchemaVersion:    m.SchemaVersion,
		TenantID:         m.TenantID,
		AggregateType:    m.AggregateType,
		AggregateID:      m.AggregateID,
		AggregateVersion: m.AggregateVersion,
		PartitionKey:     PartitionKey(m.TenantID, m.AggregateType, m.AggregateID),
		OccurredAt:       m.OccurredAt.UTC().Truncate(time.Microsecond),
		RecordedAt:       time.Now().UTC().Truncate(time.Microsecond),
		Producer:         m.Producer,
		CorrelationID:    m.CorrelationID,
		CausationID:      m.CausationID,
		Traceparent:      m.Traceparent,
	}
	if c, ok := payload.(CanonicalEncoder); ok {
		if canon, ok := c.AppendCanonical(make([]byte, 0, 512)); ok {
			e.Payload = canon
		}
	}
	if e.Payload == nil {
		body, err := marshalJSON(payload)
		if err != nil {
			return Envelope{}, withOp(invalid("payload", "marshal payload: %w", err), "new envelope")
		}
		if e.Payload, err = Canonical(body); err != nil {
			return Envelope{}, withOp(invalid("payload", "%w", err), "new envelope")
		}
	}
	e.PayloadDigest = digestOf(e.Payload)
	if err := e.checkFields(); err != nil {
		return Envelope{}, withOp(err, "new envelope")
	}
	e.sealed = seal{payload: e.Payload, digest: e.PayloadDigest}
	buf := sizeBuffers.Get().(*[]byte)
	*buf = e.appendJSON((*buf)[:0])
	size := len(*buf)
	sizeBuffers.Put(buf)
	if err := checkSize(&e, size); err != nil {
		return Envelope{}, withOp(err, "new envelope")
	}
	return e, nil
}

// checkSize refuses an envelope whose encoding, of size bytes, is over
// MaxBytes.
func checkSize(e *Envelope, size int) *DecodeError {
	if size <= MaxBytes {
		return nil
	}
	return &DecodeError{Reason: ReasonTooLarge, Err: fmt.Errorf("%w: %s v%d is %d bytes encoded, more than envelope.MaxBytes (%d)",
		ErrTooLarge, e.EventType, e.SchemaVersion, size, MaxBytes)}
}

// Marshal checks e with the rules of Decode (all but the registry's) and
// returns its JSON encoding, with the payload in canonical form and both times
// in UTC. It returns a *DecodeError (whose message starts "marshal
// envelope:") when a field breaks a rule or the encoding is over MaxBytes
// (ReasonTooLarge, wrapping ErrTooLarge), so an invalid envelope is refused by
// its producer instead of being quarantined by every consumer. The payload
// of an envelope from New or Decode, while it is still that one, is not
// canonicalised and hashed again: New and Decode did that once.
func (e Envelope) Marshal() ([]byte, error) {
	if err := e.checkFields(); err != nil {
		return nil, withOp(err, "marshal envelope")
	}
	if !e.sealed.holds(e.Payload, e.PayloadDigest) {
		canon, err := Canonical(e.Payload)
		if err != nil {
			return nil, withOp(invalid("payload", "%w", err), "marshal envelope")
		}
		if digestOf(canon) != e.PayloadDigest {
			return nil, withOp(newError(ReasonDigestMismatch, "payloadDigest %s does not match the payload", e.PayloadDigest), "marshal envelope")
		}
		e.Payload = canon
	}
	e.OccurredAt = e.OccurredAt.UTC()
	e.RecordedAt = e.RecordedAt.UTC()
	out := e.appendJSON(make([]byte, 0, len(e.Payload)+envelopeOverhead))
	if err := checkSize(&e, len(out)); err != nil {
		return nil, withOp(err, "marshal envelope")
	}
	return out, nil
}

// envelopeOverhead is room for every field of an envelope but its payload:
// the names, the ids of at most MaxIDLength bytes, the times and the digest.
const envelopeOverhead = 1536

// sizeBuffers hold the encodings New measures and drops.
var sizeBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// appendJSON appends the JSON encoding of e, an envelope whose fields
// checkFields has passed and whose Payload is in canonical form: the fields
// in the struct's order, under their json names, the optional ones only when
// set, the times in RFC 3339 with nanoseconds, the payload as its canonical
// bytes. Around the payload it is byte for byte what encoding/json writes
// for e (without HTML escaping; TestAppendJSONIsEncodingJSON), without its
// reflection and without compacting the payload again: every string but the
// payload is printable ASCII once checked, so only the quote and the
// backslash are escaped. (Inside the payload encoding/json's escapes vary
// with the Go release; the canonical bytes are what the digest covers.)
func (e *Envelope) appendJSON(dst []byte) []byte {
	dst = append(dst, `{"eventId":"`...)
	dst = appendUUID(dst, e.EventID)
	dst = append(dst, `","eventType":`...)
	dst = appendString(dst, e.EventType)
	dst = append(dst, `,"schemaVersion":`...)
	dst = strconv.AppendInt(dst, int64(e.SchemaVersion), 10)
	dst = append(dst, `,"tenantId":`...)
	dst = appendString(dst, e.TenantID)
	dst = append(dst, `,"aggregateType":`...)
	dst = appendString(dst, e.AggregateType)
	dst = append(dst, `,"aggregateId":`...)
	dst = appendString(dst, e.AggregateID)
	dst = append(dst, `,"aggregateVersion":`...)
	dst = strconv.AppendInt(dst, e.AggregateVersion, 10)
	dst = append(dst, `,"partitionKey":`...)
	dst = appendString(dst, e.PartitionKey)
	dst = append(dst, `,"payload":`...)
	dst = append(dst, e.Payload...)
	dst = append(dst, `,"payloadDigest":`...)
	dst = appendString(dst, e.PayloadDigest)
	dst = append(dst, `,"occurredAt":"`...)
	dst = e.OccurredAt.AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, `","recordedAt":"`...)
	dst = e.RecordedAt.AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, `","producer":`...)
	dst = appendString(dst, e.Producer)
	if e.CorrelationID != "" {
		dst = append(dst, `,"correlationId":`...)
		dst = appendString(dst, e.CorrelationID)
	}
	if e.CausationID != "" {
		dst = append(dst, `,"causationId":`...)
		dst = appendString(dst, e.CausationID)
	}
	if e.Traceparent != "" {
		dst = append(dst, `,"traceparent":`...)
		dst = appendString(dst, e.Traceparent)
	}
	return append(dst, '}')
}

// appendUUID appends id in its canonical lowercase 8-4-4-4-12 form.
func appendUUID(dst []byte, id uuid.UUID) []byte {
	var buf [36]byte
	hex.Encode(buf[0:8], id[0:4])
	buf[8] = '-'
	hex.Encode(buf[9:13], id[4:6])
	buf[13] = '-'
	hex.Encode(buf[14:18], id[6:8])
	buf[18] = '-'
	hex.Encode(buf[19:23], id[8:10])
	buf[23] = '-'
	hex.Encode(buf[24:], id[10:])
	return append(dst, buf[:]...)
}

// marshalJSON is json.Marshal without HTML escaping and without the trailing
// newline of an Encoder.
func marshalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// checkFields checks every field but the payload's content and digest, in the
// order of the struct. The first broken rule is returned.
func (e *Envelope) checkFields() *DecodeError {
	switch {
	case e.EventID == uuid.Nil:
		return missing("eventId")
	case e.EventID.Version() != 7 || e.EventID.Variant() != uuid.RFC4122:
		return invalid("eventId", "%s is not a UUIDv7", e.EventID)
	}
	if err := checkName("eventType", e.EventType, nameChars); err != nil {
		return err
	}
	switch {
	case e.SchemaVersion == 0:
		return missing("schemaVersion")
	case e.SchemaVersion < 1 || e.SchemaVersion > maxSchemaVersion:
		return invalid("schemaVersion", "%d is out of range", e.SchemaVersion)
	}
	if err := checkName("tenantId", e.TenantID, tenantChars); err != nil {
		return err
	}
	if err := checkName("aggregateType", e.AggregateType, nameChars); err != nil {
		return err
	}
	if err := checkName("aggregateId", e.AggregateID, idChars); err != nil {
		return err
	}
	switch {
	case e.AggregateVersion == 0:
		return missing("aggregateVersion")
	case e.AggregateVersion < 1:
		return invalid("aggregateVersion", "%d is out of range", e.AggregateVersion)
	}
	switch {
	case e.PartitionKey == "":
		return missing("partitionKey")
	case !isPartitionKey(e.PartitionKey, e.TenantID, e.AggregateType, e.AggregateID):
		want := PartitionKey(e.TenantID, e.AggregateType, e.AggregateID)
		return invalid("partitionKey", "%s is not %s", quote(e.PartitionKey), quote(want))
	}
	if len(e.Payload) == 0 {
		return missing("payload")
	}
	switch {
	case e.PayloadDigest == "":
		return missing("payloadDigest")
	case !isDigest(e.PayloadDigest):
		return invalid("payloadDigest", "%s is not 64 lowercase hex digits", quote(e.PayloadDigest))
	}
	if err := checkTime("occurredAt", e.OccurredAt); err != nil {
		return err
	}
	if err := checkTime("recordedAt", e.RecordedAt); err != nil {
		return err
	}
	if err := checkName("producer", e.Producer, printableChars); err != nil {
		return err
	}
	if e.CorrelationID != "" {
		if err := checkName("correlationId", e.CorrelationID, printableChars); err != nil {
			return err
		}
	}
	if e.CausationID != "" {
		if err := checkName("causationId", e.CausationID, printableChars); err != nil {
			return err
		}
	}
	if e.Traceparent != "" && !ValidTraceparent(e.Traceparent) {
		return invalid("traceparent", "%s is not a W3C traceparent", quote(e.Traceparent))
	}
	return nil
}

// isPartitionKey reports whether key is PartitionKey(tenantID,
// aggregateType, aggregateID), without building it.
func isPartitionKey(key, tenantID, aggregateType, aggregateID string) bool {
	n := len(tenantID)
	m := n + 1 + len(aggregateType)
	return len(key) == m+1+len(aggregateID) &&
		key[:n] == tenantID && key[n] == '|' &&
		key[n+1:m] == aggregateType && key[m] == '|' &&
		key[m+1:] == aggregateID
}

// Character classes of names and ids: bits of classes.
const (
	tenantChars    = 1 << iota // [A-Za-z0-9_-]
	nameChars                  // [A-Za-z0-9_.-]
	idChars                    // printable ASCII but '|'
	printableChars             // printable ASCII
)

// classes holds, for each byte, the classes it belongs to.
var classes = func() (t [256]uint8) {
	for c := '!'; c < 0x7F; c++ {
		t[c] = idChars | printableChars
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
			t[c] |= tenantChars | nameChars
		case c == '.':
			t[c] |= nameChars
		case c == '|':
			t[c] &^= idChars
		}
	}
	return t
}()

func checkName(field, s string, class int) *DecodeError {
	if s == "" {
		return missing(field)
	}
	if len(s) > MaxIDLength {
		return invalid(field, "longer than %d bytes", MaxIDLength)
	}
	for i := 0; i < len(s); i++ {
		if !inClass(s[i], class) {
			return invalid(field, "%s has a character outside the allowed set", quote(s))
		}
	}
	return nil
}

func inClass(c byte, class int) bool { return int(classes[c])&class != 0 }

func checkTime(field string, t time.Time) *DecodeError {
	if t.IsZero() {
		return missing(field)
	}
	if y := t.UTC().Year(); y < 1 || y > 9999 {
		return invalid(field, "year %d is out of range", y)
	}
	return nil
}

func isDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	return isLowerHex(s)
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// ValidTraceparent reports whether s is a W3C Trace Context traceparent of
// version 00: "vv-<32 hex trace-id>-<16 hex parent-id>-<2 hex flags>", all hex
// lowercase, version not "ff", trace-id and parent-id not all zeros. Header
// values of later versions (which may append fields) are not accepted. A
// service taking a traceparent from an untrusted request should drop an
// invalid one (as W3C says) before passing it to New, which rejects it.
func ValidTraceparent(s string) bool {
	if len(s) != 55 || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return false
	}
	version, traceID, parentID, flags := s[0:2], s[3:35], s[36:52], s[53:55]
	if !isLowerHex(version) || !isLowerHex(traceID) || !isLowerHex(parentID) || !isLowerHex(flags) {
		return false
	}
	return version != "ff" &&
		traceID != "00000000000000000000000000000000" &&
		parentID != "0000000000000000"
}

// Indexes of the envelope's fields in a parsed document.
const (
	fEventID = iota
	fEventType
	fSchemaVersion
	fTenantID
	fAggregateType
	fAggregateID
	fAggregateVersion
	fPartitionKey
	fPayload
	fPayloadDigest
	fOccurredAt
	fRecordedAt
	fProducer
	fCorrelationID
	fCausationID
	fTraceparent
	numFields
)

var fieldNames = [numFields]string{
	"eventId", "eventType", "schemaVersion", "tenantId", "aggregateType", "aggregateId",
	"aggregateVersion", "partitionKey", "payload", "payloadDigest", "occurredAt", "recordedAt",
	"producer", "correlationId", "causationId", "traceparent",
}

func fieldIndex(name []byte) int {
	for i, n := range fieldNames {
		if n == string(name) {
			return i
		}
	}
	return -1
}

// Kinds of a parsed top-level value.
const (
	kindAbsent = iota
	kindNull
	kindBool
	kindNumber
	kindString
	kindComposite // object or array
)

// rawField is one top-level member of an envelope document.
type rawField struct {
	kind   int
	text   string // a string's value or a number's literal
	object bool   // for kindComposite: an object, not an array
	canon  []byte // for kindComposite: its canonical form
}

// parseEnvelope parses raw as one strict JSON object with known, distinct
// member names into fields. Any failure is ReasonMalformed. The strings it
// reads share one copy of raw: a field kept keeps the record's text (at
// most MaxBytes) alive, and a decode makes one string where it made one per
// field.
func parseEnvelope(raw []byte, fields *[numFields]rawField) *DecodeError {
	s := scanner{data: raw, maxDepth: MaxPayloadDepth + 1, outer: 1}
	if err := s.envelope(fields); err != nil {
		return &DecodeError{Reason: ReasonMalformed, Err: err}
	}
	return nil
}

func (s *scanner) envelope(fields *[numFields]rawField) error {
	if !utf8.Valid(s.data) {
		return fmt.Errorf("invalid UTF-8")
	}
	s.text = string(s.data)
	s.ws()
	if err := s.expect('{'); err != nil {
		return fmt.Errorf("not a JSON object: %w", err)
	}
	s.ws()
	if s.peek() == '}' {
		s.pos++
		return s.end()
	}
	for {
		if s.peek() != '"' {
			return s.errorf("want a string key")
		}
		// A key without escapes (every field name) is matched where it
		// lies, without a string made of it.
		at := s.pos
		raw, plain := s.plainString()
		var key string
		if !plain {
			s.pos = at
			var err error
			if key, err = s.str(); err != nil {
				return err
			}
			raw = []byte(key)
		}
		i := fieldIndex(raw)
		if i < 0 {
			return s.errorf("unknown field %s", quote(string(raw)))
		}
		f := &fields[i]
		if f.kind != kindAbsent {
			return s.errorf("duplicate field %s", quote(string(raw)))
		}
		s.ws()
		if err := s.expect(':'); err != nil {
			return err
		}
		s.ws()
		if err := s.field(f); err != nil {
			return err
		}
		s.ws()
		if s.peek() == ',' {
			s.pos++
			s.ws()
			continue
		}
		if err := s.expect('}'); err != nil {
			return err
		}
		return s.end()
	}
}

// field reads one top-level value into f.
func (s *scanner) field(f *rawField) error {
	var err error
	switch c := s.peek(); {
	case c == '"':
		f.kind = kindString
		f.text, err = s.str()
	case c == '-' || (c >= '0' && c <= '9'):
		f.kind = kindNumber
		f.text, err = s.number()
	case c == '{' || c == '[':
		f.kind = kindComposite
		f.object = c == '{'
		f.canon, err = s.canonicalValue(1)
	case c == 'n':
		f.kind = kindNull
		_, err = s.literal(nil, "null")
	case c == 't' || c == 'f':
		f.kind = kindBool
		_, err = s.value(nil, 1)
	default:
		_, err = s.value(nil, 1) // reports the syntax error
		if err == nil {
			err = s.errorf("want a value")
		}
	}
	return err
}

// decodeEnvelope parses and checks raw. It does not consult a registry.
func decodeEnvelope(raw []byte) (Envelope, *DecodeError) {
	var fields [numFields]rawField
	if derr := parseEnvelope(raw, &fields); derr != nil {
		return Envelope{}, derr
	}
	var e Envelope
	var err *DecodeError
	str := func(i int) string {
		if err != nil {
			return ""
		}
		var s string
		s, err = stringField(&fields, i)
		return s
	}
	if id := str(fEventID); id != "" {
		e.EventID, err = parseEventID(id)
	}
	e.EventType = str(fEventType)
	if err == nil {
		var n int64
		n, err = intField(&fields, fSchemaVersion, maxSchemaVersion)
		e.SchemaVersion = int(n)
	}
	e.TenantID = str(fTenantID)
	e.AggregateType = str(fAggregateType)
	e.AggregateID = str(fAggregateID)
	if err == nil {
		e.AggregateVersion, err = intField(&fields, fAggregateVersion, 1<<63-1)
	}
	e.PartitionKey = str(fPartitionKey)
	if err == nil {
		switch f := fields[fPayload]; {
		case f.kind == kindAbsent || f.kind == kindNull:
			err = missing("payload")
		case f.kind != kindComposite || !f.object:
			err = invalid("payload", "not a JSON object")
		default:
			e.Payload = f.canon
		}
	}
	e.PayloadDigest = str(fPayloadDigest)
	if ts := str(fOccurredAt); err == nil {
		e.OccurredAt, err = parseTime("occurredAt", ts)
	}
	if ts := str(fRecordedAt); err == nil {
		e.RecordedAt, err = parseTime("recordedAt", ts)
	}
	e.Producer = str(fProducer)
	e.CorrelationID = str(fCorrelationID)
	e.CausationID = str(fCausationID)
	e.Traceparent = str(fTraceparent)
	if err != nil {
		return Envelope{}, err
	}
	if err := e.checkFields(); err != nil {
		return Envelope{}, err
	}
	if !digestIs(e.Payload, e.PayloadDigest) {
		return Envelope{}, newError(ReasonDigestMismatch, "payloadDigest %s does not match the payload", e.PayloadDigest)
	}
	e.sealed = seal{payload: e.Payload, digest: e.PayloadDigest}
	return e, nil
}

// stringField returns a string field's value, "" when it is absent or null.
// Whether it is required is checkFields' business.
func stringField(fields *[numFields]rawField, i int) (string, *DecodeError) {
	switch f := fields[i]; f.kind {
	case kindAbsent, kindNull:
		return "", nil
	case kindString:
		return f.text, nil
	default:
		return "", invalid(fieldNames[i], "not a string")
	}
}

// intField returns a required integer field in [1, max].
func intField(fields *[numFields]rawField, i int, max int64) (int64, *DecodeError) {
	name := fieldNames[i]
	switch f := fields[i]; f.kind {
	case kindAbsent, kindNull:
		return 0, missing(name)
	case kindNumber:
		n, err := strconv.ParseInt(f.text, 10, 64)
		if err != nil || n < 1 || n > max {
			return 0, invalid(name, "%s is not an integer from 1 to %d", quote(f.text), max)
		}
		return n, nil
	default:
		return 0, invalid(name, "not a number")
	}
}

// parseEventID parses the canonical lowercase form of a UUID; its version is
// checked by checkFields.
func parseEventID(s string) (uuid.UUID, *DecodeError) {
	id, err := uuid.Parse(s)
	var canon [36]byte
	if err != nil || string(appendUUID(canon[:0], id)) != s {
		return uuid.UUID{}, invalid("eventId", "%s is not a UUID in canonical lowercase form", quote(s))
	}
	if id == uuid.Nil {
		return uuid.UUID{}, invalid("eventId", "the nil UUID")
	}
	return id, nil
}

// parseTime parses an RFC 3339 timestamp ("" is left to checkFields as
// missing) and returns it in UTC.
func parseTime(field, s string) (time.Time, *DecodeError) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, invalid(field, "%s is not an RFC 3339 timestamp", quote(s))
	}
	if t.IsZero() {
		return time.Time{}, invalid(field, "the zero time")
	}
	return t.UTC(), nil
}
