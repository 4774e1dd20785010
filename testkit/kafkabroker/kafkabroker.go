// Package kafkabroker starts Kafka-protocol brokers for tests and for the
// stack launcher: an in-process fake (kfake) that starts in milliseconds,
// and a real Apache Kafka broker in KRaft mode run as a child JVM, for
// behaviour only a real broker has (durable logs that survive a crash).
// It also holds the helpers every Kafka user of the code base shares:
// the sarama protocol version, topic creation and readiness checks.
package kafkabroker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/IBM/sarama"

	"github.com/usagebilling/billing/pkg/kafkaconf"
	"github.com/usagebilling/billing/testkit/freeport"
)

// SaramaVersion returns the Kafka protocol version the code base configures
// sarama with: kafkaconf.Version, which works against both kfake and Apache
// Kafka 4.x.
func SaramaVersion() sarama.KafkaVersion { return kafkaconf.Version }

// adminConfig returns a sarama config for short administrative calls.
func adminConfig() *sarama.Config {
	cfg := kafkaconf.New("kafkabroker")
	cfg.Metadata.Retry.Max = 1
	cfg.Metadata.Retry.Backoff = 100 * time.Millisecond
	cfg.Admin.Retry.Max = 3
	cfg.Admin.Retry.Backoff = 200 * time.Millisecond
	cfg.Admin.Timeout = 10 * time.Second
	return cfg
}

// WaitReady waits until the cluster at addrs answers metadata requests
// listing at least one broker and a controller, or ctx ends.
func WaitReady(ctx context.Context, addrs []string) error {
	var last error
	for {
		if last = ready(addrs); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for kafka %v: %w (last error: %v)", addrs, ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func ready(addrs []string) error {
	client, err := sarama.NewClient(addrs, adminConfig())
	if err != nil {
		return err
	}
	defer client.Close()
	if len(client.Brokers()) == 0 {
		return errors.New("metadata lists no brokers")
	}
	if _, err := client.Controller(); err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	return nil
}

// CreateTopics creates topics with the given number of partitions
// (0 or less: the broker's default) and the broker's default replication
// factor. Topics that already exist are fine. It returns once metadata shows
// every topic with a leader for each partition.
func CreateTopics(ctx context.Context, addrs []string, partitions int, topics ...string) error {
	if len(topics) == 0 {
		return nil
	}
	if partitions <= 0 {
		partitions = -1
	}
	admin, err := sarama.NewClusterAdmin(addrs, adminConfig())
	if err != nil {
		return fmt.Errorf("create topics: connect to %v: %w", addrs, err)
	}
	defer admin.Close()
	for _, topic := range topics {
		err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: int32(partitions), ReplicationFactor: -1}, false)
		if err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
			return fmt.Errorf("create topic %s: %w", topic, err)
		}
	}
	for {
		err := topicsReady(admin, topics)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for topics %v: %w (last: %v)", topics, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func topicsReady(admin sarama.ClusterAdmin, topics []string) error {
	meta, err := admin.DescribeTopics(topics)
	if err != nil {
		return err
	}
	if len(meta) != len(topics) {
		return fmt.Errorf("metadata describes %d of %d topics", len(meta), len(topics))
	}
	for _, t := range meta {
		if !errors.Is(t.Err, sarama.ErrNoError) {
			return fmt.Errorf("topic %s: %w", t.Name, t.Err)
		}
		if len(t.Partitions) == 0 {
			return fmt.Errorf("topic %s has no partitions yet", t.Name)
		}
		for _, p := range t.Partitions {
			if p.Leader < 0 || !errors.Is(p.Err, sarama.ErrNoError) {
				return fmt.Errorf("topic %s partition %d has no leader yet", t.Name, p.ID)
			}
		}
	}
	return nil
}

// freePort picks a port outside the ephemeral range: the server is
// restarted on it, and a client connection must not have taken it meanwhile.
func freePort() (int, error) { return freeport.Port() }

// checkPortFree returns a clear error when port on 127.0.0.1 is taken.
func checkPortFree(what string, port int) error {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("%s port %d on 127.0.0.1 is already in use (a broker of an earlier run still alive?); stop whatever listens there or use port 0 for a free one: %w", what, port, err)
	}
	return l.Close()
}
