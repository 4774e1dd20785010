package collector_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/usagebilling/billing/pkg/collector"
)

// A second collector of the same name and labels gets the first one back;
// one of another type under that name is an error, and it comes back
// unregistered.
func TestRegisterSharesACollectorAlreadyRegistered(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := prometheus.CounterOpts{Name: "things_total", Help: "Things.", ConstLabels: prometheus.Labels{"service": "a"}}
	var err error
	first := collector.Register(reg, prometheus.NewCounter(opts), &err)
	second := collector.Register(reg, prometheus.NewCounter(opts), &err)
	if err != nil {
		t.Fatalf("register: %v", err)
	}
	if first != second {
		t.Fatal("the second registration got a collector of its own, want the first one")
	}
	first.Inc()
	other := collector.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: "things_total", Help: "Other.",
		ConstLabels: prometheus.Labels{"service": "a"}}), &err)
	if err == nil || other == nil {
		t.Fatalf("a gauge under a counter's name: err %v, want an error and the gauge back", err)
	}
}
