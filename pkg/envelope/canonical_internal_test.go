package envelope

import (
	"bytes"
	"errors"
	"testing"
	"unicode/utf8"
)

// rebuilt is the canonical form of in by value alone, without the check of
// an input already canonical.
func rebuilt(in []byte) ([]byte, error) {
	if !utf8.Valid(in) {
		return nil, errors.New("invalid UTF-8")
	}
	s := scanner{data: in, maxDepth: MaxPayloadDepth}
	s.ws()
	if s.peek() != '{' {
		return nil, errors.New("not a JSON object")
	}
	out, err := s.value(nil, 0)
	if err != nil {
		return nil, err
	}
	if err := s.end(); err != nil {
		return nil, err
	}
	return out, nil
}

// FuzzCanonicalInPlace checks that a valid UTF-8 input isCanonical accepts
// is exactly what value would write for it, so that the check in place never
// changes a digest, and that Canonical agrees with value on every input.
// isCanonical is only ever given input already checked as valid UTF-8 (by
// object and envelope), so the in-place claim is only made for such input.
func FuzzCanonicalInPlace(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":null,"b":[1,{"a":"é"}]}`, `{"a":1,"a":2}`, `{"b":1,"a":2}`,
		`{"a":"x\"y"}`, `{"a":[]}`, `{"":0,"a":-0.5e+3,"b":true,"c":false}`, `{"a":01}`, `{"a" :1}`, `{"a":1,}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		want, werr := rebuilt(in)
		s := scanner{data: in, maxDepth: MaxPayloadDepth}
		if utf8.Valid(in) && len(in) > 0 && in[0] == '{' && s.isCanonical(0) && s.pos == len(in) {
			if werr != nil || !bytes.Equal(want, in) {
				t.Fatalf("isCanonical accepted %q, which value makes %q (%v)", in, want, werr)
			}
		}
		got, gerr := Canonical(in)
		if (gerr == nil) != (werr == nil) || !bytes.Equal(got, want) {
			t.Fatalf("Canonical(%q) = %q, %v; value: %q, %v", in, got, gerr, want, werr)
		}
	})
}
