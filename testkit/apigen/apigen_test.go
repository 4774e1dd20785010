package apigen_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/usagebilling/billing/pkg/api"
	"github.com/usagebilling/billing/testkit/apigen"
	"github.com/usagebilling/billing/testkit/apitest"
)

// root is pkg/api, where the documents and the generated types live.
var root = filepath.Join("..", "..", "pkg", "api")

// TestDocuments: each service's document loads and validates as OpenAPI 3.1
// (as far as kin-openapi checks it: structure, references, schemas under
// JSON Schema 2020-12, examples), written and as served.
func TestDocuments(t *testing.T) {
	for _, s := range apigen.Services {
		t.Run(s.Name, func(t *testing.T) {
			doc, err := os.ReadFile(filepath.Join(root, s.Dir, "openapi.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := apitest.Load(doc); err != nil {
				t.Fatal(err)
			}
			// As served: JSON, which also refuses a key written twice
			// (the loader above keeps the last).
			served, err := api.ToJSON(doc)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := apitest.Load(served); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestGeneratedTypesFresh: the generated types are those of the documents
// as they are now (`make openapi` regenerates them).
func TestGeneratedTypesFresh(t *testing.T) {
	for _, s := range apigen.Services {
		t.Run(s.Name, func(t *testing.T) {
			want, err := apigen.GenerateDir(root, s)
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(filepath.Join(root, s.Dir, apigen.GeneratedFile))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("pkg/api/%s/%s is stale: run make openapi", s.Dir, apigen.GeneratedFile)
			}
		})
	}
}
