package httpapi_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/usagebilling/billing/services/billing/internal/app"
	bt "github.com/usagebilling/billing/services/billing/internal/billingtest"
	"github.com/usagebilling/billing/services/billing/internal/httpapi"
)

// PUT .../settings: the settings of the periods not yet begun, idempotent by
// key; every refused request is a problem with its code and writes nothing.
func TestSettingsOverHTTP(t *testing.T) {
	f := newFixture(t)
	r := chi.NewRouter()
	r.Use(signedIn)
	api := httpapi.New(app.New(app.Deps{Pool: f.pool}, app.Config{}), nil)
	api.Routes(r)
	api.PeriodRoutes(r)
	f.srv.Config.Handler = r
	key := func(k string) map[string]string { return map[string]string{"Idempotency-Key": k} }
	rows := func() int {
		return bt.Count(t, f.pool, `SELECT count(*) FROM tenant_settings`)
	}
	for _, tc := range []struct {
		name   string
		header map[string]string
		body   string
		status int
		code   string
	}{
		{"unknown zone", key("s1"), `{"timeZone":"Mars/Olympus"}`, 400, "invalid_time_zone"},
		{"not a duration", key("s1"), `{"gracePeriod":"1h"}`, 400, "invalid_grace_period"},
		{"months", key("s1"), `{"gracePeriod":"P1M"}`, 400, "invalid_grace_period"},
		{"too long", key("s1"), `{"gracePeriod":"P8D"}`, 422, "grace_period_out_of_range"},
		{"no key", nil, `{"timeZone":"Asia/Seoul"}`, 400, "missing_idempotency_key"},
		{"null body (would reset the settings)", key("s1"), `null`, 400, "malformed_json"},
		{"charset utf-16", map[string]string{"Idempotency-Key": "s1", "Content-Type": "application/json; charset=utf-16"}, `{"timeZone":"Asia/Seoul"}`, 415, "unsupported_media_type"},
		{"no token", map[string]string{"Idempotency-Key": "s1", "X-No-Token": "1"}, `{"timeZone":"Asia/Seoul"}`, 401, "unauthorized"},
		{"tax rate of 1", key("s1"), `{"taxRates":[{"code":"VAT","name":"VAT","rate":"1"}]}`, 422, "tax_rate_out_of_range"},
		{"negative tax rate", key("s1"), `{"taxRates":[{"code":"VAT","name":"VAT","rate":"-0.1"}]}`, 422, "tax_rate_out_of_range"},
		{"7 decimal places", key("s1"), `{"taxRates":[{"code":"VAT","name":"VAT","rate":"0.1234567"}]}`, 422, "tax_rate_out_of_range"},
		{"rate not a decimal", key("s1"), `{"taxRates":[{"code":"VAT","name":"VAT","rate":"20%"}]}`, 400, "invalid_tax_rate"},
		{"rate as a number", key("s1"), `{"taxRates":[{"code":"VAT","name":"VAT","rate":0.2}]}`, 400, "invalid_field"},
		{"bad code", key("s1"), `{"taxRates":[{"code":"V A T","name":"VAT","rate":"0.2"}]}`, 400, "invalid_tax_rate"},
		{"no name", key("s1"), `{"taxRates":[{"code":"VAT","name":"","rate":"0.2"}]}`, 400, "invalid_tax_rate"},
		{"control character in name", key("s1"), `{"taxRates":[{"code":"VAT","name":"V\u0007AT","rate":"0.2"}]}`, 400, "control_character"},
		{"same code twice", key("s1"), `{"taxRates":[{"code":"VAT","name":"a","rate":"0.2"},{"code":"VAT","name":"b","rate":"0.1"}]}`, 422, "duplicate_tax_code"},
		{"six rates", key("s1"), `{"taxRates":[{"code":"A","name":"a","rate":"0.1"},{"code":"B","name":"b","rate":"0.1"},{"code":"C","name":"c","rate":"0.1"},` +
			`{"code":"D","name":"d","rate":"0.1"},{"code":"E","name":"e","rate":"0.1"},{"code":"F","name":"f","rate":"0.1"}]}`, 422, "too_many_tax_rates"},
	} {
		got := f.do(t, http.MethodPut, "/v1/tenants/t1/settings", tc.header, tc.body)
		if got.status != tc.status || got.problem(t) != tc.code {
			t.Errorf("%s: %d %s, want %d %s", tc.name, got.status, got.body, tc.status, tc.code)
		}
	}
	if n := rows(); n != 0 {
		t.Fatalf("refused requests wrote %d settings rows", n)
	}
	body := `{"timeZone":"Asia/Seoul","gracePeriod":"PT90M"}`
	first := f.do(t, http.MethodPut, "/v1/tenants/t1/settings", key("s1"), body)
	var got app.SettingsReply
	if first.status != http.StatusOK || json.Unmarshal(first.body, &got) != nil ||
		got.TimeZone != "Asia/Seoul" || got.GracePeriod != "PT1H30M" || got.EffectiveFrom == "" {
		t.Fatalf("settings: %d %s", first.status, first.body)
	}
	again := f.do(t, http.MethodPut, "/v1/tenants/t1/settings", key("s1"), body)
	if again.status != http.StatusOK || string(again.body) != string(first.body) || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %s %v", again.status, again.body, again.header)
	}
	other := f.do(t, http.MethodPut, "/v1/tenants/t1/settings", key("s1"), `{"timeZone":"UTC"}`)
	if other.status != http.StatusUnprocessableEntity || other.problem(t) != "idempotency_key_reused" {
		t.Fatalf("key reused: %d %s", other.status, other.body)
	}
	var zone, actor string
	var grace int64
	err := f.pool.QueryRow(t.Context(), `SELECT time_zone, grace_seconds, actor FROM tenant_settings
		WHERE tenant_id = 't1' AND effective_from = $1`, got.EffectiveFrom).Scan(&zone, &grace, &actor)
	if err != nil || zone != "Asia/Seoul" || grace != 5400 || actor != testActor || rows() != 1 {
		t.Fatalf("settings row: %s %d %s (%v), %d rows", zone, grace, actor, err, rows())
	}
	// Tax rates, kept in the order given, replace the settings of the same
	// period.
	taxed := f.do(t, http.MethodPut, "/v1/tenants/t1/settings", key("s2"),
		`{"timeZone":"Asia/Seoul","taxRates":[{"code":"VAT","name":"VAT 10%","rate":"0.1"},{"code":"LOCAL","name":"Local tax","rate":"0.012345"}]}`)
	got = app.SettingsReply{}
	if taxed.status != http.StatusOK || json.Unmarshal(taxed.body, &got) != nil || len(got.TaxRates) != 2 ||
		got.TaxRates[0].Code != "VAT" || got.TaxRates[1].Rate.String() != "0.012345" || got.GracePeriod != "PT1H" {
		t.Fatalf("tax rates: %d %s", taxed.status, taxed.body)
	}
	var rates string
	if err := f.pool.QueryRow(t.Context(), `SELECT tax_rates::text FROM tenant_settings
		WHERE tenant_id = 't1' AND effective_from = $1`, got.EffectiveFrom).Scan(&rates); err != nil || rows() != 1 ||
		rates != `[{"code": "VAT", "name": "VAT 10%", "rate": "0.1"}, {"code": "LOCAL", "name": "Local tax", "rate": "0.012345"}]` {
		t.Fatalf("tax rates row: %s (%v), %d rows", rates, err, rows())
	}
}
