package inbox_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// publishingInbox applies Noted like the test domain and publishes an echo of
// each applied note through Outcome.Publish, on topic "echo.<origin prefix>".
func publishingInbox(t *testing.T) *inbox.Inbox {
	t.Helper()
	hs := map[string]inbox.Handler{
		"Noted": func(ctx context.Context, tx pgx.Tx, d *envelope.Decoded) (inbox.Outcome, error) {
			n := d.Payload.(note)
			if _, err := tx.Exec(ctx, `INSERT INTO effect (event_id, origin, aggregate, version) VALUES ($1, $2, $3, $4)`,
				d.Envelope.EventID, n.Origin, d.Envelope.AggregateID, d.Envelope.AggregateVersion); err != nil {
				return inbox.Outcome{}, err
			}
			if n.Fail == "permanent" {
				return inbox.Outcome{}, inbox.Permanent("bad_note", errors.New("told to fail"))
			}
			if n.Needs != "" {
				return inbox.Outcome{}, inbox.DeferUntil(n.Needs)
			}
			echo := ev(t, "Noted", 1, "echo-"+d.Envelope.EventID.String(), 1, note{Origin: "echo-" + n.Origin})
			topic := "echo.a"
			if n.Origin[0] == 'b' {
				topic = "echo.b"
			}
			return inbox.Outcome{Publish: []inbox.Publication{{Topic: topic, Event: echo}}}, nil
		},
	}
	ib, err := inbox.New(newRegistry(), hs, inbox.Options{Service: "publish"})
	if err != nil {
		t.Fatal(err)
	}
	return ib
}

// TestPublishedWithTheDecisions checks that the events handlers publish
// through Outcome.Publish are in the outbox exactly for the applied events,
// in the batch's order across topics, and that neither a handler failure in
// the middle of a run (which rolls the run back and decides it again) nor a
// redelivery leaves an extra or a missing one.
func TestPublishedWithTheDecisions(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, inboxOutboxTmpl)
	ib := publishingInbox(t)
	var raws [][]byte
	var want []string
	var wantOrigins []string
	for i := range 60 {
		prefix := "a"
		if i%3 == 0 {
			prefix = "b"
		}
		o := prefix + "-" + uuid.NewString()
		switch {
		case i%11 == 4:
			raws = append(raws, raw(t, ev(t, "Noted", 1, uuid.NewString(), 1, note{Origin: o, Fail: "permanent"})))
			want = append(want, "quarantined:bad_note")
		case i%13 == 7:
			raws = append(raws, raw(t, ev(t, "Noted", 1, uuid.NewString(), 1, note{Origin: o, Needs: "never"})))
			want = append(want, "deferred:missing_fact")
		default:
			raws = append(raws, raw(t, ev(t, "Noted", 1, uuid.NewString(), 1, note{Origin: o})))
			want = append(want, "applied")
			wantOrigins = append(wantOrigins, "echo-"+o)
		}
	}
	wantOutcomes(t, decide(t, ib, pool, raws...), want...)
	published := func() []string {
		t.Helper()
		rows, err := pool.Query(t.Context(), `
			SELECT convert_from(envelope, 'UTF8')::jsonb->'payload'->>'origin', topic FROM outbox_event ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for rows.Next() {
			var origin, topic string
			if err := rows.Scan(&origin, &topic); err != nil {
				t.Fatal(err)
			}
			if topic != "echo."+origin[len("echo-"):len("echo-")+1] {
				t.Fatalf("%s published on %s", origin, topic)
			}
			out = append(out, origin)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if got := published(); !slices.Equal(got, wantOrigins) {
		t.Fatalf("published %d events %q,\nwant %d in batch order %q", len(got), got, len(wantOrigins), wantOrigins)
	}
	// Redelivered: duplicates publish nothing more.
	decide(t, ib, pool, raws...)
	if got := published(); len(got) != len(wantOrigins) {
		t.Fatalf("%d events published after redelivery, want %d", len(got), len(wantOrigins))
	}
}
