// Package migrations holds the invoice service's schema.
package migrations

import (
	"embed"

	"github.com/usagebilling/billing/pkg/pgmigrate"
)

//go:embed *.sql
var files embed.FS

// Set is the invoice schema, tracked in its own migrations table.
var Set = pgmigrate.Set{FS: files, Dir: ".", Table: "invoice_schema_migrations"}
