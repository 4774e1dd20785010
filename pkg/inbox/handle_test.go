package inbox_test

import (
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// Handle keys each handler by its payload type's event type, calls it with
// that payload, and refuses a second handler for one type.
func TestHandle(t *testing.T) {
	var got []string
	hs := map[string]inbox.Handler{}
	inbox.Handle(hs, func(_ context.Context, _ pgx.Tx, _ *envelope.Decoded, p events.PriceActivated) (inbox.Outcome, error) {
		got = append(got, "price "+p.MeterCode)
		return inbox.Outcome{}, nil
	})
	inbox.Handle(hs, func(context.Context, pgx.Tx, *envelope.Decoded, events.PriceScheduleWatermark) (inbox.Outcome, error) {
		got = append(got, "watermark")
		return inbox.Outcome{}, nil
	})
	keys := slices.Sorted(maps.Keys(hs))
	if want := []string{events.TypePriceActivated, events.TypePriceScheduleWatermark}; !slices.Equal(keys, want) {
		t.Fatalf("keys %v, want %v", keys, want)
	}
	if _, err := hs[events.TypePriceActivated](t.Context(), nil, &envelope.Decoded{Payload: events.PriceActivated{MeterCode: "api_calls"}}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"price api_calls"}) {
		t.Fatalf("called %v", got)
	}

	defer func() {
		if recover() == nil {
			t.Fatal("a second handler for PriceActivated was accepted")
		}
	}()
	inbox.Handle(hs, func(context.Context, pgx.Tx, *envelope.Decoded, events.PriceActivated) (inbox.Outcome, error) {
		return inbox.Outcome{}, nil
	})
}

// A batch is decided on generic plans (DecideTx), and only that transaction:
// the connection goes back to the pool with PostgreSQL's own choice.
func TestDecideCommitPlansGenerically(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, tmpl)
	cfg := pool.Config()
	cfg.MaxConns = 1 // the check after the commit reads the same connection
	one, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	var inside string
	hs := handlers(true)
	hs["Noted"] = func(ctx context.Context, tx pgx.Tx, d *envelope.Decoded) (inbox.Outcome, error) {
		return inbox.Outcome{}, tx.QueryRow(ctx, `SELECT current_setting('plan_cache_mode')`).Scan(&inside)
	}
	ib, err := inbox.New(newRegistry(), hs, inbox.Options{Service: "test"})
	if err != nil {
		t.Fatal(err)
	}
	ds, err := ib.DecideCommit(t.Context(), one, msgs(raw(t, ev(t, "Noted", 1, "a", 1, note{Origin: origin("g")}))))
	if err != nil {
		t.Fatal(err)
	}
	wantOutcomes(t, ds, "applied")
	if inside != "force_generic_plan" {
		t.Errorf("plan_cache_mode while deciding = %q, want force_generic_plan", inside)
	}
	var after string
	if err := one.QueryRow(t.Context(), `SELECT current_setting('plan_cache_mode')`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after != "auto" {
		t.Errorf("plan_cache_mode after the commit = %q, want auto (SET LOCAL)", after)
	}
}
