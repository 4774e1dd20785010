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
	// Delivered counts the deliveries the receiver answered (invoice
	// issues them when a period of an endpoint's tenant is invoiced);
	// Kept is the tenant whose endpoint stays registered to the end.
	Delivered int
	Kept      string
}

// Receiver is the churn's webhook endpoint: it answers 200 and counts.
func (c *Churn) Receiver() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			c.mu.Lock()
			c.Delivered++
			c.mu.Unlock()
		}
		w.WriteHeader(http.StatusOK)
	}))
}

// Deliveries returns how many deliveries arrived so far.
func (c *Churn) Deliveries() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Delivered
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
//
// When the churn ends, an endpoint of keep is registered and left in place,
// so the invoices issued when the run closes keep's periods are delivered
// to srv (c.Delivered): the churned endpoints see no invoice issued while
// they exist, the periods closing only at the end.
func churnWebhooks(ctx context.Context, h *chaos.Harness, srv *httptest.Server, tenants []string, keep string, until time.Duration, c *Churn) {
	register := func(tenant, key string) (string, bool) {
		path := "/v1/tenants/" + tenant + "/webhook-endpoints"
		var created struct {
			EndpointID string `json:"endpointId"`
		}
		if !retry(ctx, c, func() error {
			resp, err := h.Client.Do(ctx, "invoice", http.MethodPost, path, tenant, map[string]string{"url": srv.URL + "/hook"},
				map[string]string{"Idempotency-Key": key})
			if err != nil {
				return err
			}
			if resp.Status != http.StatusCreated && resp.Status != http.StatusOK {
				return fmt.Errorf("POST %s: %s", path, resp)
			}
			return resp.Decode(&created)
		}) {
			return "", false
		}
		c.mu.Lock()
		c.Created++
		c.mu.Unlock()
		return created.EndpointID, true
	}
	defer func() {
		if ctx.Err() != nil {
			return
		}
		if _, ok := register(keep, "soak-hook-kept"); ok {
			c.mu.Lock()
			c.Kept = keep
			c.mu.Unlock()
		}
	}()
	start := time.Now()
	for i := 0; ; i++ {
		at := 90*time.Second + time.Duration(i)*4*time.Minute
		if at+2*time.Minute > until || !sleep(ctx, time.Until(start.Add(at))) {
			return
		}
		tenant := tenants[i%len(tenants)]
		path := "/v1/tenants/" + tenant + "/webhook-endpoints"
		id, ok := register(tenant, fmt.Sprintf("soak-hook-%d", i))
		if !ok {
			continue
		}
		created := struct{ EndpointID string }{id}
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
