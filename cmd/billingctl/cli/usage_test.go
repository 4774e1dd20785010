package cli

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// TestPrintRefusals: thousands of refused events print as a few lines, one
// per code with its count, first lines and first detail, most first.
func TestPrintRefusals(t *testing.T) {
	var refused []RefusedEvent
	for i := range 2500 {
		refused = append(refused, RefusedEvent{Line: i + 2, SourceEventID: fmt.Sprint("ev-", i), Status: 422,
			Code: "no_price_in_effect", Detail: "no price of api_calls in effect"})
	}
	refused = append(refused, RefusedEvent{Line: 2502, Status: 400, Code: "invalid_quantity", Detail: "quantity must be positive"})
	for i := range 6 {
		refused = append(refused, RefusedEvent{Line: 2503 + i, Status: 400, Code: fmt.Sprint("code_", i)})
	}
	var out bytes.Buffer
	printRefusals(&out, refused)
	got := out.String()
	want := "refused, by code (-o json lists every refused event):\n" +
		"  no_price_in_effect: 2500 (422 Unprocessable Entity; lines 2, 3, 4, ...): no price of api_calls in effect\n" +
		"  invalid_quantity: 1 (400 Bad Request; line 2502): quantity must be positive\n" +
		"  code_0: 1 (400 Bad Request; line 2503)\n" +
		"  code_1: 1 (400 Bad Request; line 2504)\n" +
		"  code_2: 1 (400 Bad Request; line 2505)\n" +
		"  ... and 3 more codes\n"
	if got != want {
		t.Errorf("printed:\n%s\nwant:\n%s", got, want)
	}
	if n := strings.Count(got, "\n"); n > 10 {
		t.Errorf("%d lines for %d refused events", n, len(refused))
	}
	out.Reset()
	printRefusals(&out, nil)
	if out.Len() > 0 {
		t.Errorf("nothing refused printed %q", out.String())
	}
}
