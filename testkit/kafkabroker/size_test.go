package kafkabroker_test

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/kafkaconf"
	"github.com/usagebilling/billing/testkit/kafkabroker"
)

// testSizeLimits checks a broker against kafkaconf's size limits: it reports
// message.max.bytes = kafkaconf.BrokerMessageMaxBytes; a full batch of the
// relay's producer, records of an envelope at envelope.MaxBytes under the
// longest partition key, passes; a batch over the broker's limit (but under
// Kafka's default, so only our setting refuses it) is refused.
func testSizeLimits(t *testing.T, addrs []string) {
	ctx := t.Context()
	topic := fmt.Sprintf("sizes-%d", time.Now().UnixNano())
	if err := kafkabroker.CreateTopics(ctx, addrs, 1, topic); err != nil {
		t.Fatal(err)
	}

	admin, err := sarama.NewClusterAdmin(addrs, kafkaconf.New("size-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	brokers, _, err := admin.DescribeCluster()
	if err != nil || len(brokers) == 0 {
		t.Fatalf("describe cluster: %v (%d brokers)", err, len(brokers))
	}
	//lint:ignore SA1019 one resource, one config: the single-resource call reads plainest
	entries, err := admin.DescribeConfig(sarama.ConfigResource{
		Type: sarama.BrokerResource, Name: strconv.Itoa(int(brokers[0].ID())), ConfigNames: []string{"message.max.bytes"},
	})
	if err != nil {
		t.Fatalf("describe broker config: %v", err)
	}
	if len(entries) != 1 || entries[0].Value != strconv.Itoa(kafkaconf.BrokerMessageMaxBytes) {
		t.Fatalf("message.max.bytes = %+v, want %d", entries, kafkaconf.BrokerMessageMaxBytes)
	}

	key := envelope.PartitionKey(strings.Repeat("t", envelope.MaxIDLength),
		strings.Repeat("a", envelope.MaxIDLength), strings.Repeat("i", envelope.MaxIDLength))
	p, err := sarama.NewSyncProducer(addrs, kafkaconf.NewIdempotentProducer("size-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var msgs []*sarama.ProducerMessage
	for range 40 { // more than a batch holds: the producer splits them
		msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(key),
			Value: sarama.ByteEncoder(make([]byte, envelope.MaxBytes))})
	}
	if err := p.SendMessages(msgs); err != nil {
		t.Fatalf("send records of an envelope at the limit: %v", err)
	}

	over := sarama.NewConfig()
	over.Version = kafkaconf.Version
	over.Producer.Return.Successes = true
	over.Producer.Retry.Max = 0
	over.Producer.MaxMessageBytes = 2 << 20 // let the broker judge
	big, err := sarama.NewSyncProducer(addrs, over)
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	_, _, err = big.SendMessage(&sarama.ProducerMessage{Topic: topic,
		Value: sarama.ByteEncoder(make([]byte, kafkaconf.BrokerMessageMaxBytes))})
	if !errors.Is(err, sarama.ErrMessageSizeTooLarge) {
		t.Fatalf("a batch over message.max.bytes: %v, want %v", err, sarama.ErrMessageSizeTooLarge)
	}
}

func TestEmbeddedSizeLimits(t *testing.T) {
	e, err := kafkabroker.StartEmbedded(kafkabroker.EmbeddedOptions{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	testSizeLimits(t, e.Addrs())
}

// testFetchBound checks that a consumer behind on many partitions is sent at
// most kafkaconf.FetchRequestBytes a fetch (plus the one batch a broker
// always returns whole), not a fetch's worth for every partition, and still
// reads every record: eight partitions, each 2.5 MiB behind.
func testFetchBound(t *testing.T, addrs []string) {
	const partitions, perPartition = 8, 40
	ctx := t.Context()
	topic := fmt.Sprintf("fetch-bound-%d", time.Now().UnixNano())
	if err := kafkabroker.CreateTopics(ctx, addrs, partitions, topic); err != nil {
		t.Fatal(err)
	}
	pc := kafkaconf.NewIdempotentProducer("fetch-bound")
	pc.Producer.Partitioner = sarama.NewManualPartitioner
	p, err := sarama.NewSyncProducer(addrs, pc)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var msgs []*sarama.ProducerMessage
	for part := range partitions {
		for range perPartition {
			msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Partition: int32(part),
				Value: sarama.ByteEncoder(make([]byte, envelope.MaxBytes))})
		}
	}
	if err := p.SendMessages(msgs); err != nil {
		t.Fatal(err)
	}

	cc := kafkaconf.New("fetch-bound")
	c, err := sarama.NewConsumer(addrs, cc)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := make(chan struct{}, partitions*perPartition)
	for part := range partitions {
		pcons, err := c.ConsumePartition(topic, int32(part), sarama.OffsetOldest)
		if err != nil {
			t.Fatal(err)
		}
		defer pcons.Close()
		go func() {
			for range pcons.Messages() {
				got <- struct{}{}
			}
		}()
	}
	deadline := time.After(time.Minute)
	for n := range partitions * perPartition {
		select {
		case <-got:
		case <-deadline:
			t.Fatalf("read %d of %d records in a minute", n, partitions*perPartition)
		}
	}

	var largest int64
	cc.MetricRegistry.Each(func(name string, m any) {
		if h, ok := m.(interface{ Max() int64 }); ok && name == "response-size" {
			largest = h.Max()
		}
	})
	limit := int64(kafkaconf.FetchRequestBytes + kafkaconf.MaxBatchBytes + kafkaconf.RecordOverhead)
	if largest == 0 || largest > limit {
		t.Fatalf("largest response %d bytes, want 1 to %d (FetchRequestBytes and one batch); %d partitions were behind %d bytes each",
			largest, limit, partitions, perPartition*envelope.MaxBytes)
	}
	t.Logf("largest response %d bytes for %d partitions %d bytes behind each", largest, partitions, perPartition*envelope.MaxBytes)
}

func TestEmbeddedFetchBound(t *testing.T) {
	e, err := kafkabroker.StartEmbedded(kafkabroker.EmbeddedOptions{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	testFetchBound(t, e.Addrs())
}
