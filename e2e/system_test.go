package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
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

var specs = []service.Spec{meter.Spec, usage.Spec, billing.Spec, invoice.Spec, query.Spec}

// startInProcess runs the five services in this process through
// service.Run, the same path their mains take, each on its own database of
// one throwaway PostgreSQL cluster, all on one Kafka-protocol broker
// (E2E_TARGET=inprocess).
func startInProcess(t *testing.T) *target {
	t.Helper()
	cluster := pgtest.Cluster(t)
	brokers := kafkatest.Brokers(t)
	ctx := t.Context()
	if err := kafkabroker.CreateTopics(ctx, brokers, 6, events.AllTopics...); err != nil {
		t.Fatal(err)
	}
	tg := &target{urls: map[string]string{}, dbs: map[string]string{}}
	addrs := map[string]string{}
	var serviceURLs []string
	for _, spec := range specs {
		addrs[spec.Name] = freeAddr(t)
		tg.urls[spec.Name] = "http://" + addrs[spec.Name]
		serviceURLs = append(serviceURLs, spec.Name+"="+tg.urls[spec.Name])
	}
	runCtx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { stop(); wg.Wait() })
	suffix := strings.ToLower(strings.NewReplacer("/", "_", "=", "_").Replace(t.Name()))
	for _, spec := range specs {
		db := fmt.Sprintf("%s_%s", spec.Name, suffix)
		if err := cluster.CreateDatabase(ctx, db); err != nil {
			t.Fatal(err)
		}
		tg.dbs[spec.Name] = cluster.URL(db)
		env := service.NewEnvFrom(map[string]string{
			"DATABASE_URL":            cluster.URL(db),
			"KAFKA_BROKERS":           strings.Join(brokers, ","),
			"HTTP_ADDR":               addrs[spec.Name],
			"LOG_LEVEL":               "warn",
			"CONSUMER_SWEEP_INTERVAL": "500ms",
			"AUTH_DEV_KEY":            "true",
			"SERVICE_URLS":            strings.Join(serviceURLs, ","),
		})
		wg.Go(func() {
			if err := service.Run(runCtx, spec, nil, env); err != nil {
				t.Errorf("%s: %v", spec.Name, err)
			}
		})
	}
	for name, u := range tg.urls {
		deadline := time.Now().Add(60 * time.Second)
		for {
			resp, err := http.Get(u + "/readyz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not ready after 60s: %v", name, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return tg
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
