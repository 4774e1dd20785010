package outbox

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/usagebilling/billing/pkg/collector"
)

type metrics struct {
	pending        prometheus.Gauge
	oldestAge      prometheus.Gauge
	maxPerKey      prometheus.Gauge
	deadLetters    prometheus.Gauge
	ownedShards    prometheus.Gauge
	published      prometheus.Counter
	failedAttempts prometheus.Counter
	commitToAck    prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	}
	m := &metrics{
		pending:     gauge("outbox_pending", "Outbox rows not yet published (dead letters excluded), counted up to 10,000 (StatsCountCap): a larger backlog reads 10,000."),
		oldestAge:   gauge("outbox_oldest_pending_age_seconds", "Age of the oldest pending outbox row."),
		maxPerKey:   gauge("outbox_max_pending_per_key", "Most pending outbox rows of any one partition key, among the oldest 1,000 pending rows of each shard."),
		deadLetters: gauge("outbox_dead_letters", "Outbox rows that exhausted their attempts and wait for an operator, counted up to 10,000 (StatsCountCap)."),
		ownedShards: gauge("outbox_relay_owned_shards", "Shards whose lease this relay holds."),
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_published_total", Help: "Outbox rows acknowledged by the broker and marked sent (their pending entries deleted)."}),
		failedAttempts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_failed_attempts_total", Help: "Sends of outbox rows that the broker did not acknowledge."}),
		commitToAck: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "outbox_commit_to_ack_seconds",
			Help:    "Time from an outbox row's insert to the broker's acknowledgement of it.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	m.pending = collector.Register(reg, m.pending, &err)
	m.oldestAge = collector.Register(reg, m.oldestAge, &err)
	m.maxPerKey = collector.Register(reg, m.maxPerKey, &err)
	m.deadLetters = collector.Register(reg, m.deadLetters, &err)
	m.ownedShards = collector.Register(reg, m.ownedShards, &err)
	m.published = collector.Register(reg, m.published, &err)
	m.failedAttempts = collector.Register(reg, m.failedAttempts, &err)
	m.commitToAck = collector.Register(reg, m.commitToAck, &err)
	return m, err
}
