// Package kafkaconf holds the one sarama configuration the system's producers
// and consumers start from, so every client speaks the same protocol version,
// fails over on the same timeouts and agrees on message sizes.
//
// # Size limits
//
// Every event is an envelope of at most envelope.MaxBytes (64 KiB), refused
// where it is built (envelope.New, Marshal, outbox.Append). The Kafka limits
// below are derived from it, so that an envelope at the limit always passes
// the producer, the broker and the consumer:
//
//   - MaxRecordBytes (65 KiB): one record, an envelope plus RecordOverhead.
//   - MaxBatchBytes (975 KiB): the producer's limit on one partition's record
//     batch, sarama's Producer.MaxMessageBytes: 15 records at the limit.
//   - BrokerMessageMaxBytes (976 KiB): message.max.bytes of the brokers
//     testkit/kafkabroker starts (kfake and Apache Kafka), a full batch plus
//     headroom.
//   - FetchBytes (976 KiB): the consumers' per-partition fetch size, one
//     whole batch at the broker's limit.
//   - FetchRequestBytes (3.8 MiB): the most one fetch request asks of a
//     broker across all its partitions, four partitions' worth. This, not
//     the partition count, bounds what a consumer that is behind holds: a
//     response, and the records of earlier ones still in its partitions'
//     channels (decoded records share their response's buffer).
//
// With your own Kafka: the broker's message.max.bytes (or each topic's
// max.message.bytes) must be at least MinBrokerMessageMaxBytes, a full batch
// with its header. Kafka's default, 1048588, is enough; do not lower it below
// that. Other consumers of the topics need max.partition.fetch.bytes of at
// least the same (Kafka's default, 1 MiB, is enough).
package kafkaconf

import (
	"time"

	"github.com/IBM/sarama"

	"github.com/usagebilling/billing/pkg/envelope"
)

const (
	// RecordOverhead is the headroom a record needs besides its envelope:
	// the key (the partition key, at most 3*envelope.MaxIDLength+2 = 386
	// bytes), the record's own fields (sarama reserves 36 bytes a record)
	// and the v2 record batch header (61 bytes): 483 bytes today, rounded up
	// to 1 KiB to leave room for a few record headers.
	RecordOverhead = 1 << 10

	// MaxRecordBytes is the largest record the system produces: an envelope
	// at envelope.MaxBytes plus RecordOverhead (66560 bytes).
	MaxRecordBytes = envelope.MaxBytes + RecordOverhead

	// KafkaDefaultMessageMaxBytes is Apache Kafka's default message.max.bytes
	// (broker) and max.message.bytes (topic): 1 MiB plus 12 bytes.
	KafkaDefaultMessageMaxBytes = 1048588

	// batchHeaderBytes is the size of a v2 record batch's header, which
	// the broker counts against message.max.bytes and sarama does not count
	// against Producer.MaxMessageBytes.
	batchHeaderBytes = 61

	// MaxBatchBytes is sarama's Producer.MaxMessageBytes: the largest record
	// the producer accepts and the largest (uncompressed) batch it builds for
	// one partition. It is the most whole records at MaxRecordBytes whose
	// batch still fits Kafka's default limit: 15 records, 998400 bytes (975
	// KiB). So batches stay large (one hot key is not sent a record at a
	// time), an envelope at the limit always fits, and a broker left at
	// Kafka's default accepts every batch.
	MaxBatchBytes = (KafkaDefaultMessageMaxBytes - batchHeaderBytes) / MaxRecordBytes * MaxRecordBytes

	// MinBrokerMessageMaxBytes is the smallest message.max.bytes (broker) or
	// max.message.bytes (topic) that accepts every batch the producer
	// builds: MaxBatchBytes plus the batch header (998461 bytes).
	MinBrokerMessageMaxBytes = MaxBatchBytes + batchHeaderBytes

	// BrokerMessageMaxBytes is message.max.bytes of the brokers
	// testkit/kafkabroker starts: a full batch plus RecordOverhead of headroom
	// (999424 bytes, 976 KiB), at least MinBrokerMessageMaxBytes.
	BrokerMessageMaxBytes = MaxBatchBytes + RecordOverhead

	// FetchBytes is the consumers' per-partition fetch size
	// (Consumer.Fetch.Default): a whole batch at BrokerMessageMaxBytes, so
	// one fetch holds at least one batch.
	FetchBytes = BrokerMessageMaxBytes

	// FetchRequestBytes is the consumers' limit on one fetch response
	// across partitions (Consumer.Fetch.MaxBytes, Kafka's fetch.max.bytes):
	// four partitions' FetchBytes, 3.8 MiB. Without it (sarama's default is
	// 50 MiB) a consumer of 18 partitions that is behind holds 18 partitions'
	// fetches per response, about 17 MiB, and more while earlier responses'
	// records wait in its channels: the soak's query service grew by 17.5 MB
	// in sarama's response buffers after a fault. The broker always returns
	// the first batch even when it is larger (KIP-74), so the limit bounds
	// memory and never skips a record; partitions left out of one response
	// are fetched by the next, and sarama puts its partitions in each
	// request in random order, so none is starved.
	FetchRequestBytes = 4 * FetchBytes
)

// compile-time checks of the relations above: a record at the limit fits a
// batch, and a full batch fits our brokers and Kafka's default.
var (
	_ [MaxBatchBytes - MaxRecordBytes]struct{}
	_ [BrokerMessageMaxBytes - MinBrokerMessageMaxBytes]struct{}
	_ [KafkaDefaultMessageMaxBytes - MinBrokerMessageMaxBytes]struct{}
)

// Version is the Kafka protocol version the clients announce. Kafka 4.x
// removed protocol versions older than 2.1; sarama negotiates each request's
// version with the broker, so this also works against kfake.
var Version = sarama.V4_0_0_0

// New returns a sarama configuration with the system's protocol version,
// network timeouts short enough that a cut broker path surfaces as an error
// within seconds rather than stalling a relay or consumer, and the process's
// Security (TLS and SASL, see Use).
func New(clientID string) *sarama.Config {
	c := sarama.NewConfig()
	c.Version = Version
	c.ClientID = clientID
	c.Net.DialTimeout = 3 * time.Second
	c.Net.ReadTimeout = 10 * time.Second
	c.Net.WriteTimeout = 10 * time.Second
	c.Metadata.Retry.Max = 2
	c.Metadata.Retry.Backoff = 250 * time.Millisecond
	SetSizeLimits(c)
	Current().Apply(c)
	return c
}

// SetSizeLimits sets c's producer and consumer sizes to the system's (see
// Size limits in the package documentation): Producer.MaxMessageBytes to
// MaxBatchBytes, Consumer.Fetch.Default to FetchBytes, Consumer.Fetch.Max
// to 0 (no limit) and Consumer.Fetch.MaxBytes to FetchRequestBytes. A bounded
// Fetch.Max would make sarama skip a batch larger than it, an event lost
// without a trace; an oversized envelope is instead read and quarantined by
// the inbox's decoder.
func SetSizeLimits(c *sarama.Config) {
	c.Producer.MaxMessageBytes = MaxBatchBytes
	c.Consumer.Fetch.Default = FetchBytes
	c.Consumer.Fetch.Max = 0
	c.Consumer.Fetch.MaxBytes = FetchRequestBytes
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
