package load

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/api/invoiceapi"
	"github.com/usagebilling/billing/pkg/api/queryapi"
	"github.com/usagebilling/billing/pkg/money"
)

// Closed is what closing one tenant's period after the load showed: how long
// from the close's answer until the invoice was issued and until query showed
// it, and the invoice's shape.
type Closed struct {
	Tenant          string          `json:"tenant"`
	Period          string          `json:"period"`
	CloseSeconds    float64         `json:"closeAnswerSeconds"`    // POST close -> its answer
	IssuedSeconds   float64         `json:"issuedSeconds"`         // the answer -> invoice issued (invoice API)
	InQuerySeconds  float64         `json:"visibleInQuerySeconds"` // the answer -> query's invoiced total
	Number          int64           `json:"number"`
	ChargeLines     int             `json:"chargeLines"`
	ChargeCount     int64           `json:"chargeCount"`
	Total           decimal.Decimal `json:"total"`
	WantChargeCount int64           `json:"wantChargeCount"`
	WantTotal       decimal.Decimal `json:"wantTotal"`
	// The operator's reconciliation of the closed period, once query shows
	// the invoice: how long it took and what it found (not run without an
	// operator token; Reconciled is false when it did not answer).
	ReconcileRun     bool           `json:"reconcileRun"`
	Reconciled       bool           `json:"reconciled"`
	ReconcileSeconds float64        `json:"reconcileSeconds"`
	ReconcileCounts  map[string]int `json:"reconcileCounts,omitempty"`
	Mismatches       int            `json:"mismatches"`
	Problem          string         `json:"problem,omitempty"`
}

// closePeriods closes each tenant's period (the UTC month the facts occurred
// in) once every accepted fact was charged, and waits, up to timeout each,
// for its invoice to be issued and for query to show it. accepted is the
// number of facts (probes included) each tenant had accepted.
func closePeriods(ctx context.Context, cfg *Config, cl *client, period string, accepted []int64, timeout time.Duration,
	progress func(string, ...any)) []Closed {
	out := make([]Closed, len(cfg.TenantIDs))
	for i, tenant := range cfg.TenantIDs {
		c := &out[i]
		c.Tenant, c.Period, c.WantChargeCount = tenant, period, accepted[i]
		want, err := money.Round(cfg.UnitPrice.Mul(decimal.NewFromInt(accepted[i])), "USD")
		if err != nil {
			c.Problem = err.Error()
			continue
		}
		c.WantTotal = want
		err = closeOne(ctx, cfg, cl, c, timeout)
		if err == nil && cl.operator != "" {
			rctx, cancel := context.WithTimeout(ctx, timeout)
			err = reconcileOne(rctx, cl, c)
			cancel()
		}
		if err != nil {
			c.Problem = err.Error()
		}
		progress("closed %s %s: answered in %s, invoice %d issued %s later (%d charge line(s), %d charges, total %s), in query %s later%s%s",
			tenant, period, secs(c.CloseSeconds), c.Number, secs(c.IssuedSeconds), c.ChargeLines, c.ChargeCount, c.Total,
			secs(c.InQuerySeconds), reconciledSuffix(c), problemSuffix(c.Problem))
	}
	return out
}

func closeOne(ctx context.Context, cfg *Config, cl *client, c *Closed, timeout time.Duration) error {
	start := time.Now()
	a, err := cl.do(ctx, http.MethodPost, "billing", c.Tenant, "/v1/tenants/"+c.Tenant+"/periods/"+c.Period+"/close",
		map[string]string{"Idempotency-Key": cfg.RunID + "-close-" + c.Tenant}, nil)
	if err != nil {
		return fmt.Errorf("close: %w", err)
	}
	if a.status != http.StatusAccepted {
		return fmt.Errorf("close: %s", a)
	}
	answered := time.Now()
	c.CloseSeconds = answered.Sub(start).Seconds()
	deadline := answered.Add(timeout)
	// The invoice: issued.
	for {
		a, err := cl.do(ctx, http.MethodGet, "invoice", c.Tenant, "/v1/tenants/"+c.Tenant+"/invoices?period="+c.Period, nil, nil)
		if err != nil {
			return fmt.Errorf("read invoices: %w", err)
		}
		var page invoiceapi.InvoiceList
		if a.status != http.StatusOK || json.Unmarshal(a.body, &page) != nil {
			return fmt.Errorf("read invoices: %s", a)
		}
		if len(page.Invoices) == 1 && page.Invoices[0].Status == "issued" {
			inv := page.Invoices[0]
			c.IssuedSeconds = time.Since(answered).Seconds()
			c.Number = deref(inv.Number)
			for _, l := range inv.Lines {
				if l.Kind == "charge" {
					c.ChargeLines++
					c.ChargeCount += deref(l.ChargeCount)
				}
			}
			if inv.Total.Valid {
				c.Total = inv.Total.Decimal
			}
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no issued invoice %s after the close", timeout)
		}
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}
	// Query: the invoiced total.
	for {
		a, err := cl.do(ctx, http.MethodGet, "query", c.Tenant, "/v1/tenants/"+c.Tenant+"/summary", nil, nil)
		if err != nil {
			return fmt.Errorf("read summary: %w", err)
		}
		var s queryapi.Summary
		if a.status == http.StatusOK && json.Unmarshal(a.body, &s) == nil {
			if got, ok := s.Invoiced["USD"]; ok {
				c.InQuerySeconds = time.Since(answered).Seconds()
				if !got.Equal(c.WantTotal) {
					return fmt.Errorf("query shows invoiced USD %s, want %s", got, c.WantTotal)
				}
				break
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("query shows no invoiced total %s after the close", timeout)
		}
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}
	switch {
	case c.ChargeLines != 1:
		return fmt.Errorf("%d charge lines, want 1 (one meter, one price version)", c.ChargeLines)
	case c.ChargeCount != c.WantChargeCount:
		return fmt.Errorf("the charge line counts %d charges, want %d", c.ChargeCount, c.WantChargeCount)
	case !c.Total.Equal(c.WantTotal):
		return fmt.Errorf("invoice total %s, want %s", c.Total, c.WantTotal)
	}
	return nil
}

// reconcileOne runs the operator's reconciliation of the closed period and
// requires it empty, with every accepted fact counted.
func reconcileOne(ctx context.Context, cl *client, c *Closed) error {
	c.ReconcileRun = true
	start := time.Now()
	a, err := cl.doAs(ctx, cl.operator, http.MethodGet, "query",
		"/v1/operator/reconciliation?tenantId="+url.QueryEscape(c.Tenant)+"&period="+url.QueryEscape(c.Period))
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	var rep queryapi.Reconciliation
	if a.status != http.StatusOK || json.Unmarshal(a.body, &rep) != nil {
		return fmt.Errorf("reconcile: %s", a)
	}
	c.Reconciled, c.ReconcileSeconds = true, time.Since(start).Seconds()
	counts := map[string]int{"usageFacts": rep.Counts.UsageFacts, "charges": rep.Counts.Charges,
		"invoiceLines": rep.Counts.InvoiceLines, "queryUsage": rep.Counts.QueryUsage}
	c.ReconcileCounts, c.Mismatches = counts, rep.MismatchCount
	switch {
	case rep.MismatchCount > 0:
		return fmt.Errorf("reconciliation found %d mismatches, the first %+v", rep.MismatchCount, rep.Mismatches[0])
	case int64(rep.Counts.UsageFacts) != c.WantChargeCount || int64(rep.Counts.Charges) != c.WantChargeCount:
		return fmt.Errorf("reconciliation compared %d usage facts and %d charges, want %d", rep.Counts.UsageFacts,
			rep.Counts.Charges, c.WantChargeCount)
	}
	return nil
}

func reconciledSuffix(c *Closed) string {
	if !c.Reconciled {
		return ""
	}
	return fmt.Sprintf("; reconciled in %s: %d usage facts, %d charges, %d invoice lines, %d mismatches",
		secs(c.ReconcileSeconds), c.ReconcileCounts["usageFacts"], c.ReconcileCounts["charges"],
		c.ReconcileCounts["invoiceLines"], c.Mismatches)
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func secs(s float64) string { return fmt.Sprintf("%.2fs", s) }

func problemSuffix(p string) string {
	if p == "" {
		return ""
	}
	return "; PROBLEM: " + p
}
