package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/usagebilling/billing/e2e/chaos"
	"github.com/usagebilling/billing/pkg/auth"
)

// PlanMeter is the catalog meter the soak's plans charge for, and Plans
// the two plans a tenant's subscription alternates between. The load
// sends no fact of PlanMeter and every tenant has its own price for each
// meter it sends, which the rating order prefers to a plan's: the plans
// price none of the run's facts and carry no fixed fee or minimum, so the
// end check's expectation (every invoice equal to billing's charges) holds
// while subscriptions change under the tenant's schedule lock.
const PlanMeter = "soak_plan_units"

var Plans = []string{"soak-plan-a", "soak-plan-b"}

// PlanChurn counts the plan versions published and the subscriptions
// changed under the load, and the attempts that failed.
type PlanChurn struct {
	mu                              sync.Mutex
	Tenant                          string
	Published, Subscribed, Failures int
	Last                            string // the last failure
}

func (c *PlanChurn) failed(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.Failures++
	c.Last = err.Error()
}

// churnPlans defines PlanMeter and publishes Plans, then every three
// minutes (from 45 s in) subscribes tenant to the other plan: a plan change
// that ends the subscription in effect.
func churnPlans(ctx context.Context, h *chaos.Harness, tenant string, until time.Duration, c *PlanChurn) {
	c.Tenant = tenant
	tok, err := auth.TokenFromEnv("soak-catalog", auth.RoleCatalogAdmin, "")
	if err != nil {
		c.failed(err)
		return
	}
	catalog := func(path, key string, body any) error {
		raw, err := json.Marshal(body)
		if err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.Stack.URL("meter", 0)+path, bytes.NewReader(raw))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
			return fmt.Errorf("POST %s: %d %s", path, resp.StatusCode, b)
		}
		return nil
	}
	churn := &Churn{} // retry's failure counter; copied into c
	try := func(fn func() error) bool {
		ok := retry(ctx, churn, fn)
		churn.mu.Lock()
		if churn.Failures > 0 {
			c.mu.Lock()
			c.Failures += churn.Failures
			c.Last = churn.Last
			c.mu.Unlock()
			churn.Failures = 0
		}
		churn.mu.Unlock()
		return ok
	}
	if !try(func() error {
		return catalog("/v1/meters", "soak-plan-meter", map[string]any{"code": PlanMeter, "name": "soak plan units", "aggregation": "sum"})
	}) {
		return
	}
	for i, code := range Plans {
		if !try(func() error {
			return catalog("/v1/plans", "soak-plan-"+code, map[string]any{"code": code, "name": "soak " + code, "currency": "USD",
				"charges": []map[string]any{{"meterCode": PlanMeter, "model": "unit", "unitPrice": fmt.Sprintf("0.00%d", i+1)}}})
		}) {
			return
		}
		c.mu.Lock()
		c.Published++
		c.mu.Unlock()
	}
	start := time.Now()
	for i := 0; ; i++ {
		at := 45*time.Second + time.Duration(i)*3*time.Minute
		if at > until-30*time.Second || !sleep(ctx, time.Until(start.Add(at))) {
			return
		}
		plan := Plans[i%len(Plans)]
		path := "/v1/tenants/" + tenant + "/subscriptions"
		// Billing learns a plan from meter's event: 422 unknown_plan
		// until then, retried as a failure.
		if try(func() error {
			resp, err := h.Client.Do(ctx, "billing", http.MethodPost, path, tenant, map[string]any{"planCode": plan},
				map[string]string{"Idempotency-Key": fmt.Sprintf("soak-subscribe-%d", i)})
			if err != nil {
				return err
			}
			if resp.Status != http.StatusCreated && resp.Status != http.StatusOK {
				return fmt.Errorf("POST %s: %s", path, resp)
			}
			return nil
		}) {
			c.mu.Lock()
			c.Subscribed++
			c.mu.Unlock()
		}
	}
}
