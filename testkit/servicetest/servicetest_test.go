package servicetest_test

import (
	"context"
	"os"
	"slices"
	"testing"
	"testing/fstest"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/pgmigrate"
	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/testkit/pgtest"
	"github.com/usagebilling/billing/testkit/servicetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// spec is a service whose one table has a unique constraint guarding the
// origin of its effect, another unique constraint, and a check.
var spec = service.Spec{
	Name: "servicetest",
	Migrations: []pgmigrate.Set{{
		FS: fstest.MapFS{
			"m/0001_thing.up.sql": {Data: []byte(`CREATE TABLE thing (
				origin text NOT NULL CONSTRAINT thing_origin_key UNIQUE,
				name text NOT NULL CONSTRAINT thing_name_key UNIQUE CONSTRAINT thing_name_check CHECK (name <> ''))`)},
			"m/0001_thing.down.sql": {Data: []byte(`DROP TABLE thing`)},
		},
		Dir: "m", Table: "servicetest_schema_migrations",
	}},
	OriginConstraints: []string{"thing_origin_key"},
}

// The inbox servicetest builds is service.NewInbox's: a unique violation
// on a constraint the Spec names is a DUPLICATE, on another one a
// quarantine, announced on ops.events.v1 as the running service does.
func TestNewInboxIsTheServicesInbox(t *testing.T) {
	pool := servicetest.NewPool(t, spec)
	ib := servicetest.NewInbox(t, spec, service.Parts{
		Topics: []string{events.TopicUsage},
		Handlers: map[string]inbox.Handler{events.TypeUsageAccepted: inbox.On(
			func(ctx context.Context, tx pgx.Tx, _ *envelope.Decoded, u events.UsageAccepted) (inbox.Outcome, error) {
				_, err := tx.Exec(ctx, `INSERT INTO thing (origin, name) VALUES ($1, $2)`, u.SourceEventID, u.MeterCode)
				return inbox.Outcome{}, err
			})},
	})
	ds := servicetest.Decide(t, pool, ib, servicetest.Messages(events.TopicUsage,
		usage(t, "origin-1", "api"),
		usage(t, "origin-1", "sms"), // the same origin: a redelivery the inbox did not see
		usage(t, "origin-2", "api"), // another origin, a name taken: a conflict
	)...)
	var got []string
	for _, d := range ds {
		got = append(got, d.Outcome)
	}
	if want := []string{inbox.OutcomeApplied, inbox.OutcomeDuplicate, inbox.OutcomeQuarantined}; !slices.Equal(got, want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
	if n := len(servicetest.Events(t, spec, pool, events.TopicUsage)); n != 0 {
		t.Fatalf("%d usage events published, want none", n)
	}
	var announced int
	for _, p := range servicetest.Outbox(t, spec, pool) {
		if p.Topic == events.TopicOps && p.Envelope.EventType == events.TypeEventQuarantined {
			announced++
		}
	}
	if announced != 1 {
		t.Fatalf("%d quarantines announced, want 1", announced)
	}
}

// MissingConstraints finds unique constraints, and reports a name that is
// no unique constraint or index (a check, a made-up name).
func TestMissingConstraints(t *testing.T) {
	pool := servicetest.NewPool(t, spec)
	missing, err := servicetest.MissingConstraints(t.Context(), pool,
		[]string{"thing_origin_key", "thing_name_check", "thing_name_key", "outbox_event_pkey", "made_up_key"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"thing_name_check", "made_up_key"}; !slices.Equal(missing, want) {
		t.Fatalf("missing %v, want %v", missing, want)
	}
}

func usage(t *testing.T, origin, meter string) []byte {
	t.Helper()
	id := uuid.New()
	at := time.Date(2026, 11, 3, 10, 0, 0, 0, time.UTC)
	e, err := envelope.New(envelope.Meta{
		EventType: events.TypeUsageAccepted, SchemaVersion: 1, TenantID: "acme", AggregateType: events.AggregateUsage,
		AggregateID: id.String(), AggregateVersion: 1, OccurredAt: at, Producer: "usage",
	}, events.UsageAccepted{UsageID: id, SourceSystem: "test", SourceEventID: origin, MeterCode: meter,
		Quantity: decimal.RequireFromString("1"), OccurredAt: at, Currency: "USD"})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := e.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}
