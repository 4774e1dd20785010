package httpapi_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/services/usage/internal/usagetest"
)

// Events sent by the CloudEvents SDK for Go (structured mode, as
// OpenMeter's clients send them) are accepted at OpenMeter's path, their
// data's numbers exact; a batch is the SDK's events marshalled as a JSON
// array.
func TestCloudEventsSDKClient(t *testing.T) {
	e := newCEEnv(t)
	srv := e.server(t, acmeIngest)
	c, err := cloudevents.NewClientHTTP(cehttp.WithTarget(srv.URL + "/api/v1/events"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := cloudevents.WithEncodingStructured(t.Context())
	newEvent := func(id, typ string, data map[string]any) cloudevents.Event {
		ev := cloudevents.NewEvent()
		ev.SetID(id)
		ev.SetSource("sdk-go")
		ev.SetType(typ)
		ev.SetSubject("acme")
		ev.SetTime(e.at)
		if data != nil {
			if err := ev.SetData(cloudevents.ApplicationJSON, data); err != nil {
				t.Fatal(err)
			}
		}
		return ev
	}
	send := func(ev cloudevents.Event) int {
		t.Helper()
		res := c.Send(ctx, ev)
		var hr *cehttp.Result
		if !cloudevents.ResultAs(res, &hr) {
			t.Fatalf("send %s: %v", ev.ID(), res)
		}
		return hr.StatusCode
	}
	prompt := newEvent("sdk-1", "prompt", map[string]any{"tokens": json.Number("123456.789012345678"), "model": "gpt-4", "region": "eu"})
	for i := range 2 { // new, then a replay
		if status := send(prompt); status != 204 {
			t.Fatalf("send %d: status %d, want 204", i, status)
		}
	}
	if status := send(newEvent("sdk-2", "nope", nil)); status != 400 {
		t.Fatalf("an unknown type: status %d, want 400", status)
	}

	// A batch of the SDK's events.
	body, err := json.Marshal([]cloudevents.Event{
		newEvent("sdk-3", "active", map[string]any{"user_id": "u-1"}),
		newEvent("sdk-4", "prompt", map[string]any{"tokens": "42", "model": "gpt-3"}),
		newEvent("sdk-5", "calls", nil),
	})
	if err != nil {
		t.Fatal(err)
	}
	if r := post(t, srv, "/api/v1/events", ceBatch, string(body)); r.status != 204 {
		t.Fatalf("batch: %d %s", r.status, r.body)
	}
	want := []factRow{
		{"acme", "tokens", "123456.789012345678", `{"model": "gpt-4", "region": "eu"}`},
		{"acme", "users", "1", `{"user_id": "u-1"}`},
		{"acme", "tokens", "42", `{"model": "gpt-3"}`},
		{"acme", "calls", "1", `{}`},
	}
	if got := e.facts(t); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("facts\n%v\nwant\n%v", got, want)
	}
}

// The exact JSON of OpenMeter's documentation, posted as its curl does
// (https://openmeter.io/docs/concepts/usage-events and
// https://openmeter.io/docs/metering/events/overview), to OpenMeter's
// path: data values as a numeric string, a number and plain strings.
func TestOpenMeterExamples(t *testing.T) {
	tests := []struct {
		name  string
		meter catalog.Meter
		body  string
		want  factRow
	}{
		{
			"usage events: a duration as a numeric string",
			catalog.Meter{Code: "request_duration", Name: "Request duration", Aggregation: catalog.Sum, ValueProperty: "duration_seconds",
				Dimensions: []string{"method", "route"}, EventType: "request"},
			`{
  "specversion": "1.0",
  "type": "request",
  "id": "00001",
  "time": "2024-01-01T00:00:00.001Z",
  "source": "service-0",
  "subject": "customer-1",
  "data": {
    "duration_seconds": "12",
    "method": "GET",
    "route": "/hello"
  }
}`,
			factRow{"customer-1", "request_duration", "12", `{"route": "/hello", "method": "GET"}`},
		},
		{
			"ingest overview: requests counted",
			catalog.Meter{Code: "api_requests", Name: "API requests", Aggregation: catalog.Count, Dimensions: []string{"method", "route"}, EventType: "request"},
			`
{
  "specversion": "1.0",
  "type": "request",
  "id": "00001",
  "time": "2023-01-01T00:00:00.001Z",
  "source": "service-0",
  "subject": "customer-1",
  "data": {
    "method": "GET",
    "route": "/hello"
  }
}
`,
			factRow{"customer-1", "api_requests", "1", `{"route": "/hello", "method": "GET"}`},
		},
		{
			"the Node.js SDK's prompt: tokens as a number",
			catalog.Meter{Code: "tokens", Name: "Tokens", Aggregation: catalog.Sum, ValueProperty: "tokens", Dimensions: []string{"model", "provider"}, EventType: "prompt"},
			`{"specversion":"1.0","id":"p-1","source":"node","type":"prompt","subject":"customer-1","time":"2024-01-01T00:00:00Z","data":{"tokens":123456,"model":"gpt4","provider":"openai"}}`,
			factRow{"customer-1", "tokens", "123456", `{"model": "gpt4", "provider": "openai"}`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := &ceEnv{Env: usagetest.New(t)}
			e.ApplyMeters(t, tt.meter)
			e.ApplyPrices(t, usagetest.Price{Tenant: "customer-1", Meter: tt.meter.Code, Currency: "USD", Version: 1, UnitPrice: "0.01",
				EffectiveAt: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)})
			srv := e.server(t, auth.NewClaimsRoles("ingest@customer-1", "customer-1", time.Hour, auth.RoleIngest))
			for i := range 2 {
				if r := post(t, srv, "/api/v1/events", "application/cloudevents+json", tt.body); r.status != 204 {
					t.Fatalf("send %d: %d %s", i, r.status, r.body)
				}
			}
			got := e.facts(t)
			if len(got) != 1 || got[0].Tenant != tt.want.Tenant || got[0].Meter != tt.want.Meter || got[0].Quantity != tt.want.Quantity ||
				!sameJSON(t, got[0].Props, tt.want.Props) {
				t.Fatalf("facts %v, want %v", got, tt.want)
			}
		})
	}
}

func sameJSON(t *testing.T, a, b string) bool {
	t.Helper()
	var x, y map[string]string
	if err := json.Unmarshal([]byte(a), &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(b), &y); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(x) == fmt.Sprint(y) // maps print in key order
}
