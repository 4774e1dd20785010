package httpx

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/usagebilling/billing/pkg/idempotency"
	"github.com/usagebilling/billing/pkg/rule"
)

// wantProblem fails unless p is the problem of status and code, or nil when
// code is "".
func wantProblem(t *testing.T, p *Problem, status int, code string) {
	t.Helper()
	switch {
	case code == "" && p != nil:
		t.Fatalf("want no problem, got %d %s (%s)", p.Status, p.Code, p.Detail)
	case code != "" && p == nil:
		t.Fatalf("want %d %s, got none", status, code)
	case code != "" && (p.Status != status || p.Code != code):
		t.Fatalf("want %d %s, got %d %s (%s)", status, code, p.Status, p.Code, p.Detail)
	}
}

// One X-Correlation-Id rule: optional or required, the same characters,
// length and codes.
func TestCorrelationID(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		header   *string // nil: no header
		required bool
		want     string
		status   int
		code     string
	}{
		{"absent optional", nil, false, "", 0, ""},
		{"empty optional", ptr(""), false, "", 0, ""},
		{"absent required", nil, true, "", 400, CodeMissingCorrelationID},
		{"empty required", ptr(""), true, "", 400, CodeMissingCorrelationID},
		{"ok", ptr("incident-42"), true, "incident-42", 0, ""},
		{"ok optional", ptr("incident-42"), false, "incident-42", 0, ""},
		{"all printable", ptr("!~az09{}|"), false, "!~az09{}|", 0, ""},
		{"128", ptr(strings.Repeat("c", 128)), true, strings.Repeat("c", 128), 0, ""},
		{"129 optional", ptr(strings.Repeat("c", 129)), false, "", 400, CodeInvalidCorrelationID},
		{"129 required", ptr(strings.Repeat("c", 129)), true, "", 400, CodeInvalidCorrelationID},
		{"space", ptr("a b"), false, "", 400, CodeInvalidCorrelationID},
		{"tab", ptr("a\tb"), true, "", 400, CodeInvalidCorrelationID},
		{"DEL", ptr("a\x7fb"), false, "", 400, CodeInvalidCorrelationID},
		{"not ASCII", ptr("caf\u00e9"), true, "", 400, CodeInvalidCorrelationID},
		{"invalid UTF-8", ptr("\xff"), false, "", 400, CodeInvalidCorrelationID},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/", nil)
			if c.header != nil {
				r.Header[HeaderCorrelationID] = []string{*c.header}
			}
			got, p := CorrelationID(r, c.required)
			wantProblem(t, p, c.status, c.code)
			if got != c.want {
				t.Fatalf("got %q, want %q", got, c.want)
			}
			if p == nil && got != "" && !ValidCorrelationID(got) {
				t.Fatalf("accepted %q, which ValidCorrelationID refuses", got)
			}
		})
	}
}

func ptr(s string) *string { return &s }

// The Idempotency-Key rule: required, 1-255 printable ASCII
// (idempotency.ValidKey).
func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		header *string
		status int
		code   string
	}{
		{"absent", nil, 400, CodeMissingIdempotencyKey},
		{"empty", ptr(""), 400, CodeMissingIdempotencyKey},
		{"ok", ptr("adj-1"), 0, ""},
		{"space inside", ptr("a key"), 0, ""},
		{"255", ptr(strings.Repeat("k", 255)), 0, ""},
		{"256", ptr(strings.Repeat("k", 256)), 400, CodeInvalidIdempotencyKey},
		{"control", ptr("a\x01"), 400, CodeInvalidIdempotencyKey},
		{"invalid UTF-8", ptr("\xff\xfe"), 400, CodeInvalidIdempotencyKey},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/", nil)
			if c.header != nil {
				r.Header[HeaderIdempotencyKey] = []string{*c.header}
			}
			key, p := IdempotencyKey(r)
			wantProblem(t, p, c.status, c.code)
			if p == nil && key != *c.header {
				t.Fatalf("key %q, want %q", key, *c.header)
			}
		})
	}
}

// A replay answers the first status and body, marked Idempotent-Replayed;
// the first answer is not marked.
func TestWriteReply(t *testing.T) {
	t.Parallel()
	for _, replayed := range []bool{false, true} {
		w := httptest.NewRecorder()
		WriteReply(w, idempotency.Reply{Status: http.StatusCreated, Body: []byte(`{"id":"1"}`), Replayed: replayed})
		want := ""
		if replayed {
			want = "true"
		}
		if w.Code != http.StatusCreated || w.Body.String() != `{"id":"1"}` ||
			w.Header().Get("Content-Type") != "application/json" || w.Header().Get(HeaderReplayed) != want {
			t.Fatalf("replayed %v: %d %q %v", replayed, w.Code, w.Body.String(), w.Header())
		}
	}
}

// Each kind of broken rule has one status; its code and detail pass through.
func TestProblemOf(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		err    error
		status int
		code   string
	}{
		{"invalid", rule.Errorf(rule.Invalid, "invalid_quantity", "bad"), 400, "invalid_quantity"},
		{"not found", rule.Errorf(rule.NotFound, "charge_not_found", "none"), 404, "charge_not_found"},
		{"conflict", rule.Errorf(rule.Conflict, "source_event_conflict", "taken"), 409, "source_event_conflict"},
		{"unprocessable", rule.Errorf(rule.Unprocessable, "unknown_meter", "no price"), 422, "unknown_meter"},
		{"unknown kind", &rule.Error{Kind: 99, Code: "odd", Detail: "?"}, 400, "odd"},
		{"wrapped rule", fmt.Errorf("post adjustment: %w", rule.Errorf(rule.Unprocessable, "currency_mismatch", "x")), 422, "currency_mismatch"},
		{"key reused", fmt.Errorf("claim: %w", idempotency.ErrKeyReused), 422, CodeIdempotencyKeyReused},
		{"deadline", context.DeadlineExceeded, 503, "database_unavailable"},
		{"other", errors.New("boom"), 500, "internal"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := ProblemOf(c.err)
			wantProblem(t, p, c.status, c.code)
			if e, ok := rule.As(c.err); ok && p.Detail != e.Detail {
				t.Fatalf("detail %q, want %q", p.Detail, e.Detail)
			}
		})
	}
	for k, want := range map[rule.Kind]int{rule.Invalid: 400, rule.NotFound: 404, rule.Conflict: 409, rule.Unprocessable: 422} {
		if got := StatusOf(k); got != want {
			t.Errorf("StatusOf(%v) = %d, want %d", k, got, want)
		}
	}
}

// WriteError writes ProblemOf's answer, and nothing for a client gone away.
func TestWriteError(t *testing.T) {
	t.Parallel()
	w := httptest.NewRecorder()
	WriteError(w, httptest.NewRequest(http.MethodGet, "/", nil), nil, rule.Errorf(rule.Conflict, "source_event_conflict", "taken"))
	var p Problem
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || w.Code != 409 || p.Code != "source_event_conflict" ||
		w.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("%d %q %v", w.Code, w.Body.String(), err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	w = httptest.NewRecorder()
	WriteError(w, httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx), nil, fmt.Errorf("read: %w", context.Canceled))
	if w.Body.Len() != 0 {
		t.Fatalf("answered a client gone away: %q", w.Body.String())
	}
}

// A decimal is a JSON string; absent and null are ""; anything else is the
// field's code.
func TestDecimalText(t *testing.T) {
	t.Parallel()
	cases := []struct {
		raw, want, code string
	}{
		{``, "", ""},
		{`null`, "", ""},
		{`"12.50"`, "12.50", ""},
		{`"-0.1"`, "-0.1", ""},
		{`"abc"`, "abc", ""}, // the domain says it is no decimal
		{`12.5`, "", "invalid_quantity"},
		{`true`, "", "invalid_quantity"},
		{`{}`, "", "invalid_quantity"},
		{`["1"]`, "", "invalid_quantity"},
	}
	for _, c := range cases {
		got, p := DecimalText("quantity", "invalid_quantity", json.RawMessage(c.raw))
		status := 0
		if c.code != "" {
			status = 400
		}
		wantProblem(t, p, status, c.code)
		if got != c.want {
			t.Fatalf("%s: got %q, want %q", c.raw, got, c.want)
		}
	}
}

// ReadJSON decodes as DecodeJSON does and hands back the body it read.
func TestReadJSON(t *testing.T) {
	t.Parallel()
	var dst struct {
		Reason string `json:"reason"`
	}
	body := `{"reason":"r"}`
	got, p := ReadJSON(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body)), &dst, 0)
	if p != nil || string(got) != body || dst.Reason != "r" {
		t.Fatalf("%q %+v %+v", got, dst, p)
	}
	_, p = ReadJSON(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{"reason":"`+strings.Repeat("r", 100)+`"}`)), &dst, 32)
	wantProblem(t, p, 413, "body_too_large")
}

// ReadCommand checks the key, then the correlation id, then the body, and
// hashes method, path and body.
func TestReadCommand(t *testing.T) {
	t.Parallel()
	type in struct {
		Reason string `json:"reason"`
	}
	req := func(key, corr, body string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/v1/tenants/t1/adjustments", strings.NewReader(body))
		if key != "" {
			r.Header.Set(HeaderIdempotencyKey, key)
		}
		if corr != "" {
			r.Header.Set(HeaderCorrelationID, corr)
		}
		return r
	}
	cases := []struct {
		name, key, corr, body string
		noBody                bool
		status                int
		code                  string
	}{
		{"ok", "k", "c-1", `{"reason":"r"}`, false, 0, ""},
		{"ok without correlation", "k", "", `{"reason":"r"}`, false, 0, ""},
		{"ok without a body", "k", "", ``, true, 0, ""},
		{"key before all", "", "a b", `{`, false, 400, CodeMissingIdempotencyKey},
		{"correlation before body", "k", "a b", `{`, false, 400, CodeInvalidCorrelationID},
		{"body", "k", "c-1", `{"reason":1}`, false, 400, "invalid_field"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var dst *in
			if !c.noBody {
				dst = &in{}
			}
			var target any
			if dst != nil {
				target = dst
			}
			cmd, p := ReadCommand(httptest.NewRecorder(), req(c.key, c.corr, c.body), target)
			wantProblem(t, p, c.status, c.code)
			if p != nil {
				return
			}
			var body []byte
			if !c.noBody {
				body = []byte(c.body)
			}
			want := Command{IdempotencyKey: c.key, CorrelationID: c.corr,
				RequestHash: idempotency.RequestHash(http.MethodPost, "/v1/tenants/t1/adjustments", body)}
			if cmd != want {
				t.Fatalf("got %+v, want %+v", cmd, want)
			}
		})
	}
}
