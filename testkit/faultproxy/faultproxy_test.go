package faultproxy_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/usagebilling/billing/testkit/faultproxy"
	"github.com/usagebilling/billing/testkit/kafkabroker"
	"github.com/usagebilling/billing/testkit/kafkatest"
	"github.com/usagebilling/billing/testkit/pgtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(pgtest.Wrap(kafkatest.Wrap(m)), kafkatest.GoleakOptions()...)
}

// echoServer echoes each line back; it stops when the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(c, c); c.Close() })
		}
	})
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return l.Addr().String()
}

func newProxy(t *testing.T, upstream string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(t.Name(), "127.0.0.1:0", upstream, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// roundTrip sends a line over conn and waits for its echo.
func roundTrip(conn net.Conn, r *bufio.Reader, timeout time.Duration) (time.Duration, error) {
	began := time.Now()
	_ = conn.SetDeadline(began.Add(timeout))
	if _, err := conn.Write([]byte("ping\n")); err != nil {
		return 0, err
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	if line != "ping\n" {
		return 0, errors.New("echo garbled: " + strconv.Quote(line))
	}
	return time.Since(began), nil
}

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, bufio.NewReader(conn)
}

func TestCutAndRestore(t *testing.T) {
	p := newProxy(t, echoServer(t))
	addr := p.Addr()
	conn, r := dial(t, addr)
	if _, err := roundTrip(conn, r, 2*time.Second); err != nil {
		t.Fatalf("before cut: %v", err)
	}

	if err := p.Cut(); err != nil {
		t.Fatal(err)
	}
	if _, err := roundTrip(conn, r, 2*time.Second); err == nil {
		t.Fatal("an open connection still works after Cut")
	}
	if c, err := net.DialTimeout("tcp", addr, 2*time.Second); err == nil {
		c.Close()
		t.Fatal("a new connection succeeded after Cut")
	}

	if err := p.Restore(); err != nil {
		t.Fatal(err)
	}
	if p.Addr() != addr {
		t.Fatalf("address changed from %s to %s", addr, p.Addr())
	}
	conn2, r2 := dial(t, addr)
	if _, err := roundTrip(conn2, r2, 2*time.Second); err != nil {
		t.Fatalf("after restore: %v", err)
	}
	if err := p.Restore(); err != nil { // restoring a working proxy is fine
		t.Fatal(err)
	}
}

func TestLatencyAndClear(t *testing.T) {
	p := newProxy(t, echoServer(t))
	conn, r := dial(t, p.Addr())
	if err := p.Latency(150*time.Millisecond, 0); err != nil {
		t.Fatal(err)
	}
	if err := p.Latency(200*time.Millisecond, 10*time.Millisecond); err != nil { // replaces
		t.Fatal(err)
	}
	rtt, err := roundTrip(conn, r, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if rtt < 350*time.Millisecond || rtt > 2*time.Second {
		t.Fatalf("round trip with 200ms latency each way took %s", rtt)
	}
	if err := p.Clear(); err != nil {
		t.Fatal(err)
	}
	if rtt, err = roundTrip(conn, r, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if rtt > 150*time.Millisecond {
		t.Fatalf("round trip after Clear took %s", rtt)
	}
}

func TestBlackhole(t *testing.T) {
	p := newProxy(t, echoServer(t))
	if err := p.Blackhole(); err != nil {
		t.Fatal(err)
	}
	conn, r := dial(t, p.Addr()) // connecting still works
	_, err := roundTrip(conn, r, 300*time.Millisecond)
	if ne := net.Error(nil); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("blackholed round trip: %v, want a timeout", err)
	}
	if err := p.Restore(); err != nil {
		t.Fatal(err)
	}
	conn2, r2 := dial(t, p.Addr())
	if _, err := roundTrip(conn2, r2, 2*time.Second); err != nil {
		t.Fatalf("after restore: %v", err)
	}
}

func TestNewOnBusyPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if p, err := faultproxy.New("busy", l.Addr().String(), "127.0.0.1:1", nil); err == nil {
		p.Close()
		t.Fatal("New on a busy port succeeded")
	}
}

func TestPostgresBehindProxy(t *testing.T) {
	dbURL := pgtest.NewDB(t, pgtest.Template{Name: "empty", Migrate: func(context.Context, string) error { return nil }})
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	p := newProxy(t, u.Host)
	u.Host = p.Addr()
	ctx := t.Context()

	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatalf("connect through proxy: %v", err)
	}
	defer conn.Close(t.Context())
	if err := conn.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Cut(); err != nil {
		t.Fatal(err)
	}
	if err := conn.Ping(ctx); err == nil {
		t.Fatal("query through a cut proxy succeeded")
	}
	if c, err := pgx.Connect(ctx, u.String()); err == nil {
		c.Close(ctx)
		t.Fatal("connect through a cut proxy succeeded")
	}
	if err := p.Restore(); err != nil {
		t.Fatal(err)
	}
	conn2, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatalf("connect after restore: %v", err)
	}
	defer conn2.Close(t.Context())
	if err := conn2.Ping(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestKafkaBehindProxy runs a real broker that advertises the proxy and
// checks that the relay's producer setup fails while the path is cut and
// recovers after Restore.
func TestKafkaBehindProxy(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	brokerPort := l.Addr().(*net.TCPAddr).Port
	l.Close()
	p := newProxy(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(brokerPort)))
	a := kafkatest.Apache(t, kafkabroker.ApacheOptions{Port: brokerPort, AdvertisedAddr: p.Addr()})
	if got := a.Addrs(); len(got) != 1 || got[0] != p.Addr() {
		t.Fatalf("broker advertises %v, want the proxy %s", got, p.Addr())
	}
	topic := kafkatest.Topic(t, a.Addrs(), 1)

	cfg := sarama.NewConfig()
	cfg.Version = kafkabroker.SaramaVersion()
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.Return.Successes = true
	cfg.Producer.Retry.Max = 2
	cfg.Producer.Retry.Backoff = 100 * time.Millisecond
	cfg.Metadata.Retry.Max = 1
	cfg.Net.DialTimeout = time.Second
	producer, err := sarama.NewSyncProducer(a.Addrs(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	send := func(v string) error {
		_, _, err := producer.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(v)})
		return err
	}
	if err := send("before"); err != nil {
		t.Fatalf("produce through proxy: %v", err)
	}

	if err := p.Cut(); err != nil {
		t.Fatal(err)
	}
	if err := send("during"); err == nil {
		t.Fatal("produce through a cut proxy succeeded")
	}
	if err := p.Restore(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := send("after")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("produce after restore: %v", err)
		}
		time.Sleep(200 * time.Millisecond) // polled: the client reconnects through the restored proxy on its own
	}
}
