// Package migrations holds the query service's schema.
package migrations

import (
	"embed"

	"github.com/usagebilling/billing/pkg/pgmigrate"
)

//go:embed *.sql
var files embed.FS

// Set is the query schema, tracked in its own migrations table.
var Set = pgmigrate.Set{FS: files, Dir: ".", Table: "query_schema_migrations"}
