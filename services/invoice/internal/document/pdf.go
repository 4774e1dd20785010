package document

import (
	"bytes"
	"fmt"
	"strings"
	"unicode"

	"github.com/go-pdf/fpdf"
)

// The PDF's page, in millimetres: A4 portrait.
const (
	pageMargin   = 15.0
	footerHeight = 12.0 // kept free above the bottom margin for the footer
	descWidth    = 106.0
	qtyWidth     = 37.0
	amountWidth  = 37.0 // descWidth + qtyWidth + amountWidth = the width between the margins
	rowHeight    = 5.0
	detailHeight = 4.0
)

// PDF renders d as a PDF: a header of the seller, the invoice's facts and
// its status banner (repeated, shorter, on every later page, as is the
// table's header when the table goes on), the lines by kind, the totals,
// the correction notes, and "page n of m" on every page. A line is never
// split across pages.
//
// The PDF uses the core fonts (Helvetica), so nothing is embedded and its
// text is cp1252: characters outside cp1252 (such as CJK or Cyrillic tenant
// names or dimension values) are written as "?". Every figure is ASCII and
// always exact; the HTML document shows every character.
func PDF(d Document) ([]byte, error) {
	r := &pdfRenderer{d: d, pdf: fpdf.New("P", "mm", "A4", "")}
	return r.render()
}

type pdfRenderer struct {
	d   Document
	pdf *fpdf.Fpdf
	tr  func(string) string
	// inTable: the lines table goes on, so a new page repeats its header.
	inTable bool
}

func (r *pdfRenderer) render() ([]byte, error) {
	p, d := r.pdf, r.d
	r.tr = cp1252(p.UnicodeTranslatorFromDescriptor(""))
	p.SetMargins(pageMargin, pageMargin, pageMargin)
	p.SetAutoPageBreak(true, pageMargin+footerHeight)
	p.AliasNbPages("")
	p.SetTitle(d.Title()+" — "+d.TenantID+" "+d.Period, true)
	p.SetAuthor(d.Seller.Name, true)
	p.SetSubject("Invoice "+d.InvoiceID, true)
	p.SetCreator("usage billing invoice service", true)
	p.SetProducer("fpdf", true)
	p.SetLang("en")
	p.SetCatalogSort(true) // fonts in a fixed order: the same Document, the same bytes
	if !d.AsOf.IsZero() {
		p.SetCreationDate(d.AsOf.UTC())
		p.SetModificationDate(d.AsOf.UTC())
	}
	p.SetHeaderFunc(r.header)
	p.SetFooterFunc(r.footer)

	p.AddPage()
	r.facts()
	r.lines()
	r.totals()
	r.corrections()

	if err := p.Error(); err != nil {
		return nil, fmt.Errorf("render invoice pdf: %w", err)
	}
	var buf bytes.Buffer
	if err := p.Output(&buf); err != nil {
		return nil, fmt.Errorf("write invoice pdf: %w", err)
	}
	return buf.Bytes(), nil
}

// cp1252 returns a translator to cp1252 that writes "?" for a character
// outside it (fpdf's own writes "."), and a space for a control character.
func cp1252(tr func(string) string) func(string) string {
	return func(s string) string {
		var b strings.Builder
		for _, c := range s {
			switch {
			case unicode.IsControl(c):
				b.WriteByte(' ')
			case c < 0x80:
				b.WriteRune(c)
			default:
				if t := tr(string(c)); t != "." {
					b.WriteString(t)
				} else {
					b.WriteByte('?')
				}
			}
		}
		return b.String()
	}
}

func (r *pdfRenderer) font(style string, size float64) { r.pdf.SetFont("Helvetica", style, size) }

func (r *pdfRenderer) grey(on bool) {
	if on {
		r.pdf.SetTextColor(100, 100, 100)
	} else {
		r.pdf.SetTextColor(0, 0, 0)
	}
}

// header: the seller and the title on the first page; a one-line reminder
// on the others; the banner on all; then the table's header if it goes on.
func (r *pdfRenderer) header() {
	p, d := r.pdf, r.d
	left, top := pageMargin, pageMargin
	width := descWidth + qtyWidth + amountWidth
	p.SetXY(left, top)
	if p.PageNo() == 1 {
		r.font("B", 15)
		p.MultiCell(width/2, 7, r.tr(d.Seller.Name), "", "L", false)
		r.font("", 9)
		for _, line := range d.Seller.Address {
			p.SetX(left)
			p.MultiCell(width/2, 4.5, r.tr(line), "", "L", false)
		}
		y := p.GetY()
		p.SetXY(left+width/2, top)
		r.font("B", 18)
		p.CellFormat(width/2, 8, "INVOICE", "", 2, "R", false, 0, "")
		r.font("", 10)
		p.CellFormat(width/2, 5, r.tr(d.Title()), "", 2, "R", false, 0, "")
		p.SetY(max(y, p.GetY()) + 2)
	} else {
		r.font("B", 9)
		p.CellFormat(width/2, 5, r.tr(d.Seller.Name), "", 0, "L", false, 0, "")
		r.font("", 9)
		p.CellFormat(width/2, 5, r.tr(fmt.Sprintf("%s · %s · %s · %s (continued)", d.Title(), d.TenantID, d.Period, d.Currency)),
			"", 1, "R", false, 0, "")
	}
	if b := d.Banner(); b != "" {
		p.SetX(left)
		r.font("B", 11)
		p.SetTextColor(180, 0, 0)
		p.SetDrawColor(180, 0, 0)
		p.CellFormat(width, 7, r.tr(b), "1", 1, "C", false, 0, "")
		p.SetDrawColor(0, 0, 0)
		r.grey(false)
	}
	p.SetDrawColor(160, 160, 160)
	p.Line(left, p.GetY()+1, left+width, p.GetY()+1)
	p.SetDrawColor(0, 0, 0)
	p.Ln(3)
	if r.inTable {
		r.tableHeader()
	}
}

func (r *pdfRenderer) footer() {
	p, d := r.pdf, r.d
	_, h := p.GetPageSize()
	width := descWidth + qtyWidth + amountWidth
	p.SetXY(pageMargin, h-pageMargin-6)
	r.font("", 8)
	r.grey(true)
	p.CellFormat(width/2, 4, r.tr("Invoice ID "+d.InvoiceID), "", 0, "L", false, 0, "")
	p.CellFormat(width/2, 4, fmt.Sprintf("Page %d of {nb}", p.PageNo()), "", 0, "R", false, 0, "")
	r.grey(false)
}

// facts: who is billed, the number, the period, the currency, the dates.
func (r *pdfRenderer) facts() {
	p := r.pdf
	for _, f := range r.d.facts() {
		p.SetX(pageMargin)
		r.font("B", 9)
		p.CellFormat(32, 5, r.tr(f.Name), "", 0, "L", false, 0, "")
		r.font("", 9)
		p.MultiCell(descWidth+qtyWidth+amountWidth-32, 5, r.tr(f.Value), "", "L", false)
	}
	p.Ln(4)
}

// room makes sure h millimetres fit on the page, else starts the next.
func (r *pdfRenderer) room(h float64) {
	_, pageH := r.pdf.GetPageSize()
	if r.pdf.GetY()+h > pageH-pageMargin-footerHeight {
		r.pdf.AddPage()
	}
}

func (r *pdfRenderer) tableHeader() {
	p := r.pdf
	p.SetX(pageMargin)
	r.font("B", 9)
	p.SetFillColor(235, 235, 235)
	p.CellFormat(descWidth, 6, "Line", "B", 0, "L", true, 0, "")
	p.CellFormat(qtyWidth, 6, "Quantity", "B", 0, "R", true, 0, "")
	p.CellFormat(amountWidth, 6, r.tr("Amount ("+r.d.Currency+")"), "B", 1, "R", true, 0, "")
}

// lines: a section per kind, its title, then each line: its id, its
// quantity and amount on the right, and its details below the id.
func (r *pdfRenderer) lines() {
	p := r.pdf
	r.room(30)
	r.tableHeader()
	r.inTable = true
	if len(r.d.Lines) == 0 {
		r.font("I", 9)
		p.CellFormat(descWidth, rowHeight+1, "No lines.", "", 1, "L", false, 0, "")
	}
	for _, s := range r.d.Sections() {
		r.room(7 + rowHeight + detailHeight)
		p.SetX(pageMargin)
		r.font("B", 9)
		p.CellFormat(descWidth, 7, r.tr(s.Title), "", 1, "L", false, 0, "")
		for _, l := range s.Lines {
			r.line(l)
		}
	}
	r.inTable = false
	p.Ln(2)
}

func (r *pdfRenderer) line(l Line) {
	p := r.pdf
	r.font("", 9)
	id := p.SplitLines([]byte(r.tr(l.LineID)), descWidth-4)
	r.font("", 8)
	var details [][]byte
	for _, f := range l.Details {
		details = append(details, p.SplitLines([]byte(r.tr(f.Name+": "+f.Value)), descWidth-4)...)
	}
	h := float64(len(id))*rowHeight + float64(len(details))*detailHeight + 1.5
	r.room(h)
	x, y := pageMargin, p.GetY()
	r.font("", 9)
	for i, part := range id {
		p.SetXY(x+2, y+float64(i)*rowHeight)
		p.CellFormat(descWidth-2, rowHeight, string(part), "", 0, "L", false, 0, "")
	}
	r.figure(x+descWidth, y, qtyWidth, l.Quantity, "")
	r.figure(x+descWidth+qtyWidth, y, amountWidth, l.Amount, "")
	r.font("", 8)
	r.grey(true)
	for i, part := range details {
		p.SetXY(x+4, y+float64(len(id))*rowHeight+float64(i)*detailHeight)
		p.CellFormat(descWidth-4, detailHeight, string(part), "", 0, "L", false, 0, "")
	}
	r.grey(false)
	p.SetDrawColor(220, 220, 220)
	p.Line(x, y+h-0.5, x+descWidth+qtyWidth+amountWidth, y+h-0.5)
	p.SetDrawColor(0, 0, 0)
	p.SetXY(x, y+h)
}

// figure writes an exact decimal string right-aligned in a cell, in a
// smaller font if it would not fit: a figure is never cut.
func (r *pdfRenderer) figure(x, y, w float64, value, style string) {
	p := r.pdf
	size := 9.0
	r.font(style, size)
	for size > 5 && p.GetStringWidth(value) > w-2 {
		size -= 0.5
		r.font(style, size)
	}
	p.SetXY(x, y)
	p.CellFormat(w, rowHeight, r.tr(value), "", 0, "R", false, 0, "")
}

// totals: each figure below the lines, right-aligned under the amounts.
func (r *pdfRenderer) totals() {
	p := r.pdf
	r.room(float64(len(r.d.Totals))*(rowHeight+1) + 4)
	for i, f := range r.d.Totals {
		y := p.GetY()
		style := ""
		if i == len(r.d.Totals)-1 {
			style = "B"
		}
		r.font(style, 9)
		p.SetXY(pageMargin+descWidth, y)
		p.CellFormat(qtyWidth, rowHeight+1, r.tr(f.Name), "", 0, "R", false, 0, "")
		r.figure(pageMargin+descWidth+qtyWidth, y+0.5, amountWidth, f.Value, style)
		p.SetXY(pageMargin, y+rowHeight+1)
	}
	p.Ln(6)
}

// corrections: the correction notes issued after the invoice, if any.
func (r *pdfRenderer) corrections() {
	p := r.pdf
	if len(r.d.Corrections) == 0 {
		return
	}
	r.room(20)
	p.SetX(pageMargin)
	r.font("B", 10)
	p.CellFormat(0, 7, "Correction notes issued after this invoice", "", 1, "L", false, 0, "")
	for _, c := range r.d.Corrections {
		r.room(2*rowHeight + 2)
		x, y := pageMargin, p.GetY()
		r.font("", 9)
		p.SetXY(x+2, y)
		p.CellFormat(descWidth+qtyWidth-2, rowHeight, r.tr("Correction "+c.CorrectionID), "", 0, "L", false, 0, "")
		r.figure(x+descWidth+qtyWidth, y, amountWidth, c.Amount, "")
		r.font("", 8)
		r.grey(true)
		p.SetXY(x+4, y+rowHeight)
		p.CellFormat(descWidth+qtyWidth-4, detailHeight, r.tr("issued at "+c.IssuedAt+" for event "+c.OriginEventID), "", 0, "L", false, 0, "")
		r.grey(false)
		p.SetXY(x, y+rowHeight+detailHeight+1)
	}
}
