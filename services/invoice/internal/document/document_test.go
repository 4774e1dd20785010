package document_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/services/invoice/internal/document"
	"github.com/usagebilling/billing/services/invoice/internal/document/documenttest"
)

// sample is an issued invoice as the service issues one: charge lines (one
// of a dimension price, one of a plan's charge), an unpriced line, an
// adjustment, the rounding line, and a correction note.
func sample() document.Document {
	return document.Document{
		Seller:   document.Seller{Name: "Northwind Metering GmbH", Address: []string{"Friedrichstraße 68", "10117 Berlin", "Germany"}},
		TenantID: "acme", InvoiceID: "0193a5f2-7c4e-7b1a-9d2e-5f3c8a1b2c3d", Number: "42", Period: "2026-10",
		Currency: "EUR", Status: "issued", IssuedAt: "2026-11-01T00:05:12Z",
		AsOf: time.Date(2026, 11, 2, 9, 30, 0, 0, time.UTC),
		Lines: []document.Line{
			{LineID: "charge/api_calls/3/model=gpt-4&region=eu", Kind: "charge", Quantity: "1284500", Amount: "256.9",
				Details: []document.Field{{"Meter", "api_calls"}, {"Price version", "3"}, {"Dimensions", "model=gpt-4, region=eu"}, {"Charges", "1284500"}}},
			{LineID: "charge/api_calls/3/model=gpt-4o-mini&region=eu", Kind: "charge", Quantity: "5210333", Amount: "78.154995",
				Details: []document.Field{{"Meter", "api_calls"}, {"Price version", "3"}, {"Dimensions", "model=gpt-4o-mini, region=eu"}, {"Charges", "5210333"}}},
			{LineID: "charge/storage_gb/7/plan=team", Kind: "charge", Quantity: "512.25", Amount: "10.245",
				Details: []document.Field{{"Meter", "storage_gb"}, {"Plan", "team, version 7"}, {"Charges", "31"}}},
			{LineID: "unpriced/webhook_calls", Kind: "unpriced", Quantity: "1200", Amount: "0",
				Details: []document.Field{{"Meter", "webhook_calls"}, {"Charges", "1200"}}},
			{LineID: "adjustment/8c1d2e3f-4a5b-4c6d-8e7f-901a2b3c4d5e", Kind: "adjustment", Amount: "-25",
				Details: []document.Field{{"Origin event", "8c1d2e3f-4a5b-4c6d-8e7f-901a2b3c4d5e"}}},
			{LineID: "rounding", Kind: "rounding", Amount: "0.000005",
				Details: []document.Field{{"Origin event", "5e4d3c2b-1a09-4f8e-8d7c-6b5a4f3e2d1c"}}},
			{LineID: "tax/VAT", Kind: "tax", Amount: "60.86",
				Details: []document.Field{{"Origin event", "5e4d3c2b-1a09-4f8e-8d7c-6b5a4f3e2d1c"}, {"Tax", "VAT (USt. 19%)"}, {"Rate", "0.19"}}},
			{LineID: "credit_applied/01a23c5f-64e7-7292-b903-81af01673ead", Kind: "credit_applied", Amount: "-100",
				Details: []document.Field{{"Origin event", "5e4d3c2b-1a09-4f8e-8d7c-6b5a4f3e2d1c"}, {"Credit grant", "01a23c5f-64e7-7292-b903-81af01673ead"}}},
		},
		Totals: []document.Field{{"Subtotal", "320.299995"}, {"Taxes", "60.86"}, {"Total", "381.16"},
			{"Credits applied", "-100"}, {"Amount due", "281.16"}},
		Corrections: []document.Correction{{CorrectionID: "2b3c4d5e-6f70-4182-93a4-b5c6d7e8f901",
			OriginEventID: "7a6b5c4d-3e2f-4a1b-9c8d-7e6f5a4b3c2d", Amount: "-4.5", IssuedAt: "2026-11-03T10:00:00Z"}},
	}
}

// figures are every amount and quantity of d, and its totals.
func figures(d document.Document) []string {
	var out []string
	for _, l := range d.Lines {
		out = append(out, l.Amount)
		if l.Quantity != "" {
			out = append(out, l.Quantity)
		}
	}
	for _, f := range d.Totals {
		out = append(out, f.Value)
	}
	for _, c := range d.Corrections {
		out = append(out, c.Amount)
	}
	return out
}

func TestPDFShowsEveryFigure(t *testing.T) {
	d := sample()
	pdf, err := document.PDF(d)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(pdf, []byte("%PDF-")) {
		t.Fatalf("not a PDF: %q", pdf[:min(len(pdf), 16)])
	}
	text := documenttest.PDFText(t, pdf)
	for _, f := range figures(d) {
		if !documenttest.HasToken(text, f) {
			t.Errorf("figure %s is not in the PDF's text:\n%s", f, text)
		}
	}
	for _, want := range []string{"Northwind Metering GmbH", "Friedrichstraße 68", "Invoice 42", "acme", "2026-10", "EUR",
		d.InvoiceID, "Charge", "Unpriced", "Adjustment", "Rounding", "charge/api_calls/3/model=gpt-4&region=eu",
		"Dimensions: model=gpt-4, region=eu", "Plan: team, version 7", "Subtotal", "Total", "2026-11-01T00:05:12Z",
		"Correction 2b3c4d5e-6f70-4182-93a4-b5c6d7e8f901"} {
		if !strings.Contains(text, want) {
			t.Errorf("%q is not in the PDF's text:\n%s", want, text)
		}
	}
	if strings.Contains(text, "DRAFT") || strings.Contains(text, "Open —") {
		t.Errorf("an issued invoice is marked not issued:\n%s", text)
	}
}

func TestPDFIsTheSameForTheSameDocument(t *testing.T) {
	a, err := document.PDF(sample())
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if b, err := document.PDF(sample()); err != nil || !bytes.Equal(a, b) {
			t.Fatalf("two renderings of one document differ (%v)", err)
		}
	}
}

func TestPDFPaginatesWithItsHeaderOnEveryPage(t *testing.T) {
	d := sample()
	d.Status, d.Number, d.IssuedAt, d.Totals = "draft", "", "", []document.Field{{"Subtotal", "123456.789"}}
	d.Lines = nil
	for i := range 150 {
		d.Lines = append(d.Lines, document.Line{
			LineID: fmt.Sprintf("charge/api_calls/1/customer=c%03d", i), Kind: "charge",
			Quantity: fmt.Sprint(1000 + i), Amount: fmt.Sprintf("%d.%03d", 10+i, i),
			Details: []document.Field{{"Meter", "api_calls"}, {"Dimensions", fmt.Sprintf("customer=c%03d", i)}},
		})
	}
	pdf, err := document.PDF(d)
	if err != nil {
		t.Fatal(err)
	}
	pages := documenttest.Pages(documenttest.PDFText(t, pdf))
	if len(pages) < 3 {
		t.Fatalf("%d pages for 150 lines, want at least 3", len(pages))
	}
	for i, p := range pages {
		for _, want := range []string{"DRAFT — not issued", "Quantity", "Amount (EUR)", fmt.Sprintf("Page %d of %d", i+1, len(pages))} {
			if !strings.Contains(p, want) {
				t.Errorf("page %d lacks %q:\n%s", i+1, want, p)
			}
		}
		if i > 0 && !strings.Contains(p, "(continued)") {
			t.Errorf("page %d does not say it continues:\n%s", i+1, p)
		}
	}
	// Every line once, whole on one page; the subtotal after the last.
	all := strings.Join(pages, "\n")
	for _, l := range d.Lines {
		if n := strings.Count(all, l.LineID+" "); n != 1 {
			t.Errorf("line %s appears %d times", l.LineID, n)
		}
		page := -1
		for i, p := range pages {
			if strings.Contains(p, l.LineID) {
				page = i
			}
		}
		if page < 0 || !documenttest.HasToken(pages[page], l.Amount) || !strings.Contains(pages[page], "customer="+l.LineID[len(l.LineID)-4:]) {
			t.Errorf("line %s is not whole on one page", l.LineID)
		}
	}
	if !documenttest.HasToken(pages[len(pages)-1], "123456.789") {
		t.Errorf("the last page lacks the subtotal:\n%s", pages[len(pages)-1])
	}
}

func TestPDFWritesTextOutsideCP1252AsQuestionMarks(t *testing.T) {
	d := sample()
	d.Seller.Name = "Größe & Söhne — 株式会社"
	d.Lines[0].Details = append(d.Lines[0].Details, document.Field{"City", "Zürich / Москва"})
	pdf, err := document.PDF(d)
	if err != nil {
		t.Fatal(err)
	}
	text := documenttest.PDFText(t, pdf)
	for _, want := range []string{"Größe & Söhne — ????", "City: Zürich / ??????", "256.9", "381.16"} {
		if !strings.Contains(text, want) {
			t.Errorf("%q is not in the PDF's text:\n%s", want, text)
		}
	}
}

func TestPDFMarksAnInvoiceNotIssued(t *testing.T) {
	for status, want := range map[string]string{"draft": "DRAFT — not issued", "open": "Open — running estimate"} {
		t.Run(status, func(t *testing.T) {
			d := sample()
			d.Status, d.Number, d.IssuedAt, d.Totals, d.Corrections = status, "", "", []document.Field{{"Subtotal", "320.299995"}}, nil
			pdf, err := document.PDF(d)
			if err != nil {
				t.Fatal(err)
			}
			text := documenttest.PDFText(t, pdf)
			for _, w := range []string{want, "not numbered until issued"} {
				if !strings.Contains(text, w) {
					t.Errorf("%q is not in the PDF's text:\n%s", w, text)
				}
			}
			if !regexp.MustCompile(`As of +2026-11-02T09:30:00Z`).MatchString(text) {
				t.Errorf("the PDF does not say as of when:\n%s", text)
			}
			page, err := document.HTML(d)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(page), `<p class="banner" role="status">`+want+`</p>`) {
				t.Errorf("the HTML lacks the banner %q", want)
			}
		})
	}
}

func TestHTMLShowsEveryFigureEscaped(t *testing.T) {
	d := sample()
	d.TenantID = `acme"><script>alert(1)</script>`
	d.Lines[0].Details = append(d.Lines[0].Details, document.Field{"City", "Zürich <b>&</b> 東京"})
	page, err := document.HTML(d)
	if err != nil {
		t.Fatal(err)
	}
	s := string(page)
	if strings.Contains(s, "<script") || strings.Contains(s, "<b>") {
		t.Fatalf("the HTML is not escaped:\n%s", s)
	}
	text := documenttest.HTMLText(page)
	for _, f := range figures(d) {
		if !documenttest.HasToken(text, f) {
			t.Errorf("figure %s is not in the HTML's text", f)
		}
	}
	for _, want := range []string{"City: Zürich <b>&</b> 東京", d.TenantID, "Friedrichstraße 68", "charge/api_calls/3/model=gpt-4&region=eu"} {
		if !strings.Contains(text, want) {
			t.Errorf("%q is not in the HTML's text", want)
		}
	}
	// The one inline style is what the policy's hash admits.
	m := regexp.MustCompile(`(?s)<style>(.*?)</style>`).FindStringSubmatch(s)
	if m == nil {
		t.Fatal("no style element")
	}
	sum := sha256.Sum256([]byte(m[1]))
	if hash := "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"; !strings.Contains(document.ContentSecurityPolicy, "style-src "+hash) {
		t.Errorf("policy %q does not admit the style %s", document.ContentSecurityPolicy, hash)
	}
	for _, banned := range []string{"<script", "<img", "<link", "src=", "href=", "style=\""} {
		if strings.Contains(s, banned) {
			t.Errorf("the HTML holds %q", banned)
		}
	}
}

func TestSectionsFollowKindsInOrder(t *testing.T) {
	d := document.Document{Lines: []document.Line{
		{LineID: "a", Kind: "charge"}, {LineID: "b", Kind: "charge"}, {LineID: "c", Kind: "minimum_true_up"},
		{LineID: "d", Kind: "tax"}, {LineID: "e", Kind: "credit_applied"},
	}}
	var got []string
	for _, s := range d.Sections() {
		got = append(got, fmt.Sprintf("%s:%d", s.Title, len(s.Lines)))
	}
	if want := "Charge:2 Minimum true up:1 Tax:1 Credit applied:1"; strings.Join(got, " ") != want {
		t.Errorf("sections %v, want %s", got, want)
	}
}

func TestLoadSeller(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		want    document.Seller
		wantErr string
	}{
		{name: "defaults", env: map[string]string{}, want: document.Seller{Name: document.DefaultSellerName}},
		{name: "address lines", env: map[string]string{"INVOICE_SELLER_NAME": "Northwind GmbH", "INVOICE_SELLER_ADDRESS": " Friedrichstraße 68 ;10117 Berlin;; Germany "},
			want: document.Seller{Name: "Northwind GmbH", Address: []string{"Friedrichstraße 68", "10117 Berlin", "Germany"}}},
		{name: "control character", env: map[string]string{"INVOICE_SELLER_NAME": "North\x07wind"}, wantErr: "INVOICE_SELLER_NAME: must not hold control characters"},
		{name: "too long", env: map[string]string{"INVOICE_SELLER_ADDRESS": strings.Repeat("x", 201)}, wantErr: "INVOICE_SELLER_ADDRESS line 1: at most 200 characters"},
		{name: "too many lines", env: map[string]string{"INVOICE_SELLER_ADDRESS": "a;b;c;d;e;f;g"}, wantErr: "INVOICE_SELLER_ADDRESS: 7 lines, at most 6"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := document.LoadSeller(service.NewEnvFrom(tt.env))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("seller %+v, want %+v", got, tt.want)
			}
		})
	}
}

var docsImage = flag.String("docs-image", "", "write the sample invoice's first page as a PNG to this path (pdftoppm)")

// TestDocsImage renders the sample for the invoice README:
//
//	go test ./internal/document -run DocsImage -docs-image "$PWD/../../docs/invoice-document.png"
func TestDocsImage(t *testing.T) {
	if *docsImage == "" {
		t.Skip("no -docs-image")
	}
	pdf, err := document.PDF(sample())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	in := filepath.Join(dir, "invoice.pdf")
	if err := os.WriteFile(in, pdf, 0o600); err != nil {
		t.Fatal(err)
	}
	out := strings.TrimSuffix(*docsImage, ".png")
	if b, err := exec.CommandContext(t.Context(), "pdftoppm", "-png", "-r", "60", "-singlefile", "-f", "1", in, out).CombinedOutput(); err != nil {
		t.Fatalf("pdftoppm: %v: %s", err, b)
	}
}
