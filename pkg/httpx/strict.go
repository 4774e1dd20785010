package httpx

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
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
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var t reflect.Type
	if dst != nil {
		t = reflect.TypeOf(dst)
	}
	w := walker{dec: dec}
	tok, err := dec.Token()
	if err != nil {
		return NewProblem(http.StatusBadRequest, "malformed_json", "body is not valid JSON")
	}
	if tok == nil && wantsObject(t) {
		// encoding/json leaves the value as it was: a command would run
		// with every field absent (PUT settings would reset them).
		return NewProblem(http.StatusBadRequest, "malformed_json", "body must be a JSON object, not null")
	}
	if p := w.value(tok, t, "", 0); p != nil {
		return p
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
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

// walker follows the tokens of a JSON value and the Go type it decodes into.
type walker struct{ dec *json.Decoder }

var (
	rawMessageType  = reflect.TypeFor[json.RawMessage]()
	unmarshalerType = reflect.TypeFor[json.Unmarshaler]()
)

// value checks the value that starts with tok, decoded into t (nil: any
// value; its objects still may not repeat a member).
func (w *walker) value(tok json.Token, t reflect.Type, path string, depth int) *Problem {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && (t == rawMessageType || t.Kind() == reflect.Interface ||
		reflect.PointerTo(t).Implements(unmarshalerType)) {
		t = nil
	}
	switch v := tok.(type) {
	case json.Delim:
		if depth >= MaxDepth {
			return Problemf(http.StatusBadRequest, CodeTooDeep, "objects and arrays nest deeper than %d", MaxDepth)
		}
		if v == '{' {
			return w.object(t, path, depth+1)
		}
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for i := 0; ; i++ {
			tok, err := w.dec.Token()
			if err != nil {
				return NewProblem(http.StatusBadRequest, "malformed_json", "body is not valid JSON")
			}
			if tok == json.Delim(']') {
				return nil
			}
			if p := w.value(tok, elem, fmt.Sprintf("%s[%d]", path, i), depth+1); p != nil {
				return p
			}
		}
	case string:
		if strings.ContainsRune(v, 0) {
			return nulProblem(fieldName(path))
		}
	case json.Number:
		if len(v) > MaxNumberChars {
			return Problemf(http.StatusBadRequest, CodeNumberTooLarge, "%s: a number of more than %d characters", fieldName(path), MaxNumberChars)
		}
		if i := strings.IndexAny(string(v), "eE"); i >= 0 {
			exp := strings.TrimLeft(string(v[i+1:]), "+-")
			if len(strings.TrimLeft(exp, "0")) > 2 {
				return Problemf(http.StatusBadRequest, CodeNumberTooLarge, "%s: a number with an exponent beyond two digits", fieldName(path))
			}
		}
	}
	return nil
}

func fieldName(path string) string {
	if path == "" {
		return "the body"
	}
	return fmt.Sprintf("field %q", path)
}

// object checks the members of an object, after its '{'.
func (w *walker) object(t reflect.Type, path string, depth int) *Problem {
	var fields map[string]reflect.Type
	var elem reflect.Type
	switch {
	case t != nil && t.Kind() == reflect.Struct:
		fields = structFields(t)
	case t != nil && t.Kind() == reflect.Map:
		elem = t.Elem()
	}
	seen := map[string]string{}
	for {
		tok, err := w.dec.Token()
		if err != nil {
			return NewProblem(http.StatusBadRequest, "malformed_json", "body is not valid JSON")
		}
		if tok == json.Delim('}') {
			return nil
		}
		key, ok := tok.(string)
		if !ok {
			return NewProblem(http.StatusBadRequest, "malformed_json", "body is not valid JSON")
		}
		member := key
		if path != "" {
			member = path + "." + key
		}
		if strings.ContainsRune(key, 0) {
			return nulProblem("a member name")
		}
		fold := key
		if fields != nil {
			fold = foldKey(key) // encoding/json matches struct fields so
		}
		if prev, dup := seen[fold]; dup {
			if prev == key {
				return Problemf(http.StatusBadRequest, CodeDuplicateField, "member %q appears twice in one object", clipText(member))
			}
			return Problemf(http.StatusBadRequest, CodeDuplicateField, "members %q and %q name the same field", clipText(prev), clipText(key))
		}
		seen[fold] = key
		vt := elem
		if fields != nil {
			ft, exact := fields[key]
			if !exact {
				for name := range fields {
					if foldKey(name) == fold {
						return Problemf(http.StatusBadRequest, CodeFieldCase, "member %q: field names are case-sensitive, this one is %q", clipText(member), name)
					}
				}
				// An unknown field: the decoder refuses it (unknown_field).
			}
			vt = ft
		}
		tok, err = w.dec.Token()
		if err != nil {
			return NewProblem(http.StatusBadRequest, "malformed_json", "body is not valid JSON")
		}
		if p := w.value(tok, vt, member, depth); p != nil {
			return p
		}
	}
}

// structFields maps the JSON names of t's fields (embedded structs'
// promoted) to their types.
func structFields(t reflect.Type) map[string]reflect.Type {
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
				for k, v := range structFields(ft) {
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
