// Package migrations holds the invoice service's schema.
//
// The numbering skips 0004, and the gap stays. golang-migrate records one
// version per database (invoice_schema_migrations) and applies the files
// numbered above it, so a database already past 0003 would never run a
// 0004 added now: fresh databases and deployed ones would differ. Renumbering
// 0005 onwards down by one is worse: a database at version 5 (0005, pricing
// models) would then be taken for one at the new 0005 (0006's content,
// reconciliation order) and skip it. A gap costs nothing (the tool walks
// the files in order), so every number after it is kept as it was
// released; TestNumbering holds the files to that: 0001 to 0003, then gap
// free from 0005, each with its down.
package migrations

import (
	"embed"

	"github.com/usagebilling/billing/pkg/monthpart"
	"github.com/usagebilling/billing/pkg/pgmigrate"
)

//go:embed *.sql
var files embed.FS

// Set is the invoice schema, tracked in its own migrations table.
// Its invoice_charge_months calls the month upkeep's shared DDL.
var Set = pgmigrate.Set{FS: files, Dir: ".", Table: "invoice_schema_migrations",
	Needs: []pgmigrate.Set{monthpart.Migrations}}

// ChargeMonths is invoice_charge as a table partitioned by month of its
// origin event id (0019): the service's retention creates its months ahead
// through invoice_charge_months, which does nothing else; archiving a month
// is the operator's, through invoice_charge_archive.
var ChargeMonths = monthpart.Table{Name: "invoice_charge", Key: "origin_event_id", DDL: "invoice_charge_months", Ahead: 2}
