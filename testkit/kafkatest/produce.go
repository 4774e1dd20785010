package kafkatest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/testkit/kafkabroker"
)

// Record is a message for Produce: its key (none when empty) and its value.
type Record struct {
	Key   string
	Value []byte
}

// Values are records of raws, without keys.
func Values(raws ...[]byte) []Record {
	out := make([]Record, len(raws))
	for i, raw := range raws {
		out[i] = Record{Value: raw}
	}
	return out
}

// Keyed are records of raw envelopes keyed by their partitionKey, as the
// outbox relay sends them.
func Keyed(t testing.TB, raws ...[]byte) []Record {
	t.Helper()
	out := make([]Record, len(raws))
	for i, raw := range raws {
		var e struct {
			PartitionKey string `json:"partitionKey"`
		}
		if err := json.Unmarshal(raw, &e); err != nil {
			t.Fatalf("read the partition key of %.80q: %v", raw, err)
		}
		out[i] = Record{Key: e.PartitionKey, Value: raw}
	}
	return out
}

// Envelopes are records of envs as the outbox relay sends them: marshalled,
// keyed by their partition keys.
func Envelopes(t testing.TB, envs ...envelope.Envelope) []Record {
	t.Helper()
	out := make([]Record, len(envs))
	for i, e := range envs {
		raw, err := e.Marshal()
		if err != nil {
			t.Fatalf("marshal %s: %v", e.EventType, err)
		}
		out[i] = Record{Key: e.PartitionKey, Value: raw}
	}
	return out
}

// Produce sends records to topic, in order, each acknowledged by every
// in-sync replica before the next; an error fails the test.
func Produce(t testing.TB, brokers []string, topic string, records ...Record) {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Version = kafkabroker.SaramaVersion()
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	p, err := sarama.NewSyncProducer(brokers, cfg)
	if err != nil {
		t.Fatalf("new producer: %v", err)
	}
	defer p.Close()
	for _, r := range records {
		m := &sarama.ProducerMessage{Topic: topic, Value: sarama.ByteEncoder(r.Value)}
		if r.Key != "" {
			m.Key = sarama.StringEncoder(r.Key)
		}
		if _, _, err := p.SendMessage(m); err != nil {
			t.Fatalf("produce to %s: %v", topic, err)
		}
	}
}

// BrokersWithTopics is Brokers with topics created on them, partitions
// partitions each.
func BrokersWithTopics(t testing.TB, partitions int, topics ...string) []string {
	t.Helper()
	brokers := Brokers(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := kafkabroker.CreateTopics(ctx, brokers, partitions, topics...); err != nil {
		t.Fatalf("create topics: %v", err)
	}
	return brokers
}
