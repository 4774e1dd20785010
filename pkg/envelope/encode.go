package envelope

import (
	"bytes"
	"encoding"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// CanonicalEncoder is a payload type's own encoder of its common shape, the
// mirror of CanonicalDecoder: AppendCanonical appends to dst the canonical
// form of the payload, exactly the bytes Canonical would make of
// encoding/json's encoding of it, and reports true; or reports false for
// anything it does not write that way (a nested value it leaves to
// encoding/json, a string that is not valid UTF-8 or holds U+0000), and New
// then marshals the payload with encoding/json and canonicalises it. It
// spares both for the events that come once per fact.
type CanonicalEncoder interface {
	AppendCanonical(dst []byte) ([]byte, bool)
}

// Object writes a payload object in canonical form, member by member, for
// a CanonicalEncoder: the members must be given in the canonical order (by
// their keys' bytes) and only those encoding/json would write (an omitempty
// field left out when empty). Any value it cannot write canonically, or a
// key out of order, makes End report false.
type Object struct {
	buf  []byte
	prev string
	n    int
	ok   bool
}

// StartObject starts an object at the end of dst.
func StartObject(dst []byte) Object {
	return Object{buf: append(dst, '{'), ok: true}
}

// key writes the separator and the key of the next member.
func (o *Object) key(k string) {
	if !o.ok || o.n > 0 && k <= o.prev || !plainText(k) {
		o.ok = false
		return
	}
	if o.n > 0 {
		o.buf = append(o.buf, ',')
	}
	o.buf = appendString(o.buf, k)
	o.buf = append(o.buf, ':')
	o.prev = k
	o.n++
}

// String writes a string member.
func (o *Object) String(k, v string) {
	if o.key(k); o.ok && !plainText(v) {
		o.ok = false
	}
	if o.ok {
		o.buf = appendString(o.buf, v)
	}
}

// Int writes an integer member, as encoding/json writes an int64.
func (o *Object) Int(k string, v int64) {
	if o.key(k); o.ok {
		o.buf = strconv.AppendInt(o.buf, v, 10)
	}
}

// Bool writes a boolean member.
func (o *Object) Bool(k string, v bool) {
	if o.key(k); o.ok {
		o.buf = strconv.AppendBool(o.buf, v)
	}
}

// Text writes a member encoding/json writes as the string of its
// MarshalText (a UUID, say).
func (o *Object) Text(k string, v encoding.TextMarshaler) {
	if o.key(k); !o.ok {
		return
	}
	t, err := v.MarshalText()
	if err != nil || !plainText(string(t)) {
		o.ok = false
		return
	}
	o.buf = appendString(o.buf, string(t))
}

// JSON writes a member encoding/json writes through its MarshalJSON (a
// decimal, a time), when what it writes is a number or a string with no
// escape, which the canonical form keeps as it is.
func (o *Object) JSON(k string, v json.Marshaler) {
	if o.key(k); !o.ok {
		return
	}
	b, err := v.MarshalJSON()
	if err != nil || !verbatim(b) {
		o.ok = false
		return
	}
	o.buf = append(o.buf, b...)
}

// StringMap writes a map of strings, its keys in order, as encoding/json
// writes a map[string]string.
func (o *Object) StringMap(k string, m map[string]string) {
	if o.key(k); !o.ok {
		return
	}
	var arr [16]string
	keys := arr[:0]
	for mk := range m {
		keys = append(keys, mk)
	}
	slices.Sort(keys)
	o.buf = append(o.buf, '{')
	for i, mk := range keys {
		if !plainText(mk) || !plainText(m[mk]) {
			o.ok = false
			return
		}
		if i > 0 {
			o.buf = append(o.buf, ',')
		}
		o.buf = appendString(o.buf, mk)
		o.buf = append(o.buf, ':')
		o.buf = appendString(o.buf, m[mk])
	}
	o.buf = append(o.buf, '}')
}

// End closes the object and returns the buffer, and whether every member
// was written canonically.
func (o *Object) End() ([]byte, bool) {
	return append(o.buf, '}'), o.ok
}

// plainText reports whether s is written the same by encoding/json and the
// canonical form once re-encoded: valid UTF-8 (encoding/json writes U+FFFD
// for an invalid byte) without U+0000 (the canonical form refuses it).
// The escapes of each differ, but appendString writes the canonical ones.
func plainText(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

// verbatim reports whether b, what a MarshalJSON wrote, is a JSON number or
// a string without escapes: the canonical form copies either as it is.
func verbatim(b []byte) bool {
	if len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"' {
		inner := b[1 : len(b)-1]
		return utf8.Valid(inner) && bytes.IndexByte(inner, '"') < 0 && bytes.IndexByte(inner, '\\') < 0 &&
			!bytes.ContainsFunc(inner, func(r rune) bool { return r < 0x20 })
	}
	s := scanner{data: b}
	return len(b) > 0 && (b[0] == '-' || b[0] >= '0' && b[0] <= '9') && s.skipNumber() == nil && s.pos == len(b)
}
