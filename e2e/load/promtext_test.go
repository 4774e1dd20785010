package load

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

const exposition = `# HELP outbox_commit_to_ack_seconds Time from an outbox row's insert to the broker's acknowledgement of it.
# TYPE outbox_commit_to_ack_seconds histogram
outbox_commit_to_ack_seconds_bucket{le="0.001"} 0
outbox_commit_to_ack_seconds_bucket{le="0.002"} 10
outbox_commit_to_ack_seconds_bucket{le="0.004"} 60
outbox_commit_to_ack_seconds_bucket{le="0.008"} 100
outbox_commit_to_ack_seconds_bucket{le="+Inf"} 100
outbox_commit_to_ack_seconds_sum 0.4
outbox_commit_to_ack_seconds_count 100
inbox_batch_duration_seconds_bucket{service="query",le="0.01"} 3
inbox_batch_duration_seconds_bucket{service="query",le="+Inf"} 4
inbox_batch_duration_seconds_bucket{service="query",topic="b\"x,y}",le="0.01"} 1
inbox_batch_duration_seconds_bucket{service="query",topic="b\"x,y}",le="+Inf"} 1
inbox_batch_duration_seconds_count{service="query"} 4
inbox_batch_duration_seconds_count{service="query",topic="b\"x,y}"} 1
outbox_pending 0 1700000000000
`

func TestParseTextAndQuantile(t *testing.T) {
	series, err := ParseText(strings.NewReader(exposition))
	if err != nil {
		t.Fatal(err)
	}
	if len(series) != 14 {
		t.Fatalf("got %d series, want 14", len(series))
	}
	if l := series[9].Labels["topic"]; l != `b"x,y}` {
		t.Fatalf("escaped label: got %q", l)
	}
	h, ok := HistogramOf(series, "outbox_commit_to_ack_seconds")
	if !ok || h.Count != 100 || len(h.Bounds) != 5 || !math.IsInf(h.Bounds[4], 1) {
		t.Fatalf("histogram: %+v", h)
	}
	// The 50th of 100 lies in (0.002, 0.004]: 10 below, 50 inside, so
	// 0.002 + 0.002*40/50.
	if v, over, ok := h.Quantile(0.5); !ok || over || math.Abs(v-0.0036) > 1e-12 {
		t.Fatalf("p50: %v %v %v, want 0.0036", v, over, ok)
	}
	// The first bucket interpolates from zero.
	if v, _, _ := h.Quantile(0.05); math.Abs(v-0.0015) > 1e-12 {
		t.Fatalf("p5: %v, want 0.0015", v)
	}

	if js, err := json.Marshal(h); err != nil || !strings.Contains(string(js), `{"le":"+Inf","count":100}`) {
		t.Fatalf("JSON: %s %v", js, err)
	}

	// A delta: the same histogram read earlier with 10 fast rows.
	before := Histogram{Bounds: h.Bounds, Counts: []float64{0, 10, 10, 10, 10}, Count: 10}
	d := h.Sub(before)
	if v, _, _ := d.Quantile(0.5); math.Abs(v-(0.002+0.002*45/50)) > 1e-12 || d.Count != 90 {
		t.Fatalf("delta p50 %v count %v", v, d.Count)
	}
	if _, _, ok := before.Sub(before).Quantile(0.5); ok {
		t.Fatal("empty delta: want ok false")
	}

	// Two label sets summed; the rank in the +Inf bucket is "above 0.01".
	ib, _ := HistogramOf(series, "inbox_batch_duration_seconds")
	if ib.Count != 5 || ib.Counts[0] != 4 || ib.Counts[1] != 5 {
		t.Fatalf("inbox: %+v", ib)
	}
	if v, over, _ := ib.Quantile(0.99); !over || v != 0.01 {
		t.Fatalf("inbox p99: %v over %v, want 0.01 and over", v, over)
	}
}
