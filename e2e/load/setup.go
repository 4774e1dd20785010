package load

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/http"
	"strconv"
	"time"

	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/api/usageapi"
)

// SourceSystem is the sourceSystem of every fact the load sends.
const SourceSystem = "load"

// SetupTimeout bounds the wait for usage to learn every tenant's price.
const SetupTimeout = 3 * time.Minute

// fact is a usage fact as POST /usage and /usage:batch take it.
type fact = usageapi.UsageRequest

func newFact(cfg *Config, id string) fact {
	f := fact{SourceSystem: SourceSystem, SourceEventId: id, MeterCode: cfg.MeterCode, Quantity: decimal.NewFromInt(1),
		OccurredAt: time.Now().UTC()}
	if cfg.Properties > 0 {
		h := fnv.New32a()
		h.Write([]byte(id))
		n := h.Sum32()
		props := make(usageapi.Properties, cfg.Properties)
		for i := range cfg.Properties {
			props["p"+strconv.Itoa(i)] = "v" + strconv.Itoa(int((n>>uint(i%4*8))%50))
		}
		f.Properties = &props
	}
	return f
}

// activatePrices activates the load's price for every tenant (201, or 200
// when the same Idempotency-Key was already used) and returns once every
// one is in effect: a price activated without effectiveAt takes effect
// right after its tenant's published schedule (decision 0019), and a fact
// before it would be unpriced.
func activatePrices(ctx context.Context, cfg *Config, cl *client, progress func(string, ...any)) error {
	progress("activating %s USD %s per fact for %d tenant(s) (meter)", cfg.MeterCode, cfg.UnitPrice, cfg.Tenants)
	body := map[string]string{"meterCode": cfg.MeterCode, "currency": "USD", "unitPrice": cfg.UnitPrice.String()}
	var last time.Time
	for _, t := range cfg.TenantIDs {
		key := map[string]string{"Idempotency-Key": fmt.Sprintf("%s-price-%s-%s", cfg.RunID, cfg.MeterCode, cfg.UnitPrice)}
		a, err := cl.do(ctx, http.MethodPost, "meter", t, "/v1/tenants/"+t+"/prices", key, body)
		if err != nil {
			return fmt.Errorf("activate the price of tenant %s: %w", t, err)
		}
		if a.status != http.StatusCreated && a.status != http.StatusOK {
			return fmt.Errorf("activate the price of tenant %s: %s", t, a)
		}
		var p struct {
			EffectiveAt time.Time `json:"effectiveAt"`
		}
		if err := json.Unmarshal(a.body, &p); err != nil {
			return fmt.Errorf("activate the price of tenant %s: %w", t, err)
		}
		if p.EffectiveAt.After(last) {
			last = p.EffectiveAt
		}
	}
	if wait := time.Until(last); wait > 0 {
		progress("the prices take effect at %s: waiting %s", last.Format(time.RFC3339Nano), wait.Round(time.Millisecond))
		select {
		case <-time.After(wait + time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// probe sends one fact per tenant until usage accepts it: usage learns
// prices from meter's events, asynchronously, and refuses usage of a
// meter it has no price for yet (422 unknown_meter or no_price_in_effect).
// It records each accepted probe in tally, as the first fact of its
// tenant.
func probe(ctx context.Context, cfg *Config, cl *client, tally *tally, origin time.Time, progress func(string, ...any)) error {
	began := time.Now()
	ready := make([]bool, cfg.Tenants)
	nReady := 0
	lastSay := time.Time{}
	for attempt := 0; ; attempt++ {
		var lastRefusal string
		for i, t := range cfg.TenantIDs {
			if ready[i] {
				continue
			}
			a, err := cl.do(ctx, http.MethodPost, "usage", t, "/v1/tenants/"+t+"/usage", nil,
				newFact(cfg, fmt.Sprintf("%s-probe-%d", cfg.RunID, i)))
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				lastRefusal = err.Error()
				continue
			}
			switch code := a.problemCode(); {
			case a.status == http.StatusCreated || a.status == http.StatusOK:
				ready[i] = true
				nReady++
				tally.probeAccepted(i, time.Since(origin))
			case a.status == http.StatusUnprocessableEntity && (code == "unknown_meter" || code == "no_price_in_effect"):
				lastRefusal = fmt.Sprintf("422 %s", code)
			case a.status >= 500 || a.status == http.StatusTooManyRequests:
				lastRefusal = a.String()
			default:
				return fmt.Errorf("probe fact of tenant %s: %s", t, a)
			}
		}
		if nReady == cfg.Tenants {
			progress("usage accepts the probe fact of every tenant (%s)", time.Since(began).Round(10*time.Millisecond))
			return nil
		}
		if time.Since(began) > SetupTimeout {
			return fmt.Errorf("usage still refuses the probe fact of %d tenant(s) after %s (last: %s)",
				cfg.Tenants-nReady, SetupTimeout, lastRefusal)
		}
		if time.Since(lastSay) >= time.Second {
			progress("waiting for usage to learn the price: %d/%d tenant(s) ready, last answer %s (%s)",
				nReady, cfg.Tenants, lastRefusal, time.Since(began).Round(100*time.Millisecond))
			lastSay = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
