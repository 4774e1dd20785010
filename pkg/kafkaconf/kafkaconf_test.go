package kafkaconf_test

import (
	"strings"
	"testing"

	"github.com/IBM/sarama"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/kafkaconf"
)

func TestSizeLimitsAreAligned(t *testing.T) {
	// The largest record the relay sends: an envelope at the limit under the
	// longest partition key, as sarama sizes it.
	key := envelope.PartitionKey(strings.Repeat("t", envelope.MaxIDLength),
		strings.Repeat("a", envelope.MaxIDLength), strings.Repeat("i", envelope.MaxIDLength))
	msg := &sarama.ProducerMessage{Key: sarama.StringEncoder(key), Value: sarama.ByteEncoder(make([]byte, envelope.MaxBytes))}
	const batchHeader = 61
	if n := msg.ByteSize(2) + batchHeader; n > kafkaconf.MaxRecordBytes {
		t.Errorf("a record at the limit with its batch header is %d bytes, more than MaxRecordBytes %d", n, kafkaconf.MaxRecordBytes)
	}
	checks := []struct {
		name       string
		small, big int
	}{
		{"record within a batch", kafkaconf.MaxRecordBytes, kafkaconf.MaxBatchBytes},
		{"full batch within our brokers", kafkaconf.MaxBatchBytes + batchHeader, kafkaconf.BrokerMessageMaxBytes},
		{"full batch within Kafka's default", kafkaconf.MinBrokerMessageMaxBytes, kafkaconf.KafkaDefaultMessageMaxBytes},
		{"broker batch within a fetch", kafkaconf.BrokerMessageMaxBytes, kafkaconf.FetchBytes},
	}
	for _, c := range checks {
		if c.small > c.big {
			t.Errorf("%s: %d > %d", c.name, c.small, c.big)
		}
	}
	t.Logf("envelope %d, record %d, batch %d, broker %d (min %d), fetch %d",
		envelope.MaxBytes, kafkaconf.MaxRecordBytes, kafkaconf.MaxBatchBytes,
		kafkaconf.BrokerMessageMaxBytes, kafkaconf.MinBrokerMessageMaxBytes, kafkaconf.FetchBytes)
}

func TestConfigsCarryTheSizeLimits(t *testing.T) {
	for name, c := range map[string]*sarama.Config{
		"New":                   kafkaconf.New("test"),
		"NewIdempotentProducer": kafkaconf.NewIdempotentProducer("test"),
	} {
		if err := c.Validate(); err != nil {
			t.Errorf("%s: invalid config: %v", name, err)
		}
		if c.Producer.MaxMessageBytes != kafkaconf.MaxBatchBytes {
			t.Errorf("%s: Producer.MaxMessageBytes = %d, want %d", name, c.Producer.MaxMessageBytes, kafkaconf.MaxBatchBytes)
		}
		if c.Consumer.Fetch.Default != kafkaconf.FetchBytes || c.Consumer.Fetch.Max != 0 || c.Consumer.Fetch.MaxBytes != kafkaconf.FetchRequestBytes {
			t.Errorf("%s: fetch default %d, max %d, max bytes %d; want %d, 0 (unbounded), %d", name,
				c.Consumer.Fetch.Default, c.Consumer.Fetch.Max, c.Consumer.Fetch.MaxBytes, kafkaconf.FetchBytes, kafkaconf.FetchRequestBytes)
		}
	}
}
