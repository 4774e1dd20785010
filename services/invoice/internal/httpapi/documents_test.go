package httpapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/services/invoice/internal/document"
	"github.com/usagebilling/billing/services/invoice/internal/document/documenttest"
	. "github.com/usagebilling/billing/services/invoice/internal/invoicetest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// fetch GETs path with accept (none when empty).
func fetch(t *testing.T, srv *httptest.Server, path, accept string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// invoiceJSON is the part of an invoice's JSON its documents must show.
type invoiceJSON struct {
	InvoiceID string `json:"invoiceId"`
	Number    *int64 `json:"number"`
	TenantID  string `json:"tenantId"`
	Period    string `json:"period"`
	Currency  string `json:"currency"`
	Status    string `json:"status"`
	Lines     []struct {
		LineID     string            `json:"lineId"`
		Kind       string            `json:"kind"`
		MeterCode  string            `json:"meterCode"`
		Quantity   *string           `json:"quantity"`
		Amount     string            `json:"amount"`
		Dimensions map[string]string `json:"dimensions"`
		PlanCode   string            `json:"planCode"`
	} `json:"lines"`
	Subtotal    string  `json:"subtotal"`
	Total       *string `json:"total"`
	Corrections []struct {
		CorrectionID string `json:"correctionId"`
		Amount       string `json:"amount"`
	} `json:"corrections"`
}

// rowOf is the line of text holding s, or "".
func rowOf(text, s string) string {
	for row := range strings.SplitSeq(text, "\n") {
		if strings.Contains(row, s) {
			return row
		}
	}
	return ""
}

// checkDocument fails t unless text (a document's, one row per line, as
// pdftotext -layout and HTMLText give it) shows every figure of inv: each
// line's amount and quantity on the row of its lineId, the subtotal and
// total on their rows, each correction's amount on its row, and the
// invoice's facts.
func checkDocument(t *testing.T, what, text string, inv invoiceJSON) {
	t.Helper()
	if len(inv.Lines) == 0 {
		t.Fatalf("%s: the invoice has no lines to compare", what)
	}
	for _, l := range inv.Lines {
		row := rowOf(text, l.LineID+" ")
		if row == "" {
			t.Errorf("%s: no row holds line %s", what, l.LineID)
			continue
		}
		if !documenttest.HasToken(row, l.Amount) {
			t.Errorf("%s: line %s's row %q lacks its amount %s", what, l.LineID, row, l.Amount)
		}
		if l.Quantity != nil && !documenttest.HasToken(row, *l.Quantity) {
			t.Errorf("%s: line %s's row %q lacks its quantity %s", what, l.LineID, row, *l.Quantity)
		}
		if l.MeterCode != "" && !strings.Contains(text, "Meter: "+l.MeterCode) {
			t.Errorf("%s: line %s's meter %s is not shown", what, l.LineID, l.MeterCode)
		}
		for name, value := range l.Dimensions {
			if !strings.Contains(text, name+"="+value) {
				t.Errorf("%s: line %s's dimension %s=%s is not shown", what, l.LineID, name, value)
			}
		}
		if l.PlanCode != "" && !strings.Contains(text, "Plan: "+l.PlanCode) {
			t.Errorf("%s: line %s's plan %s is not shown", what, l.LineID, l.PlanCode)
		}
		if !strings.Contains(text, document.KindTitle(l.Kind)) {
			t.Errorf("%s: line kind %s has no heading", what, l.Kind)
		}
	}
	if row := rowOf(text, "Subtotal"); !documenttest.HasToken(row, inv.Subtotal) {
		t.Errorf("%s: the subtotal row %q lacks the subtotal %s", what, row, inv.Subtotal)
	}
	if inv.Total != nil {
		row := ""
		for r := range strings.SplitSeq(text, "\n") {
			if regexp.MustCompile(`(^|\s)Total\s`).MatchString(r) {
				row = r
			}
		}
		if !documenttest.HasToken(row, *inv.Total) {
			t.Errorf("%s: the total row %q lacks the total %s", what, row, *inv.Total)
		}
	}
	for _, c := range inv.Corrections {
		if row := rowOf(text, c.CorrectionID); !documenttest.HasToken(row, c.Amount) {
			t.Errorf("%s: correction %s's row %q lacks its amount %s", what, c.CorrectionID, row, c.Amount)
		}
	}
	facts := []string{inv.InvoiceID, inv.TenantID, inv.Period, inv.Currency, seller.Name, seller.Address[0]}
	if inv.Number != nil {
		facts = append(facts, fmt.Sprintf("Invoice %d", *inv.Number))
	}
	for _, f := range facts {
		if !strings.Contains(text, f) {
			t.Errorf("%s: %q is not shown", what, f)
		}
	}
}

// htmlRows is page's text with one row per table row (HTMLText joins a
// row's cells with spaces).
func htmlRows(page []byte) string {
	s := strings.NewReplacer("</tr>", "</tr>\n", "</p>", "</p>\n", "</dd>", "</dd>\n").Replace(string(page))
	return documenttest.HTMLText([]byte(s))
}

// An invoice's PDF and HTML show every figure of its JSON, from the same
// read; the JSON stays as it was, whatever Accept asks for it.
func TestInvoiceDocumentsShowTheJSONFigures(t *testing.T) {
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	p := NewPeriod(t, "acme", "2026-10")
	zurich := events.ChargeRated{MeterCode: "tokens", Quantity: D("125000"), UnitPrice: D("0.0000021"), Amount: D("0.2625"),
		PriceVersion: 2, Dimensions: map[string]string{"model": "gpt-4", "region": "Zürich"}, OccurredAt: time.Now().UTC()}
	plan := events.ChargeRated{MeterCode: "storage_gb", Quantity: D("512.25"), UnitPrice: D("0.02"), Amount: D("10.245"),
		PriceVersion: 7, PlanCode: "team", OccurredAt: time.Now().UTC()}
	seats := events.ChargeRated{MeterCode: "seats", Aggregation: "max", Quantity: D("7"), Unpriced: true, OccurredAt: time.Now().UTC()}
	charges := []envelope.Envelope{p.Charge("USD", "3", "0.335"), p.ChargeRated(zurich), p.ChargeRated(plan), p.ChargeRated(seats),
		p.Adjustment("USD", "-0.5"), p.Charge("KRW", "1", "99.5")}
	closed := p.Close()
	after := p.Adjustment("USD", "-0.25") // a correction note
	q := NewPeriod(t, "acme", "2026-11")
	Decide(t, pool, ib, append(charges, closed, after, q.Charge("USD", "2", "1.25"), q.Charge("USD", "1", "1.25"))...)
	srv := server(t, pool)

	_, list := fetch(t, srv, "/v1/tenants/acme/invoices", "")
	var invoices struct{ Invoices []invoiceJSON }
	if err := json.Unmarshal(list, &invoices); err != nil {
		t.Fatal(err)
	}
	if len(invoices.Invoices) != 3 {
		t.Fatalf("%d invoices, want KRW and USD issued and USD open", len(invoices.Invoices))
	}
	for _, listed := range invoices.Invoices {
		t.Run(listed.Currency+"-"+listed.Status, func(t *testing.T) {
			path := "/v1/tenants/acme/invoices/" + listed.InvoiceID
			resp, asJSON := fetch(t, srv, path, "application/json")
			_, bare := fetch(t, srv, path, "")
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || !bytes.Equal(asJSON, bare) {
				t.Fatalf("JSON: %d %s, or not what a request without Accept gets:\n%s\n%s", resp.StatusCode, resp.Header.Get("Content-Type"), asJSON, bare)
			}
			var inv invoiceJSON
			if err := json.Unmarshal(asJSON, &inv); err != nil {
				t.Fatal(err)
			}

			resp, pdf := fetch(t, srv, path, "application/pdf")
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/pdf" || !bytes.HasPrefix(pdf, []byte("%PDF-")) ||
				resp.Header.Get("Content-Disposition") != `inline; filename="invoice-`+inv.InvoiceID+`.pdf"` {
				t.Fatalf("PDF: %d %v %q", resp.StatusCode, resp.Header, pdf[:min(len(pdf), 32)])
			}
			text := documenttest.PDFText(t, pdf)
			checkDocument(t, "PDF", text, inv)

			resp, page := fetch(t, srv, path, "text/html")
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" ||
				resp.Header.Get("Content-Security-Policy") != document.ContentSecurityPolicy || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
				t.Fatalf("HTML: %d %v", resp.StatusCode, resp.Header)
			}
			checkDocument(t, "HTML", htmlRows(page), inv)

			switch inv.Status {
			case "issued":
				// Its documents are the same whenever asked.
				if _, again := fetch(t, srv, path, "application/pdf"); !bytes.Equal(again, pdf) {
					t.Error("an issued invoice's PDF differs from one request to the next")
				}
				if strings.Contains(text, "not issued") || strings.Contains(text, "running estimate") {
					t.Errorf("an issued invoice's PDF is marked not issued:\n%s", text)
				}
			case "open":
				if !strings.Contains(text, "Open — running estimate") || !strings.Contains(string(page), "Open — running estimate") {
					t.Errorf("an open invoice's documents are not marked as a running estimate:\n%s", text)
				}
			}
		})
	}
}

// The Accept header chooses the representation, q-values and wildcards
// weighed; nothing acceptable is 406 not_acceptable.
func TestInvoiceContentNegotiation(t *testing.T) {
	pool := pgtest.NewPool(t, Template)
	ib := NewInbox(t)
	p := NewPeriod(t, "acme", "2026-10")
	Decide(t, pool, ib, p.Charge("USD", "3", "0.335"), p.Close())
	srv := server(t, pool)
	_, list := fetch(t, srv, "/v1/tenants/acme/invoices", "")
	var invoices struct{ Invoices []invoiceJSON }
	if err := json.Unmarshal(list, &invoices); err != nil || len(invoices.Invoices) != 1 {
		t.Fatalf("invoices %s: %v", list, err)
	}
	path := "/v1/tenants/acme/invoices/" + invoices.Invoices[0].InvoiceID

	tests := []struct{ accept, want string }{
		{"", "application/json"},
		{"application/json", "application/json"},
		{"*/*", "application/json"},
		{"application/*", "application/json"},
		{"application/json, application/pdf", "application/json"},
		{"application/pdf", "application/pdf"},
		{"APPLICATION/PDF", "application/pdf"},
		{"application/pdf;q=0.5, text/html;q=0.9", "text/html; charset=utf-8"},
		{"text/*", "text/html; charset=utf-8"},
		{"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", "text/html; charset=utf-8"},
		{"application/json;q=0, */*", "application/pdf"},
		{"application/json;q=0.1, application/*;q=0.5", "application/pdf"},
		{"text/html;q=0, */*;q=0.1", "application/json"},
		{"nonsense", "application/json"},
		{"image/png", "406"},
		{"application/json;q=0", "406"},
		{"*/*;q=0", "406"},
		{"text/plain, image/*", "406"},
	}
	for _, tt := range tests {
		t.Run(tt.accept, func(t *testing.T) {
			resp, body := fetch(t, srv, path, tt.accept)
			if resp.Header.Get("Vary") != "Accept" {
				t.Errorf("Vary %q, want Accept", resp.Header.Get("Vary"))
			}
			if tt.want == "406" {
				var problem struct{ Code string }
				if resp.StatusCode != 406 || resp.Header.Get("Content-Type") != "application/problem+json" ||
					json.Unmarshal(body, &problem) != nil || problem.Code != "not_acceptable" {
					t.Fatalf("%d %s %s, want 406 not_acceptable", resp.StatusCode, resp.Header.Get("Content-Type"), body)
				}
				return
			}
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != tt.want {
				t.Fatalf("%d %s, want 200 %s", resp.StatusCode, resp.Header.Get("Content-Type"), tt.want)
			}
		})
	}
	// An unknown invoice stays 404 whatever the representation asked.
	resp, _ := fetch(t, srv, "/v1/tenants/acme/invoices/00000000-0000-4000-8000-000000000000", "application/pdf")
	if resp.StatusCode != 404 || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("unknown invoice as PDF: %d %s, want a 404 problem", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}
