package httpapi_test

import (
	"encoding/json"
	"net/url"
	"testing"
	"time"

	"github.com/usagebilling/billing/pkg/catalog"
	. "github.com/usagebilling/billing/services/query/internal/querytest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

func TestGetMeterUsage(t *testing.T) {
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	f := NewFeed(t, "acme")
	h := time.Date(2026, 11, 3, 10, 0, 0, 0, time.UTC)
	Decide(t, pool, ib, Meter(t, "tokens", catalog.Sum, "", "model", "region"),
		f.Fact("tokens", "2", h.Add(time.Minute), "a", map[string]string{"model": "gpt-4", "region": "eu"}),
		f.Fact("tokens", "3", h.Add(2*time.Minute), "b", map[string]string{"model": "gpt-4", "region": "us"}),
		f.Fact("tokens", "4", h.Add(3*time.Minute), "c", map[string]string{"region": "eu"}),
		f.Fact("tokens", "5", h.Add(25*time.Hour), "d", map[string]string{"model": "claude", "region": "eu"}))
	srv := server(t, pool)
	base := "/v1/tenants/acme/meters/tokens/usage?from=2026-11-03T00:00:00Z&to=2026-11-05T00:00:00Z&windowSize=day"

	status, ct, body := get(t, srv, base+"&groupBy=model&filter=region:eu&limit=2")
	if status != 200 || ct != "application/json" {
		t.Fatalf("usage: %d %s %s", status, ct, body)
	}
	var page struct {
		MeterCode, Aggregation, WindowSize, TimeZone string
		Rows                                         []map[string]any
		Next                                         string
	}
	if err := json.Unmarshal([]byte(body), &page); err != nil {
		t.Fatal(err)
	}
	rows, _ := json.Marshal(page.Rows)
	want := `[{"dimensions":{"model":null},"from":"2026-11-03T00:00:00Z","to":"2026-11-04T00:00:00Z","value":"4"},` +
		`{"dimensions":{"model":"gpt-4"},"from":"2026-11-03T00:00:00Z","to":"2026-11-04T00:00:00Z","value":"2"}]`
	if page.MeterCode != "tokens" || page.Aggregation != "sum" || page.WindowSize != "day" || page.TimeZone != "UTC" ||
		string(rows) != want || page.Next == "" {
		t.Fatalf("first page %s, want rows %s and a next", body, want)
	}
	_, _, body = get(t, srv, base+"&groupBy=model&filter=region:eu&limit=2&cursor="+url.QueryEscape(page.Next))
	want = `{"meterCode":"tokens","aggregation":"sum","windowSize":"day","timeZone":"UTC","rows":[` +
		`{"from":"2026-11-04T00:00:00Z","to":"2026-11-05T00:00:00Z","dimensions":{"model":"claude"},"value":"5"}]}`
	if body != want+"\n" && body != want {
		t.Fatalf("last page %s, want %s", body, want)
	}
	// Two dimensions in one groupBy, or groupBy repeated (a list parameter
	// of the edge, httpx.ListParameters): the same answer.
	status, _, body = get(t, srv, base+"&groupBy=model,region&timeZone=Europe/Paris")
	if status != 200 {
		t.Fatalf("groupBy model,region: %d %s", status, body)
	}
	status, _, repeated := get(t, srv, base+"&groupBy=model&groupBy=region&timeZone=Europe/Paris")
	if status != 200 || repeated != body {
		t.Fatalf("groupBy=model&groupBy=region: %d %s, want %s", status, repeated, body)
	}

	for _, c := range []struct {
		query  string
		status int
		code   string
	}{
		{"&groupBy=user", 400, "invalid_dimension"},
		{"&filter=user:x", 400, "invalid_dimension"},
		{"&filter=model", 400, "invalid_filter"},
		{"&timeZone=Mars/Olympus", 400, "invalid_time_zone"},
		{"&timeZone=Local", 400, "invalid_time_zone"},
		{"&limit=0", 400, "invalid_limit"},
		{"&cursor=bm90IGEgY3Vyc29y", 400, "invalid_cursor"},
	} {
		status, ct, body := get(t, srv, base+c.query)
		var p struct{ Code string }
		_ = json.Unmarshal([]byte(body), &p)
		if status != c.status || ct != "application/problem+json" || p.Code != c.code {
			t.Fatalf("%s: %d %s %s, want %d %s", c.query, status, ct, body, c.status, c.code)
		}
	}
	for _, c := range []struct {
		path   string
		status int
		code   string
	}{
		{"/v1/tenants/acme/meters/nope/usage?from=2026-11-03T00:00:00Z&to=2026-11-04T00:00:00Z&windowSize=hour", 404, "meter_not_found"},
		{"/v1/tenants/acme/meters/tokens/usage?from=2026-11-03T00:00:00Z&to=2026-11-04T00:00:00Z&windowSize=week", 400, "invalid_window_size"},
		{"/v1/tenants/acme/meters/tokens/usage?from=2026-11-03&to=2026-11-04T00:00:00Z&windowSize=day", 400, "invalid_time"},
		{"/v1/tenants/acme/meters/tokens/usage?to=2026-11-04T00:00:00Z&windowSize=day", 400, "invalid_time"},
		{"/v1/tenants/acme/meters/tokens/usage?from=2026-11-04T00:00:00Z&to=2026-11-04T00:00:00Z&windowSize=day", 400, "invalid_range"},
		{"/v1/tenants/acme/meters/tokens/usage?from=2026-11-01T00:00:00Z&to=2026-12-03T00:00:00Z&windowSize=hour", 400, "range_too_large"},
		{"/v1/tenants/acme/meters/tokens/usage?from=2026-11-01T00:00:00Z&to=2037-11-03T00:00:00Z&windowSize=month", 400, "range_too_large"},
	} {
		status, ct, body := get(t, srv, c.path)
		var p struct{ Code string }
		_ = json.Unmarshal([]byte(body), &p)
		if status != c.status || ct != "application/problem+json" || p.Code != c.code {
			t.Fatalf("%s: %d %s %s, want %d %s", c.path, status, ct, body, c.status, c.code)
		}
	}
}
