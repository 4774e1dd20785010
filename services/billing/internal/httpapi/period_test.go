package httpapi_test

import (
	"encoding/json"
	"net/http"
	"testing"
)

// GET .../periods/{period}: the period's status and running estimate; a
// malformed period is 400 invalid_period and changes nothing.
func TestPeriodEstimateOverHTTP(t *testing.T) {
	f := newFixture(t)
	r := f.do(t, http.MethodGet, "/v1/tenants/t1/periods/2026-01", nil, "")
	var got map[string]any
	if err := json.Unmarshal(r.body, &got); r.status != http.StatusOK || err != nil {
		t.Fatalf("period: %d %s", r.status, r.body)
	}
	est, _ := got["estimate"].(map[string]any)
	if got["period"] != "2026-01" || got["status"] != "open" || got["closesAt"] != nil || est["USD"] != "1.5" {
		t.Fatalf("period %s, want 2026-01 open, closesAt null, estimate USD 1.5 (3 x 0.5)", r.body)
	}
	before := f.state(t)
	for _, p := range []string{"2026-13", "26-01", "latest"} {
		r := f.do(t, http.MethodGet, "/v1/tenants/t1/periods/"+p, nil, "")
		if r.status != http.StatusBadRequest || r.problem(t) != "invalid_period" {
			t.Errorf("period %q: %d %s, want 400 invalid_period", p, r.status, r.body)
		}
	}
	if f.state(t) != before {
		t.Fatal("a refused request changed billing's state")
	}
	r = f.do(t, http.MethodPost, "/v1/tenants/t1/periods/2026-01/close", map[string]string{"Idempotency-Key": "close-1"}, "")
	if r.status != http.StatusAccepted {
		t.Fatalf("close: %d %s", r.status, r.body)
	}
	r = f.do(t, http.MethodGet, "/v1/tenants/t1/periods/2026-01", nil, "")
	if err := json.Unmarshal(r.body, &got); err != nil || got["status"] != "closed" {
		t.Fatalf("period after its close: %s", r.body)
	}
}
