// Package rule is the one shape of a domain rule broken by a request: an
// Error with a Kind, a stable machine-readable Code and a Detail for people.
// Every service's domain package returns it; the HTTP edge (pkg/httpx) maps
// its Kind to a status, once, and its Code becomes the problem's code. The
// package knows nothing of HTTP.
package rule

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
)

// Kind says which sort of rule an Error breaks.
type Kind int

const (
	// Invalid: the request itself is malformed or out of range (400).
	Invalid Kind = iota + 1
	// NotFound: the request names something that does not exist for the
	// tenant (404).
	NotFound
	// Conflict: the request's identity is taken by something with other
	// content (409).
	Conflict
	// Unprocessable: well formed, but a business rule refuses it as it
	// stands (422).
	Unprocessable
)

// String names the kind.
func (k Kind) String() string {
	switch k {
	case Invalid:
		return "invalid"
	case NotFound:
		return "not_found"
	case Conflict:
		return "conflict"
	case Unprocessable:
		return "unprocessable"
	default:
		return fmt.Sprintf("kind(%d)", int(k))
	}
}

// Error is a broken rule with a stable machine-readable code.
type Error struct {
	Kind   Kind
	Code   string
	Detail string
}

func (e *Error) Error() string { return e.Code + ": " + e.Detail }

// Errorf returns an Error of kind with code and a formatted detail.
func Errorf(kind Kind, code, format string, args ...any) *Error {
	return &Error{Kind: kind, Code: code, Detail: fmt.Sprintf(format, args...)}
}

// As returns the *Error in err's chain, if there is one.
func As(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

// CodeInvalidField: a field of the request is not what it must be.
const CodeInvalidField = "invalid_field"

// MinYear and MaxYear bound the years of a time a request may name: the zero
// time (0001-01-01, which would read as "absent") and year 9999 (a price
// that blocks every later one, a fact no period holds) are refused.
const (
	MinYear = 1970
	MaxYear = 2199
)

// Time reads the RFC 3339 time of a request's field, in UTC and truncated
// to microseconds (Instant). A text that is no RFC 3339 time, or a year out
// of MinYear..MaxYear, is an Invalid invalid_field error naming field.
func Time(field, s string) (time.Time, *Error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, Errorf(Invalid, CodeInvalidField, "field %q must be an RFC 3339 time such as 2026-11-01T00:00:00Z, got %q", field, s)
	}
	if y := t.UTC().Year(); y < MinYear || y > MaxYear {
		return time.Time{}, Errorf(Invalid, CodeInvalidField, "field %q: year %d is out of range (%d to %d)", field, y, MinYear, MaxYear)
	}
	return Instant(t), nil
}

// Instant is t in UTC, truncated to microseconds (what PostgreSQL keeps).
func Instant(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// CodeControlCharacter: a control character (U+0000-U+001F, U+007F-U+009F:
// BEL, ESC, tab, newline...) in free text that is stored and shown to
// operators (a reason, an actor).
const CodeControlCharacter = "control_character"

// FreeText checks text a client gives to be stored and shown (a reason, an
// actor): a control character is an Invalid control_character error naming
// field, so no terminal escape or bell reaches an audit log or a console.
func FreeText(field, s string) *Error {
	if strings.ContainsFunc(s, unicode.IsControl) {
		return Errorf(Invalid, CodeControlCharacter,
			"field %q must not hold control characters (U+0000-U+001F, U+007F-U+009F)", field)
	}
	return nil
}
