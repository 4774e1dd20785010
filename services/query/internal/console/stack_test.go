package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/kafkabroker"
	"github.com/usagebilling/billing/pkg/kafkatest"
	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/pkg/service/servicetest"
	"github.com/usagebilling/billing/services/billing"
	"github.com/usagebilling/billing/services/invoice"
	"github.com/usagebilling/billing/services/meter"
	"github.com/usagebilling/billing/services/query"
	"github.com/usagebilling/billing/services/usage"
)

// The five services in this process, each on its own database, on one
// Kafka-protocol broker, as services/query/recovery_test.go runs them.

var specs = []service.Spec{meter.Spec, usage.Spec, billing.Spec, invoice.Spec, query.Spec}

type stack struct {
	t       *testing.T
	brokers []string
	addrs   map[string]string
	dbs     map[string]string
	procs   map[string]*proc
}

type proc struct {
	stop context.CancelFunc
	done chan error
}

func newStack(t *testing.T) *stack {
	t.Helper()
	brokers := kafkatest.Brokers(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := kafkabroker.CreateTopics(ctx, brokers, 3, events.AllTopics...); err != nil {
		t.Fatal(err)
	}
	s := &stack{t: t, brokers: brokers, addrs: map[string]string{}, dbs: map[string]string{}, procs: map[string]*proc{}}
	for _, spec := range specs {
		s.addrs[spec.Name] = freeAddr(t)
		s.dbs[spec.Name] = servicetest.NewDB(t, spec)
	}
	t.Cleanup(func() {
		for name := range s.procs {
			s.stop(name)
		}
	})
	for _, spec := range specs {
		s.start(spec)
	}
	return s
}

func (s *stack) url(name string) string { return "http://" + s.addrs[name] }

func (s *stack) start(spec service.Spec) {
	s.t.Helper()
	var urls []string
	for _, sp := range specs {
		urls = append(urls, sp.Name+"="+s.url(sp.Name))
	}
	env := service.NewEnvFrom(map[string]string{
		"DATABASE_URL": s.dbs[spec.Name], "KAFKA_BROKERS": strings.Join(s.brokers, ","), "HTTP_ADDR": s.addrs[spec.Name],
		"LOG_LEVEL": "error", "AUTH_DEV_KEY": "true", "SERVICE_URLS": strings.Join(urls, ","),
		"CONSUMER_SWEEP_INTERVAL": "200ms", "RELAY_POLL_INTERVAL": "100ms",
	})
	ctx, stop := context.WithCancel(context.Background())
	p := &proc{stop: stop, done: make(chan error, 1)}
	go func() { p.done <- service.Run(ctx, spec, nil, env) }()
	s.procs[spec.Name] = p
	eventually(s.t, spec.Name+" ready", time.Minute, func() bool {
		select {
		case err := <-p.done:
			s.t.Fatalf("%s stopped: %v", spec.Name, err)
		default:
		}
		resp, err := http.Get(s.url(spec.Name) + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

func (s *stack) stop(name string) {
	p := s.procs[name]
	delete(s.procs, name)
	p.stop()
	select {
	case err := <-p.done:
		if err != nil {
			s.t.Errorf("%s: %v", name, err)
		}
	case <-time.After(30 * time.Second):
		s.t.Errorf("%s did not stop", name)
	}
}

// call sends a JSON request and decodes a 2xx JSON answer into out; it
// returns the status and the problem code, if any.
func call(t *testing.T, c *http.Client, method, url string, header map[string]string, body, out any) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, url, b, err)
		}
	}
	var p struct{ Code string }
	_ = json.Unmarshal(b, &p)
	return resp.StatusCode, p.Code
}

func produceRaw(t *testing.T, brokers []string, topic, key string, raw []byte) {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Version = kafkabroker.SaramaVersion()
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	p, err := sarama.NewSyncProducer(brokers, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(key), Value: sarama.ByteEncoder(raw)}); err != nil {
		t.Fatal(err)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// eventually polls cond until it holds or timeout passes.
func eventually(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
