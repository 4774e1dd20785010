// Package kafkatest gives tests a Kafka-protocol broker chosen by the
// environment:
//
//   - KAFKA_BROKERS=host:port,...: an existing cluster, shared by all tests;
//   - TEST_KAFKA=apache: one real Apache Kafka broker per test process,
//     started on first use (kafkabroker.StartApache);
//   - TEST_KAFKA=embedded or unset: a new in-memory kfake broker per test.
//
// The brokers it starts carry the system's size limits
// (kafkabroker.BrokerConfigs); an existing cluster needs message.max.bytes of
// at least kafkaconf.MinBrokerMessageMaxBytes (Kafka's default is enough).
//
// Packages close what this process started with Main:
//
//	func TestMain(m *testing.M) { os.Exit(kafkatest.Main(m)) }
//
// or, with goleak (sarama keeps one global goroutine, see GoleakOptions):
//
//	func TestMain(m *testing.M) {
//		goleak.VerifyTestMain(kafkatest.Wrap(m), kafkatest.GoleakOptions()...)
//	}
package kafkatest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"go.uber.org/goleak"

	"github.com/usagebilling/billing/pkg/kafkaconf"
	"github.com/usagebilling/billing/testkit/kafkabroker"
)

// Environment variables choosing the broker.
const (
	EnvKafka   = "TEST_KAFKA"    // "embedded" (default) or "apache"
	EnvBrokers = "KAFKA_BROKERS" // comma-separated host:port of an existing cluster
)

// M is what Main and Wrap run; *testing.M satisfies it.
type M interface{ Run() int }

// Main runs the tests, then closes the shared Apache broker if this
// process started one. It returns the exit code for os.Exit.
func Main(m M) int { return Wrap(m).Run() }

// Wrap returns an M that runs m and then cleans up like Main; use it to
// combine with goleak.VerifyTestMain or pgtest.Wrap.
func Wrap(m M) M { return wrapped{m} }

type wrapped struct{ m M }

func (w wrapped) Run() int {
	code := w.m.Run()
	if err := shutdown(); err != nil {
		fmt.Fprintf(os.Stderr, "kafkatest: cleanup: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// GoleakOptions returns the goleak options for packages whose tests use
// sarama: it ignores the global metrics goroutine sarama starts once per
// process and never stops.
func GoleakOptions() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick"),
	}
}

// Brokers returns the bootstrap addresses of the broker chosen by the
// environment (see the package documentation). An embedded broker is closed
// when the test ends.
func Brokers(t testing.TB) []string {
	t.Helper()
	if v := os.Getenv(EnvBrokers); v != "" {
		var addrs []string
		for _, a := range strings.Split(v, ",") {
			if a = strings.TrimSpace(a); a != "" {
				addrs = append(addrs, a)
			}
		}
		return addrs
	}
	switch kind := os.Getenv(EnvKafka); kind {
	case "", "embedded":
		e, err := kafkabroker.StartEmbedded(kafkabroker.EmbeddedOptions{})
		if err != nil {
			t.Fatalf("kafkatest: %v", err)
		}
		t.Cleanup(e.Close)
		return e.Addrs()
	case "apache":
		a, err := sharedApache()
		if err != nil {
			t.Fatalf("kafkatest: %v", err)
		}
		return a.Addrs()
	default:
		t.Fatalf("kafkatest: %s=%q: want \"embedded\" or \"apache\" (or set %s)", EnvKafka, kind, EnvBrokers)
		return nil
	}
}

// Topic creates a topic with a name unique to this test and process and
// the given partition count (0 or less: the broker's default), waits until
// it has leaders and returns its name. On a shared broker the topic is
// deleted when the test ends.
func Topic(t testing.TB, brokers []string, partitions int) string {
	t.Helper()
	name := topicName(t.Name())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := kafkabroker.CreateTopics(ctx, brokers, partitions, name); err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
	if shared(brokers) {
		t.Cleanup(func() { deleteTopic(brokers, name) })
	}
	return name
}

// Apache starts a real broker dedicated to the test, for tests that kill,
// stop or restart it, and closes it when the test ends. A nil opts.Logger
// logs to the test log.
func Apache(t testing.TB, opts kafkabroker.ApacheOptions) *kafkabroker.Apache {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	a, err := kafkabroker.StartApache(ctx, opts)
	if err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
	t.Cleanup(func() {
		if err := a.Close(); err != nil {
			t.Errorf("kafkatest: close broker: %v", err)
		}
	})
	return a
}

var (
	mu        sync.Mutex
	apache    *kafkabroker.Apache
	apacheErr error
)

func sharedApache() (*kafkabroker.Apache, error) {
	mu.Lock()
	defer mu.Unlock()
	if apache != nil || apacheErr != nil {
		return apache, apacheErr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	apache, apacheErr = kafkabroker.StartApache(ctx, kafkabroker.ApacheOptions{})
	if apacheErr != nil {
		apacheErr = fmt.Errorf("start shared apache kafka (%s=apache): %w", EnvKafka, apacheErr)
	}
	return apache, apacheErr
}

func shutdown() error {
	mu.Lock()
	defer mu.Unlock()
	a := apache
	apache, apacheErr = nil, nil
	if a == nil {
		return nil
	}
	return a.Close()
}

// shared reports whether brokers outlive the test: the process-wide Apache
// broker or an existing cluster.
func shared(brokers []string) bool {
	if os.Getenv(EnvBrokers) != "" {
		return true
	}
	mu.Lock()
	defer mu.Unlock()
	return apache != nil && slices.Equal(brokers, apache.Addrs())
}

func deleteTopic(brokers []string, name string) {
	cfg := sarama.NewConfig()
	cfg.Version = kafkaconf.Version
	cfg.Net.DialTimeout = 2 * time.Second
	cfg.Admin.Retry.Max = 0
	admin, err := sarama.NewClusterAdmin(brokers, cfg)
	if err != nil {
		return // best effort: the test may have taken the broker down
	}
	defer admin.Close()
	_ = admin.DeleteTopic(name)
}

var (
	topicSeq  atomic.Int64
	processID = func() string {
		b := make([]byte, 3)
		_, _ = rand.Read(b)
		return hex.EncodeToString(b)
	}()
)

// topicName makes a legal, unique topic name (letters, digits, ".", "_",
// "-"; at most 249 characters) from a test name.
func topicName(testName string) string {
	var b strings.Builder
	for _, r := range testName {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	clean := b.String()
	if len(clean) > 180 {
		clean = clean[:180]
	}
	return fmt.Sprintf("test-%s-%s-%d", clean, processID, topicSeq.Add(1))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
