package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/services/meter/internal/app"
)

const proPlan = `{"code": "pro", "name": "Pro", "currency": "USD", "minimumSpend": "100",
	"fixedFees": [{"code": "base", "name": "Base fee", "amount": "49.00"}],
	"charges": [{"meterCode": "tokens", "model": "graduated",
	             "tiers": [{"upTo": "1000000", "unitPrice": "0"}, {"unitPrice": "0.000002"}]},
	            {"meterCode": "tokens", "dimensions": {"model": "big"}, "unitPrice": "0.00001"}]}`

// A catalog-admin publishes plan versions (idempotently), any catalog reader
// lists them; bad input is refused with its code and writes nothing.
func TestPlansOverHTTP(t *testing.T) {
	e := newEnv(t)
	if r := define(t, e, "m1", `{"code": "tokens", "name": "Tokens", "aggregation": "sum", "dimensions": ["model"]}`); r.status != http.StatusCreated {
		t.Fatalf("define: %d %s", r.status, r.body)
	}
	r := send(t, e, auth.RoleCatalogAdmin, http.MethodPost, "/v1/plans", "p1", proPlan)
	if r.status != http.StatusCreated {
		t.Fatalf("publish: %d %s", r.status, r.body)
	}
	var v1 struct {
		Version int64 `json:"version"`
		Charges []struct {
			MeterCode string `json:"meterCode"`
			Model     string `json:"model"`
		} `json:"charges"`
	}
	if err := json.Unmarshal([]byte(r.body), &v1); err != nil || v1.Version != 1 || len(v1.Charges) != 2 || v1.Charges[0].Model != "graduated" {
		t.Fatalf("v1 %s (%v)", r.body, err)
	}
	if again := send(t, e, auth.RoleCatalogAdmin, http.MethodPost, "/v1/plans", "p1", proPlan); again.status != http.StatusCreated ||
		again.header.Get("Idempotent-Replayed") != "true" || again.body != r.body {
		t.Fatalf("replay: %d %s", again.status, again.body)
	}
	if r := send(t, e, auth.RoleCatalogAdmin, http.MethodPost, "/v1/plans", "p2", proPlan); r.status != http.StatusCreated ||
		!strings.Contains(r.body, `"version":2`) {
		t.Fatalf("second version: %d %s", r.status, r.body)
	}
	if r := send(t, e, auth.RoleBillingAdmin, http.MethodPost, "/v1/plans", "p3", proPlan); r.status != http.StatusForbidden {
		t.Fatalf("a billing-admin publishing a plan: %d %s", r.status, r.body)
	}
	before := written(t, e.pool)
	for i, tc := range []struct{ body, code string }{
		{`{"code": "x", "name": "X", "currency": "USD", "fixedFees": [{"code": "f", "name": "F", "amount": "1.005"}]}`, "amount_precision"},
		{`{"code": "x", "name": "X", "currency": "USD", "minimumSpend": 100}`, "invalid_plan"},
		{`{"code": "x", "name": "X", "currency": "USD", "fixedFees": [{"code": "f", "name": "F", "amount": "` + strings.Repeat("9", 38) + `"}]}`, "decimal_out_of_range"},
		{`{"code": "x", "name": "X", "currency": "USD", "fixedFees": [{"code": "f", "name": "F", "amount": "1` + strings.Repeat("0", 18) + `"}]}`, "decimal_out_of_range"},
		{`{"code": "x", "name": "X", "currency": "USD", "minimumSpend": "` + strings.Repeat("9", 38) + `"}`, "decimal_out_of_range"},
		{`{"code": "x", "name": "X", "currency": "USD", "charges": [{"meterCode": "tokens", "unitPrice": "` + strings.Repeat("9", 38) + `"}]}`, "decimal_out_of_range"},
		{`{"code": "x", "name": "X", "currency": "USD", "charges": [{"meterCode": "seats", "unitPrice": "1"}]}`, "meter_not_found"},
		{`{"code": "x y", "name": "X", "currency": "USD"}`, "invalid_plan"},
		{`{"code": "x", "name": "X", "currency": "USD", "charges": [{"meterCode": "tokens", "unitPrice": "1"}, {"meterCode": "tokens", "unitPrice": "2"}]}`, "ambiguous_price"},
	} {
		r := send(t, e, auth.RoleCatalogAdmin, http.MethodPost, "/v1/plans", fmt.Sprintf("bad-%d", i), tc.body)
		if !strings.Contains(r.body, `"code":"`+tc.code+`"`) {
			t.Errorf("%s: %d %s, want %s", tc.body, r.status, r.body, tc.code)
		}
	}
	if after := written(t, e.pool); after != before {
		t.Fatalf("refused plans wrote %d rows", after-before)
	}
	if r := send(t, e, auth.RoleOperator, http.MethodGet, "/v1/plans", "", ""); r.status != http.StatusOK ||
		!strings.Contains(r.body, `"version":2`) || strings.Contains(r.body, `"version":1`) {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	r = send(t, e, auth.RoleCatalogAdmin, http.MethodGet, "/v1/plans/pro/versions?limit=1", "", "")
	var page struct {
		Versions []struct{ Version int64 } `json:"versions"`
		Next     string                    `json:"next"`
	}
	if err := json.Unmarshal([]byte(r.body), &page); err != nil || len(page.Versions) != 1 || page.Next == "" {
		t.Fatalf("versions page: %d %s", r.status, r.body)
	}
	r = send(t, e, auth.RoleCatalogAdmin, http.MethodGet, "/v1/plans/pro/versions?limit=1&cursor="+page.Next, "", "")
	if !strings.Contains(r.body, `"version":2`) || strings.Contains(r.body, `"next"`) {
		t.Fatalf("last versions page: %d %s", r.status, r.body)
	}
	if r := send(t, e, auth.RoleCatalogAdmin, http.MethodGet, "/v1/plans/basic/versions", "", ""); r.status != http.StatusNotFound ||
		!strings.Contains(r.body, "plan_not_found") {
		t.Fatalf("versions of no plan: %d %s", r.status, r.body)
	}
}

// At most METER_MAX_PLAN_VERSIONS_PER_MONTH versions of one plan take
// effect in a UTC month: the publication past it is refused 422
// limit_exceeded and writes nothing; the plan's version in the next month
// and another plan's in the same month are not limited by it.
func TestPlanVersionsAreLimitedPerMonth(t *testing.T) {
	e := newEnv(t)
	e.srv = serveWith(t, e.pool, app.Config{MaxPlanVersions: 3})
	now := time.Now().UTC()
	month := time.Date(now.Year(), now.Month()+3, 1, 1, 0, 0, 0, time.UTC) // a month no clock reaches in the test
	step := 0
	publish := func(code string, at time.Time) response {
		step++
		return send(t, e, auth.RoleCatalogAdmin, http.MethodPost, "/v1/plans", fmt.Sprintf("k%d", step),
			fmt.Sprintf(`{"code":%q,"name":"P","currency":"USD","effectiveAt":%q}`,
				code, at.Add(time.Duration(step)*time.Hour).Format(time.RFC3339)))
	}
	for i := range 3 {
		if r := publish("pro", month); r.status != http.StatusCreated {
			t.Fatalf("version %d in the month: %d %s", i+1, r.status, r.body)
		}
	}
	before := written(t, e.pool)
	if r := publish("pro", month); r.status != http.StatusUnprocessableEntity || !strings.Contains(r.body, `"code":"limit_exceeded"`) ||
		!strings.Contains(r.body, "METER_MAX_PLAN_VERSIONS_PER_MONTH") {
		t.Fatalf("a fourth version in the month: %d %s, want 422 limit_exceeded", r.status, r.body)
	}
	if after := written(t, e.pool); after != before {
		t.Fatalf("the refused version wrote %d rows", after-before)
	}
	if r := publish("pro", month.AddDate(0, 1, 0)); r.status != http.StatusCreated {
		t.Fatalf("a version in the next month: %d %s", r.status, r.body)
	}
	if r := publish("basic", month); r.status != http.StatusCreated {
		t.Fatalf("another plan's version in the month: %d %s", r.status, r.body)
	}
}
