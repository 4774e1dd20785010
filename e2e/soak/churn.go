package soak

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/usagebilling/billing/e2e/chaos"
)

// Churn counts the webhook endpoints created and deleted under the load,
// and the attempts that failed (a fault in the way; each is retried).
type Churn struct {
	mu                         sync.Mutex
	Created, Deleted, Failures int
	Last                       string // the last failure
}

func (c *Churn) failed(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.Failures++
	c.Last = err.Error()
}

// churnWebhooks registers a webhook endpoint for one tenant in turn every
// four minutes and deletes it two minutes later: configuration changing
// under the load. The endpoint is a receiver in the test process that
// answers 200.
func churnWebhooks(ctx context.Context, h *chaos.Harness, tenants []string, until time.Duration, c *Churn) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	defer srv.Close()
	start := time.Now()
	for i := 0; ; i++ {
		at := 90*time.Second + time.Duration(i)*4*time.Minute
		if at+2*time.Minute > until || !sleep(ctx, time.Until(start.Add(at))) {
			return
		}
		tenant := tenants[i%len(tenants)]
		path := "/v1/tenants/" + tenant + "/webhook-endpoints"
		var created struct {
			EndpointID string `json:"endpointId"`
		}
		if !retry(ctx, c, func() error {
			resp, err := h.Client.Do(ctx, "invoice", http.MethodPost, path, tenant, map[string]string{"url": srv.URL + "/hook"},
				map[string]string{"Idempotency-Key": fmt.Sprintf("soak-hook-%d", i)})
			if err != nil {
				return err
			}
			if resp.Status != http.StatusCreated && resp.Status != http.StatusOK {
				return fmt.Errorf("POST %s: %s", path, resp)
			}
			return resp.Decode(&created)
		}) {
			continue
		}
		c.mu.Lock()
		c.Created++
		c.mu.Unlock()
		if !sleep(ctx, 2*time.Minute) {
			return
		}
		if retry(ctx, c, func() error {
			resp, err := h.Client.Do(ctx, "invoice", http.MethodDelete, path+"/"+created.EndpointID, tenant, nil, nil)
			if err != nil {
				return err
			}
			if resp.Status != http.StatusNoContent && resp.Status != http.StatusNotFound {
				return fmt.Errorf("DELETE %s: %s", path, resp)
			}
			return nil
		}) {
			c.mu.Lock()
			c.Deleted++
			c.mu.Unlock()
		}
	}
}

// retry tries fn for up to a minute, counting each failure.
func retry(ctx context.Context, c *Churn, fn func() error) bool {
	stop := time.Now().Add(time.Minute)
	for {
		err := fn()
		if err == nil {
			return true
		}
		c.failed(err)
		if time.Now().After(stop) || !sleep(ctx, 2*time.Second) {
			return false
		}
	}
}
