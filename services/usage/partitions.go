package usage

import (
	"context"
	"fmt"
	"sync"

	"github.com/IBM/sarama"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/kafkaconf"
	"github.com/usagebilling/billing/services/usage/internal/app"
)

// topicPartitions reads how many partitions usage.events.v1 has from the
// broker's metadata, once per watermark round (a topic given more partitions
// gets watermarks on them from the next round). The client is made on first
// use and again after a failure.
type topicPartitions struct {
	brokers []string
	mu      sync.Mutex
	client  sarama.Client
}

var _ app.Partitions = (*topicPartitions)(nil).count

func (t *topicPartitions) count(context.Context) (int32, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.client == nil {
		c, err := sarama.NewClient(t.brokers, kafkaconf.New("usage-watermark"))
		if err != nil {
			return 0, fmt.Errorf("connect to brokers: %w", err)
		}
		t.client = c
	}
	if err := t.client.RefreshMetadata(events.TopicUsage); err != nil {
		t.closeLocked()
		return 0, fmt.Errorf("metadata of %s: %w", events.TopicUsage, err)
	}
	ps, err := t.client.Partitions(events.TopicUsage)
	if err != nil {
		t.closeLocked()
		return 0, fmt.Errorf("partitions of %s: %w", events.TopicUsage, err)
	}
	if len(ps) == 0 {
		return 0, app.ErrNoPartitions
	}
	return int32(len(ps)), nil
}

func (t *topicPartitions) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closeLocked()
}

func (t *topicPartitions) closeLocked() {
	if t.client != nil {
		_ = t.client.Close()
		t.client = nil
	}
}
