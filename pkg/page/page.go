// Package page is the list contract every service's HTTP API shares
// (docs/design.md): a list takes `limit` (default 100, at most 1000) and
// an opaque `cursor`, and answers `next`, absent on the last page. A cursor is
// the keyset position after the last item of a page, encoded as base64url
// JSON, so a page is read with an index range scan whatever the list's size
// and rows inserted meanwhile neither repeat nor shift the pages.
package page

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"

	"github.com/usagebilling/billing/pkg/httpx"
)

const (
	// DefaultLimit is the page size when a request names none.
	DefaultLimit = 100
	// MaxLimit is the largest page size a request may ask for.
	MaxLimit = 1000
	// maxCursor bounds a cursor's length before it is decoded.
	maxCursor = 1024
)

// Request is a parsed page request.
type Request struct {
	Limit  int
	cursor string
}

// First reports whether the request asks for the first page.
func (r Request) First() bool { return r.cursor == "" }

// Parse reads `limit` and `cursor` from a query string. Problems:
// invalid_limit and invalid_cursor (400).
func Parse(q url.Values) (Request, *httpx.Problem) {
	limit, p := Limit(q.Get("limit"), DefaultLimit, MaxLimit)
	if p != nil {
		return Request{}, p
	}
	req := Request{Limit: limit, cursor: q.Get("cursor")}
	if len(req.cursor) > maxCursor {
		return Request{}, invalidCursor()
	}
	return req, nil
}

// Limit reads a `limit` parameter: an integer from 1 to most, def when
// absent. Problem: invalid_limit (400).
func Limit(s string, def, most int) (int, *httpx.Problem) {
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > most {
		return 0, httpx.Problemf(http.StatusBadRequest, "invalid_limit", "limit must be an integer from 1 to %d", most)
	}
	return n, nil
}

// After decodes the request's cursor into dst, the keyset position a previous
// page ended at. It does nothing on the first page. A cursor this API did not
// make is invalid_cursor (400).
func (r Request) After(dst any) *httpx.Problem {
	if r.cursor == "" {
		return nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(r.cursor)
	if err != nil {
		return invalidCursor()
	}
	// Strictly (httpx.Unmarshal): a cursor holding NUL or invalid UTF-8, a
	// member twice, or anything but the position's own fields is not one
	// this API made, and must not reach a query.
	if p := httpx.Unmarshal(raw, dst); p != nil {
		return invalidCursor()
	}
	return nil
}

func invalidCursor() *httpx.Problem {
	return httpx.NewProblem(http.StatusBadRequest, "invalid_cursor", "cursor must be a next value this API returned")
}

// Fetch is how many rows to read for a page: one more than the limit, so the
// page knows whether another follows.
func (r Request) Fetch() int32 { return int32(r.Limit) + 1 }

// Cut trims rows read with Fetch to the page and returns the cursor of the
// next page (nil on the last), made from the page's last row by key.
func Cut[T any](r Request, rows []T, key func(T) any) ([]T, *string) {
	if len(rows) <= r.Limit {
		return rows, nil
	}
	rows = rows[:r.Limit]
	next := Encode(key(rows[len(rows)-1]))
	return rows, &next
}

// Encode makes a cursor of a keyset position.
func Encode(position any) string {
	raw, err := json.Marshal(position)
	if err != nil {
		panic("page: cursor position does not marshal: " + err.Error())
	}
	return base64.RawURLEncoding.EncodeToString(raw)
}
