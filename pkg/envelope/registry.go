package envelope

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sync"
)

// upcaster upgrades a payload from one schema version to the next.
type upcaster = func(payload json.RawMessage) (json.RawMessage, error)

// Registry knows which (eventType, schemaVersion) pairs a consumer can decode,
// and how. Register decoders and upcasters at start-up; Decode and Known may
// then be called from any number of goroutines. The zero value is an empty
// registry ready to use; a Registry must not be copied after first use.
type Registry struct {
	mu    sync.RWMutex
	types map[string]*schemas
}

// schemas holds one event type's decoders and upcasters, by schema version.
type schemas struct {
	decoders  map[int]decodeFunc
	upcasters map[int]upcaster
}

type decodeFunc func(payload []byte) (any, error)

// Decoded is a successfully decoded envelope.
type Decoded struct {
	// Envelope is the envelope as received; its Payload is the canonical form
	// of the payload as sent, before any upcasting.
	Envelope Envelope
	// Payload is the payload decoded into the type registered for
	// PayloadVersion: a value of that type, not a pointer to it.
	Payload any
	// PayloadVersion is the schema version Payload was decoded at, after
	// upcasting; Envelope.SchemaVersion when no upcaster ran.
	PayloadVersion int
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{}
}

// Register makes r decode payloads of (eventType, schemaVersion) into T.
// Decoding is strict: unknown fields are rejected, and the payload must be
// exactly one JSON value. Numbers decoded into interface values become
// json.Number, so they stay exact. Object keys are matched to T's fields as
// encoding/json matches them, which ignores case; the digest still covers the
// keys as sent. If T or *T has a method Validate() error, it is called after
// decoding; a failure is reported as InvalidField("payload."+field) when the
// error wraps a FieldError, as InvalidField("payload") otherwise.
//
// Register panics, as registration is start-up configuration, when r is nil,
// eventType is not a valid event type, schemaVersion is out of range, or the
// pair is already registered.
func Register[T any](r *Registry, eventType string, schemaVersion int) {
	r.add(eventType, schemaVersion, func(s *schemas) error {
		if _, dup := s.decoders[schemaVersion]; dup {
			return errors.New("decoder already registered")
		}
		if s.decoders == nil {
			s.decoders = make(map[int]decodeFunc)
		}
		s.decoders[schemaVersion] = decodeInto[T]
		return nil
	})
}

// Upcast makes r upgrade payloads of eventType from schema version
// fromVersion to fromVersion+1 with fn. Decode applies upcasters in a chain, as
// far as they go from the envelope's version, and decodes the payload at the
// highest version of that chain that has a decoder. fn gets its own copy of
// the payload in canonical form and must return a JSON object, which is
// canonicalised before the next step. An upcaster's error is reported like a
// Validate error (see Register); an output that is not a JSON object as
// InvalidField("payload").
//
// Upcast panics when r or fn is nil, eventType is not a valid event type,
// fromVersion is out of range, or an upcaster from fromVersion is already
// registered.
func (r *Registry) Upcast(eventType string, fromVersion int, fn func(payload json.RawMessage) (json.RawMessage, error)) {
	if fn == nil {
		panic(fmt.Sprintf("envelope: upcast %s v%d: nil function", eventType, fromVersion))
	}
	r.add(eventType, fromVersion, func(s *schemas) error {
		if fromVersion >= maxSchemaVersion {
			return errors.New("no version to upcast to")
		}
		if _, dup := s.upcasters[fromVersion]; dup {
			return errors.New("upcaster already registered")
		}
		if s.upcasters == nil {
			s.upcasters = make(map[int]upcaster)
		}
		s.upcasters[fromVersion] = fn
		return nil
	})
}

func (r *Registry) add(eventType string, version int, fn func(*schemas) error) {
	if r == nil {
		panic("envelope: register on a nil *Registry")
	}
	if err := checkName("eventType", eventType, nameChars); err != nil {
		panic(fmt.Sprintf("envelope: register %s: %v", quote(eventType), err))
	}
	if version < 1 || version > maxSchemaVersion {
		panic(fmt.Sprintf("envelope: register %s v%d: schema version out of range", eventType, version))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.types == nil {
		r.types = make(map[string]*schemas)
	}
	s := r.types[eventType]
	if s == nil {
		s = &schemas{}
		r.types[eventType] = s
	}
	if err := fn(s); err != nil {
		panic(fmt.Sprintf("envelope: register %s v%d: %v", eventType, version, err))
	}
}

// plan is how to decode one (eventType, schemaVersion): the upcasters to run
// in order, then the decoder of version target.
type plan struct {
	upcasters []upcaster
	decode    decodeFunc
	target    int
}

// plan finds how to decode (eventType, version); on failure it returns the
// reason.
func (r *Registry) plan(eventType string, version int) (plan, string) {
	if r == nil {
		return plan{}, ReasonUnknownEventType
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	s := r.types[eventType]
	if s == nil {
		return plan{}, ReasonUnknownEventType
	}
	var p plan
	for v := version; ; v++ {
		if d, ok := s.decoders[v]; ok {
			p.decode, p.target = d, v
		}
		if _, ok := s.upcasters[v]; !ok {
			break
		}
	}
	if p.decode == nil {
		return plan{}, ReasonUnsupportedSchema
	}
	for v := version; v < p.target; v++ {
		p.upcasters = append(p.upcasters, s.upcasters[v])
	}
	return p, ""
}

// Known reports whether r can decode payloads of (eventType, schemaVersion),
// directly or through upcasters.
func (r *Registry) Known(eventType string, schemaVersion int) bool {
	_, reason := r.plan(eventType, schemaVersion)
	return reason == ""
}

// Decode decodes and checks one raw envelope, in this order: size (at most
// MaxBytes, checked before any parsing), JSON syntax and top-level field names, each field's rule (see the
// package documentation), the payload digest, the (eventType, schemaVersion)
// pair, upcasting, and decoding the payload into its registered type. The
// first failure is returned as a *DecodeError. Decode never panics on any
// input; a nil *Registry knows no event type.
func (r *Registry) Decode(raw []byte) (*Decoded, error) {
	if len(raw) > MaxBytes {
		return nil, newError(ReasonTooLarge, "%w: %d bytes, more than envelope.MaxBytes (%d)", ErrTooLarge, len(raw), MaxBytes)
	}
	e, derr := decodeEnvelope(raw)
	if derr != nil {
		return nil, derr
	}
	p, reason := r.plan(e.EventType, e.SchemaVersion)
	switch reason {
	case ReasonUnknownEventType:
		return nil, newError(reason, "event type %s is not registered", quote(e.EventType))
	case ReasonUnsupportedSchema:
		return nil, newError(reason, "%s v%d has no decoder", e.EventType, e.SchemaVersion)
	}
	payload := e.Payload
	for i, up := range p.upcasters {
		from := e.SchemaVersion + i
		out, err := up(bytes.Clone(payload))
		if err != nil {
			return nil, payloadError(err, "upcast %s v%d to v%d", e.EventType, from, from+1)
		}
		if payload, err = Canonical(out); err != nil {
			return nil, invalid("payload", "upcast %s v%d to v%d: %w", e.EventType, from, from+1, err)
		}
	}
	v, err := p.decode(payload)
	if err != nil {
		return nil, payloadError(err, "%s v%d payload", e.EventType, p.target)
	}
	return &Decoded{Envelope: e, Payload: v, PayloadVersion: p.target}, nil
}

type validator interface{ Validate() error }

// decodeInto decodes a canonical payload strictly into a T and validates it.
// CanonicalDecoder is a payload type's own decoder of its common shape
// (*T's, for a T given to Register): DecodeCanonical decodes payload, in
// canonical form, into the receiver and reports true only when the result is
// exactly what encoding/json would decode (with the rules of Register); it
// reports false for anything else (an unknown or differently cased key, a
// null, a string with escapes), and Decode then decodes with encoding/json
// from the zero value. It spares a second parse of the payload for the
// events that come once per fact.
type CanonicalDecoder interface {
	DecodeCanonical(payload []byte) bool
}

func decodeInto[T any](payload []byte) (any, error) {
	var v T
	if c, ok := any(&v).(CanonicalDecoder); ok {
		if c.DecodeCanonical(payload) {
			return validated(v)
		}
		var zero T
		v = zero
	}
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			return nil, FieldError{Field: typeErr.Field, Err: err}
		}
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("trailing data after the payload")
	}
	return validated(v)
}

// validated is v once its Validate method, if T or *T has one, accepts it.
func validated[T any](v T) (any, error) {
	var val validator
	if vp, ok := any(&v).(validator); ok {
		val = vp
	} else if vv, ok := any(v).(validator); ok && !isNilPointer(vv) {
		val = vv
	}
	if val != nil {
		if err := val.Validate(); err != nil {
			return nil, err
		}
	}
	return v, nil
}

func isNilPointer(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// payloadError maps a payload decoding, validation or upcasting error to
// InvalidField("payload.<field>") or InvalidField("payload").
func payloadError(err error, format string, args ...any) *DecodeError {
	name := "payload"
	if field, ok := fieldOf(err); ok {
		name = "payload." + field
	}
	return &DecodeError{Reason: InvalidField(name), Err: fmt.Errorf(format+": %w", append(args, err)...)}
}

// fieldOf returns the field named by a FieldError in err's chain, if that
// name is fit for a reason.
func fieldOf(err error) (string, bool) {
	var field string
	var fe FieldError
	var pfe *FieldError
	switch {
	case errors.As(err, &fe):
		field = fe.Field
	case errors.As(err, &pfe) && pfe != nil:
		field = pfe.Field
	default:
		return "", false
	}
	if field == "" || len(field) > MaxIDLength {
		return "", false
	}
	for i := 0; i < len(field); i++ {
		c := field[i]
		if !inClass(c, nameChars) && c != '[' && c != ']' {
			return "", false
		}
	}
	return field, true
}
