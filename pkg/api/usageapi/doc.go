// Package usageapi is the usage service's HTTP contract: its OpenAPI 3.1 document
// and the Go types generated from it (`make openapi`).
package usageapi

import (
	_ "embed"
	"net/http"
	"sync"

	"github.com/usagebilling/billing/pkg/api"
)

//go:embed openapi.yaml
var spec []byte

// YAML is the document as written.
func YAML() []byte { return spec }

// JSON is the document as served at GET /openapi.json.
var JSON = sync.OnceValue(func() []byte { return api.MustJSON(spec) })

// Handler serves the document at GET /openapi.json (api.Path), open to
// anyone.
func Handler() http.Handler { return api.Handler(JSON()) }
