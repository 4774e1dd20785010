package recon_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/usagebilling/billing/pkg/recon"
)

// served serves rows as a service's set does: in position order, after a
// position, at most limit; it counts the pages asked for.
type served struct {
	rows  []recon.UsageFact
	pages int
}

func newServed(n int) *served {
	s := &served{}
	for range n {
		id := uuid.New()
		s.rows = append(s.rows, recon.UsageFact{EventID: id})
	}
	slices.SortFunc(s.rows, func(a, b recon.UsageFact) int { return a.Pos().Compare(b.Pos()) })
	return s
}

func (s *served) fetch(_ context.Context, after recon.Position, limit int) ([]recon.UsageFact, error) {
	s.pages++
	var out []recon.UsageFact
	for _, r := range s.rows {
		if r.Pos().Compare(after) > 0 && len(out) < limit {
			out = append(out, r)
		}
	}
	return out, nil
}

func drain[T recon.Row](t *testing.T, s *recon.Stream[T]) []T {
	t.Helper()
	var out []T
	for {
		r, ok, err := s.Next(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return out
		}
		out = append(out, r)
	}
}

// A set read page by page gives every row once, in order.
func TestPagesReadsEveryRowInOrder(t *testing.T) {
	for _, n := range []int{0, 1, recon.PageSize, 2*recon.PageSize + 17} {
		s := newServed(n)
		got := drain(t, recon.Pages(t.Context(), s.fetch))
		if !slices.Equal(got, s.rows) {
			t.Fatalf("%d rows: read %d, not the same in order", n, len(got))
		}
		if want := n/recon.PageSize + 1; s.pages != want {
			t.Fatalf("%d rows: %d pages asked for, want %d", n, s.pages, want)
		}
	}
}

// Streams merged are one stream in order; Take takes one key's rows.
func TestMergeAndTake(t *testing.T) {
	a, b := newServed(recon.PageSize+3), newServed(7)
	b.rows = append(b.rows, a.rows[5]) // a key in both
	slices.SortFunc(b.rows, func(x, y recon.UsageFact) int { return x.Pos().Compare(y.Pos()) })
	m := recon.Merge(recon.Pages(t.Context(), a.fetch), recon.Pages(t.Context(), b.fetch), recon.Rows[recon.UsageFact](nil))
	key := a.rows[5].EventID
	var all []recon.UsageFact
	for {
		k, ok, err := m.PeekKey(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		rows, err := m.Take(t.Context(), k)
		if err != nil || len(rows) == 0 {
			t.Fatalf("take %s: %v, %v", k, rows, err)
		}
		if n := len(rows); (k == key) != (n == 2) || n > 2 {
			t.Fatalf("key %s: %d rows", k, n)
		}
		all = append(all, rows...)
	}
	if len(all) != len(a.rows)+len(b.rows) || !slices.IsSortedFunc(all, func(x, y recon.UsageFact) int { return x.Pos().Compare(y.Pos()) }) {
		t.Fatalf("merged %d rows, want %d in order", len(all), len(a.rows)+len(b.rows))
	}
}

// A set that answers a page not after the previous one is an error, not a
// silent loop.
func TestPagesRefusesASetOutOfOrder(t *testing.T) {
	s := newServed(recon.PageSize + 1)
	again := func(ctx context.Context, _ recon.Position, limit int) ([]recon.UsageFact, error) {
		return s.fetch(ctx, recon.Position{}, limit) // always the first page
	}
	st := recon.Pages(t.Context(), again)
	var err error
	for i := 0; err == nil && i < 3*recon.PageSize; i++ {
		_, _, err = st.Next(t.Context())
	}
	if err == nil {
		t.Fatal("a set repeating its first page was read without error")
	}
	boom := errors.New("boom")
	failing := recon.Pages(t.Context(), func(context.Context, recon.Position, int) ([]recon.UsageFact, error) { return nil, boom })
	if _, _, err := failing.Next(t.Context()); !errors.Is(err, boom) {
		t.Fatalf("a failing read: %v", err)
	}
}

func TestPositionCursorRoundTrips(t *testing.T) {
	p := recon.Position{Key: uuid.New(), ID: uuid.New(), Line: "charge/api_calls/2"}
	var got recon.Position
	if err := recon.DecodePosition(recon.EncodePosition(p), &got); err != nil || got != p {
		t.Fatalf("round trip %+v -> %+v, %v", p, got, err)
	}
	if err := recon.DecodePosition("%%", &got); err == nil {
		t.Fatal("a bad cursor decoded")
	}
}
