package envelope

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// Reasons carried by a *DecodeError. They are part of the contract: the inbox
// stores them with a quarantined event and operators filter on them. Two more
// families are built by MissingField and InvalidField.
const (
	// ReasonMalformed: the input is not one well-formed, strict JSON object
	// (syntax error, trailing data, duplicate or unknown top-level field,
	// invalid UTF-8, nesting too deep).
	ReasonMalformed = "malformed"
	// ReasonTooLarge: the input (or, for New and Marshal, the encoding) is
	// larger than MaxBytes.
	ReasonTooLarge = "too_large"
	// ReasonUnknownEventType: no schema version of the event type is
	// registered.
	ReasonUnknownEventType = "unknown_event_type"
	// ReasonUnsupportedSchema: the event type is registered, but its schema
	// version has neither a decoder nor a chain of upcasters to one.
	ReasonUnsupportedSchema = "unsupported_schema"
	// ReasonDigestMismatch: payloadDigest is not the digest of the payload.
	ReasonDigestMismatch = "digest_mismatch"
)

// ErrTooLarge is wrapped by the error of New, Marshal and Decode for an
// envelope over MaxBytes (a *DecodeError with ReasonTooLarge), and by
// outbox.Append's: errors.Is(err, ErrTooLarge) finds it.
var ErrTooLarge = errors.New("envelope too large")

// MissingField returns the reason for a required field that is absent, null or
// empty: "missing_field:<name>".
func MissingField(name string) string { return "missing_field:" + name }

// InvalidField returns the reason for a field that is present but breaks its
// rule: "invalid_field:<name>". Payload problems are reported as
// "invalid_field:payload" or, when the failing field is known,
// "invalid_field:payload.<field>".
func InvalidField(name string) string { return "invalid_field:" + name }

// DecodeError is the error of Decode, New and Marshal. Reason is
// machine-readable (one of the Reason constants, or a MissingField or
// InvalidField value); Err holds the human-readable detail.
type DecodeError struct {
	// Reason is the machine-readable reason.
	Reason string
	// Err is the detail; it may be nil.
	Err error

	op string // what failed: "decode envelope" (the default), "new envelope", ...
}

// Error returns "decode envelope: <reason>: <detail>" ("new envelope: ..." and
// "marshal envelope: ..." for errors of New and Marshal).
func (e *DecodeError) Error() string {
	op := e.op
	if op == "" {
		op = "decode envelope"
	}
	if e.Err == nil {
		return op + ": " + e.Reason
	}
	return op + ": " + e.Reason + ": " + e.Err.Error()
}

// Unwrap returns the detail error.
func (e *DecodeError) Unwrap() error { return e.Err }

// ReasonOf returns the reason of the first *DecodeError in err's chain.
func ReasonOf(err error) (reason string, ok bool) {
	var de *DecodeError
	if errors.As(err, &de) && de != nil {
		return de.Reason, true
	}
	return "", false
}

// FieldError names the payload field that a payload's Validate method (or an
// upcaster) rejects. Decode reports it as "invalid_field:payload.<Field>". Field
// is a dotted path of JSON names ("quantity", "lines.amount"); a name that is
// empty, longer than MaxIDLength or not made of [A-Za-z0-9_.[\]-] is reported
// as plain "invalid_field:payload".
type FieldError struct {
	// Field is the JSON name (or dotted path) of the invalid payload field.
	Field string
	// Err says what is wrong with it.
	Err error
}

// Error returns "<field>: <detail>".
func (e FieldError) Error() string {
	if e.Err == nil {
		return e.Field + ": invalid"
	}
	return e.Field + ": " + e.Err.Error()
}

// Unwrap returns the detail error.
func (e FieldError) Unwrap() error { return e.Err }

func newError(reason string, format string, args ...any) *DecodeError {
	return &DecodeError{Reason: reason, Err: fmt.Errorf(format, args...)}
}

func missing(name string) *DecodeError {
	return &DecodeError{Reason: MissingField(name), Err: errors.New("required")}
}

func invalid(name string, format string, args ...any) *DecodeError {
	return newError(InvalidField(name), format, args...)
}

// withOp returns err with its operation name set when it is a *DecodeError.
func withOp(err error, op string) error {
	if de, ok := err.(*DecodeError); ok {
		de.op = op
	}
	return err
}

// quote quotes s for an error detail, cut to a readable length: details can
// carry input from an untrusted producer.
func quote(s string) string {
	const limit = 64
	if len(s) <= limit {
		return fmt.Sprintf("%q", s)
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%q...", s[:cut])
}
