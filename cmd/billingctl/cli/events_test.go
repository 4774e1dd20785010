package cli

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestReadCloudEvents: the three shapes of a file of CloudEvents, each
// event's number and line, the tenant as the subject of an event without
// one, and input refused before any request.
func TestReadCloudEvents(t *testing.T) {
	ev := func(id string) string {
		return `{"specversion":"1.0","id":"` + id + `","source":"s","type":"tokens","time":"2026-11-01T12:00:00Z","data":{"n":"1"}}`
	}
	for _, tc := range []struct {
		name, in string
		numbers  []int
		lines    []int
	}{
		{"one object", "\n  " + ev("a") + "\n", []int{1}, []int{2}},
		{"an array", "[" + ev("a") + ",\n" + ev("b") + "]", []int{1, 2}, []int{0, 0}},
		{"ndjson", ev("a") + "\n\n" + ev("b") + "\n" + ev("c") + "\n", []int{1, 2, 3}, []int{1, 3, 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			evs, err := readCloudEvents(strings.NewReader(tc.in), "acme")
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) != len(tc.numbers) {
				t.Fatalf("%d events, want %d", len(evs), len(tc.numbers))
			}
			for i, e := range evs {
				if e.number != tc.numbers[i] || e.line != tc.lines[i] {
					t.Errorf("event %d: number %d line %d, want %d and %d", i, e.number, e.line, tc.numbers[i], tc.lines[i])
				}
				var m map[string]any
				if err := json.Unmarshal(e.raw, &m); err != nil || m["subject"] != "acme" || m["id"] != e.id || e.id == "" {
					t.Errorf("event %d: %s (id %q), want subject acme and its id", i, e.raw, e.id)
				}
			}
		})
	}
	// A subject given is kept; no tenant, none added.
	evs, err := readCloudEvents(strings.NewReader(strings.Replace(ev("a"), `"source"`, `"subject":"other","source"`, 1)+"\n"+ev("b")), "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(evs[0].raw), `"subject":"other"`) || strings.Contains(string(evs[1].raw), "subject") {
		t.Errorf("subjects: %s, %s", evs[0].raw, evs[1].raw)
	}
	for _, tc := range []struct{ in, want string }{
		{"", "no events"},
		{"[]", "no events"},
		{ev("a") + "\n" + `"a string"`, "event 2 (line 2): not a JSON object"},
		{"[" + ev("a") + ", 3]", "event 2: not a JSON object"},
		{ev("a") + "\n{\"id\":", "event 2 (line 2)"},
		{"[" + ev("a"), "a JSON array"},
	} {
		if _, err := readCloudEvents(strings.NewReader(tc.in), "acme"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("readCloudEvents(%q): %v, want an error with %q", tc.in, err, tc.want)
		}
	}
}

// TestChunks: requests of at most batch events and maxEventsBody bytes,
// every event in one, in order.
func TestChunks(t *testing.T) {
	small := cloudEvent{raw: json.RawMessage(`{}`)}
	big := cloudEvent{raw: json.RawMessage(`"` + strings.Repeat("x", maxEventsBody/3) + `"`)}
	for _, tc := range []struct {
		name  string
		evs   []cloudEvent
		batch int
		want  []int
	}{
		{"by count", []cloudEvent{small, small, small, small, small}, 2, []int{2, 2, 1}},
		{"by bytes", []cloudEvent{big, big, big, big, small}, 1000, []int{2, 3}},
		{"one", []cloudEvent{small}, 1000, []int{1}},
	} {
		var got []int
		for _, c := range chunks(tc.evs, tc.batch) {
			got = append(got, len(c))
			size := 2
			for _, e := range c {
				size += len(e.raw) + 1
			}
			if size > maxEventsBody+1 {
				t.Errorf("%s: a request of %d bytes", tc.name, size)
			}
		}
		if len(got) != len(tc.want) {
			t.Fatalf("%s: chunks %v, want %v", tc.name, got, tc.want)
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Fatalf("%s: chunks %v, want %v", tc.name, got, tc.want)
			}
		}
	}
}
