package kafkatest_test

import (
	"errors"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"go.uber.org/goleak"

	"github.com/usagebilling/billing/testkit/kafkabroker"
	"github.com/usagebilling/billing/testkit/kafkatest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(kafkatest.Wrap(m), kafkatest.GoleakOptions()...)
}

func partitions(t *testing.T, brokers []string, topic string) int {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Version = kafkabroker.SaramaVersion()
	client, err := sarama.NewClient(brokers, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	parts, err := client.Partitions(topic)
	if err != nil {
		t.Fatalf("partitions of %s: %v", topic, err)
	}
	return len(parts)
}

func TestEmbeddedPerTest(t *testing.T) {
	t.Setenv(kafkatest.EnvKafka, "")
	t.Setenv(kafkatest.EnvBrokers, "")
	var first []string
	t.Run("a", func(t *testing.T) {
		first = kafkatest.Brokers(t)
		topic := kafkatest.Topic(t, first, 3)
		if n := partitions(t, first, topic); n != 3 {
			t.Fatalf("topic has %d partitions, want 3", n)
		}
		if other := kafkatest.Topic(t, first, 3); other == topic {
			t.Fatalf("Topic returned %s twice", topic)
		}
	})
	// Closed after its test.
	if conn, err := net.DialTimeout("tcp", first[0], time.Second); err == nil {
		conn.Close()
		t.Fatalf("embedded broker %s still listening after its test", first[0])
	}
	if second := kafkatest.Brokers(t); slices.Equal(first, second) {
		t.Fatalf("two tests got the same embedded broker %v", first)
	}
}

func TestExistingBrokers(t *testing.T) {
	e, err := kafkabroker.StartEmbedded(kafkabroker.EmbeddedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	t.Setenv(kafkatest.EnvBrokers, " "+strings.Join(e.Addrs(), ",")+", ")
	got := kafkatest.Brokers(t)
	if !slices.Equal(got, e.Addrs()) {
		t.Fatalf("Brokers = %v, want %v", got, e.Addrs())
	}
	var topic string
	t.Run("topic", func(t *testing.T) { topic = kafkatest.Topic(t, got, 2) })
	// A topic on a shared cluster is deleted after its test.
	admin, err := sarama.NewClusterAdmin(got, sarama.NewConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	topics, err := admin.ListTopics()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := topics[topic]; ok {
		t.Fatalf("topic %s left on the shared cluster", topic)
	}
}

func TestSharedApache(t *testing.T) {
	t.Setenv(kafkatest.EnvKafka, "apache")
	t.Setenv(kafkatest.EnvBrokers, "")
	var first []string
	t.Run("a", func(t *testing.T) {
		first = kafkatest.Brokers(t)
		topic := kafkatest.Topic(t, first, 4)
		if n := partitions(t, first, topic); n != 4 {
			t.Fatalf("topic has %d partitions, want 4", n)
		}
	})
	t.Run("b", func(t *testing.T) {
		if got := kafkatest.Brokers(t); !slices.Equal(got, first) {
			t.Fatalf("second test got broker %v, want the shared %v", got, first)
		}
		if n := partitions(t, first, kafkatest.Topic(t, first, 0)); n != kafkabroker.DefaultPartitions {
			t.Fatalf("default topic has %d partitions, want %d", n, kafkabroker.DefaultPartitions)
		}
	})
}

func TestDedicatedApacheClosed(t *testing.T) {
	var dir, addr string
	t.Run("inner", func(t *testing.T) {
		a := kafkatest.Apache(t, kafkabroker.ApacheOptions{})
		dir, addr = a.Dir(), a.ListenAddr()
	})
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		conn.Close()
		t.Fatalf("dedicated broker %s still listening after its test", addr)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("dedicated broker dir %s left behind", dir)
	}
}

// Lagging, what WaitConsumed waits on, names each partition the group has
// not committed to its end, and nothing once it has.
func TestLaggingUntilCommittedToTheEnd(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.Topic(t, brokers, 1)
	kafkatest.Produce(t, brokers, topic, kafkatest.Values([]byte("a"), []byte("b"), []byte("c"))...)
	behind := func() []string {
		t.Helper()
		l, err := kafkatest.Lagging(brokers, "g", topic)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	if l := behind(); len(l) != 1 {
		t.Fatalf("before the group joined: %v, want one entry", l)
	}
	cfg := sarama.NewConfig()
	cfg.Version = kafkabroker.SaramaVersion()
	client, err := sarama.NewClient(brokers, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	// Commits outside any generation (-1), as an admin tool does: no member
	// joins the group.
	commit := func(offset int64) {
		t.Helper()
		coord, err := client.Coordinator("g")
		if err != nil {
			t.Fatal(err)
		}
		req := &sarama.OffsetCommitRequest{Version: 2, ConsumerGroup: "g", ConsumerGroupGeneration: -1}
		req.AddBlock(topic, 0, offset, 0, "")
		resp, err := coord.CommitOffset(req)
		if err != nil {
			t.Fatal(err)
		}
		if kerr := resp.Errors[topic][0]; kerr != sarama.ErrNoError {
			t.Fatalf("commit %d: %v", offset, kerr)
		}
	}
	commit(2)
	if l := behind(); !slices.Equal(l, []string{topic + "/0 2/3"}) {
		t.Fatalf("two of three committed: %v, want [%s/0 2/3]", l, topic)
	}
	commit(3)
	if l := behind(); len(l) != 0 {
		t.Fatalf("all committed: %v, want none", l)
	}
	kafkatest.WaitConsumed(t, brokers, "g", time.Minute, topic)
}
