package system_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/usagebilling/billing/pkg/api/billingapi"
	"github.com/usagebilling/billing/pkg/api/invoiceapi"
	"github.com/usagebilling/billing/pkg/api/meterapi"
	"github.com/usagebilling/billing/pkg/api/queryapi"
	"github.com/usagebilling/billing/pkg/api/usageapi"
	"github.com/usagebilling/billing/testkit/apitest"
)

// documents are the services' OpenAPI documents (pkg/api), by service.
var documents = map[string]struct{ yaml, json []byte }{
	"meter":   {meterapi.YAML(), meterapi.JSON()},
	"usage":   {usageapi.YAML(), usageapi.JSON()},
	"billing": {billingapi.YAML(), billingapi.JSON()},
	"invoice": {invoiceapi.YAML(), invoiceapi.JSON()},
	"query":   {queryapi.YAML(), queryapi.JSON()},
}

// TestOpenAPIDocumentsMatchRouters: for each of the five services, built as
// it runs (service.NewRouter over its Build), every route chi.Walk finds is
// an operation of the service's OpenAPI document and every operation is a
// route; and the service serves the document at GET /openapi.json without
// a token, as valid OpenAPI 3.1 JSON, the same as the embedded one.
func TestOpenAPIDocumentsMatchRouters(t *testing.T) {
	for _, spec := range specs {
		t.Run(spec.Name, func(t *testing.T) {
			doc, ok := documents[spec.Name]
			if !ok {
				t.Fatalf("no OpenAPI document for %s", spec.Name)
			}
			srv, routes, _ := routesOf(t, spec)
			var walked []string
			for _, rt := range routes {
				walked = append(walked, rt.method+" "+rt.pattern)
			}
			apitest.CheckRouteList(t, doc.yaml, walked)

			resp, err := http.Get(srv.URL + "/openapi.json") // no Authorization header
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("GET /openapi.json: %d %s: %.200s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
			}
			if !bytes.Equal(body, doc.json) || !json.Valid(body) {
				t.Errorf("GET /openapi.json serves another document than %sapi's", spec.Name)
			}
			if _, err := apitest.Load(body); err != nil {
				t.Errorf("served document: %v", err)
			}
		})
	}
}
