package envelope

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// MaxPayloadDepth is the deepest nesting of objects and arrays a payload may
// have; the payload object itself is level 1.
const MaxPayloadDepth = 64

// Canonical returns the canonical form of a payload, which must be exactly one
// JSON object (surrounding whitespace allowed). The canonical form is what
// PayloadDigest covers and what an Envelope stores, so that producer and
// consumer agree on the bytes whatever encoder wrote them. The rule:
//
//   - Input must be strict JSON (RFC 8259) and I-JSON (RFC 7493): valid UTF-8,
//     no lone surrogate escapes, no duplicate keys in any object. Strings must
//     not contain U+0000 (PostgreSQL jsonb and text cannot store it), and
//     nesting may not exceed MaxPayloadDepth levels.
//   - No insignificant whitespace is written.
//   - Object members are sorted by key, comparing the keys' UTF-8 bytes
//     (which is code point order; RFC 8785 sorts by UTF-16 units instead).
//   - Array elements keep their order.
//   - Numbers are copied verbatim: 1, 1.0 and 1e0 stay distinct (billing
//     amounts travel as decimal strings anyway).
//   - true, false and null are written as such.
//   - Strings (keys and values) are re-encoded minimally: '"' and '\' as \" and
//     \\; U+0008, U+0009, U+000A, U+000C, U+000D as \b, \t, \n, \f, \r; the
//     other control characters below U+0020 as \u00xx with lowercase hex; every
//     other character, including '<', '>', '&', '/', U+007F, U+2028 and U+2029,
//     as its literal UTF-8 bytes.
//
// Canonical is idempotent: Canonical(Canonical(p)) equals Canonical(p).
func Canonical(payload []byte) ([]byte, error) {
	s := scanner{data: payload, maxDepth: MaxPayloadDepth}
	out, err := s.object()
	if err != nil {
		return nil, fmt.Errorf("canonicalize payload: %w", err)
	}
	return out, nil
}

// Digest returns the lowercase hex SHA-256 of Canonical(payload).
func Digest(payload []byte) (string, error) {
	canon, err := Canonical(payload)
	if err != nil {
		return "", err
	}
	return digestOf(canon), nil
}

func digestOf(canon []byte) string {
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:])
}

// digestIs reports whether digest is digestOf(canon), without a string.
func digestIs(canon []byte, digest string) bool {
	sum := sha256.Sum256(canon)
	var text [2 * sha256.Size]byte
	hex.Encode(text[:], sum[:])
	return string(text[:]) == digest
}

// scanner is a strict JSON parser that writes the canonical form of what it
// reads. It never panics and recurses at most maxDepth levels.
type scanner struct {
	data     []byte
	pos      int
	maxDepth int
	outer    int // levels of maxDepth taken by an enclosing envelope
	// text, when set, is data as a string: the strings and numbers read
	// are cut from it rather than each copied (see text).
	text string
}

// sub is data[start:end] as a string: cut from text when it is set.
func (s *scanner) sub(start, end int) string {
	if s.text != "" {
		return s.text[start:end]
	}
	return string(s.data[start:end])
}

// object parses the whole input as one JSON object and returns its canonical
// form.
func (s *scanner) object() ([]byte, error) {
	if !utf8.Valid(s.data) {
		return nil, errors.New("invalid UTF-8")
	}
	s.ws()
	if s.pos >= len(s.data) {
		return nil, errors.New("empty input")
	}
	if s.data[s.pos] != '{' {
		return nil, s.errorf("not a JSON object")
	}
	out, err := s.canonicalValue(0)
	if err != nil {
		return nil, err
	}
	if err := s.end(); err != nil {
		return nil, err
	}
	return out, nil
}

// end checks that only whitespace is left.
func (s *scanner) end() error {
	s.ws()
	if s.pos != len(s.data) {
		return s.errorf("trailing data after the JSON value")
	}
	return nil
}

func (s *scanner) errorf(format string, args ...any) error {
	return fmt.Errorf("offset %d: %s", s.pos, fmt.Sprintf(format, args...))
}

func (s *scanner) ws() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// peek returns the next byte, or 0 at the end of input (0 never starts a
// valid token).
func (s *scanner) peek() byte {
	if s.pos < len(s.data) {
		return s.data[s.pos]
	}
	return 0
}

func (s *scanner) expect(c byte) error {
	if s.peek() != c {
		if s.pos >= len(s.data) {
			return s.errorf("unexpected end of input, want %q", c)
		}
		return s.errorf("unexpected %s, want %q", describe(s.data[s.pos]), c)
	}
	s.pos++
	return nil
}

// canonicalValue returns the canonical form of the next JSON value, in a new
// slice. A value already in canonical form (what every producer's New and
// Marshal write) is checked where it lies and copied, without decoding its
// strings and sorting its members again; any other value is rebuilt by value.
func (s *scanner) canonicalValue(depth int) ([]byte, error) {
	start := s.pos
	if s.isCanonical(depth) {
		return append([]byte(nil), s.data[start:s.pos]...), nil
	}
	s.pos = start
	return s.value(nil, depth)
}

// isCanonical reads the next value and reports whether it is in canonical
// form and would be read by value without error: no whitespace, members in
// strictly increasing order of keys, strings without escapes. It gives up
// (false, s.pos anywhere) at the first byte that is not, so that value reads
// the value again and says what is wrong or rebuilds it; a string with an
// escape, canonical or not, is left to value too. The caller has checked
// that the whole input is valid UTF-8: isCanonical does not look inside a
// string's bytes.
func (s *scanner) isCanonical(depth int) bool {
	switch c := s.peek(); {
	case c == '{':
		return depth < s.maxDepth && s.members(depth, nil)
	case c == '[':
		if depth >= s.maxDepth {
			return false
		}
		s.pos++
		if s.peek() == ']' {
			s.pos++
			return true
		}
		for {
			if !s.isCanonical(depth + 1) {
				return false
			}
			switch s.peek() {
			case ',':
				s.pos++
			case ']':
				s.pos++
				return true
			default:
				return false
			}
		}
	case c == '"':
		_, ok := s.plainString()
		return ok
	case c == '-' || (c >= '0' && c <= '9'):
		return s.skipNumber() == nil
	case c == 't':
		return s.skipLiteral("true")
	case c == 'f':
		return s.skipLiteral("false")
	case c == 'n':
		return s.skipLiteral("null")
	default:
		return false
	}
}

// plainString reads a string without escapes or control characters and
// returns its bytes between the quotes; false for any other input.
func (s *scanner) plainString() ([]byte, bool) {
	if s.peek() != '"' {
		return nil, false
	}
	start := s.pos + 1
	for i := start; i < len(s.data); i++ {
		switch c := s.data[i]; {
		case c == '"':
			s.pos = i + 1
			return s.data[start:i], true
		case c == '\\' || c < 0x20:
			return nil, false
		}
	}
	return nil, false
}

func (s *scanner) skipLiteral(lit string) bool {
	if !strings.HasPrefix(string(s.data[s.pos:min(len(s.data), s.pos+len(lit))]), lit) {
		return false
	}
	s.pos += len(lit)
	return true
}

// value appends the canonical form of the next JSON value to dst. depth is the
// number of objects and arrays that enclose it.
func (s *scanner) value(dst []byte, depth int) ([]byte, error) {
	switch c := s.peek(); {
	case c == '{':
		if depth >= s.maxDepth {
			return nil, s.errorf("nested deeper than %d levels", s.maxDepth-s.outer)
		}
		return s.objectValue(dst, depth+1)
	case c == '[':
		if depth >= s.maxDepth {
			return nil, s.errorf("nested deeper than %d levels", s.maxDepth-s.outer)
		}
		return s.arrayValue(dst, depth+1)
	case c == '"':
		str, err := s.str()
		if err != nil {
			return nil, err
		}
		return appendString(dst, str), nil
	case c == '-' || (c >= '0' && c <= '9'):
		num, err := s.number()
		if err != nil {
			return nil, err
		}
		return append(dst, num...), nil
	case c == 't':
		return s.literal(dst, "true")
	case c == 'f':
		return s.literal(dst, "false")
	case c == 'n':
		return s.literal(dst, "null")
	case s.pos >= len(s.data):
		return nil, s.errorf("unexpected end of input, want a value")
	default:
		return nil, s.errorf("unexpected %s, want a value", describe(c))
	}
}

func (s *scanner) literal(dst []byte, lit string) ([]byte, error) {
	if !strings.HasPrefix(string(s.data[s.pos:min(len(s.data), s.pos+len(lit))]), lit) {
		return nil, s.errorf("invalid literal, want %s", lit)
	}
	s.pos += len(lit)
	return append(dst, lit...), nil
}

// member is one object member whose canonical value sits at
// scratch[start:end].
type member struct {
	key        string
	start, end int
}

func (s *scanner) objectValue(dst []byte, depth int) ([]byte, error) {
	s.pos++ // '{'
	s.ws()
	if s.peek() == '}' {
		s.pos++
		return append(dst, '{', '}'), nil
	}
	var (
		members []member
		scratch []byte
	)
	for {
		if s.peek() != '"' {
			return nil, s.errorf("want a string key")
		}
		key, err := s.str()
		if err != nil {
			return nil, err
		}
		s.ws()
		if err := s.expect(':'); err != nil {
			return nil, err
		}
		s.ws()
		start := len(scratch)
		if scratch, err = s.value(scratch, depth); err != nil {
			return nil, err
		}
		members = append(members, member{key: key, start: start, end: len(scratch)})
		s.ws()
		if s.peek() == ',' {
			s.pos++
			s.ws()
			continue
		}
		if err := s.expect('}'); err != nil {
			return nil, err
		}
		break
	}
	slices.SortFunc(members, func(a, b member) int { return strings.Compare(a.key, b.key) })
	dst = append(dst, '{')
	for i, m := range members {
		if i > 0 {
			if m.key == members[i-1].key {
				return nil, fmt.Errorf("duplicate key %s", quote(m.key))
			}
			dst = append(dst, ',')
		}
		dst = appendString(dst, m.key)
		dst = append(dst, ':')
		dst = append(dst, scratch[m.start:m.end]...)
	}
	return append(dst, '}'), nil
}

func (s *scanner) arrayValue(dst []byte, depth int) ([]byte, error) {
	s.pos++ // '['
	dst = append(dst, '[')
	s.ws()
	if s.peek() == ']' {
		s.pos++
		return append(dst, ']'), nil
	}
	for {
		var err error
		if dst, err = s.value(dst, depth); err != nil {
			return nil, err
		}
		s.ws()
		if s.peek() == ',' {
			s.pos++
			s.ws()
			dst = append(dst, ',')
			continue
		}
		if err := s.expect(']'); err != nil {
			return nil, err
		}
		return append(dst, ']'), nil
	}
}

// number reads a JSON number and returns its literal text.
func (s *scanner) number() (string, error) {
	start := s.pos
	if err := s.skipNumber(); err != nil {
		return "", err
	}
	return s.sub(start, s.pos), nil
}

// skipNumber reads a JSON number.
func (s *scanner) skipNumber() error {
	if s.peek() == '-' {
		s.pos++
	}
	switch c := s.peek(); {
	case c == '0':
		s.pos++
	case c >= '1' && c <= '9':
		s.digits()
	default:
		return s.errorf("invalid number")
	}
	if s.peek() == '.' {
		s.pos++
		if !s.digits() {
			return s.errorf("invalid number: no digits after the decimal point")
		}
	}
	if c := s.peek(); c == 'e' || c == 'E' {
		s.pos++
		if c := s.peek(); c == '+' || c == '-' {
			s.pos++
		}
		if !s.digits() {
			return s.errorf("invalid number: no digits in the exponent")
		}
	}
	return nil
}

// digits skips decimal digits and reports whether there was at least one.
func (s *scanner) digits() bool {
	start := s.pos
	for c := s.peek(); c >= '0' && c <= '9'; c = s.peek() {
		s.pos++
	}
	return s.pos > start
}

// str reads a JSON string and returns its decoded value. The input is known to
// be valid UTF-8.
func (s *scanner) str() (string, error) {
	s.pos++ // '"'
	start := s.pos
	for s.pos < len(s.data) {
		switch c := s.data[s.pos]; {
		case c == '"':
			out := s.sub(start, s.pos)
			s.pos++
			return out, nil
		case c == '\\':
			return s.strEscaped(start)
		case c < 0x20:
			return "", s.errorf("control character in string")
		default:
			s.pos++
		}
	}
	return "", s.errorf("unterminated string")
}

// strEscaped finishes a string that contains escapes; start is the offset
// just after the opening quote.
func (s *scanner) strEscaped(start int) (string, error) {
	var b strings.Builder
	b.Write(s.data[start:s.pos])
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		switch {
		case c == '"':
			s.pos++
			return b.String(), nil
		case c < 0x20:
			return "", s.errorf("control character in string")
		case c != '\\':
			b.WriteByte(c)
			s.pos++
			continue
		}
		s.pos++ // '\\'
		switch e := s.peek(); e {
		case '"', '\\', '/':
			b.WriteByte(e)
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'u':
			r, err := s.unicodeEscape()
			if err != nil {
				return "", err
			}
			b.WriteRune(r)
			continue
		default:
			return "", s.errorf("invalid escape in string")
		}
		s.pos++
	}
	return "", s.errorf("unterminated string")
}

// unicodeEscape reads \uXXXX (s.pos at the 'u'), joining a surrogate pair.
func (s *scanner) unicodeEscape() (rune, error) {
	r, ok := s.hex4(s.pos + 1)
	if !ok {
		return 0, s.errorf("invalid \\u escape")
	}
	s.pos += 5
	switch {
	case r == 0:
		return 0, s.errorf("U+0000 is not allowed in strings")
	case r >= 0xDC00 && r <= 0xDFFF:
		return 0, s.errorf("lone low surrogate in string")
	case r >= 0xD800 && r <= 0xDBFF:
		if s.pos+1 >= len(s.data) || s.data[s.pos] != '\\' || s.data[s.pos+1] != 'u' {
			return 0, s.errorf("lone high surrogate in string")
		}
		lo, ok := s.hex4(s.pos + 2)
		if !ok || lo < 0xDC00 || lo > 0xDFFF {
			return 0, s.errorf("lone high surrogate in string")
		}
		s.pos += 6
		return 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00), nil
	}
	return r, nil
}

func (s *scanner) hex4(at int) (rune, bool) {
	if at+4 > len(s.data) {
		return 0, false
	}
	var r rune
	for _, c := range s.data[at : at+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// appendString appends the canonical encoding of str (see Canonical).
func appendString(dst []byte, str string) []byte {
	const hexDigits = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(str); i++ {
		c := str[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, str[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
		}
		start = i + 1
	}
	dst = append(dst, str[start:]...)
	return append(dst, '"')
}

// describe names an unexpected input byte for an error detail.
func describe(c byte) string {
	if c >= 0x20 && c < 0x7F {
		return fmt.Sprintf("%q", c)
	}
	return fmt.Sprintf("byte 0x%02x", c)
}

// Members walks obj, a JSON object in canonical form (a payload as Decode
// gives it to a decoder), calling fn with each member's key and the bytes
// of its value, in order. It stops and reports false as soon as fn does, or
// at anything a canonical object of plain values does not have: a key or a
// string with an escape, whitespace, members out of order. A decoder that
// reads the common shape of its payload this way falls back to
// encoding/json when Members says false (see CanonicalDecoder).
func Members(obj []byte, fn func(key, value []byte) bool) bool {
	s := scanner{data: obj, maxDepth: MaxPayloadDepth}
	return s.peek() == '{' && utf8.Valid(obj) && s.members(0, fn) && s.pos == len(s.data)
}

// members reads the object at s.pos, at depth, as isCanonical does, and
// gives fn (when not nil) each member's key and value; false as soon as fn
// says so or the object is not canonical.
func (s *scanner) members(depth int, fn func(key, value []byte) bool) bool {
	s.pos++ // '{'
	if s.peek() == '}' {
		s.pos++
		return true
	}
	var prev []byte
	for first := true; ; first = false {
		key, ok := s.plainString()
		if !ok || !first && string(key) <= string(prev) || s.peek() != ':' {
			return false
		}
		prev = key
		s.pos++
		start := s.pos
		if !s.isCanonical(depth+1) || fn != nil && !fn(key, s.data[start:s.pos]) {
			return false
		}
		switch s.peek() {
		case ',':
			s.pos++
		case '}':
			s.pos++
			return true
		default:
			return false
		}
	}
}

// PlainString is the text of value, a JSON string without escapes (what
// Members gives for one); false for any other value.
func PlainString(value []byte) (string, bool) {
	b, ok := PlainBytes(value)
	return string(b), ok
}

// PlainBytes is PlainString's text as the bytes between value's quotes,
// for a decoder that parses them (an id, a time) and keeps no string.
func PlainBytes(value []byte) ([]byte, bool) {
	if len(value) < 2 || value[0] != '"' || value[len(value)-1] != '"' {
		return nil, false
	}
	s := scanner{data: value}
	if b, ok := s.plainString(); ok && s.pos == len(value) && utf8.Valid(b) {
		return b, true
	}
	return nil, false
}
