package monthpart_test

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/usagebilling/billing/pkg/monthpart"
)

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

// idAt is a UUIDv7 of instant t with random bits after its time.
func idAt(t *testing.T, at time.Time) uuid.UUID {
	t.Helper()
	id := uuid.New()
	b := monthpart.Bound(at)
	copy(id[:6], b[:6])
	return id
}

func TestTimeOfIsBoundsInverse(t *testing.T) {
	for _, s := range []string{"2026-12-05T15:04:05.123Z", "1970-01-01T00:00:00Z", "2099-02-28T23:59:59.999Z"} {
		if got := monthpart.TimeOf(idAt(t, at(s))); !got.Equal(at(s)) {
			t.Errorf("TimeOf(id of %s) = %s", s, got)
		}
	}
}

// Around is id's span cut at its month's bounds: no partition boundary
// (a span's or a month's start) falls inside it, and id is in it.
func TestAroundStopsAtSpanAndMonth(t *testing.T) {
	for _, tc := range []struct {
		span   monthpart.Span
		id     string
		lo, hi string
	}{
		// Wednesday 2 December 2026: the week from Monday 30 November, cut at 1 December.
		{monthpart.Week, "2026-12-02T10:00:00Z", "2026-12-01T00:00:00Z", "2026-12-07T00:00:00Z"},
		// Monday 30 November: the same week, cut at the month's end.
		{monthpart.Week, "2026-11-30T00:00:00Z", "2026-11-30T00:00:00Z", "2026-12-01T00:00:00Z"},
		// A week inside one month.
		{monthpart.Week, "2026-12-10T23:59:59.999Z", "2026-12-07T00:00:00Z", "2026-12-14T00:00:00Z"},
		{monthpart.Month, "2026-12-10T12:00:00Z", "2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z"},
		{monthpart.Day, "2026-12-31T18:00:00Z", "2026-12-31T00:00:00Z", "2027-01-01T00:00:00Z"},
	} {
		id := idAt(t, at(tc.id))
		lo, hi := tc.span.Around(id)
		if lo != monthpart.Bound(at(tc.lo)) || hi != monthpart.Bound(at(tc.hi)) {
			t.Errorf("Around(%s) = [%s, %s), want [%s, %s)", tc.id,
				monthpart.TimeOf(lo), monthpart.TimeOf(hi), tc.lo, tc.hi)
		}
		if string(id[:]) < string(lo[:]) || string(id[:]) >= string(hi[:]) {
			t.Errorf("id %s outside its range", id)
		}
	}
}
