package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"strings"
	"testing"
)

// TestReadUsageProperties: properties from NDJSON objects and CSV
// properties.<name> columns, in the derived sourceEventId; a line without
// properties keeps the id it had before properties existed.
func TestReadUsageProperties(t *testing.T) {
	const at = "2026-11-01T12:00:00Z"
	nd := `{"meterCode":"tokens","quantity":"10","occurredAt":"` + at + `","properties":{"model":"gpt-4","region":"eu"}}` + "\n" +
		`{"meterCode":"tokens","quantity":"10","occurredAt":"` + at + `"}` + "\n"
	csv := "meterCode,quantity,occurredAt,properties.model,properties.region\n" +
		"tokens,10," + at + ",gpt-4,eu\n" +
		"tokens,10," + at + ",,\n"
	ids := map[string][]string{}
	for format, in := range map[string]string{"ndjson": nd, "csv": csv} {
		recs, err := readUsage(strings.NewReader(in), format, "s")
		if err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		if len(recs) != 2 {
			t.Fatalf("%s: %d records, want 2", format, len(recs))
		}
		want := map[string]string{"model": "gpt-4", "region": "eu"}
		if p := recs[0].event.Properties; p == nil || fmt.Sprint(map[string]string(*p)) != fmt.Sprint(want) {
			t.Errorf("%s: properties %v, want %v", format, p, want)
		}
		if p := recs[1].event.Properties; p != nil {
			t.Errorf("%s: a line without properties has %v", format, *p)
		}
		// The id before properties: line, meter, quantity and time.
		n := recs[1].line
		h := sha256.Sum256(fmt.Appendf(nil, "%d\x00%s\x00%s\x00%s", n, "tokens", "10", at))
		if old := "billingctl-" + hex.EncodeToString(h[:12]); recs[1].event.SourceEventId != old {
			t.Errorf("%s: a line without properties is %s, was %s: a file sent before would not replay", format, recs[1].event.SourceEventId, old)
		}
		ids[format] = []string{recs[0].event.SourceEventId}
	}
	// The same line with other properties is another fact.
	other := strings.Replace(nd, `"eu"`, `"us"`, 1)
	recs, err := readUsage(strings.NewReader(other), "ndjson", "s")
	if err != nil {
		t.Fatal(err)
	}
	if recs[0].event.SourceEventId == ids["ndjson"][0] {
		t.Errorf("other properties, the same derived id %s", ids["ndjson"][0])
	}
	again, _ := readUsage(strings.NewReader(nd), "ndjson", "s")
	if again[0].event.SourceEventId != ids["ndjson"][0] {
		t.Errorf("derived id %s, then %s", ids["ndjson"][0], again[0].event.SourceEventId)
	}
	for _, tc := range []struct{ format, in, want string }{
		{"ndjson", `{"meterCode":"m","quantity":"1","occurredAt":"` + at + `","properties":{"n":1}}`, `line 1: property "n" is not a string`},
		{"ndjson", `{"meterCode":"m","quantity":"1","occurredAt":"` + at + `","properties":["a"]}`, "line 1:"},
		{"csv", "meterCode,quantity,occurredAt,properties.\nm,1," + at + ",x\n", "without a property name"},
	} {
		if _, err := readUsage(strings.NewReader(tc.in), tc.format, "s"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("readUsage(%q): %v, want an error with %q", tc.in, err, tc.want)
		}
	}
}

// -tax-rate CODE:NAME:RATE keeps the rates in order; a name may hold colons
// (the rate is after the last one); a missing part or a rate that is no
// decimal is refused.
func TestTaxRateFlag(t *testing.T) {
	var f taxRatesFlag
	for _, v := range []string{"VAT:VAT 20%:0.2", "CITY:City: Seoul:0.015"} {
		if err := f.Set(v); err != nil {
			t.Fatalf("%s: %v", v, err)
		}
	}
	if got := f.String(); got != "VAT:VAT 20%:0.2,CITY:City: Seoul:0.015" {
		t.Fatalf("rates %s", got)
	}
	for _, bad := range []string{"VAT", "VAT:0.2", "VAT:VAT:twenty"} {
		if err := f.Set(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// Every command's flags are defined once beside the global ones: a clash
// (a command defining -o, which is the output format) panics when the
// command runs.
func TestEveryCommandsFlags(t *testing.T) {
	for name, cmd := range commands {
		fs := flag.NewFlagSet(name, flag.ContinueOnError)
		(&config{}).register(fs)
		func() {
			defer func() {
				if v := recover(); v != nil {
					t.Errorf("%s: %v", name, v)
				}
			}()
			cmd.flags(fs)
		}()
	}
}
