package recon

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"

	"github.com/google/uuid"
)

// Sets name the ordered streams of rows the services serve for a
// reconciliation (GET /internal/v1/reconciliation/{set}). Each is read page
// by page in Position order, for one tenant and one month, so a
// reconciliation of any volume holds one page of each at a time.
const (
	// SetUsageFacts (usage, query): facts that occurred in the month, by
	// UsageAccepted event id. Row: UsageFact.
	SetUsageFacts = "usage-facts"
	// SetMonths (billing): the months a period's reconciliation reads: the
	// period, the UTC months its off-month charges' usage occurred in, and
	// the periods the usage of the UTC month was rated into off-month (a
	// charge is off-month when its period is not the UTC month of its
	// usage: late, or a tenant in another time zone). One page. Row: Month.
	SetMonths = "months"
	// SetCharges (billing): charges rated into the period, and the
	// off-month charges of usage that occurred in the UTC month; (query):
	// projected charges of the period. By UsageAccepted event id, then charge event id. Row: Charge.
	SetCharges = "charges"
	// SetAdjustments (billing, query): adjustments of the month, by event id.
	// Row: Adjustment.
	SetAdjustments = "adjustments"
	// SetInvoiceCharges (invoice): the charges the charge lines of the
	// month's invoices count, by UsageAccepted event id, then charge event
	// id. Row: InvoiceLine.
	SetInvoiceCharges = "invoice-charges"
	// SetInvoiceLines (invoice): the adjustment and rounding lines of the
	// month's invoices, by origin event id. Row: InvoiceLine.
	SetInvoiceLines = "invoice-lines"
	// SetCorrections (invoice, query): correction notes of the month's
	// invoices, by origin event id. Row: Correction.
	SetCorrections = "corrections"
	// SetLineTotals (invoice): the lines of the month's invoices as the
	// invoices show them, by invoice id and line id. Row: LineTotal.
	SetLineTotals = "line-totals"
	// SetPrices (meter): the tenant's price versions, whatever the month,
	// by price id. Row: Price.
	SetPrices = "prices"
	// SetInvoices (query): the issued invoices of the month as query
	// projected them, by invoice id. Row: Invoice.
	SetInvoices = "invoices"
)

// Position is where a row sits in its set's order, and the cursor of the
// next page: rows strictly after it. Sets order by Key, then ID, then Line.
type Position struct {
	Key  uuid.UUID `json:"k"`
	ID   uuid.UUID `json:"i"`
	Line string    `json:"l,omitempty"`
}

// Compare orders positions as the sets do (uuid bytes as PostgreSQL
// compares them, then the line id as text).
func (p Position) Compare(o Position) int {
	return cmp.Or(bytes.Compare(p.Key[:], o.Key[:]), bytes.Compare(p.ID[:], o.ID[:]), strings.Compare(p.Line, o.Line))
}

// Row is a row of a set.
type Row interface{ Pos() Position }

// Month is a month a period's reconciliation reads (SetMonths).
type Month struct {
	Period string `json:"period"`
}

// Pos implements Row; months are one page, so the position is empty.
func (Month) Pos() Position { return Position{} }

// Pos implements Row: by usage event id.
func (u UsageFact) Pos() Position { return Position{Key: u.EventID, ID: u.EventID} }

// Pos implements Row: by the usage event id it rates, then its own.
func (c Charge) Pos() Position { return Position{Key: c.UsageEventID, ID: c.EventID} }

// Pos implements Row: by event id.
func (a Adjustment) Pos() Position { return Position{Key: a.EventID, ID: a.EventID} }

// Pos implements Row: a counted charge by its usage event id, then its
// origin (ChargeRated); another line by its origin event.
func (l InvoiceLine) Pos() Position {
	if l.UsageEventID != uuid.Nil {
		return Position{Key: l.UsageEventID, ID: l.OriginEventID}
	}
	return Position{Key: l.OriginEventID, ID: l.OriginEventID}
}

// Pos implements Row: by origin event id.
func (c Correction) Pos() Position { return Position{Key: c.OriginEventID, ID: c.OriginEventID} }

// Pos implements Row: by invoice, then line id.
func (t LineTotal) Pos() Position { return Position{Key: t.InvoiceID, ID: t.InvoiceID, Line: t.LineID} }

// Pos implements Row: by price id.
func (p Price) Pos() Position { return Position{Key: p.PriceID, ID: p.PriceID} }

// Pos implements Row: by invoice id.
func (i Invoice) Pos() Position { return Position{Key: i.InvoiceID, ID: i.InvoiceID} }

// PageFunc reads the rows of a set after a position, in order; fewer than
// asked for (or none) means the set is exhausted.
type PageFunc[T Row] func(ctx context.Context, after Position, limit int) ([]T, error)

// PageSize is how many rows a stream reads at a time, and MaxPageSize the
// most a set serves in one page.
const (
	PageSize    = 2000
	MaxPageSize = 5000
)

// Stream reads a set page by page.
type Stream[T Row] struct {
	next func(ctx context.Context) (T, bool, error)
	head *T
	done bool
}

// Pages returns the stream of a set read by fetch, PageSize rows at a
// time, the next pages read while the current one is taken. The reading
// stops when ctx ends: cancel it when done with the stream.
func Pages[T Row](ctx context.Context, fetch PageFunc[T]) *Stream[T] {
	type page struct {
		rows []T
		err  error
	}
	pages := make(chan page, 2)
	go func() {
		defer close(pages)
		var after Position
		for first := true; ; first = false {
			rows, err := fetch(ctx, after, PageSize)
			if err == nil && len(rows) > 0 && !first && rows[0].Pos().Compare(after) <= 0 {
				err = errOrder
			}
			select {
			case pages <- page{rows, err}:
			case <-ctx.Done():
				return
			}
			if err != nil || len(rows) < PageSize {
				return
			}
			after = rows[len(rows)-1].Pos()
		}
	}()
	var buf []T
	return &Stream[T]{next: func(ctx context.Context) (T, bool, error) {
		var zero T
		for len(buf) == 0 {
			select {
			case p, ok := <-pages:
				if !ok {
					return zero, false, nil
				}
				if p.err != nil {
					return zero, false, p.err
				}
				buf = p.rows
			case <-ctx.Done():
				return zero, false, ctx.Err()
			}
		}
		r := buf[0]
		buf = buf[1:]
		return r, true, nil
	}}
}

// Rows returns the stream of rows held in memory (sorted here): for tests
// and for sets known to be small.
func Rows[T Row](rows []T) *Stream[T] {
	rows = slices.Clone(rows)
	slices.SortStableFunc(rows, func(a, b T) int { return a.Pos().Compare(b.Pos()) })
	i := 0
	return &Stream[T]{next: func(context.Context) (T, bool, error) {
		var zero T
		if i == len(rows) {
			return zero, false, nil
		}
		i++
		return rows[i-1], true, nil
	}}
}

// Merge returns the rows of streams, each in order, as one stream in order.
func Merge[T Row](streams ...*Stream[T]) *Stream[T] {
	if len(streams) == 1 {
		return streams[0]
	}
	return &Stream[T]{next: func(ctx context.Context) (T, bool, error) {
		var zero T
		best := -1
		var bestPos Position
		for i, s := range streams {
			r, ok, err := s.Peek(ctx)
			if err != nil {
				return zero, false, err
			}
			if ok && (best < 0 || r.Pos().Compare(bestPos) < 0) {
				best, bestPos = i, r.Pos()
			}
		}
		if best < 0 {
			return zero, false, nil
		}
		return streams[best].Next(ctx)
	}}
}

// Peek returns the next row without taking it.
func (s *Stream[T]) Peek(ctx context.Context) (T, bool, error) {
	if s.head == nil && !s.done {
		r, ok, err := s.next(ctx)
		if err != nil {
			var zero T
			return zero, false, err
		}
		if !ok {
			s.done = true
		} else {
			s.head = &r
		}
	}
	if s.head == nil {
		var zero T
		return zero, false, nil
	}
	return *s.head, true, nil
}

// Next takes the next row.
func (s *Stream[T]) Next(ctx context.Context) (T, bool, error) {
	r, ok, err := s.Peek(ctx)
	s.head = nil
	return r, ok, err
}

// Take takes the rows whose position's Key is key (the stream is ordered,
// so they are next).
func (s *Stream[T]) Take(ctx context.Context, key uuid.UUID) ([]T, error) {
	var out []T
	for {
		r, ok, err := s.Peek(ctx)
		if err != nil || !ok || r.Pos().Key != key {
			return out, err
		}
		out = append(out, r)
		s.head = nil
	}
}

// MinKey returns the smallest next Key of streams, and false when all are
// exhausted.
func MinKey(ctx context.Context, streams ...interface {
	PeekKey(context.Context) (uuid.UUID, bool, error)
}) (uuid.UUID, bool, error) {
	var best uuid.UUID
	found := false
	for _, s := range streams {
		k, ok, err := s.PeekKey(ctx)
		if err != nil {
			return uuid.Nil, false, err
		}
		if ok && (!found || bytes.Compare(k[:], best[:]) < 0) {
			best, found = k, true
		}
	}
	return best, found, nil
}

// PeekKey returns the Key of the next row.
func (s *Stream[T]) PeekKey(ctx context.Context) (uuid.UUID, bool, error) {
	r, ok, err := s.Peek(ctx)
	if !ok || err != nil {
		return uuid.Nil, ok, err
	}
	return r.Pos().Key, true, nil
}

type orderError struct{}

func (orderError) Error() string {
	return "recon: a page is not after the previous one (a set out of order)"
}

var errOrder error = orderError{}

// Query asks for a page of a set: the tenant's rows of one month after a
// position.
type Query struct {
	TenantID string
	Period   string
	After    Position
	Limit    int
}

// SetFunc reads a page of a set.
type SetFunc func(ctx context.Context, q Query) ([]Row, error)

// Sets are the sets a service serves, by name.
type Sets map[string]SetFunc

// Set adapts a reader of typed rows to a SetFunc.
func Set[T Row](read func(ctx context.Context, q Query) ([]T, error)) SetFunc {
	return func(ctx context.Context, q Query) ([]Row, error) {
		rows, err := read(ctx, q)
		if err != nil {
			return nil, err
		}
		out := make([]Row, len(rows))
		for i, r := range rows {
			out[i] = r
		}
		return out, nil
	}
}

// EncodePosition returns a position as an opaque cursor.
func EncodePosition(p Position) string {
	raw, _ := json.Marshal(p) // a Position always marshals
	return base64.RawURLEncoding.EncodeToString(raw)
}

// DecodePosition reads a cursor EncodePosition made.
func DecodePosition(s string, p *Position) error {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, p)
}
