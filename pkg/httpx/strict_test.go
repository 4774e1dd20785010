package httpx

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

type strictBody struct {
	MeterCode string          `json:"meterCode"`
	Quantity  json.RawMessage `json:"quantity"`
	Count     int             `json:"count"`
	Tags      map[string]string
	Tiers     []struct {
		UpTo string `json:"upTo"`
	} `json:"tiers"`
	Nested *struct {
		Reason string `json:"reason"`
	} `json:"nested"`
}

// Every way a body may be lenient is refused with its own code; well-formed
// bodies decode.
func TestDecodeJSONStrict(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, body string
		status     int
		code       string
	}{
		{"ok", `{"meterCode":"api","quantity":"1.5","count":2,"tiers":[{"upTo":"10"}],"nested":{"reason":"r"},"Tags":{"a":"b","A":"c"}}`, 0, ""},
		{"ok escaped pair", `{"meterCode":"\ud83d\ude00"}`, 0, ""},
		{"ok escaped quote", `{"meterCode":"a\"\\u0000"}`, 0, ""},
		{"ok small exponent", `{"quantity":1e10}`, 0, ""},
		{"duplicate", `{"meterCode":"a","meterCode":"b"}`, 400, CodeDuplicateField},
		{"case variant duplicate", `{"meterCode":"a","METERCODE":"x"}`, 400, CodeDuplicateField},
		{"long s duplicate", `{"Tags":{},"Tag\u017f":{}}`, 400, CodeDuplicateField},
		{"case variant alone", `{"METERCODE":"x"}`, 400, CodeFieldCase},
		{"duplicate nested", `{"tiers":[{"upTo":"1","upTo":"2"}]}`, 400, CodeDuplicateField},
		{"duplicate in raw value", `{"quantity":{"a":1,"a":2}}`, 400, CodeDuplicateField},
		{"duplicate map key", `{"Tags":{"a":"b","a":"c"}}`, 400, CodeDuplicateField},
		{"unknown", `{"meterCode":"a","x":1}`, 400, "unknown_field"},
		{"trailing object", `{"meterCode":"a"} {}`, 400, "malformed_json"},
		{"trailing garbage", `{"meterCode":"a"}x`, 400, "malformed_json"},
		{"empty", ``, 400, "malformed_json"},
		{"array", `[]`, 400, "malformed_json"},
		{"truncated", `{"meterCode":`, 400, "malformed_json"},
		{"wrong type", `{"count":"2"}`, 400, "invalid_field"},
		{"escaped NUL", `{"meterCode":"a\u0000b"}`, 400, CodeNULCharacter},
		{"escaped NUL in a key", `{"Tags":{"a\u0000":"b"}}`, 400, CodeNULCharacter},
		{"raw NUL", "{\"meterCode\":\"a\x00b\"}", 400, "malformed_json"},
		{"invalid UTF-8", "{\"meterCode\":\"a\xffb\"}", 400, CodeInvalidUTF8},
		{"lone high surrogate", `{"meterCode":"\ud800"}`, 400, CodeInvalidUTF8},
		{"lone low surrogate", `{"meterCode":"\udc00x"}`, 400, CodeInvalidUTF8},
		{"high then escape", `{"meterCode":"\ud800\n"}`, 400, CodeInvalidUTF8},
		{"huge exponent", `{"quantity":1e999999999}`, 400, CodeNumberTooLarge},
		{"huge digits", `{"count":` + strings.Repeat("9", 500) + `}`, 400, CodeNumberTooLarge},
		{"deep", strings.Repeat(`{"quantity":`, 40) + "1" + strings.Repeat("}", 40), 400, CodeTooDeep},
		{"many members", `{"Tags":{` + manyMembers(30) + `}}`, 0, ""},
		{"many members duplicate", `{"Tags":{` + manyMembers(30) + `,"k3":"again"}}`, 400, CodeDuplicateField},
		{"many members case variant", `{"meterCode":"a",` + manyMembers(20) + `,"METERCODE":"b"}`, 400, CodeDuplicateField},
		{"deep arrays", `{"quantity":` + strings.Repeat("[", 1000) + strings.Repeat("]", 1000) + `}`, 400, CodeTooDeep},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var dst strictBody
			req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(c.body))
			p := DecodeJSON(httptest.NewRecorder(), req, &dst, 0)
			switch {
			case c.code == "" && p != nil:
				t.Fatalf("refused: %v", p)
			case c.code != "" && (p == nil || p.Code != c.code || p.Status != c.status):
				t.Fatalf("want %d %s, got %+v", c.status, c.code, p)
			}
		})
	}
}

// manyMembers is n distinct members of an object, "k0":"v" to "k<n-1>":"v".
func manyMembers(n int) string {
	m := make([]string, n)
	for i := range m {
		m[i] = fmt.Sprintf(`"k%d":"v"`, i)
	}
	return strings.Join(m, ",")
}

func TestDecodeJSONLimitsAndMediaType(t *testing.T) {
	t.Parallel()
	var dst strictBody
	req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{"meterCode":"`+strings.Repeat("a", 1<<20)+`"}`))
	if p := DecodeJSON(httptest.NewRecorder(), req, &dst, 0); p == nil || p.Code != "body_too_large" || p.Status != 413 {
		t.Fatalf("1 MB string: %+v", p)
	}
	req = httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "text/plain")
	if p := DecodeJSON(httptest.NewRecorder(), req, &dst, 0); p == nil || p.Code != "unsupported_media_type" || p.Status != 415 {
		t.Fatalf("text/plain: %+v", p)
	}
}

func TestCleanText(t *testing.T) {
	t.Parallel()
	h := CleanText(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	for _, c := range []struct{ target, code string }{
		{"/v1/tenants/t1/charges?limit=5", ""},
		{"/v1/tenants/t%C3%A9/charges", ""},
		{"/v1/tenants/t%00/charges", CodeNULCharacter},
		{"/v1/tenants/t%FF/charges", CodeInvalidUTF8},
		{"/v1/operator/quarantine?reason=a%00", CodeNULCharacter},
		{"/v1/operator/quarantine?reason=%C3%28", CodeInvalidUTF8},
		{"/v1/operator/quarantine?a%00=1", CodeNULCharacter},
		{"/v1/operator/quarantine?reason=%zz", "invalid_query"},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, c.target, nil))
		if c.code == "" {
			if rec.Code != http.StatusNoContent {
				t.Errorf("%s: %d %s", c.target, rec.Code, rec.Body)
			}
			continue
		}
		var p Problem
		if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || rec.Code != 400 || p.Code != c.code ||
			rec.Header().Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: %d %s, want 400 %s", c.target, rec.Code, rec.Body, c.code)
		}
	}
}

// FuzzDecodeJSON: whatever the body, DecodeJSON answers a 4xx problem or
// decodes; what it accepts is valid UTF-8 without NUL, has no duplicate
// member, and decodes the same with plain encoding/json.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{
		`{"meterCode":"api","quantity":"1.5","count":2}`, `{"meterCode":"a","METERCODE":"x"}`,
		`{"quantity":1e999}`, `{"meterCode":"\ud800"}`, `{"meterCode":"a\u0000"}`, `{} {}`,
		`{"tiers":[{"upTo":"1"}],"nested":{"reason":"r"}}`, `{"Tags":{"a":"b"}}`, "{\"meterCode\":\"\xff\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var dst strictBody
		p := Unmarshal(body, &dst)
		if p != nil {
			if p.Status < 400 || p.Status > 499 || p.Code == "" {
				t.Fatalf("problem %+v", p)
			}
			return
		}
		if !utf8.Valid(body) || strings.Contains(dst.MeterCode, "\x00") {
			t.Fatalf("accepted %q", body)
		}
		var plain strictBody
		if err := json.Unmarshal(body, &plain); err != nil {
			t.Fatalf("accepted %q, which encoding/json refuses: %v", body, err)
		}
	})
}

// FuzzTenantID: an accepted tenant id is 1-128 of [A-Za-z0-9_-], nothing
// else; the rate limiter reads the same tenant from a path.
func FuzzTenantID(f *testing.F) {
	for _, s := range []string{"acme", "", "a b", "t\x00", "t\xff", strings.Repeat("t", 129), "..", "t%2F", "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, p := TenantID(s)
		if p != nil {
			if p.Code != "invalid_tenant_id" || p.Status != 400 {
				t.Fatalf("problem %+v", p)
			}
			if _, ok := tenantOfPath("/v1/tenants/" + s); ok && !strings.Contains(s, "/") {
				t.Fatalf("the rate limiter takes %q as a tenant", s)
			}
			return
		}
		if got != s || len(s) < 1 || len(s) > 128 || strings.Trim(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-") != "" {
			t.Fatalf("accepted %q", s)
		}
	})
}

// FuzzCheckRequestText: a request CleanText lets through has a path and
// query parameters of valid UTF-8 without NUL.
func FuzzCheckRequestText(f *testing.F) {
	for _, s := range []string{"/v1/tenants/t1/charges?limit=5", "/a%00", "/a%FF", "/q?r=%00", "/q?%zz", "/q?a=%C3%28&b=1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, target string) {
		req, err := http.NewRequest(http.MethodGet, "http://x"+target, nil)
		if err != nil || req.URL.Path == "" {
			return
		}
		if p := CheckRequestText(req); p != nil {
			return
		}
		if !utf8.ValidString(req.URL.Path) || strings.ContainsRune(req.URL.Path, 0) {
			t.Fatalf("let %q through", target)
		}
		for k, vs := range req.URL.Query() {
			for _, v := range append(vs, k) {
				if !utf8.ValidString(v) || strings.ContainsRune(v, 0) {
					t.Fatalf("let %q through", target)
				}
			}
		}
	})
}

// CheckJSON reads JSON itself: what it calls malformed must be what
// encoding/json does. Seed documents mutated at random (a fixed seed:
// the same inputs every run), each checked both ways.
func TestCheckJSONReadsJSONAsEncodingJSON(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(26, 18))
	seeds := checkJSONSeeds()
	alphabet := []byte("{}[]:,\" \t\n\r\\/-+.0123456789eEtrufalsn\x00\x01\x1fbu\u00e9")
	const n = 40000
	for range n {
		b := []byte(seeds[r.IntN(len(seeds))])
		for range 1 + r.IntN(3) {
			at := r.IntN(len(b) + 1)
			switch r.IntN(3) {
			case 0: // insert
				b = slices.Insert(b, at, alphabet[r.IntN(len(alphabet))])
			case 1: // delete
				if at < len(b) {
					b = slices.Delete(b, at, at+1)
				}
			default: // replace
				if at < len(b) {
					b[at] = alphabet[r.IntN(len(alphabet))]
				}
			}
		}
		checkAsEncodingJSON(t, b)
	}
}

// FuzzCheckJSON is the same property over the fuzzer's inputs (go test
// -fuzz FuzzCheckJSON ./pkg/httpx); its seeds run with the unit tests.
func FuzzCheckJSON(f *testing.F) {
	for _, s := range checkJSONSeeds() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkAsEncodingJSON(t, b) })
}

func checkJSONSeeds() []string {
	body, _ := batchBody(2)
	return []string{
		string(body),
		`{"a":[1,-0.5e+2,0,true,false,null,"x\"\\\/\b\f\n\r\t\u00e9"],"b":{"c":{}},"d":[]}`,
		` [ 1 , [ ] , { } , "" , -0 , 1E2 , 0.0 ] `,
		`"\ud83d\ude00"`, `12.5`, `-1`, `true`, `null`,
	}
}

// checkAsEncodingJSON: a body encoding/json finds valid is not refused as
// malformed_json (it may be for one of CheckJSON's own rules: with no
// type, a repeated member, met before the text ends, is one), and one it
// finds invalid is refused.
func checkAsEncodingJSON(t *testing.T, b []byte) {
	t.Helper()
	p := CheckJSON(b, nil)
	switch valid := json.Valid(b); {
	case valid && p != nil && p.Code == "malformed_json":
		t.Fatalf("%q is JSON to encoding/json, CheckJSON refused it: %s", b, p.Detail)
	case !valid && p == nil:
		t.Fatalf("%q is not JSON to encoding/json, CheckJSON passed it", b)
	case p != nil && !slices.Contains([]string{"malformed_json", CodeInvalidUTF8, CodeNULCharacter, CodeNumberTooLarge, CodeTooDeep, CodeDuplicateField}, p.Code):
		t.Fatalf("%q: code %s", b, p.Code)
	}
}

// A problem names where in the body it is, as a path of members and
// elements.
func TestCheckJSONNamesThePlace(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]string{
		`{"tiers":[{"upTo":"1"},{"upTo":"1","upTo":"2"}]}`: `member "tiers[1].upTo" appears twice in one object`,
		`{"tiers":[{},{},{"upTo":1e999}]}`:                 `field "tiers[2].upTo": a number with an exponent beyond two digits`,
		`{"nested":{"REASON":"x"}}`:                        `member "nested.REASON": field names are case-sensitive, this one is "reason"`,
		`[[1],[2,` + strings.Repeat("7", 41) + `]]`:        `field "[1][1]": a number of more than 40 characters`,
		strings.Repeat("9", 41):                            `the body: a number of more than 40 characters`,
	} {
		if p := CheckJSON([]byte(body), &strictBody{}); p == nil || p.Detail != want {
			t.Errorf("%s: got %+v, want %q", body, p, want)
		}
	}
}
