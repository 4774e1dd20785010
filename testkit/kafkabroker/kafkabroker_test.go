package kafkabroker_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"go.uber.org/goleak"

	"github.com/usagebilling/billing/testkit/kafkabroker"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv("KAFKABROKER_TEST_HELPER_DIR"); dir != "" {
		os.Exit(helperProcess(dir))
	}
	// sarama's metrics start one global meter goroutine that never ends.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick"))
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// producerConfig is the relay's producer setup: idempotent, acks=all, one
// request in flight.
func producerConfig() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.Version = kafkabroker.SaramaVersion()
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.Return.Successes = true
	cfg.Producer.Retry.Max = 10
	cfg.Producer.Retry.Backoff = 200 * time.Millisecond
	return cfg
}

func produce(t *testing.T, addrs []string, topic string, values ...string) {
	t.Helper()
	p, err := sarama.NewSyncProducer(addrs, producerConfig())
	if err != nil {
		t.Fatalf("new producer: %v", err)
	}
	defer p.Close()
	msgs := make([]*sarama.ProducerMessage, len(values))
	for i, v := range values {
		msgs[i] = &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(v), Value: sarama.StringEncoder(v)}
	}
	if err := p.SendMessages(msgs); err != nil {
		t.Fatalf("produce to %s: %v", topic, err)
	}
}

// consume joins group and returns the values of the first n messages it
// gets on topic, committing them.
func consume(t *testing.T, addrs []string, topic, group string, n int) []string {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Version = kafkabroker.SaramaVersion()
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Enable = false
	cg, err := sarama.NewConsumerGroup(addrs, group, cfg)
	if err != nil {
		t.Fatalf("new consumer group: %v", err)
	}
	defer cg.Close()

	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	h := &collector{want: n, done: cancel}
	for ctx.Err() == nil {
		if err := cg.Consume(ctx, []string{topic}, h); err != nil && !errors.Is(err, sarama.ErrClosedConsumerGroup) {
			t.Fatalf("consume %s: %v", topic, err)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.got) < n {
		t.Fatalf("consumed %d of %d messages from %s: %v", len(h.got), n, topic, h.got)
	}
	return h.got
}

type collector struct {
	want int
	done context.CancelFunc
	mu   sync.Mutex
	got  []string
}

func (*collector) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (*collector) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (c *collector) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for msg := range claim.Messages() {
		c.mu.Lock()
		c.got = append(c.got, string(msg.Value))
		full := len(c.got) >= c.want
		c.mu.Unlock()
		s.MarkMessage(msg, "")
		if full {
			// One synchronous commit at the end: sarama sends commits on
			// the fetch connection, so each waits for a long-poll fetch.
			s.Commit()
			c.done()
		}
	}
	return nil
}

// testProduceConsume checks what the system relies on: idempotent produce
// and consumer-group consumption with committed offsets.
func testProduceConsume(t *testing.T, addrs []string) {
	ctx := t.Context()
	if err := kafkabroker.WaitReady(ctx, addrs); err != nil {
		t.Fatalf("wait ready: %v", err)
	}
	topic := fmt.Sprintf("facts-%d", time.Now().UnixNano())
	for range 2 { // already existing is fine
		if err := kafkabroker.CreateTopics(ctx, addrs, 3, topic); err != nil {
			t.Fatalf("create topic: %v", err)
		}
	}
	var want []string
	for i := range 20 {
		want = append(want, "m"+strconv.Itoa(i))
	}
	produce(t, addrs, topic, want...)
	got := consume(t, addrs, topic, "g1", len(want))
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("consumed %v, want %v", got, want)
	}

	// The group committed its offsets: a new member sees only new messages.
	produce(t, addrs, topic, "after")
	if got := consume(t, addrs, topic, "g1", 1); !slices.Equal(got, []string{"after"}) {
		t.Fatalf("after commit consumed %v, want [after]", got)
	}
}

func TestEmbeddedProduceConsume(t *testing.T) {
	e, err := kafkabroker.StartEmbedded(kafkabroker.EmbeddedOptions{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	testProduceConsume(t, e.Addrs())
}

func TestEmbeddedDefaultPartitions(t *testing.T) {
	e, err := kafkabroker.StartEmbedded(kafkabroker.EmbeddedOptions{Partitions: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := kafkabroker.CreateTopics(t.Context(), e.Addrs(), 0, "defaulted"); err != nil {
		t.Fatal(err)
	}
	client, err := sarama.NewClient(e.Addrs(), producerConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	parts, err := client.Partitions("defaulted")
	if err != nil || len(parts) != 5 {
		t.Fatalf("partitions = %v (err %v), want 5", parts, err)
	}
}

func TestEmbeddedPortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	e, err := kafkabroker.StartEmbedded(kafkabroker.EmbeddedOptions{Port: port})
	if err == nil {
		e.Close()
		t.Fatal("started on a busy port")
	}
	if !strings.Contains(err.Error(), strconv.Itoa(port)) || !strings.Contains(err.Error(), "already in use") {
		t.Fatalf("error does not name the busy port: %v", err)
	}
}

func TestApache(t *testing.T) {
	ctx := t.Context()
	began := time.Now()
	a, err := kafkabroker.StartApache(ctx, kafkabroker.ApacheOptions{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("broker start took %s", time.Since(began).Round(time.Millisecond))
	dir := a.Dir()
	defer func() {
		if err := a.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("temp dir %s left after Close", dir)
		}
	}()
	if !slices.Equal(a.Addrs(), []string{a.ListenAddr()}) {
		t.Fatalf("Addrs %v, want the listen address %s", a.Addrs(), a.ListenAddr())
	}

	t.Run("produce consume", func(t *testing.T) { testProduceConsume(t, a.Addrs()) })
	t.Run("size limits", func(t *testing.T) { testSizeLimits(t, a.Addrs()) })
	t.Run("fetch bound", func(t *testing.T) { testFetchBound(t, a.Addrs()) })

	t.Run("kill and start keeps data", func(t *testing.T) {
		if err := kafkabroker.CreateTopics(ctx, a.Addrs(), 2, "durable"); err != nil {
			t.Fatal(err)
		}
		produce(t, a.Addrs(), "durable", "before-kill")
		if err := a.Kill(); err != nil {
			t.Fatal(err)
		}
		if conn, err := net.DialTimeout("tcp", a.ListenAddr(), time.Second); err == nil {
			conn.Close()
			t.Fatal("broker port still open after Kill")
		}
		began := time.Now()
		if err := a.Start(ctx); err != nil {
			t.Fatalf("start after kill: %v", err)
		}
		t.Logf("restart after kill took %s", time.Since(began).Round(time.Millisecond))
		if err := kafkabroker.CreateTopics(ctx, a.Addrs(), 2, "durable"); err != nil { // waits for leaders
			t.Fatal(err)
		}
		if got := consume(t, a.Addrs(), "durable", "after-kill", 1); !slices.Equal(got, []string{"before-kill"}) {
			t.Fatalf("after restart consumed %v, want [before-kill]", got)
		}
	})

	t.Run("stop and start", func(t *testing.T) {
		if err := a.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if err := a.Stop(ctx); err != nil {
			t.Fatalf("second stop: %v", err)
		}
		if err := a.Start(ctx); err != nil {
			t.Fatalf("start after stop: %v", err)
		}
		produce(t, a.Addrs(), "durable", "after-stop")
		if got := consume(t, a.Addrs(), "durable", "after-stop", 2); len(got) != 2 {
			t.Fatalf("consumed %v, want 2 messages", got)
		}
	})
}

// TestApacheDiesWithProcess checks that the JVM does not outlive a killed
// Go process.
func TestApacheDiesWithProcess(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "KAFKABROKER_TEST_HELPER_DIR="+t.TempDir())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("helper did not report its broker: %v", err)
	}
	addr := strings.TrimSpace(line)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	deadline := time.Now().Add(15 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return // the JVM is gone
		}
		conn.Close()
		if time.Now().After(deadline) {
			t.Fatalf("broker on %s still running after its Go process was killed", addr)
		}
		time.Sleep(100 * time.Millisecond) // polled: the JVM exits on its own once its parent is gone
	}
}

// helperProcess starts a broker, prints its address and waits to be killed.
func helperProcess(dir string) int {
	a, err := kafkabroker.StartApache(context.Background(), kafkabroker.ApacheOptions{Dir: dir})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(a.ListenAddr())
	time.Sleep(2 * time.Minute) // deliberate: the child waits to be killed; never outlive the test
	return 0
}

func TestApachePortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	a, err := kafkabroker.StartApache(t.Context(), kafkabroker.ApacheOptions{Port: port})
	if err == nil {
		_ = a.Close()
		t.Fatal("started on a busy port")
	}
	if !strings.Contains(err.Error(), strconv.Itoa(port)) || !strings.Contains(err.Error(), "already in use") {
		t.Fatalf("error does not name the busy port: %v", err)
	}
}

// TestApacheFailureShowsBrokerOutput starts a JVM that cannot start and
// expects its complaint in the error.
func TestApacheFailureShowsBrokerOutput(t *testing.T) {
	_, err := kafkabroker.StartApache(t.Context(), kafkabroker.ApacheOptions{HeapMB: 1})
	if err == nil {
		t.Fatal("started with a 1 MB heap")
	}
	if !strings.Contains(err.Error(), "heap") {
		t.Fatalf("error lacks the broker's output: %v", err)
	}
}

// TestEnsureJarsFetchesOnce runs EnsureJars concurrently against an empty
// cache with a fake mvn that counts its calls.
func TestEnsureJarsFetchesOnce(t *testing.T) {
	bin := t.TempDir()
	calls := filepath.Join(t.TempDir(), "calls")
	fake := `#!/bin/sh
echo call >> "` + calls + `"
sleep 1
for a in "$@"; do case "$a" in -DoutputDirectory=*) out="${a#-DoutputDirectory=}";; esac; done
mkdir -p "$out" && touch "$out/kafka_2.13-9.9.9.jar"
`
	if err := os.WriteFile(filepath.Join(bin, "mvn"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	cache := t.TempDir()

	var wg sync.WaitGroup
	libs := make([]string, 4)
	errs := make([]error, 4)
	for i := range libs {
		wg.Go(func() { libs[i], errs[i] = kafkabroker.EnsureJars(t.Context(), cache, "9.9.9", nil) })
	}
	wg.Wait()
	for i := range libs {
		if errs[i] != nil {
			t.Fatalf("call %d: %v", i, errs[i])
		}
		if libs[i] != filepath.Join(cache, "lib") {
			t.Fatalf("call %d returned %s", i, libs[i])
		}
	}
	if _, err := os.Stat(filepath.Join(cache, "lib", "kafka_2.13-9.9.9.jar")); err != nil {
		t.Fatalf("jar not in place: %v", err)
	}
	b, _ := os.ReadFile(calls)
	if n := strings.Count(string(b), "call"); n != 1 {
		t.Fatalf("mvn ran %d times, want 1", n)
	}

	// Cached: no mvn at all now.
	t.Setenv("PATH", t.TempDir())
	if _, err := kafkabroker.EnsureJars(t.Context(), cache, "9.9.9", nil); err != nil {
		t.Fatalf("cached call: %v", err)
	}
}

func TestEnsureJarsMavenFailure(t *testing.T) {
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "mvn"), []byte("#!/bin/sh\necho 'Could not resolve dependencies' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	cache := t.TempDir()
	_, err := kafkabroker.EnsureJars(t.Context(), cache, "9.9.9", nil)
	if err == nil || !strings.Contains(err.Error(), "Could not resolve dependencies") {
		t.Fatalf("error lacks maven's output: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cache, "lib")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("failed fetch left a lib dir behind")
	}
}
