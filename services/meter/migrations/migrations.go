// Package migrations holds the meter schema, embedded and applied at start.
package migrations

import (
	"embed"

	"github.com/usagebilling/billing/pkg/pgmigrate"
)

//go:embed *.sql
var files embed.FS

// Set is the meter's own schema, tracked in meter_schema_migrations.
var Set = pgmigrate.Set{FS: files, Dir: ".", Table: "meter_schema_migrations"}
