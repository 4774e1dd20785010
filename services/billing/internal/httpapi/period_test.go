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
	// January 2026 has ended (the fixture runs on the real clock) and is not
	// closed: in grace until its end plus the default hour.
	if got["period"] != "2026-01" || got["status"] != "grace" || got["closesAt"] != "2026-02-01T01:00:00Z" || est["USD"] != "1.5" {
		t.Fatalf("period %s, want 2026-01 grace, closesAt 2026-02-01T01:00:00Z, estimate USD 1.5 (3 x 0.5)", r.body)
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
	if err := json.Unmarshal(r.body, &got); err != nil || got["status"] != "closed" || got["closesAt"] != nil {
		t.Fatalf("period after its close: %s", r.body)
	}
}
