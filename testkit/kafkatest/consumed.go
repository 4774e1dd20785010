package kafkatest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/usagebilling/billing/testkit/kafkabroker"
)

// WaitConsumed waits until consumer group has committed, on every partition
// of topics, the offset after the partition's last message: everything
// produced so far was consumed, and, for an inbox runner (which marks a
// message only once its batch's decisions are committed in the database),
// decided. It is the signal a test waits for instead of a pause after its
// effects showed ("the duplicates behind them were decided too"). The test
// fails after timeout with the partitions still behind.
func WaitConsumed(t testing.TB, brokers []string, group string, timeout time.Duration, topics ...string) {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Version = kafkabroker.SaramaVersion()
	client, err := sarama.NewClient(brokers, cfg)
	if err != nil {
		t.Fatalf("kafka client: %v", err)
	}
	defer client.Close()
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		t.Fatalf("cluster admin: %v", err)
	}
	// Not admin.Close: it would close the client, closed above.
	deadline := time.Now().Add(timeout)
	for {
		behind, err := lagging(client, admin, group, topics)
		if err != nil {
			t.Fatalf("offsets of group %s: %v", group, err)
		}
		if len(behind) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %s has not consumed everything after %v: %s", group, timeout, strings.Join(behind, ", "))
		}
		// Polled: the runner commits its marked offsets on sarama's
		// auto-commit interval (1 s), and the broker tells no one.
		time.Sleep(50 * time.Millisecond)
	}
}

// Lagging lists the partitions of topics on which group has not committed
// the offset after the last message, as "topic/partition committed/newest"
// (committed -1: none); empty when the group consumed everything.
func Lagging(brokers []string, group string, topics ...string) ([]string, error) {
	cfg := sarama.NewConfig()
	cfg.Version = kafkabroker.SaramaVersion()
	client, err := sarama.NewClient(brokers, cfg)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		return nil, err
	}
	return lagging(client, admin, group, topics)
}

// lagging lists the partitions of topics whose committed offset of group is
// short of their newest offset, as "topic/partition committed/newest".
func lagging(client sarama.Client, admin sarama.ClusterAdmin, group string, topics []string) ([]string, error) {
	parts := map[string][]int32{}
	for _, topic := range topics {
		ps, err := client.Partitions(topic)
		if err != nil {
			return nil, fmt.Errorf("partitions of %s: %w", topic, err)
		}
		parts[topic] = ps
	}
	resp, err := admin.ListConsumerGroupOffsets(group, parts)
	if errors.Is(err, sarama.ErrGroupIDNotFound) {
		return []string{"the group has not joined yet"}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list offsets: %w", err)
	}
	var behind []string
	for topic, ps := range parts {
		for _, p := range ps {
			newest, err := client.GetOffset(topic, p, sarama.OffsetNewest)
			if err != nil {
				return nil, fmt.Errorf("newest offset of %s/%d: %w", topic, p, err)
			}
			committed := int64(-1)
			if b := resp.GetBlock(topic, p); b != nil {
				committed = b.Offset
			}
			// An empty partition (newest 0) has nothing to consume.
			if newest > 0 && committed < newest {
				behind = append(behind, fmt.Sprintf("%s/%d %d/%d", topic, p, committed, newest))
			}
		}
	}
	return behind, nil
}
