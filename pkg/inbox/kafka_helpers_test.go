package inbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/usagebilling/billing/pkg/kafkabroker"
)

// TEMPORARY until pkg/kafkatest lands.
func testBrokers(t *testing.T) []string {
	t.Helper()
	e, err := kafkabroker.StartEmbedded(kafkabroker.EmbeddedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e.Addrs()
}

func testTopic(t *testing.T, brokers []string, partitions int) string {
	t.Helper()
	name := "t-" + uuid.NewString()[:8]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := kafkabroker.CreateTopics(ctx, brokers, partitions, name); err != nil {
		t.Fatal(err)
	}
	return name
}
