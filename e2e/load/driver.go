package load

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/usagebilling/billing/pkg/api/usageapi"
)

// MaxAttempts is how often a batch is sent when the answer is a 5xx or no
// answer at all: again with the same source event ids, so a fact that was
// stored after all comes back as a replay (200), not as a second fact.
const MaxAttempts = 3

// tally is what usage answered, overall and per tenant.
type tally struct {
	mu          sync.Mutex
	sentFacts   int64 // facts in first attempts
	sentBatches int64
	created     int64 // 201
	replayed    int64 // 200: a retry of a fact stored after all
	refused     map[string]int64
	serverErrs  map[string]int64 // answers 5xx, or none, by status and code
	retries     int64
	inDoubt     int64 // facts whose last attempt got a 5xx or no answer
	behind      int64 // times the sender fell more than a second behind the rate
	tenants     []tenantTally
}

type tenantTally struct {
	sent     int64
	accepted int64
	probes   int64
	inDoubt  int64
	accepts  []Step // the response time of each batch, with its accepted facts
}

func newTally(tenants int) *tally {
	return &tally{refused: map[string]int64{}, serverErrs: map[string]int64{}, tenants: make([]tenantTally, tenants)}
}

func (t *tally) probeAccepted(tenant int, at time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tt := &t.tenants[tenant]
	tt.probes++
	tt.accepts = append(tt.accepts, Step{At: at, N: 1})
}

// snapshot is the tally's counters at one instant.
type snapshot struct {
	Sent, Accepted, Refused, ServerErrors, InDoubt int64
	RefusedBy                                      map[string]int64
}

func (t *tally) snapshot() snapshot {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := snapshot{Sent: t.sentFacts, Accepted: t.created + t.replayed, InDoubt: t.inDoubt, RefusedBy: map[string]int64{}}
	for k, n := range t.refused {
		s.Refused += n
		s.RefusedBy[k] = n
	}
	for _, n := range t.serverErrs {
		s.ServerErrors += n
	}
	return s
}

// expected returns, per tenant, the facts usage accepted (probes included):
// what query must count and billing charge.
func (t *tally) expected() []int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]int64, len(t.tenants))
	for i, tt := range t.tenants {
		out[i] = tt.accepted + tt.probes
	}
	return out
}

// job is one batch: facts first .. first+n-1 of a tenant.
type job struct {
	tenant int
	first  int64
	n      int
}

// driver sends the load: a generator paces batches (Rate) and picks their
// tenant (Weights); Concurrency workers post them.
type driver struct {
	cfg    *Config
	cl     *client
	tally  *tally
	origin time.Time
}

// run sends until sendCtx ends, then waits for the requests in flight,
// which run under ctx (so the end of the sending window does not cut a
// request whose facts may already be stored).
func (d *driver) run(sendCtx, ctx context.Context) {
	jobs := make(chan job)
	var wg sync.WaitGroup
	for range d.cfg.Concurrency {
		wg.Go(func() {
			for j := range jobs {
				d.send(ctx, j)
			}
		})
	}
	d.generate(sendCtx, jobs)
	close(jobs)
	wg.Wait()
}

func (d *driver) generate(ctx context.Context, jobs chan<- job) {
	pick := newPicker(d.cfg.Weights())
	seq := make([]int64, d.cfg.Tenants)
	var interval time.Duration
	if d.cfg.Rate > 0 {
		interval = time.Duration(float64(d.cfg.Batch) / d.cfg.Rate * float64(time.Second))
	}
	next := time.Now()
	deadline, hasDeadline := ctx.Deadline()
	var generated int64
	for ctx.Err() == nil {
		n := d.cfg.Batch
		if d.cfg.Facts > 0 {
			if generated >= d.cfg.Facts {
				return
			}
			n = int(min(int64(n), d.cfg.Facts-generated))
		}
		generated += int64(n)
		if interval > 0 {
			if hasDeadline && !next.Before(deadline) {
				<-ctx.Done() // the next batch is due after the window, which lasts all the same
				return
			}
			if wait := time.Until(next); wait > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
			} else if -wait > time.Second {
				// Too far behind to catch up without a burst: the
				// system (or this machine) does not take the rate.
				d.tally.mu.Lock()
				d.tally.behind++
				d.tally.mu.Unlock()
				next = time.Now()
			}
			next = next.Add(interval)
		}
		t := pick.next()
		j := job{tenant: t, first: seq[t], n: n}
		seq[t] += int64(n)
		select {
		case <-ctx.Done():
			return
		case jobs <- j:
		}
	}
}

func (d *driver) send(ctx context.Context, j job) {
	tenant := d.cfg.TenantIDs[j.tenant]
	facts := make([]fact, j.n)
	for k := range facts {
		facts[k] = newFact(d.cfg, fmt.Sprintf("%s-%d-%d", d.cfg.RunID, j.tenant, j.first+int64(k)))
	}
	body, _ := json.Marshal(usageapi.BatchRequest{Events: facts})
	d.tally.mu.Lock()
	d.tally.sentFacts += int64(j.n)
	d.tally.sentBatches++
	d.tally.tenants[j.tenant].sent += int64(j.n)
	d.tally.mu.Unlock()

	for attempt := 1; ; attempt++ {
		a, err := d.cl.do(ctx, http.MethodPost, "usage", tenant, "/v1/tenants/"+tenant+"/usage:batch", nil, body)
		at := time.Since(d.origin)
		if err != nil || a.status >= 500 {
			key := ""
			if err != nil {
				key = "no answer: " + shortErr(err)
			} else {
				key = fmt.Sprintf("%d %s", a.status, a.problemCode())
			}
			d.tally.mu.Lock()
			d.tally.serverErrs[key] += int64(j.n)
			if attempt < MaxAttempts && ctx.Err() == nil {
				d.tally.retries++
				d.tally.mu.Unlock()
				select {
				case <-ctx.Done():
				case <-time.After(time.Duration(attempt) * 500 * time.Millisecond):
				}
				continue
			}
			d.tally.inDoubt += int64(j.n)
			d.tally.tenants[j.tenant].inDoubt += int64(j.n)
			d.tally.mu.Unlock()
			return
		}
		if a.status != http.StatusOK {
			d.tally.mu.Lock()
			d.tally.refused[fmt.Sprintf("%d %s (whole batch)", a.status, a.problemCode())] += int64(j.n)
			d.tally.mu.Unlock()
			return
		}
		var res usageapi.BatchResponse
		if err := json.Unmarshal(a.body, &res); err != nil || len(res.Results) != j.n {
			d.tally.mu.Lock()
			d.tally.serverErrs["200 with an unreadable body"] += int64(j.n)
			d.tally.inDoubt += int64(j.n)
			d.tally.tenants[j.tenant].inDoubt += int64(j.n)
			d.tally.mu.Unlock()
			return
		}
		d.record(j.tenant, at, res.Results)
		return
	}
}

func (d *driver) record(tenant int, at time.Duration, results []usageapi.BatchResult) {
	d.tally.mu.Lock()
	defer d.tally.mu.Unlock()
	var accepted int64
	for _, r := range results {
		switch {
		case r.Status == http.StatusCreated:
			d.tally.created++
			accepted++
		case r.Status == http.StatusOK:
			d.tally.replayed++
			accepted++
		case r.Status >= 500:
			d.tally.serverErrs[fmt.Sprintf("%d %s (in a batch)", r.Status, deref(r.Code))]++
			d.tally.inDoubt++
			d.tally.tenants[tenant].inDoubt++
		default:
			d.tally.refused[fmt.Sprintf("%d %s", r.Status, deref(r.Code))]++
		}
	}
	tt := &d.tally.tenants[tenant]
	tt.accepted += accepted
	if accepted > 0 {
		tt.accepts = append(tt.accepts, Step{At: at, N: accepted})
	}
}

func shortErr(err error) string {
	s := err.Error()
	if len(s) > 80 {
		s = s[len(s)-80:]
	}
	return s
}

// sortedKeys returns the keys of m, sorted.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
