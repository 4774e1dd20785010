package load

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
)

// Histograms read from each service's /metrics.
const (
	RelayHistogram = "outbox_commit_to_ack_seconds" // pkg/outbox: outbox row insert -> broker ack
	InboxHistogram = "inbox_batch_duration_seconds" // pkg/inbox: decide and commit one consumed batch
)

// scrape is one reading of every service's /metrics.
type scrape map[string][]Series

// scrapeAll reads /metrics of every service, of each instance when a
// service has several (their series together: a histogram sums them); a
// service that does not answer is left out and named in the error.
func scrapeAll(ctx context.Context, cl *client) (scrape, error) {
	out := scrape{}
	var failed []string
	for _, s := range Services {
		for _, base := range cl.instances(s) {
			a, err := cl.get(ctx, base+"/metrics")
			if err == nil && a.status != http.StatusOK {
				err = fmt.Errorf("%s", a)
			}
			var series []Series
			if err == nil {
				series, err = ParseText(bytes.NewReader(a.body))
			}
			if err != nil {
				failed = append(failed, fmt.Sprintf("%s: %v", s, err))
				break
			}
			out[s] = append(out[s], series...)
		}
	}
	if len(failed) > 0 {
		return out, fmt.Errorf("read /metrics: %v", failed)
	}
	return out, nil
}

// HistStats are the percentiles of one service's histogram over the run.
type HistStats struct {
	Service string    `json:"service"`
	Metric  string    `json:"metric"`
	Count   float64   `json:"count"`
	Mean    float64   `json:"meanSeconds"`
	P50     float64   `json:"p50Seconds"`
	P95     float64   `json:"p95Seconds"`
	P99     float64   `json:"p99Seconds"`
	Over    []bool    `json:"aboveTopBucket"` // p50, p95, p99 beyond the highest finite bucket
	Delta   Histogram `json:"delta"`
}

// histDeltas returns, for every service whose /metrics has metric at the
// end, the percentiles of what it observed between before and after.
func histDeltas(before, after scrape, metric string) []HistStats {
	var out []HistStats
	for _, s := range Services {
		end, ok := HistogramOf(after[s], metric)
		if !ok {
			continue
		}
		start, _ := HistogramOf(before[s], metric)
		d := end.Sub(start)
		hs := HistStats{Service: s, Metric: metric, Count: d.Count, Delta: d}
		if d.Count > 0 {
			hs.Mean = d.Sum / d.Count
		}
		for i, q := range []float64{0.50, 0.95, 0.99} {
			v, over, _ := d.Quantile(q)
			hs.Over = append(hs.Over, over)
			switch i {
			case 0:
				hs.P50 = v
			case 1:
				hs.P95 = v
			case 2:
				hs.P99 = v
			}
		}
		out = append(out, hs)
	}
	return out
}
