package envelope_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/usagebilling/billing/pkg/envelope"
)

func TestCanonical(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"empty object", " {} ", `{}`},
		{"keys sorted by bytes", `{"b":1,"B":2,"é":3,"a":4,"aa":5,"":6}`, `{"":6,"B":2,"a":4,"aa":5,"b":1,"é":3}`},
		{"nested objects sorted, arrays kept", `{"z":[{"y":1,"x":2},3,"s"],"a":{"d":null,"c":true,"b":false}}`,
			`{"a":{"b":false,"c":true,"d":null},"z":[{"x":2,"y":1},3,"s"]}`},
		{"whitespace dropped", "{\n\t\"a\" :\r [ 1 , 2 ] ,\"b\":{ } , \"c\" : [ ] }", `{"a":[1,2],"b":{},"c":[]}`},
		{"numbers verbatim", `{"a":1.0,"b":-0,"c":1E+2,"d":12345678901234567890123,"e":0.1e-7}`,
			`{"a":1.0,"b":-0,"c":1E+2,"d":12345678901234567890123,"e":0.1e-7}`},
		{"no HTML escaping", `{"s":"\u003ca href=\"x\"\u003e \u0026 </a>"}`, `{"s":"<a href=\"x\"> & </a>"}`},
		{"escapes minimal", `{"s":"\/\u00e9\ud83d\ude00\u2028\u2029\u007f"}`, "{\"s\":\"/é😀\u2028\u2029\u007f\"}"},
		{"short escapes", `{"s":"\u0008\u0009\u000a\u000c\u000d\"\\"}`, `{"s":"\b\t\n\f\r\"\\"}`},
		{"other controls as lowercase \\u00xx", `{"s":"\u0001\u001F\u001b"}`, `{"s":"\u0001\u001f\u001b"}`},
		{"escaped keys", `{"\u0062":1,"\u0061":2}`, `{"a":2,"b":1}`},
		{"literal UTF-8 kept", `{"k":"한국어 ✓"}`, `{"k":"한국어 ✓"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := envelope.Canonical([]byte(tt.in))
			if err != nil {
				t.Fatalf("Canonical: %v", err)
			}
			if string(got) != tt.want {
				t.Errorf("Canonical(%s)\n got %s\nwant %s", tt.in, got, tt.want)
			}
			again, err := envelope.Canonical(got)
			if err != nil || string(again) != string(got) {
				t.Errorf("Canonical is not idempotent: %s, %v", again, err)
			}
			digest, err := envelope.Digest([]byte(tt.in))
			sum := sha256.Sum256([]byte(tt.want))
			if err != nil || digest != hex.EncodeToString(sum[:]) {
				t.Errorf("Digest = %s, %v; want sha256 of the canonical form", digest, err)
			}
		})
	}
}

func TestCanonicalRejects(t *testing.T) {
	deep := func(n int) string { return strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n) }
	if _, err := envelope.Canonical([]byte(deep(envelope.MaxPayloadDepth))); err != nil {
		t.Fatalf("Canonical at MaxPayloadDepth: %v", err)
	}
	tests := map[string]string{
		"empty":               ``,
		"array":               `[]`,
		"string":              `"x"`,
		"null":                `null`,
		"trailing data":       `{} {}`,
		"trailing comma":      `{"a":1,}`,
		"array trailing":      `{"a":[1,]}`,
		"duplicate key":       `{"a":1,"a":2}`,
		"duplicate escaped":   `{"a":1,"\u0061":2}`,
		"nested duplicate":    `{"x":[{"a":1,"b":2,"a":3}]}`,
		"lone high surrogate": `{"s":"\ud800"}`,
		"lone low surrogate":  `{"s":"\udc00x"}`,
		"bad surrogate pair":  `{"s":"\ud800\u0041"}`,
		"NUL escape":          `{"s":"\u0000"}`,
		"raw control":         "{\"s\":\"a\tb\"}",
		"invalid UTF-8":       "{\"s\":\"\xff\"}",
		"bad escape":          `{"s":"\x"}`,
		"short \\u":           `{"s":"\u12"}`,
		"leading zero":        `{"n":01}`,
		"bare minus":          `{"n":-}`,
		"no fraction digits":  `{"n":1.}`,
		"no exponent digits":  `{"n":1e}`,
		"plus sign":           `{"n":+1}`,
		"NaN":                 `{"n":NaN}`,
		"single quotes":       `{'a':1}`,
		"unquoted key":        `{a:1}`,
		"bad literal":         `{"a":tru}`,
		"unterminated":        `{"a":"b`,
		"too deep":            deep(envelope.MaxPayloadDepth + 1),
		"too deep arrays":     `{"a":` + strings.Repeat("[", envelope.MaxPayloadDepth) + strings.Repeat("]", envelope.MaxPayloadDepth) + `}`,
	}
	for name, in := range tests {
		t.Run(name, func(t *testing.T) {
			if got, err := envelope.Canonical([]byte(in)); err == nil {
				t.Errorf("Canonical(%q) = %s, want an error", in, got)
			}
			if _, err := envelope.Digest([]byte(in)); err == nil {
				t.Errorf("Digest(%q) succeeded, want an error", in)
			}
		})
	}
}
