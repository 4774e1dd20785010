package webhook

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/usagebilling/billing/pkg/collector"
)

type metrics struct {
	commitToFirstAttempt prometheus.Histogram
	oldestPendingAge     prometheus.Gauge
	attemptsPerIntent    prometheus.Histogram
	attempts             *prometheus.CounterVec // by outcome: accepted, retry, failed, lost
	finished             *prometheus.CounterVec // by status: accepted, failed, expired
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		commitToFirstAttempt: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "webhook_commit_to_first_attempt_seconds",
			Help:    "Time from the transaction that wrote a webhook intent to its first delivery attempt.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 16),
		}),
		oldestPendingAge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "webhook_oldest_pending_intent_age_seconds",
			Help: "Age of the oldest webhook intent neither accepted, failed nor expired (0: none).",
		}),
		attemptsPerIntent: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "webhook_attempts_per_intent",
			Help:    "Delivery attempts of each webhook intent when it ends (accepted, failed or expired).",
			Buckets: []float64{1, 2, 3, 4, 6, 10, 20, 50, 100},
		}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "webhook_attempts_total",
			Help: "Webhook delivery attempts by outcome: accepted (2xx), retry (timeout, network error, 408, 425, 429, 5xx), failed (another answer), lost (the lease was taken over before the result was recorded).",
		}, []string{"outcome"}),
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "webhook_intents_finished_total",
			Help: "Webhook intents that ended, by status: accepted, failed, expired.",
		}, []string{"status"}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	m.commitToFirstAttempt = collector.Register(reg, m.commitToFirstAttempt, &err)
	m.oldestPendingAge = collector.Register(reg, m.oldestPendingAge, &err)
	m.attemptsPerIntent = collector.Register(reg, m.attemptsPerIntent, &err)
	m.attempts = collector.Register(reg, m.attempts, &err)
	m.finished = collector.Register(reg, m.finished, &err)
	return m, err
}

func (m *metrics) ended(status string, attempts int32) {
	m.finished.WithLabelValues(status).Inc()
	m.attemptsPerIntent.Observe(float64(attempts))
}
