package httpx

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// The problem codes of strict JSON (CheckJSON) and clean text (CheckText),
// all 400.
const (
	// CodeDuplicateField: an object names a member twice ({"a":1,"a":2});
	// encoding/json would keep the last.
	CodeDuplicateField = "duplicate_field"
	// CodeFieldCase: a member named in other letter case than the field
	// ("METERCODE" for "meterCode"); encoding/json would match it.
	CodeFieldCase = "field_name_case"
	// CodeInvalidUTF8: a body, path or query parameter that is not valid
	// UTF-8, or a JSON string escaping half a surrogate pair.
	CodeInvalidUTF8 = "invalid_utf8"
	// CodeNULCharacter: U+0000 in a JSON string, a path or a query
	// parameter (PostgreSQL text cannot hold it).
	CodeNULCharacter = "nul_character"
	// CodeNumberTooLarge: a JSON number of more than MaxNumberChars
	// characters or with an exponent of more than two digits, refused before
	// anything parses it.
	CodeNumberTooLarge = "number_too_large"
	// CodeTooDeep: objects and arrays nested deeper than MaxDepth.
	CodeTooDeep = "json_too_deep"
)

// MaxNumberChars is the longest JSON number CheckJSON accepts.
const MaxNumberChars = 40

// MaxDepth is how deeply CheckJSON lets objects and arrays nest.
const MaxDepth = 16

// CheckJSON checks that body is exactly one JSON value fit for decoding into
// a value of dst's type with encoding/json and no leniency: valid UTF-8, no
// NUL and no lone surrogate in any string, no member named twice in an
// object (for a struct, not even in other letter case), members of a struct
// named exactly as its fields (encoding/json matches case-insensitively),
// no number longer than MaxNumberChars or with an exponent beyond two
// digits, nesting at most MaxDepth, nothing after the value, and not null
// for a struct or a map (the decoder would leave it untouched). Unknown fields
// and wrong types are left to the decoder (DecodeJSON). It returns nil when
// the body passes, or a 400 problem: malformed_json, invalid_utf8,
// nul_character, duplicate_field, field_name_case, number_too_large,
// json_too_deep.
func CheckJSON(body []byte, dst any) *Problem {
	if !utf8.Valid(body) {
		return NewProblem(http.StatusBadRequest, CodeInvalidUTF8, "body is not valid UTF-8")
	}
	if p := checkEscapes(body); p != nil {
		return p
	}
	var t reflect.Type
	if dst != nil {
		t = reflect.TypeOf(dst)
	}
	w := walker{b: body, path: make([]step, 0, MaxDepth)}
	w.space()
	if bytes.HasPrefix(body[w.i:], []byte("null")) && wantsObject(t) {
		// encoding/json leaves the value as it was: a command would run
		// with every field absent (PUT settings would reset them).
		return NewProblem(http.StatusBadRequest, "malformed_json", "body must be a JSON object, not null")
	}
	if p := w.value(t, 0); p != nil {
		return p
	}
	if w.space(); w.i < len(body) {
		return NewProblem(http.StatusBadRequest, "malformed_json", "body must hold exactly one JSON value, with nothing after it")
	}
	return nil
}

// wantsObject reports whether t (through pointers) is a struct or a map: a
// body decoded into one must be a JSON object.
func wantsObject(t reflect.Type) bool {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t != nil && (t.Kind() == reflect.Struct || t.Kind() == reflect.Map)
}

// checkEscapes refuses \u0000 and escaped lone surrogates in the strings of
// body, which must be valid UTF-8 (the decoder would turn them into U+0000
// and U+FFFD silently). Anything else malformed is the decoder's to find.
func checkEscapes(body []byte) *Problem {
	inString := false
	pendingHigh := false // the previous escape was a high surrogate
	for i := 0; i < len(body); i++ {
		c := body[i]
		if !inString {
			if c == '"' {
				inString = true
			}
			continue
		}
		if c == '"' {
			if pendingHigh {
				return loneSurrogate()
			}
			inString = false
			continue
		}
		if c != '\\' {
			if pendingHigh {
				return loneSurrogate()
			}
			continue
		}
		if i+1 >= len(body) {
			return nil // the decoder says malformed_json
		}
		if body[i+1] != 'u' {
			if pendingHigh {
				return loneSurrogate()
			}
			i++ // skip the escaped character (it may be a quote)
			continue
		}
		if i+6 > len(body) {
			return nil
		}
		var r rune
		for _, h := range body[i+2 : i+6] {
			switch {
			case h >= '0' && h <= '9':
				r = r<<4 | rune(h-'0')
			case h >= 'a' && h <= 'f':
				r = r<<4 | rune(h-'a'+10)
			case h >= 'A' && h <= 'F':
				r = r<<4 | rune(h-'A'+10)
			default:
				return nil
			}
		}
		i += 5
		switch {
		case r == 0:
			return nulProblem("a JSON string")
		case r >= 0xD800 && r <= 0xDBFF:
			if pendingHigh {
				return loneSurrogate()
			}
			pendingHigh = true
		case r >= 0xDC00 && r <= 0xDFFF:
			if !pendingHigh {
				return loneSurrogate()
			}
			pendingHigh = false
		default:
			if pendingHigh {
				return loneSurrogate()
			}
		}
	}
	return nil
}

func loneSurrogate() *Problem {
	return NewProblem(http.StatusBadRequest, CodeInvalidUTF8, `a JSON string escapes half a surrogate pair (\uD800-\uDFFF alone): not a character`)
}

func nulProblem(where string) *Problem {
	return Problemf(http.StatusBadRequest, CodeNULCharacter, "%s holds U+0000 (NUL), which no field accepts", where)
}

// walker reads a JSON value from its bytes, following the Go type it decodes
// into: one pass, which allocates only for a member name with escapes and
// for an object's members past smallObject. The grammar is RFC 8259's, as
// encoding/json reads it; what the walker passes, the decoder parses.
type walker struct {
	b    []byte
	i    int
	path []step // where the value being read is, for a problem to name
}

// step is one step of a path into the body: an element (index) or a
// member (name, index -1).
type step struct {
	name  []byte
	index int
}

// where renders the path of the value being read ("events[3].quantity").
func (w *walker) where() string {
	var b strings.Builder
	for i, s := range w.path {
		switch {
		case s.index >= 0:
			fmt.Fprintf(&b, "[%d]", s.index)
		case i > 0:
			b.WriteByte('.')
			fallthrough
		default:
			b.Write(s.name)
		}
	}
	return b.String()
}

func malformed() *Problem {
	return NewProblem(http.StatusBadRequest, "malformed_json", "body is not valid JSON")
}

func (w *walker) space() {
	for w.i < len(w.b) {
		switch w.b[w.i] {
		case ' ', '\t', '\n', '\r':
			w.i++
		default:
			return
		}
	}
}

// value checks the value at w.i (after white space), decoded into t (nil:
// any value; its objects still may not repeat a member).
func (w *walker) value(t reflect.Type, depth int) *Problem {
	t = decodedAs(t)
	w.space()
	if w.i >= len(w.b) {
		return malformed()
	}
	switch c := w.b[w.i]; {
	case c == '{' || c == '[':
		if depth >= MaxDepth {
			return Problemf(http.StatusBadRequest, CodeTooDeep, "objects and arrays nest deeper than %d", MaxDepth)
		}
		w.i++
		if c == '{' {
			return w.object(t, depth+1)
		}
		return w.array(t, depth+1)
	case c == '"':
		_, ok := w.string()
		if !ok {
			return malformed()
		}
	case c == '-' || c >= '0' && c <= '9':
		return w.number()
	case c == 't':
		return w.literal("true")
	case c == 'f':
		return w.literal("false")
	case c == 'n':
		return w.literal("null")
	default:
		return malformed()
	}
	return nil
}

func (w *walker) literal(lit string) *Problem {
	if !bytes.HasPrefix(w.b[w.i:], []byte(lit)) {
		return malformed()
	}
	w.i += len(lit)
	return nil
}

// string reads a string at w.i, its opening quote, and returns its content
// as written (escapes and all) and whether it was well formed. UTF-8 and
// the escapes' code points were checked before (checkEscapes).
func (w *walker) string() ([]byte, bool) {
	start := w.i + 1
	for i := start; i < len(w.b); {
		switch c := w.b[i]; {
		case c == '"':
			w.i = i + 1
			return w.b[start:i], true
		case c < 0x20:
			return nil, false
		case c != '\\':
			i++
		case i+1 >= len(w.b):
			return nil, false
		case w.b[i+1] == 'u':
			if i+6 > len(w.b) || !isHex(w.b[i+2]) || !isHex(w.b[i+3]) || !isHex(w.b[i+4]) || !isHex(w.b[i+5]) {
				return nil, false
			}
			i += 6
		case isEscape(w.b[i+1]):
			i += 2
		default:
			return nil, false
		}
	}
	return nil, false
}

// isEscape reports whether c may follow a backslash (the \u escape aside).
func isEscape(c byte) bool {
	switch c {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return true
	}
	return false
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// number reads a number at w.i: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?,
// at most MaxNumberChars long, its exponent at most two digits.
func (w *walker) number() *Problem {
	start := w.i
	i := start
	digits := func() int {
		n := 0
		for i < len(w.b) && w.b[i] >= '0' && w.b[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if w.b[i] == '-' {
		i++
	}
	switch {
	case i < len(w.b) && w.b[i] == '0':
		i++
	case digits() == 0:
		return malformed()
	}
	if i < len(w.b) && w.b[i] == '.' {
		i++
		if digits() == 0 {
			return malformed()
		}
	}
	expAt := -1
	if i < len(w.b) && (w.b[i] == 'e' || w.b[i] == 'E') {
		i++
		if i < len(w.b) && (w.b[i] == '+' || w.b[i] == '-') {
			i++
		}
		expAt = i
		if digits() == 0 {
			return malformed()
		}
	}
	w.i = i
	if i-start > MaxNumberChars {
		return Problemf(http.StatusBadRequest, CodeNumberTooLarge, "%s: a number of more than %d characters", w.fieldName(), MaxNumberChars)
	}
	if expAt >= 0 && len(bytes.TrimLeft(w.b[expAt:i], "0")) > 2 {
		return Problemf(http.StatusBadRequest, CodeNumberTooLarge, "%s: a number with an exponent beyond two digits", w.fieldName())
	}
	return nil
}

func (w *walker) fieldName() string {
	if len(w.path) == 0 {
		return "the body"
	}
	return fmt.Sprintf("field %q", w.where())
}

// array checks the elements of an array, after its '['.
func (w *walker) array(t reflect.Type, depth int) *Problem {
	var elem reflect.Type
	if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
		elem = t.Elem()
	}
	if w.space(); w.i < len(w.b) && w.b[w.i] == ']' {
		w.i++
		return nil
	}
	for n := 0; ; n++ {
		w.path = append(w.path, step{index: n})
		if p := w.value(elem, depth); p != nil {
			return p
		}
		w.path = w.path[:len(w.path)-1]
		if done, p := w.after(']'); done || p != nil {
			return p
		}
	}
}

// after reads what follows an element or a member: a comma, with more to
// come, or close, the end (done).
func (w *walker) after(close byte) (done bool, p *Problem) {
	if w.space(); w.i >= len(w.b) {
		return false, malformed()
	}
	switch w.b[w.i] {
	case ',':
		w.i++
		return false, nil
	case close:
		w.i++
		return true, nil
	}
	return false, malformed()
}

// object checks the members of an object, after its '{'.
func (w *walker) object(t reflect.Type, depth int) *Problem {
	var fields map[string]reflect.Type
	var elem reflect.Type
	switch {
	case t != nil && t.Kind() == reflect.Struct:
		fields = structFields(t)
	case t != nil && t.Kind() == reflect.Map:
		elem = t.Elem()
	}
	if w.space(); w.i < len(w.b) && w.b[w.i] == '}' {
		w.i++
		return nil
	}
	// encoding/json matches struct fields case-insensitively (as
	// bytes.EqualFold), so a struct's members may not repeat in any case.
	seen := members{fold: fields != nil}
	for {
		if w.space(); w.i >= len(w.b) || w.b[w.i] != '"' {
			return malformed()
		}
		raw, ok := w.string()
		if !ok {
			return malformed()
		}
		key := raw
		if bytes.IndexByte(raw, '\\') >= 0 {
			var s string
			if json.Unmarshal(w.b[w.i-len(raw)-2:w.i], &s) != nil {
				return malformed()
			}
			key = []byte(s)
		}
		if bytes.IndexByte(key, 0) >= 0 {
			return nulProblem("a member name")
		}
		w.path = append(w.path, step{name: key, index: -1})
		if prev, dup := seen.add(key); dup {
			if bytes.Equal(prev, key) {
				return Problemf(http.StatusBadRequest, CodeDuplicateField, "member %q appears twice in one object", clipText(w.where()))
			}
			return Problemf(http.StatusBadRequest, CodeDuplicateField, "members %q and %q name the same field", clipText(string(prev)), clipText(string(key)))
		}
		vt := elem
		if fields != nil {
			ft, exact := fields[string(key)]
			if !exact {
				for name := range fields {
					if strings.EqualFold(name, string(key)) {
						return Problemf(http.StatusBadRequest, CodeFieldCase, "member %q: field names are case-sensitive, this one is %q", clipText(w.where()), name)
					}
				}
				// An unknown field: the decoder refuses it (unknown_field).
			}
			vt = ft
		}
		if w.space(); w.i >= len(w.b) || w.b[w.i] != ':' {
			return malformed()
		}
		w.i++
		if p := w.value(vt, depth); p != nil {
			return p
		}
		w.path = w.path[:len(w.path)-1]
		if done, p := w.after('}'); done || p != nil {
			return p
		}
	}
}

// smallObject is how many members an object's names are compared one by
// one; past it they go into a map, so a body's cost stays linear in its
// size however many members one object has.
const smallObject = 16

// members are the names an object has had so far.
type members struct {
	fold  bool // compare as encoding/json matches struct fields
	names [smallObject][]byte
	n     int // names held
	index map[string][]byte
}

// add records name and returns the earlier name it repeats, if any.
func (m *members) add(name []byte) ([]byte, bool) {
	if m.index == nil {
		for _, prev := range m.names[:m.n] {
			if bytes.Equal(prev, name) || m.fold && bytes.EqualFold(prev, name) {
				return prev, true
			}
		}
		if m.n < smallObject {
			m.names[m.n] = name
			m.n++
			return nil, false
		}
		m.index = make(map[string][]byte, 2*smallObject)
		for _, prev := range m.names {
			m.index[m.key(prev)] = prev
		}
	}
	k := m.key(name)
	if prev, dup := m.index[k]; dup {
		return prev, true
	}
	m.index[k] = name
	return nil, false
}

func (m *members) key(name []byte) string {
	if m.fold {
		return foldKey(string(name))
	}
	return string(name)
}

var (
	rawMessageType  = reflect.TypeFor[json.RawMessage]()
	unmarshalerType = reflect.TypeFor[json.Unmarshaler]()
)

// decodedAs is the type whose shape a value decoded into t must have: t
// without its pointers, or nil for any value (a json.RawMessage, an
// interface, a type with its own UnmarshalJSON).
func decodedAs(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && (t == rawMessageType || t.Kind() == reflect.Interface ||
		reflect.PointerTo(t).Implements(unmarshalerType)) {
		return nil
	}
	return t
}

// structFields maps the JSON names of t's fields (embedded structs'
// promoted) to their types, worked out once per type.
func structFields(t reflect.Type) map[string]reflect.Type {
	if f, ok := fieldsOf.Load(t); ok {
		return f.(map[string]reflect.Type)
	}
	f, _ := fieldsOf.LoadOrStore(t, readFields(t))
	return f.(map[string]reflect.Type)
}

// fieldsOf caches structFields: reflect.Type -> map[string]reflect.Type.
var fieldsOf sync.Map

func readFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range readFields(ft) {
					if _, ok := out[k]; !ok {
						out[k] = v
					}
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

// foldKey folds a member name as encoding/json does when it matches one to a
// struct field (Unicode simple case folding, so "K" and the Kelvin sign
// match).
func foldKey(s string) string {
	var b strings.Builder
	for _, r := range s {
		// The smallest rune of r's fold orbit, as encoding/json's foldRune.
		m := r
		for r2 := unicode.SimpleFold(r); r2 != r; r2 = unicode.SimpleFold(r2) {
			m = min(m, r2)
		}
		b.WriteRune(m)
	}
	return b.String()
}

// clipText shortens a client's text quoted back in a problem.
func clipText(s string) string {
	const max = 64
	if r := []rune(s); len(r) > max {
		return string(r[:max]) + "..."
	}
	return s
}

// CheckText refuses a path or query parameter value that is not valid UTF-8
// or holds NUL: 400 invalid_utf8 or nul_character naming what.
func CheckText(what, s string) *Problem {
	if !utf8.ValidString(s) {
		return Problemf(http.StatusBadRequest, CodeInvalidUTF8, "%s is not valid UTF-8", what)
	}
	if strings.ContainsRune(s, 0) {
		return nulProblem(what)
	}
	return nil
}

// CleanText refuses, before any handler reads them, a request whose path or
// query parameters (names and values, percent-decoded) are not valid UTF-8
// or hold NUL (CheckText), a query string that does not parse
// (invalid_query, 400) and a query parameter given more than once
// (repeated_query_parameter, 400). Handlers and the database then see only text they
// can store.
func CleanText(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := CheckRequestText(r); p != nil {
			WriteProblem(w, p)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// CheckRequestText is CleanText's check of one request.
func CheckRequestText(r *http.Request) *Problem {
	if p := CheckText("the path", r.URL.Path); p != nil {
		return p
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return NewProblem(http.StatusBadRequest, "invalid_query", "the query string does not parse: "+err.Error())
	}
	for k, vs := range q {
		if p := CheckText("a query parameter name", k); p != nil {
			return p
		}
		if len(vs) > 1 && !slices.Contains(ListParameters, k) {
			return repeatedParameter(k)
		}
		for _, v := range vs {
			if p := CheckText(fmt.Sprintf("query parameter %q", clipText(strings.ToValidUTF8(k, "?"))), v); p != nil {
				return p
			}
		}
	}
	return nil
}
