// Package document renders an invoice as a document a person reads: a PDF
// (PDF) or an HTML page (HTML). It is pure: a Document in, bytes out, no
// HTTP and no database. The caller builds the Document from the very
// invoice value its JSON answer serialises, every figure already the exact
// decimal string the JSON carries, so that the three representations cannot
// disagree; this package formats no number of its own.
//
// Lines are listed generically: grouped by kind in the order given, each
// group titled from its kind ("fixed_fee" -> "Fixed fee"), each line with its
// details as name/value pairs. A new line kind or a new line field appears
// in the documents without a change here.
package document

import (
	"strings"
	"time"
	"unicode"
)

// Document is one invoice as its documents show it. Every figure is a
// decimal string exactly as the invoice's JSON answer writes it.
type Document struct {
	Seller    Seller
	TenantID  string
	InvoiceID string
	Number    string // empty until issued
	Period    string // YYYY-MM
	Currency  string
	Status    string // "open", "draft" or "issued" (Banner)
	IssuedAt  string // empty until issued
	// AsOf is when the document was made: the PDF's creation date, and the
	// "as of" of an invoice not yet issued.
	AsOf  time.Time
	Lines []Line
	// Totals are the invoice's figures below its lines, in order (subtotal,
	// then whatever the invoice has: taxes, credits, total, amount due).
	Totals      []Field
	Corrections []Correction
}

// Seller is who issues the invoices (configuration: LoadSeller).
type Seller struct {
	Name    string
	Address []string // lines
}

// Line is one invoice line.
type Line struct {
	LineID string
	Kind   string
	// Details are what the line carries besides its quantity and amount,
	// in order (meter, price version, dimensions, plan, ...).
	Details  []Field
	Quantity string // empty when the line has none
	Amount   string
}

// Field is a named value.
type Field struct {
	Name  string
	Value string
}

// Correction is a correction note issued after the invoice.
type Correction struct {
	CorrectionID  string
	OriginEventID string
	Amount        string
	IssuedAt      string
}

// Banner is the mark of an invoice not issued, shown on every page, or ""
// for an issued one.
func (d Document) Banner() string {
	switch d.Status {
	case "issued":
		return ""
	case "draft":
		return "DRAFT — not issued"
	case "open":
		return "Open — running estimate"
	default:
		return "Status: " + d.Status + " — not issued"
	}
}

// Title is the document's title: its number once issued.
func (d Document) Title() string {
	if d.Number != "" {
		return "Invoice " + d.Number
	}
	return "Invoice (not numbered until issued)"
}

// Section is a run of consecutive lines of one kind.
type Section struct {
	Kind  string
	Title string
	Lines []Line
}

// Sections groups the lines by kind, keeping their order: a kind's run of
// consecutive lines is one section.
func (d Document) Sections() []Section {
	var out []Section
	for _, l := range d.Lines {
		if n := len(out); n > 0 && out[n-1].Kind == l.Kind {
			out[n-1].Lines = append(out[n-1].Lines, l)
			continue
		}
		out = append(out, Section{Kind: l.Kind, Title: KindTitle(l.Kind), Lines: []Line{l}})
	}
	return out
}

// KindTitle is a line kind as a heading: "fixed_fee" -> "Fixed fee".
func KindTitle(kind string) string {
	s := strings.ReplaceAll(kind, "_", " ")
	for i, r := range s {
		return string(unicode.ToUpper(r)) + s[i+len(string(r)):]
	}
	return "Lines"
}

// asOf is AsOf as the documents write it.
func (d Document) asOf() string {
	if d.AsOf.IsZero() {
		return ""
	}
	return d.AsOf.UTC().Format(time.RFC3339)
}

// facts are the invoice's header facts, in order, the empty ones left out.
func (d Document) facts() []Field {
	all := []Field{
		{"Bill to", d.TenantID},
		{"Invoice number", d.Number},
		{"Invoice ID", d.InvoiceID},
		{"Period", d.Period},
		{"Currency", d.Currency},
		{"Issued at", d.IssuedAt},
	}
	if d.IssuedAt == "" {
		all = append(all, Field{"As of", d.asOf()})
	}
	out := all[:0]
	for _, f := range all {
		if f.Value != "" {
			out = append(out, f)
		}
	}
	return out
}
