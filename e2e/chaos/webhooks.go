package chaos

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/usagebilling/billing/e2e/scenario"
)

// Webhooks is the tenants' webhook endpoint during a scenario: a receiver
// in the test process (scenario.WebhookReceiver) that plays a fault on the
// first delivery of each key in turn — 503, 429 with Retry-After, and the
// effect applied with the answer withheld past the sender's timeout — and
// dedups on the key.
type Webhooks struct {
	rcv *scenario.WebhookReceiver
}

// StartWebhooks registers the receiver as every tenant's endpoint; call it
// in Setup, before anything is invoiced.
func StartWebhooks(ctx context.Context, r *Run) (*Webhooks, error) {
	rcv, err := scenario.StartWebhooks(ctx, r.H.Stack.URL("invoice", 0), scenario.Config{Tenants: r.Tenants})
	if err != nil {
		return nil, err
	}
	r.Note("webhook endpoint registered for %d tenants; each key's first delivery meets a fault in turn", len(r.Tenants))
	return &Webhooks{rcv: rcv}, nil
}

// Verify waits until every issued invoice and correction note of the run's
// tenants reached its tenant's endpoint, then requires each applied exactly
// once (keyed inv_<invoice>_v<version>), no other key, no bad signature,
// and every intent accepted. Without a delivery of an already applied key
// (the redelivery the faults exist to cause) it is "not proven".
func (w *Webhooks) Verify(ctx context.Context, r *Run) error {
	defer w.rcv.Close()
	want, err := w.wantKeys(ctx, r)
	if err != nil {
		return err
	}
	var effects map[string]string
	var duplicates, bad int
	var faulted map[string]int
	err = Poll(ctx, 3*time.Minute, "every invoice and correction note told to its tenant's webhook endpoint", func() (bool, string, error) {
		effects, duplicates, bad, faulted = w.rcv.Received()
		missing := 0
		for key := range want {
			if _, ok := effects[key]; !ok {
				missing++
			}
		}
		open, err := w.openIntents(ctx, r)
		if err != nil {
			return false, "", err
		}
		return missing == 0 && open == 0, fmt.Sprintf("%d of %d keys not received, %d intents not accepted", missing, len(want), open), nil
	})
	if err != nil {
		r.Fail("webhooks: %v", err)
	}
	for key, tenant := range effects {
		if want[key] != tenant {
			r.Fail("webhooks: key %s applied for %s names no issued invoice or correction note of that tenant", key, tenant)
		}
	}
	if bad > 0 {
		r.Fail("webhooks: %d deliveries had a bad signature", bad)
	}
	r.Note("webhooks: %d invoices and correction notes applied once each at their tenants' endpoints; first deliveries faulted %v; %d redeliveries of an applied key absorbed by the receiver",
		len(want), faulted, duplicates)
	if duplicates == 0 {
		r.NotProven("no webhook was delivered again after the receiver had applied it: the timeout-after-applying fault did not bite")
	}
	return nil
}

// wantKeys reads the issued invoices and correction notes of the run's
// tenants from invoice's database: key -> tenant.
func (w *Webhooks) wantKeys(ctx context.Context, r *Run) (map[string]string, error) {
	tenants := append(slices.Clone(r.Tenants), r.Extra...)
	rows, err := r.H.DB["invoice"].Query(ctx, `
		SELECT 'inv_' || invoice_id || '_v1', tenant_id FROM invoice WHERE tenant_id = ANY($1) AND status = 'issued'
		UNION ALL
		SELECT 'inv_' || c.invoice_id || '_v' || c.version, i.tenant_id
		FROM invoice_correction c JOIN invoice i USING (invoice_id) WHERE i.tenant_id = ANY($1)`, tenants)
	if err != nil {
		return nil, fmt.Errorf("read issued invoices: %w", err)
	}
	defer rows.Close()
	want := map[string]string{}
	for rows.Next() {
		var key, tenant string
		if err := rows.Scan(&key, &tenant); err != nil {
			return nil, err
		}
		want[key] = tenant
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(want) == 0 {
		return nil, fmt.Errorf("no issued invoice of %s to be told", strings.Join(tenants, ", "))
	}
	return want, nil
}

// openIntents counts the run's intents not accepted yet.
func (w *Webhooks) openIntents(ctx context.Context, r *Run) (int, error) {
	var open int
	err := r.H.DB["invoice"].QueryRow(ctx, `SELECT count(*) FROM webhook_intent WHERE tenant_id = ANY($1) AND status <> 'accepted'`,
		append(slices.Clone(r.Tenants), r.Extra...)).Scan(&open)
	return open, err
}
