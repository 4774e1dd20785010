// Package documenttest reads the invoice documents back in tests: a PDF's
// text through poppler's pdftotext, an HTML page's text, and whether a
// figure appears in a text as a token of its own.
package documenttest

import (
	"bytes"
	"html"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// PDFText is the text of pdf as `pdftotext -layout` extracts it, one page
// after another, separated by form feeds. Without pdftotext (Debian package
// poppler-utils) the test fails when CI is set and is skipped otherwise.
func PDFText(t testing.TB, pdf []byte) string {
	t.Helper()
	bin, err := exec.LookPath("pdftotext")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("pdftotext is not installed, and CI is set: CI must read the PDFs back (.ci/run installs Debian's poppler-utils): %v", err)
		}
		t.Skipf("pdftotext is not installed (Debian package poppler-utils): %v", err)
	}
	in := filepath.Join(t.TempDir(), "invoice.pdf")
	if err := os.WriteFile(in, pdf, 0o600); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(t.Context(), bin, "-layout", "-enc", "UTF-8", in, "-")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pdftotext: %v: %s", err, stderr.Bytes())
	}
	return string(out)
}

var tag = regexp.MustCompile(`<[^>]*>`)

// HTMLText is the text of page: its tags replaced by spaces, its entities
// unescaped, the contents of head (title, style) left out.
func HTMLText(page []byte) string {
	s := string(page)
	if i := strings.Index(s, "</head>"); i >= 0 {
		s = s[i:]
	}
	return html.UnescapeString(tag.ReplaceAllString(s, " "))
}

// HasToken reports whether s appears in text bounded by white space or the
// text's ends: "0.5" is not found in "-0.5" nor in "10.5".
func HasToken(text, s string) bool {
	re := regexp.MustCompile(`(^|\s)` + regexp.QuoteMeta(s) + `(\s|$)`)
	return re.MatchString(text)
}

// Pages are the pages of a PDFText.
func Pages(text string) []string {
	return strings.Split(strings.TrimRight(text, "\f\n"), "\f")
}
