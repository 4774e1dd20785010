package events_test

import (
	"os"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/outbox"
	"github.com/usagebilling/billing/testkit/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

var outboxDB = pgtest.Template{Name: "outbox", Migrate: outbox.Migrate}

// TestAppendPutsEachEventOnItsTopic appends events of three topics, mixed,
// in one transaction of a real outbox, and reads back each row's topic in
// append order; an event type outside the contract is refused.
func TestAppendPutsEachEventOnItsTopic(t *testing.T) {
	pool := pgtest.NewPool(t, outboxDB)
	ctx := t.Context()
	usageID, chargeID, redriveID := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	u := usage(usageID)
	accepted, err := events.New(u, events.Meta{Producer: "usage", TenantID: "t1", AggregateID: usageID.String(), OccurredAt: u.OccurredAt})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	rated, err := events.Caused(&accepted, charge(chargeID, accepted.EventID, u), events.Meta{
		Producer: "billing", TenantID: "t1", AggregateID: chargeID.String(), OccurredAt: time.Now()})
	if err != nil {
		t.Fatalf("Caused: %v", err)
	}
	second, err := events.Caused(&accepted, charge(uuid.Must(uuid.NewV7()), accepted.EventID, u), events.Meta{
		Producer: "billing", TenantID: "t1", AggregateID: uuid.Must(uuid.NewV7()).String(), OccurredAt: time.Now()})
	if err != nil {
		t.Fatalf("Caused: %v", err)
	}
	req, err := events.New(events.RedriveRequested{RedriveID: redriveID, Service: "billing", EventID: rated.EventID.String(),
		Reason: "test", Actor: "op"}, events.Meta{Producer: "query", TenantID: events.OpsTenant,
		AggregateID: events.RedriveAggregateID(redriveID), OccurredAt: time.Now()})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	evs := []envelope.Envelope{accepted, rated, second, req}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return events.Append(ctx, tx, evs...) }); err != nil {
		t.Fatalf("Append: %v", err)
	}
	rows, err := pool.Query(ctx, `SELECT event_id, topic FROM outbox_event ORDER BY id`)
	if err != nil {
		t.Fatalf("read outbox: %v", err)
	}
	type row struct {
		ID    uuid.UUID
		Topic string
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		t.Fatalf("read outbox: %v", err)
	}
	want := []row{{accepted.EventID, events.TopicUsage}, {rated.EventID, events.TopicBilling},
		{second.EventID, events.TopicBilling}, {req.EventID, events.TopicOpsCommands}}
	if !slices.Equal(got, want) {
		t.Fatalf("outbox rows\n got %v\nwant %v", got, want)
	}

	foreign, err := envelope.New(envelope.Meta{EventType: "test.Foreign", SchemaVersion: 1, TenantID: "t1",
		AggregateType: "thing", AggregateID: "x", AggregateVersion: 1, OccurredAt: time.Now(), Producer: "test"}, struct{}{})
	if err != nil {
		t.Fatalf("new foreign event: %v", err)
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return events.Append(ctx, tx, foreign) }); err == nil {
		t.Fatal("Append of an event type outside the contract: no error")
	}
}
