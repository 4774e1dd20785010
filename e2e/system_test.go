package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/kafkabroker"
	"github.com/usagebilling/billing/pkg/kafkatest"
	"github.com/usagebilling/billing/pkg/pgtest"
	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/services/billing"
	"github.com/usagebilling/billing/services/invoice"
	"github.com/usagebilling/billing/services/meter"
	"github.com/usagebilling/billing/services/query"
	"github.com/usagebilling/billing/services/usage"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(kafkatest.Wrap(m))) }

// system is the five services running in this process through service.Run,
// the same path their mains take, each on its own database of one throwaway
// PostgreSQL cluster, all on one Kafka-protocol broker.
type system struct {
	urls    map[string]string // service name -> base URL
	dbs     map[string]string // service name -> database URL
	brokers []string
}

var specs = []service.Spec{meter.Spec, usage.Spec, billing.Spec, invoice.Spec, query.Spec}

func startSystem(t *testing.T) *system {
	t.Helper()
	cluster := pgtest.Cluster(t)
	brokers := kafkatest.Brokers(t)
	ctx := t.Context()
	if err := kafkabroker.CreateTopics(ctx, brokers, 6, events.AllTopics...); err != nil {
		t.Fatal(err)
	}
	sys := &system{urls: map[string]string{}, dbs: map[string]string{}, brokers: brokers}
	runCtx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { stop(); wg.Wait() })
	suffix := strings.ToLower(strings.NewReplacer("/", "_", "=", "_").Replace(t.Name()))
	for _, spec := range specs {
		db := fmt.Sprintf("%s_%s", spec.Name, suffix)
		if err := cluster.CreateDatabase(ctx, db); err != nil {
			t.Fatal(err)
		}
		addr := freeAddr(t)
		sys.urls[spec.Name] = "http://" + addr
		sys.dbs[spec.Name] = cluster.URL(db)
		env := service.NewEnvFrom(map[string]string{
			"DATABASE_URL":            cluster.URL(db),
			"KAFKA_BROKERS":           strings.Join(brokers, ","),
			"HTTP_ADDR":               addr,
			"LOG_LEVEL":               "warn",
			"CONSUMER_SWEEP_INTERVAL": "500ms",
		})
		wg.Go(func() {
			if err := service.Run(runCtx, spec, nil, env); err != nil {
				t.Errorf("%s: %v", spec.Name, err)
			}
		})
	}
	for name, u := range sys.urls {
		waitUntil(t, 60*time.Second, name+" ready", func() (bool, string) {
			resp, err := http.Get(u + "/readyz")
			if err != nil {
				return false, err.Error()
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, resp.Status
		})
	}
	return sys
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// call sends a JSON request and decodes a JSON response into out (if not nil).
func call(t *testing.T, method, url string, body any, headers map[string]string, out any) int {
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
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, url, raw, err)
		}
	}
	if resp.StatusCode >= 400 {
		t.Logf("%s %s -> %d %s", method, url, resp.StatusCode, bytes.TrimSpace(raw))
	}
	return resp.StatusCode
}

// waitUntil polls cond until it holds, logging progress every 5 seconds.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := time.Now()
	for {
		ok, status := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: gave up after %v: %s", what, timeout, status)
		}
		if time.Since(last) > 5*time.Second {
			t.Logf("waiting for %s: %s", what, status)
			last = time.Now()
		}
		time.Sleep(100 * time.Millisecond)
	}
}
