package httpapi_test

import (
	"strings"
	"testing"

	"github.com/usagebilling/billing/services/query/internal/app"
	. "github.com/usagebilling/billing/services/query/internal/querytest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// A summary answers at most app.MaxSummaryTotals totals: a
// tenant with more (meters with usage, and currencies) is refused 422
// too_many_meters rather than read whole. Two meters with usage are two
// totals: read at a bound of 2, refused at 1. Not parallel: it sets the
// bound.
func TestSummaryOverTheTotalsBoundIs422(t *testing.T) {
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	f := NewFeed(t, "acme")
	Decide(t, pool, ib, f.Usage("api_calls", "USD", "1.5"), f.Usage("compute_seconds", "KRW", "10"))
	srv := server(t, pool)

	was := app.MaxSummaryTotals
	t.Cleanup(func() { app.MaxSummaryTotals = was })
	app.MaxSummaryTotals = 2
	if status, _, body := get(t, srv, "/v1/tenants/acme/summary"); status != 200 || !strings.Contains(body, `"count":2`) {
		t.Fatalf("summary within the bound: %d %s", status, body)
	}
	app.MaxSummaryTotals = 1
	status, ct, body := get(t, srv, "/v1/tenants/acme/summary")
	if status != 422 || ct != "application/problem+json" || !strings.Contains(body, `"code":"too_many_meters"`) {
		t.Fatalf("summary over the bound: %d %s %s, want 422 too_many_meters", status, ct, body)
	}
}
