package ops_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/ops"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// TestRecoveryOfFailingHandlers: an event whose handler panicked, and one
// whose handler kept failing past the retry budget, are announced as
// EventQuarantined and listed with what the handler said; once the handler
// is fixed (a flag here), a RedriveRequested applies each, through the
// service's redrive handler, and its RedriveCompleted says so.
func TestRecoveryOfFailingHandlers(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, tmpl)
	var broken atomic.Bool
	broken.Store(true)
	reg := envelope.NewRegistry()
	events.Register(reg)
	envelope.Register[note](reg, "Noted", 1)
	r := ops.NewRedriver("svc", nil)
	ib, err := inbox.New(reg, map[string]inbox.Handler{
		"Noted": inbox.On(func(ctx context.Context, tx pgx.Tx, d *envelope.Decoded, n note) (inbox.Outcome, error) {
			if _, err := tx.Exec(ctx, `INSERT INTO effect (event_id, text) VALUES ($1, $2)`, d.Envelope.EventID, n.Text); err != nil {
				return inbox.Outcome{}, err
			}
			if broken.Load() {
				switch n.Text {
				case "panic":
					panic("pretend bug")
				case "error":
					return inbox.Outcome{}, errors.New("pretend bug")
				}
			}
			return inbox.Outcome{}, nil
		}),
		events.TypeRedriveRequested: inbox.On(r.Handle),
	}, inbox.Options{Service: "svc", OnQuarantine: ops.PublishQuarantine("svc"),
		OriginConstraints: []string{"effect_origin_key"}, RetryBudget: 2})
	if err != nil {
		t.Fatal(err)
	}
	r.SetInbox(ib)

	panicking, failing := noted(t, 1, "panic"), noted(t, 1, "error")
	if got := decide(t, pool, ib, raw(t, panicking))[0]; got.Reason != inbox.ReasonHandlerPanic {
		t.Fatalf("panicking handler decided %+v", got)
	}
	// The first attempt is retried (an error of Decide), the second, the
	// last of the budget, quarantines.
	err = pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		_, err := ib.Decide(t.Context(), tx, []inbox.Message{{Raw: raw(t, failing), Topic: "some.topic"}})
		return err
	})
	var retry *inbox.RetryError
	if !errors.As(err, &retry) || retry.Attempt != 1 || retry.Budget != 2 {
		t.Fatalf("first attempt: %v, want a RetryError of attempt 1 of 2", err)
	}
	if got := decide(t, pool, ib, raw(t, failing))[0]; got.Reason != inbox.ReasonRetriesExhausted {
		t.Fatalf("failing handler decided %+v", got)
	}

	notices := published[events.EventQuarantined](t, pool, events.TypeEventQuarantined)
	if len(notices) != 2 || notices[0].Reason != inbox.ReasonHandlerPanic || notices[1].Reason != inbox.ReasonRetriesExhausted ||
		notices[0].EventID != panicking.EventID.String() || notices[1].EventID != failing.EventID.String() {
		t.Fatalf("EventQuarantined published %+v", notices)
	}
	page, err := ops.ListQuarantine(t.Context(), pool, inbox.QuarantineFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != 2 || !strings.Contains(page.Items[0].Detail, "panic: pretend bug") ||
		!strings.Contains(page.Items[0].Detail, "goroutine ") || page.Items[1].Detail != "pretend bug" {
		t.Fatalf("quarantine list %+v", page.Items)
	}

	broken.Store(false)
	decide(t, pool, ib, raw(t, redrive(t, "svc", events.ActionRedrive, panicking.EventID)),
		raw(t, redrive(t, "svc", events.ActionRedrive, failing.EventID)))
	done := published[events.RedriveCompleted](t, pool, events.TypeRedriveCompleted)
	if len(done) != 2 || done[0].Outcome != inbox.OutcomeApplied || done[1].Outcome != inbox.OutcomeApplied {
		t.Fatalf("RedriveCompleted published %+v", done)
	}
	if n := count(t, pool, `SELECT count(*) FROM effect WHERE event_id = ANY($1)`,
		[]string{panicking.EventID.String(), failing.EventID.String()}); n != 2 {
		t.Fatalf("%d effects after the redrives, want 2", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM inbox_quarantine WHERE state = 'redriven'`); n != 2 {
		t.Fatalf("%d quarantine rows redriven, want 2", n)
	}
}
