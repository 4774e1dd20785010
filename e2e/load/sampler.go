package load

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/shopspring/decimal"
)

// sampler polls every tenant's query summary, round robin, and keeps for
// each tenant the facts query counted and charged since the baseline, and
// when each count was first seen (Steps, for FIFO matching).
type sampler struct {
	cfg    *Config
	cl     *client
	origin time.Time

	mu       sync.Mutex
	views    []tenantView
	polls    int64
	pollErrs int64
	lastErr  string
}

type tenantView struct {
	baseCount int64
	baseUSD   decimal.Decimal
	counted   int64 // usage facts query counted since the baseline
	charged   int64 // charges query summed since the baseline, in facts
	lastPoll  time.Duration
	// countReach and chargeReach hold, for each poll that saw a count
	// grow, the growth at the estimated instant: the midpoint between
	// that poll and the one before.
	countReach  []Step
	chargeReach []Step
	// odd is set when the charged amount is not a whole number of unit
	// prices (a charge of another price, or a partial one).
	odd string
}

func newSampler(cfg *Config, cl *client, origin time.Time) *sampler {
	return &sampler{cfg: cfg, cl: cl, origin: origin, views: make([]tenantView, cfg.Tenants)}
}

type summary struct {
	count int64
	usd   decimal.Decimal
}

func (s *sampler) read(ctx context.Context, tenant string) (summary, error) {
	a, err := s.cl.do(ctx, http.MethodGet, "query", tenant, "/v1/tenants/"+tenant+"/summary", nil, nil)
	if err != nil {
		return summary{}, err
	}
	if a.status != http.StatusOK {
		return summary{}, fmt.Errorf("summary of %s: %s", tenant, a)
	}
	var body struct {
		Usage struct {
			Count int64 `json:"count"`
		} `json:"usage"`
		Charged map[string]decimal.Decimal `json:"charged"`
	}
	if err := json.Unmarshal(a.body, &body); err != nil {
		return summary{}, fmt.Errorf("summary of %s: %w", tenant, err)
	}
	return summary{count: body.Usage.Count, usd: body.Charged["USD"]}, nil
}

// baseline reads every tenant's summary before the first fact: a tenant
// named by a tenant token may have usage from earlier runs.
func (s *sampler) baseline(ctx context.Context) error {
	for i, t := range s.cfg.TenantIDs {
		sum, err := s.read(ctx, t)
		if err != nil {
			return fmt.Errorf("read the baseline summary: %w", err)
		}
		s.mu.Lock()
		s.views[i].baseCount, s.views[i].baseUSD = sum.count, sum.usd
		s.views[i].lastPoll = time.Since(s.origin)
		s.mu.Unlock()
	}
	return nil
}

// run polls until ctx ends: one summary every Poll/Tenants, and never
// more often than MinPollGap.
func (s *sampler) run(ctx context.Context) {
	gap := max(s.cfg.Poll/time.Duration(s.cfg.Tenants), MinPollGap)
	tick := time.NewTicker(gap)
	defer tick.Stop()
	for i := 0; ; i = (i + 1) % s.cfg.Tenants {
		s.poll(ctx, i)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// round polls every tenant once, now.
func (s *sampler) round(ctx context.Context) {
	for i := range s.cfg.Tenants {
		s.poll(ctx, i)
	}
}

func (s *sampler) poll(ctx context.Context, i int) {
	sent := time.Since(s.origin)
	sum, err := s.read(ctx, s.cfg.TenantIDs[i])
	at := (sent + time.Since(s.origin)) / 2 // the read happened in between
	s.mu.Lock()
	defer s.mu.Unlock()
	s.polls++
	if err != nil {
		if ctx.Err() == nil {
			s.pollErrs++
			s.lastErr = err.Error()
		}
		return
	}
	v := &s.views[i]
	mid := (v.lastPoll + at) / 2
	v.lastPoll = at
	if n := sum.count - v.baseCount; n > v.counted {
		v.countReach = append(v.countReach, Step{At: mid, N: n - v.counted})
		v.counted = n
	}
	q, r := sum.usd.Sub(v.baseUSD).QuoRem(s.cfg.UnitPrice, 0)
	if !r.IsZero() {
		v.odd = fmt.Sprintf("charged USD %s since the start is not a whole number of %s", sum.usd.Sub(v.baseUSD), s.cfg.UnitPrice)
	}
	if n := q.IntPart(); n > v.charged {
		v.chargeReach = append(v.chargeReach, Step{At: mid, N: n - v.charged})
		v.charged = n
	}
}

// totals returns the facts counted and charged over all tenants.
func (s *sampler) totals() (counted, charged int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range s.views {
		counted += v.counted
		charged += v.charged
	}
	return counted, charged
}

// caughtUp reports whether every tenant's facts are counted and charged.
func (s *sampler) caughtUp(expected []int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, v := range s.views {
		if v.counted < expected[i] || v.charged < expected[i] {
			return false
		}
	}
	return true
}

func (s *sampler) view(i int) tenantView {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.views[i]
}
