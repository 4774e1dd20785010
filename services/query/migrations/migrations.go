// Package migrations holds the query service's schema.
package migrations

import (
	"embed"

	"github.com/usagebilling/billing/pkg/monthpart"
	"github.com/usagebilling/billing/pkg/pgmigrate"
)

//go:embed *.sql
var files embed.FS

// Set is the query schema, tracked in its own migrations table.
// Its projected_event_months and usage_fact_months call the month upkeep's
// shared DDL.
var Set = pgmigrate.Set{FS: files, Dir: ".", Table: "query_schema_migrations",
	Needs: []pgmigrate.Set{monthpart.Migrations}}

// EventMonths is projected_event as a table partitioned by month of its
// event id (0010): the service's retention creates its months ahead
// through projected_event_months, which does nothing else; archiving a
// month is the operator's, through projected_event_archive.
var EventMonths = monthpart.Table{Name: "projected_event", Key: "event_id", DDL: "projected_event_months", Ahead: 2}

// FactMonths is usage_fact, the usage analytics' fact rows, as a table
// partitioned by month of its event id (0011), the UsageAccepted's: the
// months of EventMonths, each made with its own unique fact identity
// (usage_fact_months does nothing else); a month's facts are archived with
// its events, by projected_event_archive.
var FactMonths = monthpart.Table{Name: "usage_fact", Key: "event_id", DDL: "usage_fact_months", Ahead: 2}
