// Package api holds the HTTP contract of the five services as OpenAPI 3.1
// documents, one per service, each beside the Go types generated from it
// (meterapi, usageapi, billingapi, invoiceapi, queryapi). The hand-written
// openapi.yaml of a service is the one source of truth: the service embeds
// and serves it at GET /openapi.json, its tests check its router and its
// traffic against it (apitest), and `make openapi` regenerates the types
// (apigen).
package api

import (
	"encoding/json"
	"fmt"
	"net/http"

	"go.yaml.in/yaml/v3"
)

// Path is where every service serves its document, open to anyone.
const Path = "/openapi.json"

// ToJSON converts a YAML document to JSON.
func ToJSON(doc []byte) ([]byte, error) {
	var v any
	if err := yaml.Unmarshal(doc, &v); err != nil {
		return nil, fmt.Errorf("openapi document: %w", err)
	}
	return json.Marshal(v)
}

// MustJSON is ToJSON of an embedded document, which a test has parsed: it
// panics on an error.
func MustJSON(doc []byte) []byte {
	out, err := ToJSON(doc)
	if err != nil {
		panic(err)
	}
	return out
}

// Handler serves a document (JSON) at GET /openapi.json. The route needs no
// token (auth.OpenPaths).
func Handler(doc []byte) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write(doc)
	})
}
