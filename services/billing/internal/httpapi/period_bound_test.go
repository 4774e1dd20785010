package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/usagebilling/billing/services/billing/internal/app"
)

// A period read prices at most app.MaxPeriodLines lines:
// a period with more is refused 422 too_many_lines, not read whole however
// many price versions and dimensions the tenant's charges name. The
// fixture's January has one line; with the bound at 0 it is refused, and a
// period without lines is still read. Not parallel: it sets the bound.
func TestPeriodReadOverTheLineBoundIs422(t *testing.T) {
	f := newFixture(t)
	if r := f.do(t, http.MethodGet, "/v1/tenants/t1/periods/2026-01", nil, ""); r.status != http.StatusOK {
		t.Fatalf("period within the bound: %d %s", r.status, r.body)
	}
	was := app.MaxPeriodLines
	app.MaxPeriodLines = 0
	t.Cleanup(func() { app.MaxPeriodLines = was })
	r := f.do(t, http.MethodGet, "/v1/tenants/t1/periods/2026-01", nil, "")
	if r.status != http.StatusUnprocessableEntity || r.problem(t) != app.CodeTooManyLines {
		t.Fatalf("period over the bound: %d %s, want 422 too_many_lines", r.status, r.body)
	}
	if r := f.do(t, http.MethodGet, "/v1/tenants/t1/periods/2025-12", nil, ""); r.status != http.StatusOK {
		t.Fatalf("period without lines: %d %s", r.status, r.body)
	}
}
