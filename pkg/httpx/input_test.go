package httpx

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A body declared in another charset than UTF-8 is refused 415 before it is
// read; no charset, or utf-8 in any case, is accepted.
func TestReadJSONRefusesAnotherCharset(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		ct   string
		code string
	}{
		{"", ""},
		{"application/json", ""},
		{"application/json; charset=utf-8", ""},
		{"application/json; charset=UTF-8", ""},
		{`application/json; charset="utf-8"`, ""},
		{"application/json; charset=utf-16", "unsupported_media_type"},
		{"application/json; charset=iso-8859-1", "unsupported_media_type"},
		{"application/jsonx", "unsupported_media_type"},
		{"application/json;;;", "unsupported_media_type"},
		{"text/plain", "unsupported_media_type"},
	} {
		req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{"meterCode":"api"}`))
		if c.ct != "" {
			req.Header.Set("Content-Type", c.ct)
		}
		var dst strictBody
		p := DecodeJSON(httptest.NewRecorder(), req, &dst, 0)
		if c.code == "" {
			wantProblem(t, p, 0, "")
			continue
		}
		wantProblem(t, p, http.StatusUnsupportedMediaType, c.code)
	}
}

// A query parameter given twice is refused before any handler reads the
// first.
func TestCleanTextRefusesARepeatedParameter(t *testing.T) {
	t.Parallel()
	h := CleanText(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	for target, code := range map[string]string{
		"/v1/tenants/t1/charges?limit=5&period=2026-01":                                              "",
		"/v1/tenants/t1/charges?limit=5&limit=500":                                                   CodeRepeatedQueryParameter,
		"/v1/tenants/t1/charges?period=&period=2026-01":                                              CodeRepeatedQueryParameter,
		"/v1/tenants/t1/meters/m/usage?groupBy=model&groupBy=region&filter=model:a&filter=region:eu": "",
		"/v1/tenants/t1/meters/m/usage?groupBy=model&windowSize=day&windowSize=hour":                 CodeRepeatedQueryParameter,
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
		if code == "" {
			if rec.Code != http.StatusNoContent {
				t.Errorf("%s: %d %s", target, rec.Code, rec.Body)
			}
			continue
		}
		var p Problem
		if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || rec.Code != 400 || p.Code != code {
			t.Errorf("%s: %d %s, want 400 %s", target, rec.Code, rec.Body, code)
		}
	}
}

// An event id has one spelling: the canonical 36-character form, not nil.
func TestEventIDCanonicalOnly(t *testing.T) {
	t.Parallel()
	for s, ok := range map[string]bool{
		"0193b7e2-7c1d-7a3e-9f00-1234567890ab":          true,
		"0193B7E2-7C1D-7A3E-9F00-1234567890AB":          true,
		"00000000-0000-0000-0000-000000000000":          false,
		"{0193b7e2-7c1d-7a3e-9f00-1234567890ab}":        false,
		"urn:uuid:0193b7e2-7c1d-7a3e-9f00-1234567890ab": false,
		"0193b7e27c1d7a3e9f001234567890ab":              false,
		"0193b7e2-7c1d-7a3e-9f00-1234567890a":           false,
		"":                                              false,
	} {
		_, p := EventID("eventId", s)
		if ok {
			wantProblem(t, p, 0, "")
		} else {
			wantProblem(t, p, http.StatusBadRequest, CodeInvalidEventID)
		}
	}
}

// Free text that operators read back holds no control character.
func TestFreeTextRefusesControlCharacters(t *testing.T) {
	t.Parallel()
	for s, ok := range map[string]bool{
		"customer dispute #42": true, "café – ünïcode": true,
		"bell\u0007": false, "esc\u001b[31mred": false, "new\nline": false, "tab\there": false,
		"del\u007f": false, "c1\u0085": false,
	} {
		p := FreeText("reason", s)
		if ok {
			wantProblem(t, p, 0, "")
		} else {
			wantProblem(t, p, http.StatusBadRequest, CodeControlCharacter)
		}
	}
}
