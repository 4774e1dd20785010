package page_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/usagebilling/billing/pkg/httpx"
	"github.com/usagebilling/billing/pkg/page"
)

func TestParseLimit(t *testing.T) {
	tests := []struct {
		query string
		want  int
	}{
		{"", page.DefaultLimit},
		{"limit=", page.DefaultLimit},
		{"limit=1", 1},
		{"limit=37", 37},
		{"limit=1000", page.MaxLimit},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			req, p := page.Parse(query(t, tt.query))
			if p != nil {
				t.Fatalf("problem %+v", p)
			}
			if req.Limit != tt.want || req.Fetch() != int32(tt.want)+1 || !req.First() {
				t.Fatalf("limit %d, fetch %d, first %v; want limit %d", req.Limit, req.Fetch(), req.First(), tt.want)
			}
		})
	}
}

func TestParseInvalid(t *testing.T) {
	tests := []struct{ query, code string }{
		{"limit=0", "invalid_limit"},
		{"limit=-1", "invalid_limit"},
		{"limit=1001", "invalid_limit"},
		{"limit=99999999999999999999", "invalid_limit"},
		{"limit=ten", "invalid_limit"},
		{"limit=1.5", "invalid_limit"},
		{"limit=+5", "invalid_limit"},
		{"limit=%205", "invalid_limit"},
		{"cursor=" + strings.Repeat("a", 1025), "invalid_cursor"},
	}
	for _, tt := range tests {
		t.Run(tt.query[:min(len(tt.query), 40)], func(t *testing.T) {
			_, p := page.Parse(query(t, tt.query))
			checkProblem(t, p, tt.code)
		})
	}
}

// A cursor this API did not make is refused when decoded.
func TestAfterInvalidCursor(t *testing.T) {
	type position struct {
		Seq int64 `json:"s"`
	}
	for _, cursor := range []string{
		"!!!",                                    // not base64url
		"eyJzIjox",                               // {"s":1 cut short
		page.Encode("a string"),                  // JSON of another shape
		page.Encode(map[string]string{"s": "x"}), // a field of another type
		"eyJzIjoxfQ==",                           // padded: the API's cursors are unpadded
	} {
		t.Run(cursor, func(t *testing.T) {
			req, p := page.Parse(url.Values{"cursor": {cursor}})
			if p != nil {
				t.Fatalf("parse: %+v", p)
			}
			if req.First() {
				t.Fatal("a request with a cursor is the first page")
			}
			var pos position
			checkProblem(t, req.After(&pos), "invalid_cursor")
		})
	}
}

func TestAfterFirstPageLeavesPosition(t *testing.T) {
	req, p := page.Parse(url.Values{})
	if p != nil {
		t.Fatal(p)
	}
	pos := struct{ Seq int64 }{Seq: 7}
	if p := req.After(&pos); p != nil || pos.Seq != 7 {
		t.Fatalf("after on the first page: %+v, position %+v", p, pos)
	}
}

func TestCursorRoundTrip(t *testing.T) {
	type position struct {
		MeterCode string `json:"m"`
		Currency  string `json:"c"`
		Version   int64  `json:"v"`
	}
	for _, want := range []position{
		{},
		{"api_calls", "USD", 1},
		{"a-b.c_d", "KRW", 1<<63 - 1},
		{"ünïcode/&?=+ #", "EUR", 42},
	} {
		cursor := page.Encode(want)
		if strings.ContainsAny(cursor, "+/=") {
			t.Errorf("cursor %q is not URL-safe", cursor)
		}
		// The cursor travels as a query parameter.
		req, p := page.Parse(query(t, "limit=5&cursor="+url.QueryEscape(cursor)))
		if p != nil {
			t.Fatalf("parse %q: %+v", cursor, p)
		}
		var got position
		if p := req.After(&got); p != nil {
			t.Fatalf("after %q: %+v", cursor, p)
		}
		if got != want {
			t.Errorf("round trip: got %+v, want %+v", got, want)
		}
	}
}

func TestCut(t *testing.T) {
	key := func(n int) any { return struct{ N int }{n} }
	seq := func(n int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = i + 1
		}
		return out
	}
	req, p := page.Parse(url.Values{"limit": {"3"}})
	if p != nil {
		t.Fatal(p)
	}
	tests := []struct {
		name     string
		rows     int
		wantRows int
		wantNext bool
	}{
		{"none", 0, 0, false},
		{"fewer than the limit", 2, 2, false},
		{"exactly the limit", 3, 3, false},
		{"one more than the limit", 4, 3, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rows, next := page.Cut(req, seq(tt.rows), key)
			if len(rows) != tt.wantRows || (next != nil) != tt.wantNext {
				t.Fatalf("%d rows, next %v; want %d rows, next %v", len(rows), next, tt.wantRows, tt.wantNext)
			}
			if next == nil {
				return
			}
			// next is the position of the page's last row.
			var pos struct{ N int }
			nreq, p := page.Parse(url.Values{"cursor": {*next}})
			if p != nil {
				t.Fatal(p)
			}
			if p := nreq.After(&pos); p != nil || pos.N != rows[len(rows)-1] {
				t.Fatalf("next decodes to %+v (%v), want the last row %d", pos, p, rows[len(rows)-1])
			}
		})
	}
}

func TestEncodePanicsOnUnmarshalable(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Encode of a channel did not panic")
		}
	}()
	page.Encode(make(chan int))
}

func query(t *testing.T, raw string) url.Values {
	t.Helper()
	q, err := url.ParseQuery(raw)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func checkProblem(t *testing.T, p *httpx.Problem, code string) {
	t.Helper()
	if p == nil {
		t.Fatalf("no problem, want %s", code)
	}
	if p.Status != http.StatusBadRequest || p.Code != code {
		t.Fatalf("problem %d %s, want 400 %s", p.Status, p.Code, code)
	}
}

// Limit is the one reading of `limit`: def when absent, 1 to most, else
// invalid_limit naming the bound.
func TestLimit(t *testing.T) {
	tests := []struct {
		in       string
		def, max int
		want     int
		problem  bool
	}{
		{"", 100, 500, 100, false}, {"", 0, 500, 0, false}, {"1", 100, 500, 1, false}, {"500", 100, 500, 500, false},
		{"501", 100, 500, 0, true}, {"0", 100, 500, 0, true}, {"-1", 100, 500, 0, true}, {"1e2", 100, 500, 0, true},
	}
	for _, tt := range tests {
		n, p := page.Limit(tt.in, tt.def, tt.max)
		if tt.problem {
			if p == nil || p.Status != http.StatusBadRequest || p.Code != "invalid_limit" || !strings.Contains(p.Detail, "500") {
				t.Errorf("Limit(%q): %d, %+v, want 400 invalid_limit naming 500", tt.in, n, p)
			}
			continue
		}
		if p != nil || n != tt.want {
			t.Errorf("Limit(%q, %d, %d) = %d, %+v, want %d", tt.in, tt.def, tt.max, n, p, tt.want)
		}
	}
}
