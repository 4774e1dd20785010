package httpapi_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/usagebilling/billing/services/billing/internal/app"
	bt "github.com/usagebilling/billing/services/billing/internal/billingtest"
)

// The charges list shows what a catalog charge carries, as the OpenAPI
// document says (the fixture's server checks every response against it):
// its meter's aggregation, its price's dimensions, the fact's properties,
// unpriced; unitPrice and amount only for a charge with an amount of its own.
func TestChargesShowTheCatalog(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	svc := app.New(app.Deps{Pool: f.pool}, app.Config{})
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, f.pool, ib)
	jan1 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	price := func(meter string, dims map[string]string, at time.Time) []byte {
		return bt.Price{Tenant: "t3", Meter: meter, Currency: "USD", Version: 1, UnitPrice: "2", EffectiveAt: at, Dimensions: dims}.Raw(t)
	}
	use := func(meter string, props map[string]string) []byte {
		return bt.Usage{Tenant: "t3", Meter: meter, Currency: "USD", Quantity: "3", OccurredAt: jan10, Properties: props}.Raw(t)
	}
	bt.Decide(t, f.pool, ib,
		bt.Meter{Code: "tokens", Aggregation: "sum", Dimensions: []string{"model"}}.Raw(t),
		bt.Meter{Code: "users", Aggregation: "unique_count", ValueProperty: "user"}.Raw(t),
		price("tokens", map[string]string{"model": "gpt-4"}, jan1), price("users", nil, jan1), price("api_calls", nil, jan10.AddDate(0, 0, 1)),
		use("tokens", map[string]string{"model": "gpt-4"}), use("users", map[string]string{"user": "u1"}), use("api_calls", nil))

	r := f.do(t, "GET", "/v1/tenants/t3/charges?period=2026-01", nil, "")
	var list struct{ Charges []map[string]any }
	if err := json.Unmarshal(r.body, &list); err != nil || r.status != 200 || len(list.Charges) != 3 {
		t.Fatalf("charges %d %s", r.status, r.body)
	}
	byMeter := map[string]map[string]any{}
	for _, c := range list.Charges {
		byMeter[c["meterCode"].(string)] = c
	}
	tok, users, calls := byMeter["tokens"], byMeter["users"], byMeter["api_calls"]
	if tok["aggregation"] != "sum" || tok["amount"] != "6" || bt.JSON(tok["dimensions"]) != bt.JSON(map[string]string{"model": "gpt-4"}) ||
		bt.JSON(tok["properties"]) != bt.JSON(map[string]string{"model": "gpt-4"}) || tok["unpriced"] != false {
		t.Errorf("tokens charge %s", bt.JSON(tok))
	}
	if _, has := users["amount"]; has || users["aggregation"] != "unique_count" || users["dimensions"] != nil ||
		bt.JSON(users["properties"]) != bt.JSON(map[string]string{"user": "u1"}) {
		t.Errorf("users charge %s: want no amount of its own", bt.JSON(users))
	}
	if _, has := calls["amount"]; has || calls["unpriced"] != true || calls["priceVersion"] != float64(0) {
		t.Errorf("api_calls charge %s: want unpriced (before its first price)", bt.JSON(calls))
	}
}
