package inbox

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/usagebilling/billing/pkg/collector"
)

// metrics of an Inbox. Every metric carries the service as a constant label,
// so the inboxes of several services can share one registry.
type metrics struct {
	decisions   *prometheus.CounterVec
	deferred    prometheus.Gauge
	deferredAge prometheus.Gauge
	quarantined prometheus.Gauge
	// retention.go
	purged          prometheus.Counter
	deferredExpired prometheus.Counter
	// decide.go
	claimRetries prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, service string) (*metrics, error) {
	labels := prometheus.Labels{"service": service}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels})
	}
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "inbox_decisions_total",
			Help:        "Committed inbox decisions, by outcome and event type.",
			ConstLabels: labels,
		}, []string{"outcome", "event_type"}),
		deferred:    gauge("inbox_deferred", "Deferred events waiting for a predecessor or a fact, counted up to 10,000 (StatsCountCap)."),
		deferredAge: gauge("inbox_deferred_oldest_age_seconds", "Age of the oldest deferred event."),
		quarantined: gauge("inbox_quarantined", "Quarantined messages not yet redriven, counted up to 10,000 (StatsCountCap)."),
		purged: prometheus.NewCounter(prometheus.CounterOpts{Name: "inbox_events_purged_total",
			Help: "Decided events deleted from inbox_event past the inbox retention.", ConstLabels: labels}),
		deferredExpired: prometheus.NewCounter(prometheus.CounterOpts{Name: "inbox_deferred_expired_total",
			Help: "Deferred events quarantined as deferred_expired past the maximum age.", ConstLabels: labels}),
		claimRetries: prometheus.NewCounter(prometheus.CounterOpts{Name: "inbox_claim_retries_total",
			Help: "Runs whose first claim met a taken key and was rolled back to claim with ON CONFLICT DO NOTHING.", ConstLabels: labels}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	m.decisions = collector.Register(reg, m.decisions, &err)
	m.deferred = collector.Register(reg, m.deferred, &err)
	m.deferredAge = collector.Register(reg, m.deferredAge, &err)
	m.quarantined = collector.Register(reg, m.quarantined, &err)
	m.purged = collector.Register(reg, m.purged, &err)
	m.deferredExpired = collector.Register(reg, m.deferredExpired, &err)
	m.claimRetries = collector.Register(reg, m.claimRetries, &err)
	return m, err
}

// runnerMetrics of a Runner.
type runnerMetrics struct {
	batchDuration   prometheus.Histogram
	batchMessages   prometheus.Histogram
	transientErrors prometheus.Counter
}

func newRunnerMetrics(reg prometheus.Registerer, service string) (*runnerMetrics, error) {
	labels := prometheus.Labels{"service": service}
	m := &runnerMetrics{
		batchDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:        "inbox_batch_duration_seconds",
			Help:        "Time to decide and commit one batch of consumed messages.",
			ConstLabels: labels,
			Buckets:     prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		batchMessages: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:        "inbox_batch_messages",
			Help:        "Consumed messages decided in one committed batch, from every partition of the session.",
			ConstLabels: labels,
			Buckets:     []float64{1, 5, 10, 25, 50, 100, 200, 300, 400, 500, 1000},
		}),
		transientErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name:        "inbox_transient_errors_total",
			Help:        "Batch or sweep attempts that failed transiently and were retried.",
			ConstLabels: labels,
		}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	m.batchDuration = collector.Register(reg, m.batchDuration, &err)
	m.batchMessages = collector.Register(reg, m.batchMessages, &err)
	m.transientErrors = collector.Register(reg, m.transientErrors, &err)
	return m, err
}
