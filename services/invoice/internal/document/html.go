package document

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"html/template"
)

// style is the page's only style sheet, inline; ContentSecurityPolicy
// admits it by its hash and nothing else.
const style = `
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #111; margin: 2rem auto; max-width: 56rem; padding: 0 1rem; }
header { display: flex; justify-content: space-between; align-items: flex-start; gap: 2rem; }
h1 { font-size: 1.8rem; margin: 0; text-align: right; }
.seller strong { font-size: 1.25rem; }
.seller p, .number { margin: .15rem 0; }
.number { text-align: right; }
.banner { border: 2px solid #b40000; color: #b40000; font-weight: bold; text-align: center; padding: .4rem; margin: 1rem 0; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: .15rem 1rem; margin: 1.2rem 0; }
dl.facts dt { font-weight: bold; }
dl.facts dd { margin: 0; }
table { border-collapse: collapse; width: 100%; }
th, td { padding: .3rem .5rem; vertical-align: top; }
thead th { background: #ebebeb; text-align: left; border-bottom: 1px solid #999; }
th.num, td.num { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
tbody.section th { text-align: left; padding-top: .8rem; }
tbody.section td { border-bottom: 1px solid #ddd; }
.id { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: .85rem; overflow-wrap: anywhere; }
ul.details { list-style: none; margin: .2rem 0 0 .8rem; padding: 0; color: #555; font-size: .85rem; }
tfoot th { text-align: right; font-weight: normal; }
tfoot tr:last-child th, tfoot tr:last-child td { font-weight: bold; border-top: 1px solid #999; }
footer { margin-top: 2rem; color: #666; font-size: .8rem; }
@media print { body { margin: 0; max-width: none; } }
`

// ContentSecurityPolicy is the policy the HTML document is to be served
// with: nothing loads, nothing runs, nothing frames it; only its own inline
// style (by hash) applies.
var ContentSecurityPolicy = func() string {
	sum := sha256.Sum256([]byte(style))
	return "default-src 'none'; style-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'; " +
		"img-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
}()

var page = template.Must(template.New("invoice").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>{{.D.Title}} — {{.D.TenantID}} {{.D.Period}}</title>
<style>{{.Style}}</style>
</head>
<body>
<header>
<div class="seller"><strong>{{.D.Seller.Name}}</strong>{{range .D.Seller.Address}}<p>{{.}}</p>{{end}}</div>
<div><h1>INVOICE</h1><p class="number">{{.D.Title}}</p></div>
</header>
{{with .D.Banner}}<p class="banner" role="status">{{.}}</p>{{end}}
<dl class="facts">{{range .Facts}}
<dt>{{.Name}}</dt><dd>{{.Value}}</dd>{{end}}
</dl>
<table>
<thead><tr><th scope="col">Line</th><th scope="col" class="num">Quantity</th><th scope="col" class="num">Amount ({{.D.Currency}})</th></tr></thead>
{{range .Sections}}<tbody class="section" data-kind="{{.Kind}}">
<tr><th colspan="3" scope="rowgroup">{{.Title}}</th></tr>{{range .Lines}}
<tr data-line-id="{{.LineID}}"><td><span class="id">{{.LineID}}</span>{{with .Details}}<ul class="details">{{range .}}<li>{{.Name}}: {{.Value}}</li>{{end}}</ul>{{end}}</td><td class="num">{{.Quantity}}</td><td class="num">{{.Amount}}</td></tr>{{end}}
</tbody>
{{else}}<tbody><tr><td colspan="3"><em>No lines.</em></td></tr></tbody>
{{end}}<tfoot>{{range .D.Totals}}
<tr><th colspan="2" scope="row">{{.Name}}</th><td class="num">{{.Value}}</td></tr>{{end}}
</tfoot>
</table>
{{with .D.Corrections}}<h2>Correction notes issued after this invoice</h2>
<table>
<thead><tr><th scope="col">Correction</th><th scope="col">Issued at</th><th scope="col">For event</th><th scope="col" class="num">Amount</th></tr></thead>
<tbody>{{range .}}
<tr><td class="id">{{.CorrectionID}}</td><td>{{.IssuedAt}}</td><td class="id">{{.OriginEventID}}</td><td class="num">{{.Amount}}</td></tr>{{end}}
</tbody>
</table>
{{end}}<footer>Invoice ID {{.D.InvoiceID}}</footer>
</body>
</html>
`))

// HTML renders d as one self-contained HTML page (no script, no external
// asset), every value escaped; serve it with ContentSecurityPolicy.
func HTML(d Document) ([]byte, error) {
	var buf bytes.Buffer
	err := page.Execute(&buf, struct {
		D        Document
		Facts    []Field
		Sections []Section
		Style    template.CSS
	}{D: d, Facts: d.facts(), Sections: d.Sections(), Style: template.CSS(style)})
	if err != nil {
		return nil, fmt.Errorf("render invoice html: %w", err)
	}
	return buf.Bytes(), nil
}
