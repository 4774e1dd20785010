package inbox_test

import (
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
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
