package httpx

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// batchBody is a batch of n usage facts shaped as usage's POST
// /v1/usages:batch takes them, and the type it decodes into.
func batchBody(n int) ([]byte, any) {
	type usage struct {
		SourceSystem  string          `json:"sourceSystem"`
		SourceEventID string          `json:"sourceEventId"`
		MeterCode     string          `json:"meterCode"`
		Quantity      json.RawMessage `json:"quantity"`
		OccurredAt    string          `json:"occurredAt"`
		Currency      string          `json:"currency"`
		Properties    json.RawMessage `json:"properties"`
	}
	type batch struct {
		Events []usage `json:"events"`
	}
	var b strings.Builder
	b.WriteString(`{"events":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"sourceSystem":"load","sourceEventId":"run-1-%d","meterCode":"api_calls","quantity":"%d.25",`+
			`"occurredAt":"2026-12-06T10:%02d:%02dZ","currency":"USD","properties":{"region":"eu-west-1","tier":"gold"}}`,
			i, i%97+1, i/60%60, i%60)
	}
	b.WriteString(`]}`)
	return []byte(b.String()), &batch{}
}

// BenchmarkCheckJSON measures CheckJSON on a batch of 500 usage facts (about
// 110 KB), the body of every request usage takes under load; -benchmem
// shows its allocations.
func BenchmarkCheckJSON(b *testing.B) {
	body, dst := batchBody(500)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if p := CheckJSON(body, dst); p != nil {
			b.Fatal(p)
		}
	}
}
