// Package migrations holds billing's own schema: price evidence, billing
// periods, charges and adjustments.
package migrations

import (
	"embed"

	"github.com/usagebilling/billing/pkg/pgmigrate"
)

//go:embed *.sql
var files embed.FS

// Set is billing's schema, tracked in billing_schema_migrations.
var Set = pgmigrate.Set{FS: files, Dir: ".", Table: "billing_schema_migrations"}
