// Package kafkaconf holds the one sarama configuration the system's producers
// and consumers start from, so every client speaks the same protocol version
// and fails over on the same timeouts.
package kafkaconf

import (
	"time"

	"github.com/IBM/sarama"
)

// Version is the Kafka protocol version the clients announce. Kafka 4.x
// removed protocol versions older than 2.1; sarama negotiates each request's
// version with the broker, so this also works against kfake.
var Version = sarama.V4_0_0_0

// New returns a sarama configuration with the system's protocol version and
// network timeouts short enough that a cut broker path surfaces as an error
// within seconds rather than stalling a relay or consumer.
func New(clientID string) *sarama.Config {
	c := sarama.NewConfig()
	c.Version = Version
	c.ClientID = clientID
	c.Net.DialTimeout = 3 * time.Second
	c.Net.ReadTimeout = 10 * time.Second
	c.Net.WriteTimeout = 10 * time.Second
	c.Metadata.Retry.Max = 2
	c.Metadata.Retry.Backoff = 250 * time.Millisecond
	return c
}

// NewIdempotentProducer returns the producer configuration of the outbox
// relay: idempotent, acknowledged by all in-sync replicas, one request in
// flight per broker so that retries cannot reorder a partition.
func NewIdempotentProducer(clientID string) *sarama.Config {
	c := New(clientID)
	c.Producer.Idempotent = true
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Net.MaxOpenRequests = 1
	c.Producer.Return.Successes = true
	c.Producer.Return.Errors = true
	c.Producer.Retry.Max = 3
	c.Producer.Retry.Backoff = 100 * time.Millisecond
	c.Producer.Timeout = 5 * time.Second
	c.Producer.Partitioner = sarama.NewHashPartitioner
	return c
}
