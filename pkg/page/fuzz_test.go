package page

import (
	"encoding/base64"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"
)

type position struct {
	At string `json:"at"`
	ID string `json:"id"`
}

// Cursors a client forged are invalid_cursor, whatever they hold: NUL,
// invalid UTF-8, a member twice or in other letter case, other fields.
func TestAfterRefusesForgedCursors(t *testing.T) {
	for _, raw := range []string{
		`{"at":"2026-11-01","id":"a\u0000"}`, "{\"id\":\"\xff\"}", `{"id":"a","id":"b"}`, `{"ID":"a"}`,
		`{"id":"a","extra":1}`, `{"id":"a"} {}`, `{"id":1}`,
	} {
		req, p := Parse(url.Values{"cursor": {forge(raw)}})
		if p != nil {
			t.Fatalf("%s: %v", raw, p)
		}
		var pos position
		if p := req.After(&pos); p == nil || p.Code != "invalid_cursor" {
			t.Errorf("cursor %s: %+v, want invalid_cursor", raw, p)
		}
	}
}

// forge makes a cursor of any bytes, as a client could.
func forge(raw string) string { return base64.RawURLEncoding.EncodeToString([]byte(raw)) }

// FuzzCursor: any limit and cursor a client sends either is refused with
// invalid_limit or invalid_cursor, or yields a limit in range and a
// position of valid UTF-8 without NUL; an Encode'd position reads back.
func FuzzCursor(f *testing.F) {
	f.Add("10", Encode(position{At: "2026-11-01T00:00:00Z", ID: "x"}))
	f.Add("-1", "!!!")
	f.Add("1000", forge(`{"id":"a","id":"b"}`))
	f.Add("", forge(`{"id":"\u0000"}`))
	f.Add("99999999999999999999", strings.Repeat("A", 2000))
	f.Fuzz(func(t *testing.T, limit, cursor string) {
		req, p := Parse(url.Values{"limit": {limit}, "cursor": {cursor}})
		if p != nil {
			if p.Code != "invalid_limit" && p.Code != "invalid_cursor" {
				t.Fatalf("problem %+v", p)
			}
			return
		}
		if req.Limit < 1 || req.Limit > MaxLimit {
			t.Fatalf("limit %d", req.Limit)
		}
		var pos position
		if p := req.After(&pos); p != nil {
			if p.Code != "invalid_cursor" {
				t.Fatalf("problem %+v", p)
			}
			return
		}
		for _, s := range []string{pos.At, pos.ID} {
			if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
				t.Fatalf("cursor %q gave %+v", cursor, pos)
			}
		}
		var back position
		if p := (Request{Limit: 1, cursor: Encode(pos)}).After(&back); p != nil || back != pos {
			t.Fatalf("%+v does not read back: %v", pos, p)
		}
	})
}
