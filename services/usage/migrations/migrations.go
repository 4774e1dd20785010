// Package migrations holds the usage schema, embedded and applied at start.
package migrations

import (
	"embed"

	"github.com/usagebilling/billing/pkg/pgmigrate"
)

//go:embed *.sql
var files embed.FS

// Set is the usage service's own schema, tracked in usage_schema_migrations.
var Set = pgmigrate.Set{FS: files, Dir: ".", Table: "usage_schema_migrations"}
