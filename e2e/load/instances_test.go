package load

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// TestInstancesShareTheLoadAndTheirMetricsAdd: a service started as two
// processes gets requests in turn, and a run's histograms are the sum of
// both instances' /metrics.
func TestInstancesShareTheLoadAndTheirMetricsAdd(t *testing.T) {
	var hits [2]atomic.Int64
	var urls []string
	for i := range 2 {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/metrics" {
				fmt.Fprintf(w, "outbox_commit_to_ack_seconds_bucket{le=\"0.01\"} %d\n", 10*(i+1))
				fmt.Fprintf(w, "outbox_commit_to_ack_seconds_bucket{le=\"+Inf\"} %d\n", 10*(i+1))
				fmt.Fprintf(w, "outbox_commit_to_ack_seconds_count %d\n", 10*(i+1))
				return
			}
			hits[i].Add(1)
		}))
		t.Cleanup(srv.Close)
		urls = append(urls, srv.URL)
	}
	cfg := &Config{URLs: map[string]string{}, Instances: map[string][]string{"usage": urls}, Token: "t"}
	for _, s := range Services {
		cfg.URLs[s] = urls[0]
	}
	cl, err := newClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if _, err := cl.do(context.Background(), http.MethodPost, "usage", "", "/v1/x", nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	if a, b := hits[0].Load(), hits[1].Load(); a != 5 || b != 5 {
		t.Fatalf("requests per instance: %d and %d, want 5 and 5", a, b)
	}
	sc, err := scrapeAll(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	if h, ok := HistogramOf(sc["usage"], RelayHistogram); !ok || h.Count != 30 {
		t.Fatalf("usage's histogram over both instances: %+v, want a count of 30", h)
	}
	if h, ok := HistogramOf(sc["billing"], RelayHistogram); !ok || h.Count != 10 {
		t.Fatalf("billing's histogram (one instance): %+v, want a count of 10", h)
	}
}
