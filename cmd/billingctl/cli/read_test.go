package cli

import (
	"flag"
	"slices"
	"strings"
	"testing"
)

// TestReadUsage: the two input formats, the defaults billingctl fills in
// and the input it refuses before sending anything.
func TestReadUsage(t *testing.T) {
	const at = "2026-11-01T12:00:00Z"
	csv := "meterCode,quantity,occurredAt,sourceEventId,currency\napi_calls,1.5," + at + ",a,\napi_calls,2," + at + ",,EUR\n"
	nd := `{"meterCode":"api_calls","quantity":"1.5","occurredAt":"` + at + `","sourceEventId":"a"}` + "\n\n" +
		`{"meterCode":"api_calls","quantity":"2","occurredAt":"` + at + `","currency":"EUR","sourceSystem":"erp"}` + "\n"
	for name, tc := range map[string]struct{ format, in, system string }{
		"csv":    {"csv", csv, "billingctl"},
		"ndjson": {"ndjson", nd, "erp"},
	} {
		t.Run(name, func(t *testing.T) {
			recs, err := readUsage(strings.NewReader(tc.in), tc.format, "billingctl")
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) != 2 {
				t.Fatalf("%d records, want 2", len(recs))
			}
			a, b := recs[0].event, recs[1].event
			if a.SourceEventId != "a" || a.SourceSystem != "billingctl" || a.Quantity.String() != "1.5" || a.Currency != nil {
				t.Errorf("first: %+v", a)
			}
			if !strings.HasPrefix(b.SourceEventId, "billingctl-") || b.SourceSystem != tc.system || b.Currency == nil || *b.Currency != "EUR" {
				t.Errorf("second: %+v", b)
			}
			// The derived id is the same on a second read: a resend replays.
			again, _ := readUsage(strings.NewReader(tc.in), tc.format, "billingctl")
			if again[1].event.SourceEventId != b.SourceEventId {
				t.Errorf("derived id %s, then %s", b.SourceEventId, again[1].event.SourceEventId)
			}
		})
	}
	for _, tc := range []struct{ format, in, want string }{
		{"csv", "meterCode,quantity\napi_calls,1\n", "no occurredAt column"},
		{"csv", "meterCode,quantity,occurredAt\napi_calls,1,\n", "line 2: no occurredAt"},
		{"csv", "meterCode,quantity,occurredAt\napi_calls,x," + at + "\n", `line 2: quantity "x"`},
		{"ndjson", `{"meterCode":"m","quantity":"1","occurredAt":"yesterday"}`, `line 1: occurredAt "yesterday"`},
		{"ndjson", `{"meterCode":"m","quantity":"1","occurredAt":"` + at + `","extra":1}`, `unknown field "extra"`},
		{"xml", "", `format "xml"`},
	} {
		if _, err := readUsage(strings.NewReader(tc.in), tc.format, "s"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("readUsage(%q): %v, want an error with %q", tc.in, err, tc.want)
		}
	}
}

// TestInterleave: flags after the positional arguments are read as flags.
func TestInterleave(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.String("o", "", "")
	fs.Bool("all", false, "")
	got := interleave(fs, []string{"ID", "-o", "json", "-all", "-x=1", "--", "-not-a-flag"})
	want := []string{"-o", "json", "-all", "-x=1", "ID", "-not-a-flag"}
	if !slices.Equal(got, want) {
		t.Fatalf("interleave: %q, want %q", got, want)
	}
}
