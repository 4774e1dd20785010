package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/api/meterapi"
	"github.com/usagebilling/billing/pkg/api/usageapi"
)

// Meter is a meter the load prices and uses: one currency, and the unit
// price of each version the run activates (version 1 before the load,
// the next ones while it runs).
type Meter struct {
	Code     string
	Currency string
	Prices   []string
}

// Meters are the load's meters: two in USD (one invoice with two meters'
// lines) and one in KRW (no minor unit), so invoices need rounding.
var Meters = []Meter{
	{Code: "api_calls", Currency: "USD", Prices: []string{"0.0015", "0.0018", "0.0012"}},
	{Code: "storage_gb", Currency: "KRW", Prices: []string{"12.5", "13.25", "11.75"}},
	{Code: "compute_seconds", Currency: "USD", Prices: []string{"0.000125", "0.00015", "0.0001"}},
}

// SourceSystem is the sourceSystem of every usage fact the load sends.
const SourceSystem = "chaos"

// LoadConfig shapes one scenario's load.
type LoadConfig struct {
	// Name prefixes the source event ids, so facts of different scenarios
	// never share an identity.
	Name    string
	Tenants []string
	// Meters default to Meters.
	Meters []Meter
	// Facts is the number of distinct usage facts, sent evenly over
	// Duration by Workers concurrent senders, in batches of up to MaxBatch
	// (a fifth of the requests carry a single fact).
	Facts    int
	Duration time.Duration
	Workers  int
	MaxBatch int
	// DuplicateRate is the share of accepted facts sent again later, on
	// purpose (each must be answered 200, a replay of the same usage
	// fact); a few batches also repeat a fact within themselves.
	DuplicateRate float64
	// PriceChanges activate the next price version of every tenant's
	// meters while the load runs: at At (a share of Duration), effective
	// Lead later. Usage facts are stamped with the time they are first
	// sent, so facts on both sides of each effectiveAt exist.
	PriceChanges []PriceChange
	// GiveUp bounds how long after Duration a fact is still retried.
	GiveUp time.Duration
	// Progress receives a line every few seconds; nil discards.
	Progress func(format string, args ...any)
	// Clock stamps the facts and sets the price changes' effectiveAt: the
	// services' clock (decision 0015) when a test moves it; nil is the
	// wall clock.
	Clock func() time.Time
	// Gate, when set, pauses the senders and the price changes (the soak's
	// clock moves).
	Gate *Gate
}

// PriceChange is one mid-run activation of the next price version.
type PriceChange struct {
	At   float64
	Lead time.Duration
}

func (c *LoadConfig) defaults() {
	if len(c.Meters) == 0 {
		c.Meters = Meters
	}
	if c.Workers == 0 {
		c.Workers = 6
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = 40
	}
	if c.GiveUp == 0 {
		c.GiveUp = 3 * time.Minute
	}
	if c.Progress == nil {
		c.Progress = func(string, ...any) {}
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
}

// Fact is one usage fact the load sends, and what the system answered.
type Fact struct {
	Tenant        string
	SourceEventID string
	Meter         string
	Quantity      decimal.Decimal
	OccurredAt    time.Time // set when first sent, kept for every retry

	Accepted   bool
	UsageID    string
	EventID    string
	AcceptedAt time.Time // when the client got the accepting answer
	// LostAnswer is set when an attempt got no answer (a transport
	// error), After503 when one was answered 503.
	LostAnswer, After503 bool
	// Ambiguous: such an attempt had in fact committed; a later attempt
	// found the fact accepted (answered 200, a replay).
	Ambiguous bool
	Attempts  int
	// Unresolved: still not accepted when the load gave up.
	Unresolved bool
}

func (f *Fact) request() usageapi.UsageRequest {
	return usageapi.UsageRequest{
		SourceSystem: SourceSystem, SourceEventId: f.SourceEventID, MeterCode: f.Meter,
		Quantity: f.Quantity, OccurredAt: f.OccurredAt,
	}
}

// usageAnswer is one fact's answer (usageapi.BatchResult, or a single
// POST's answer) with its optional fields read as empty strings.
type usageAnswer struct {
	Status                 int
	UsageID, EventID, Code string
}

func answerOf(r usageapi.BatchResult) usageAnswer {
	a := usageAnswer{Status: r.Status}
	for _, f := range []struct{ dst, src *string }{{&a.UsageID, r.UsageId}, {&a.EventID, r.EventId}, {&a.Code, r.Code}} {
		if f.src != nil {
			*f.dst = *f.src
		}
	}
	return a
}

// PriceRecord is a price version the run activated.
type PriceRecord struct {
	Tenant, Meter, Currency string
	Version                 int64
	UnitPrice               decimal.Decimal
	EffectiveAt             time.Time
	EventID                 string
}

// AdjustmentRecord is an adjustment the run posted.
type AdjustmentRecord struct {
	Tenant, AdjustmentID, EventID, Period, Currency string
	Amount                                          decimal.Decimal
	CorrectionOf                                    string
}

// LoadStats counts what the load sent and what it was answered.
type LoadStats struct {
	Requests        int // HTTP requests to usage
	Batches         int // of which usage:batch
	Accepted        int // facts answered 201 (or found accepted by a retry)
	DupSubmissions  int // facts sent again on purpose
	DupReplays      int // of which answered 200 with the same usage fact
	InBatchRepeats  int // facts repeated within one batch, answered 201 then 200
	Retries         int // fact sends that had to be retried
	TransportErrors int
	AmbiguousCommit int               // facts whose failed attempt had in fact committed
	Codes           map[string]int    // problem codes answered, by "status code"
	Unexpected      []string          // answers that break the contract
	FirstSeen       map[string]string // first answer per status/code, for the report
}

// Ledger is everything the client sent and was answered: the
// reconciliation's account of what must exist.
type Ledger struct {
	mu          sync.Mutex
	facts       map[string]*Fact // tenant|sourceEventId
	order       []*Fact
	Prices      []PriceRecord
	Adjustments []AdjustmentRecord
	Stats       LoadStats
	// window, while set (WatchAnswers), collects every answer usage gives
	// to the load (the database cut of scenario 3 checks them).
	window *answerWindow
}

// Answer is one HTTP answer the load saw; At is when its request was
// sent; Status 0 is a transport error.
type Answer struct {
	At     time.Time
	Status int
	Code   string
	Detail string
}

type answerWindow struct {
	from    time.Time
	answers []Answer
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger {
	return &Ledger{facts: map[string]*Fact{}, Stats: LoadStats{Codes: map[string]int{}, FirstSeen: map[string]string{}}}
}

func factKey(tenant, sourceEventID string) string { return tenant + "|" + sourceEventID }

// Facts returns the facts of the given tenants (all when none), in the
// order they were made.
func (l *Ledger) Facts(tenants ...string) []*Fact {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*Fact
	for _, f := range l.order {
		if len(tenants) == 0 || slices.Contains(tenants, f.Tenant) {
			c := *f
			out = append(out, &c)
		}
	}
	return out
}

// AcceptedBefore returns the event ids of the facts accepted before t.
func (l *Ledger) AcceptedBefore(t time.Time) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ids []string
	for _, f := range l.order {
		if f.Accepted && !f.AcceptedAt.After(t) {
			ids = append(ids, f.EventID)
		}
	}
	return ids
}

// Accepted returns the number of accepted facts.
func (l *Ledger) Accepted() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.Stats.Accepted
}

func (l *Ledger) unexpected(format string, args ...any) {
	l.Stats.Unexpected = append(l.Stats.Unexpected, fmt.Sprintf(format, args...))
}

// Unexpected returns the answers that broke the contract.
func (l *Ledger) Unexpected() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.Stats.Unexpected)
}

// Snapshot returns a copy of the counters.
func (l *Ledger) Snapshot() LoadStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.Stats
	s.Codes = map[string]int{}
	for k, v := range l.Stats.Codes {
		s.Codes[k] = v
	}
	s.Unexpected = slices.Clone(l.Stats.Unexpected)
	return s
}

// WatchAnswers starts collecting every answer usage gives; StopWatch
// returns them.
func (l *Ledger) WatchAnswers() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.window = &answerWindow{from: time.Now()}
}

// StopWatch stops collecting answers and returns them.
func (l *Ledger) StopWatch() []Answer {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.window == nil {
		return nil
	}
	out := l.window.answers
	l.window = nil
	return out
}

func (l *Ledger) observe(sent time.Time, status int, code, detail string) {
	if l.window != nil && !sent.IsZero() {
		l.window.answers = append(l.window.answers, Answer{At: sent, Status: status, Code: code, Detail: truncate(detail, 200)})
	}
	if status >= 300 || code != "" {
		k := fmt.Sprintf("%d %s", status, code)
		l.Stats.Codes[k]++
		if _, ok := l.Stats.FirstSeen[k]; !ok {
			l.Stats.FirstSeen[k] = truncate(detail, 200)
		}
	}
}

// Load drives usage facts (and price changes) into the system.
type Load struct {
	cfg    LoadConfig
	client *Client
	ledger *Ledger
	facts  []*Fact
	// versions[tenant|meter] is the last version activated.
	versions map[string]int64
	lastEff  map[string]time.Time
}

// NewLoad prepares a load: the facts are made now (content fixed, times
// stamped when sent).
func NewLoad(client *Client, ledger *Ledger, cfg LoadConfig) *Load {
	cfg.defaults()
	ld := &Load{cfg: cfg, client: client, ledger: ledger, versions: map[string]int64{}, lastEff: map[string]time.Time{}}
	for i := range cfg.Facts {
		tenant := cfg.Tenants[i%len(cfg.Tenants)]
		m := cfg.Meters[(i/len(cfg.Tenants))%len(cfg.Meters)]
		// Quantities with up to three decimals, so amounts need exact
		// arithmetic and invoices need rounding.
		q := decimal.New(int64(1+(i*7919)%250000), -3)
		f := &Fact{Tenant: tenant, SourceEventID: fmt.Sprintf("%s-%06d", cfg.Name, i), Meter: m.Code, Quantity: q}
		ld.facts = append(ld.facts, f)
	}
	ledger.mu.Lock()
	for _, f := range ld.facts {
		k := factKey(f.Tenant, f.SourceEventID)
		if _, dup := ledger.facts[k]; dup {
			panic("chaos: fact identity made twice: " + k)
		}
		ledger.facts[k] = f
		ledger.order = append(ledger.order, f)
	}
	ledger.mu.Unlock()
	return ld
}

// ActivateInitialPrices activates version 1 of every tenant's meters,
// effective as soon as they may (right after their tenants' published
// schedule, decision 0019). The load can start when it returns: every one
// is in effect.
func (ld *Load) ActivateInitialPrices(ctx context.Context) error {
	return ld.activateAll(ctx, 0)
}

// activateAll activates the next version of every tenant's meters,
// effective lead from now; with no lead, it returns once every one is in
// effect.
func (ld *Load) activateAll(ctx context.Context, lead time.Duration) error {
	var last time.Time
	for _, tenant := range ld.cfg.Tenants {
		for _, m := range ld.cfg.Meters {
			rec, err := ld.ActivatePrice(ctx, tenant, m, lead)
			if err != nil {
				return err
			}
			if rec.EffectiveAt.After(last) {
				last = rec.EffectiveAt
			}
		}
	}
	if lead == 0 && !sleepCtx(ctx, last.Sub(ld.cfg.Clock())+time.Millisecond) {
		return ctx.Err()
	}
	return nil
}

// ActivatePrice activates the next version of tenant's meter, effective
// lead from now, retrying through outages with one Idempotency-Key.
func (ld *Load) ActivatePrice(ctx context.Context, tenant string, m Meter, lead time.Duration) (PriceRecord, error) {
	return activatePrice(ctx, ld.client, ld.ledger, ld.versions, ld.lastEff, tenant, m, lead, ld.cfg.Clock)
}

// ActivatePrice activates the next version of a tenant's meter through
// meter's HTTP API; versions and lastEff track what was activated per
// tenant and meter. The unit price is m.Prices of the version (the last
// one again beyond them).
func ActivatePrice(ctx context.Context, c *Client, ledger *Ledger, versions map[string]int64, lastEff map[string]time.Time,
	tenant string, m Meter, lead time.Duration) (PriceRecord, error) {
	return activatePrice(ctx, c, ledger, versions, lastEff, tenant, m, lead, time.Now)
}

// activatePrice is ActivatePrice with effectiveAt read from now (the
// services' clock when a test moves it).
func activatePrice(ctx context.Context, c *Client, ledger *Ledger, versions map[string]int64, lastEff map[string]time.Time,
	tenant string, m Meter, lead time.Duration, now func() time.Time) (PriceRecord, error) {
	key := tenant + "|" + m.Code
	version := versions[key] + 1
	price := m.Prices[min(int(version)-1, len(m.Prices)-1)]
	deadline := time.Now().Add(3 * time.Minute)
	for attempt := 1; ; attempt++ {
		// Effective lead from now (rounded up to the millisecond, never
		// before the activation), or at activation when lead is zero.
		unit := decimal.RequireFromString(price)
		body := meterapi.ActivatePriceRequest{MeterCode: m.Code, Currency: m.Currency, UnitPrice: &unit}
		eff := now().UTC().Add(lead).Truncate(time.Millisecond).Add(time.Millisecond)
		if prev, ok := lastEff[key]; ok && eff.Before(prev) {
			eff = prev
		}
		if lead > 0 {
			body.EffectiveAt = &eff
		}
		idem := fmt.Sprintf("chaos-price-%s-%s-v%d-%d", tenant, m.Code, version, attempt)
		for {
			resp, err := c.Do(ctx, "meter", http.MethodPost, "/v1/tenants/"+tenant+"/prices", tenant, body,
				map[string]string{"Idempotency-Key": idem})
			if err == nil && resp.Status == http.StatusCreated {
				var p meterapi.Price
				if err := resp.Decode(&p); err != nil {
					return PriceRecord{}, err
				}
				if p.UnitPrice == nil {
					return PriceRecord{}, fmt.Errorf("activate %s %s for %s: answered without a unit price", m.Code, price, tenant)
				}
				if p.Version != version {
					return PriceRecord{}, fmt.Errorf("activate %s %s for %s: version %d, want %d", m.Code, price, tenant, p.Version, version)
				}
				rec := PriceRecord{Tenant: tenant, Meter: m.Code, Currency: m.Currency, Version: p.Version,
					UnitPrice: *p.UnitPrice, EffectiveAt: p.EffectiveAt, EventID: p.EventId.String()}
				versions[key], lastEff[key] = version, p.EffectiveAt
				ledger.mu.Lock()
				ledger.Prices = append(ledger.Prices, rec)
				ledger.mu.Unlock()
				return rec, nil
			}
			if err == nil && resp.Status == http.StatusUnprocessableEntity && resp.Code == "price_backdated" && attempt < 20 {
				break // the first try never committed and its effectiveAt has passed: a new request
			}
			if err == nil && resp.Status == http.StatusUnprocessableEntity && resp.Code == "schedule_already_published" && lead > 0 && attempt < 20 {
				lead += time.Second // inside the schedule the tenant's shard has published: a second later
				break
			}
			if err == nil && resp.Status != http.StatusServiceUnavailable && resp.Status < 500 {
				return PriceRecord{}, fmt.Errorf("activate %s %s for %s: %s", m.Code, price, tenant, resp)
			}
			if time.Now().After(deadline) {
				return PriceRecord{}, fmt.Errorf("activate %s for %s: gave up after 3 minutes: %v %v", m.Code, tenant, err, resp)
			}
			if !sleepCtx(ctx, 300*time.Millisecond) {
				return PriceRecord{}, ctx.Err()
			}
		}
	}
}

// item is one request's worth of facts.
type item struct {
	tenant string
	facts  []*Fact
	// repeat: send facts[0] twice in the batch (an in-batch repeat).
	repeat bool
	// dup: the facts were accepted before; this is a deliberate duplicate.
	dup bool
	// batch: send through usage:batch even when it holds one fact.
	batch bool
}

// Run sends the facts over Duration while activating the price changes,
// then keeps retrying what is not accepted yet until GiveUp. It returns
// when every fact is accepted or given up; ctx ending stops it.
func (ld *Load) Run(ctx context.Context) error {
	cfg := ld.cfg
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := &loadRun{
		ld: ld, began: time.Now(), cancel: cancel,
		work:      make(chan item, len(ld.facts)+16),
		dups:      make(chan []*Fact, len(ld.facts)+16),
		dupBudget: int(float64(len(ld.facts)) * cfg.DuplicateRate),
	}
	r.giveUpAt = r.began.Add(cfg.Duration + cfg.GiveUp)
	items := ld.plan(rand.New(rand.NewPCG(uint64(len(ld.facts)), 7)))

	var senders sync.WaitGroup
	for range cfg.Workers {
		senders.Go(func() {
			for it := range r.work {
				if !cfg.Gate.enter(runCtx) {
					continue
				}
				err := ld.send(runCtx, it, r.giveUpAt, r.dups)
				cfg.Gate.leave()
				if err != nil {
					r.fail(err)
				}
			}
		})
	}
	var prices sync.WaitGroup
	prices.Go(func() { r.changePrices(runCtx) })
	r.progress = time.NewTicker(5 * time.Second)
	defer r.progress.Stop()
	r.dispatch(runCtx, items)
	r.sendOwedDuplicates(runCtx)
	close(r.work)
	r.await(&senders)
	prices.Wait()
	if r.err != nil {
		return r.err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return r.unresolved()
}

// plan cuts the facts into requests, per tenant, in batches of
// 1..MaxBatch (a fifth of them single facts), in an order shuffled by rng.
func (ld *Load) plan(rng *rand.Rand) []item {
	var items []item
	byTenant := map[string][]*Fact{}
	for _, f := range ld.facts {
		byTenant[f.Tenant] = append(byTenant[f.Tenant], f)
	}
	for _, tenant := range ld.cfg.Tenants {
		fs := byTenant[tenant]
		for len(fs) > 0 {
			n, batch := 1, false
			if rng.IntN(5) != 0 {
				n, batch = 1+rng.IntN(ld.cfg.MaxBatch), true
			}
			n = min(n, len(fs))
			items = append(items, item{tenant: tenant, facts: fs[:n], batch: batch, repeat: n > 2 && rng.IntN(25) == 0})
			fs = fs[n:]
		}
	}
	rng.Shuffle(len(items), func(i, j int) { items[i], items[j] = items[j], items[i] })
	return items
}

// loadRun is one Run on its way: what its dispatcher, its senders and its
// price changes share.
type loadRun struct {
	ld       *Load
	began    time.Time
	giveUpAt time.Time
	work     chan item
	dups     chan []*Fact // facts accepted, offered to be sent again on purpose
	progress *time.Ticker
	// sent and dupBudget belong to the dispatcher (Run's goroutine).
	sent      int // facts dispatched
	dupBudget int // deliberate duplicates still owed
	cancel    context.CancelFunc
	errOnce   sync.Once
	err       error // the first failure; read once the senders and price changes are done
}

// fail records the run's first failure and stops the run.
func (r *loadRun) fail(err error) {
	r.errOnce.Do(func() { r.err = err })
	r.cancel()
}

// changePrices activates the next price version of every tenant's meters at
// each price change's time.
func (r *loadRun) changePrices(ctx context.Context) {
	cfg := r.ld.cfg
	for _, pc := range cfg.PriceChanges {
		at := r.began.Add(time.Duration(pc.At * float64(cfg.Duration)))
		if !sleepCtx(ctx, time.Until(at)) || !cfg.Gate.enter(ctx) {
			return
		}
		err := r.ld.activateAll(ctx, pc.Lead)
		cfg.Gate.leave()
		if err != nil {
			r.fail(fmt.Errorf("price change: %w", err))
			return
		}
		cfg.Progress("activated price version %d of %d meters for %d tenants, effective in %s",
			r.ld.versions[cfg.Tenants[0]+"|"+cfg.Meters[0].Code], len(cfg.Meters), len(cfg.Tenants), pc.Lead)
	}
}

// dispatch hands items to the senders, item k when its share of the facts
// is due, passing on deliberate duplicates while it waits.
func (r *loadRun) dispatch(ctx context.Context, items []item) {
	total := float64(len(r.ld.facts))
	for _, it := range items {
		due := r.began.Add(time.Duration(float64(r.ld.cfg.Duration) * float64(r.sent) / total))
		for time.Now().Before(due) {
			select {
			case <-ctx.Done():
				return
			case <-r.progress.C:
				r.ld.progress(r.began, r.sent)
			case fs := <-r.dups:
				r.duplicate(fs)
			case <-time.After(time.Until(due)):
			}
		}
		r.work <- it
		r.sent += len(it.facts)
	}
}

// sendOwedDuplicates passes on the deliberate duplicates still owed, for a
// few seconds more.
func (r *loadRun) sendOwedDuplicates(ctx context.Context) {
	tail := time.NewTimer(5 * time.Second)
	defer tail.Stop()
	for r.dupBudget > 0 && ctx.Err() == nil {
		select {
		case fs := <-r.dups:
			r.duplicate(fs)
		case <-r.progress.C:
			r.ld.progress(r.began, r.sent)
		case <-tail.C:
			r.dupBudget = 0
		}
	}
}

// duplicate sends facts already accepted again, on purpose, within the
// budget.
func (r *loadRun) duplicate(fs []*Fact) {
	if r.dupBudget <= 0 {
		return
	}
	n := min(len(fs), r.dupBudget)
	r.dupBudget -= n
	r.work <- item{tenant: fs[0].Tenant, facts: fs[:n], dup: true, batch: n > 1}
}

// await waits for the senders, reporting progress meanwhile.
func (r *loadRun) await(senders *sync.WaitGroup) {
	done := make(chan struct{})
	go func() { senders.Wait(); close(done) }()
	for {
		select {
		case <-done:
			return
		case <-r.progress.C:
			r.ld.progress(r.began, r.sent)
		}
	}
}

// unresolved reports the last progress and fails when facts were given up.
func (r *loadRun) unresolved() error {
	n := 0
	r.ld.ledger.mu.Lock()
	for _, f := range r.ld.facts {
		if f.Unresolved {
			n++
		}
	}
	r.ld.ledger.mu.Unlock()
	r.ld.progress(r.began, r.sent)
	if n > 0 {
		return fmt.Errorf("%d usage facts were still not accepted %s after the load ended", n, r.ld.cfg.GiveUp)
	}
	return nil
}

func (ld *Load) progress(began time.Time, sent int) {
	s := ld.ledger.Snapshot()
	var codes []string
	for k, v := range s.Codes {
		codes = append(codes, fmt.Sprintf("%s x%d", k, v))
	}
	slices.Sort(codes)
	ld.cfg.Progress("load %s: %s in, %d/%d facts dispatched, %d accepted, %d requests, %d retries, %d transport errors, %d deliberate duplicates; answers: %s",
		ld.cfg.Name, time.Since(began).Round(time.Second), sent, len(ld.facts), s.Accepted, s.Requests, s.Retries,
		s.TransportErrors, s.DupSubmissions, strings.Join(codes, ", "))
}

// send delivers one item until every fact in it is accepted (or, for a
// deliberate duplicate, answered) or giveUpAt passes.
func (ld *Load) send(ctx context.Context, it item, giveUpAt time.Time, dups chan<- []*Fact) error {
	ld.stamp(it)
	l := ld.ledger
	pending := slices.Clone(it.facts)
	backoff := 100 * time.Millisecond
	repeat := it.repeat
	for attempt := 0; len(pending) > 0; attempt++ {
		if attempt > 0 {
			if !ld.awaitRetry(ctx, pending, giveUpAt, backoff) {
				return nil
			}
			backoff = min(backoff*2, 2*time.Second)
		}
		reqs := requests(pending, repeat)
		single := len(reqs) == 1 && !it.batch
		sent := time.Now()
		answers, status, code, detail, err := ld.post(ctx, it.tenant, reqs, single)
		l.mu.Lock()
		l.Stats.Requests++
		if !single {
			l.Stats.Batches++
		}
		if err != nil {
			ld.lostAnswer(pending, sent, err)
			l.mu.Unlock()
			if ctx.Err() != nil {
				return nil
			}
			continue
		}
		l.observe(sent, status, code, detail)
		if answers == nil {
			retry := ld.refused(it.tenant, pending, status, code, detail)
			l.mu.Unlock()
			if !retry {
				return fmt.Errorf("usage answered %d %s: %s", status, code, detail)
			}
			continue
		}
		next, accepted := ld.answered(it, pending, answers)
		if repeat {
			repeat = ld.repeatAgain(pending, answers)
		}
		l.mu.Unlock()
		ld.offerDuplicates(it, accepted, dups)
		pending = next
	}
	return nil
}

// stamp sets the OccurredAt of the item's facts sent for the first time,
// and counts a deliberate duplicate's submissions.
func (ld *Load) stamp(it item) {
	now := ld.cfg.Clock().UTC().Truncate(time.Microsecond)
	ld.ledger.mu.Lock()
	defer ld.ledger.mu.Unlock()
	for _, f := range it.facts {
		if f.OccurredAt.IsZero() {
			f.OccurredAt = now
		}
	}
	if it.dup {
		ld.ledger.Stats.DupSubmissions += len(it.facts)
	}
}

// awaitRetry counts the retry of pending and waits backoff before it. It
// returns false when the item is given up: giveUpAt, moved by the time the
// gate held the load paused, has passed (the facts not accepted are marked
// Unresolved) or ctx ended.
func (ld *Load) awaitRetry(ctx context.Context, pending []*Fact, giveUpAt time.Time, backoff time.Duration) bool {
	l := ld.ledger
	l.mu.Lock()
	l.Stats.Retries += len(pending)
	l.mu.Unlock()
	if time.Now().Add(-ld.cfg.Gate.Held()).After(giveUpAt) {
		l.mu.Lock()
		for _, f := range pending {
			if !f.Accepted {
				f.Unresolved = true
			}
		}
		l.mu.Unlock()
		return false
	}
	return sleepCtx(ctx, backoff)
}

// requests are the usage requests of pending, with pending[0] once more at
// the end when repeat (an in-batch repeat).
func requests(pending []*Fact, repeat bool) []usageapi.UsageRequest {
	reqs := make([]usageapi.UsageRequest, 0, len(pending)+1)
	for _, f := range pending {
		reqs = append(reqs, f.request())
	}
	if repeat {
		reqs = append(reqs, pending[0].request())
	}
	return reqs
}

// lostAnswer records an attempt of pending that got no answer (err), with
// the ledger locked.
func (ld *Load) lostAnswer(pending []*Fact, sent time.Time, err error) {
	l := ld.ledger
	l.Stats.TransportErrors++
	if l.window != nil {
		l.window.answers = append(l.window.answers, Answer{At: sent, Detail: truncate(err.Error(), 200)})
	}
	for _, f := range pending {
		f.Attempts++
		f.LostAnswer = true
	}
}

// refused records an attempt of pending refused as a whole, with the ledger
// locked, and returns whether to retry it: a 503 is expected (an outage);
// anything else breaks the contract, and is retried when a 5xx or a 401.
func (ld *Load) refused(tenant string, pending []*Fact, status int, code, detail string) (retry bool) {
	for _, f := range pending {
		f.Attempts++
		if status == http.StatusServiceUnavailable {
			f.After503 = true
		}
	}
	if status == http.StatusServiceUnavailable {
		return true
	}
	ld.ledger.unexpected("%s: POST usage for %s answered %d %s: %s", time.Now().Format("15:04:05.000"), tenant, status, code, detail)
	return status >= 500 || status == http.StatusUnauthorized
}

// answered records the answer to each of pending, with the ledger locked; it
// returns the facts to send again (usage has not got their price evidence
// yet) and those accepted now.
func (ld *Load) answered(it item, pending []*Fact, answers []usageAnswer) (next, accepted []*Fact) {
	l := ld.ledger
	for i, f := range pending {
		a := answers[i]
		f.Attempts++
		if a.Code != "" {
			l.observe(time.Time{}, a.Status, a.Code, "")
		}
		switch {
		case a.Status == http.StatusCreated && !f.Accepted && !it.dup:
			ld.accept(f, a, false)
			accepted = append(accepted, f)
		case a.Status == http.StatusOK && !f.Accepted && !it.dup:
			// Accepted by an attempt whose answer was lost, or by one
			// answered 503: that one had committed after all.
			ld.accept(f, a, true)
			accepted = append(accepted, f)
		case a.Status == http.StatusOK && f.Accepted:
			if a.UsageID != f.UsageID || a.EventID != f.EventID {
				l.unexpected("%s/%s sent again: answered usage %s event %s, first accepted as usage %s event %s",
					f.Tenant, f.SourceEventID, a.UsageID, a.EventID, f.UsageID, f.EventID)
			} else if it.dup {
				l.Stats.DupReplays++
			}
		case a.Status == http.StatusCreated && f.Accepted:
			l.unexpected("%s/%s sent again was answered 201 (a second usage fact %s for one identity, first %s)",
				f.Tenant, f.SourceEventID, a.UsageID, f.UsageID)
		case a.Status == http.StatusUnprocessableEntity && (a.Code == "unknown_meter" || a.Code == "no_price_in_effect"):
			// Usage has not got the price evidence yet: nothing was
			// written; later.
			next = append(next, f)
		default:
			l.unexpected("%s/%s: answered %d %s", f.Tenant, f.SourceEventID, a.Status, a.Code)
		}
	}
	return next, accepted
}

// repeatAgain checks the answer to the in-batch repeat of pending[0], with
// the ledger locked, and returns whether to repeat it in the next attempt:
// until it is answered as a replay of the accepted fact, or breaks the
// contract.
func (ld *Load) repeatAgain(pending []*Fact, answers []usageAnswer) bool {
	if len(answers) != len(pending)+1 {
		return true
	}
	a, f := answers[len(pending)], pending[0]
	switch {
	case f.Accepted && a.Status == http.StatusOK && a.UsageID == f.UsageID:
		ld.ledger.Stats.InBatchRepeats++
		return false
	case a.Status == http.StatusUnprocessableEntity:
		return true
	default:
		ld.ledger.unexpected("%s/%s repeated in one batch: the repeat was answered %d %s usage %s (first: usage %s)",
			f.Tenant, f.SourceEventID, a.Status, a.Code, a.UsageID, f.UsageID)
		return false
	}
}

// offerDuplicates now and then offers a few facts just accepted to be sent
// again on purpose, when dups has room.
func (ld *Load) offerDuplicates(it item, accepted []*Fact, dups chan<- []*Fact) {
	if len(accepted) == 0 || it.dup || rand.Float64() >= ld.cfg.DuplicateRate*4 {
		return
	}
	n := 1 + rand.IntN(min(len(accepted), 8))
	select {
	case dups <- accepted[:n]:
	default:
	}
}

func (ld *Load) accept(f *Fact, a usageAnswer, replay bool) {
	f.Accepted, f.UsageID, f.EventID, f.AcceptedAt = true, a.UsageID, a.EventID, time.Now()
	ld.ledger.Stats.Accepted++
	if replay {
		f.Ambiguous = true
		if !f.LostAnswer && !f.After503 {
			ld.ledger.unexpected("%s/%s: first answer for it was 200 (a replay) though no earlier attempt had been made", f.Tenant, f.SourceEventID)
		}
		ld.ledger.Stats.AmbiguousCommit++
	}
}

// post sends facts as one request: a single POST .../usage when single,
// else usage:batch. answers is nil when the whole request was refused
// (status, code and detail say how); err is a transport error.
func (ld *Load) post(ctx context.Context, tenant string, reqs []usageapi.UsageRequest, single bool) (answers []usageAnswer, status int, code, detail string, err error) {
	reqCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if single {
		resp, err := ld.client.Do(reqCtx, "usage", http.MethodPost, "/v1/tenants/"+tenant+"/usage", tenant, reqs[0], nil)
		if err != nil {
			return nil, 0, "", "", err
		}
		if resp.Problem() {
			if resp.Status == http.StatusServiceUnavailable || resp.Status >= 500 || resp.Status == http.StatusUnauthorized {
				return nil, resp.Status, resp.Code, string(resp.Body), nil
			}
			return []usageAnswer{{Status: resp.Status, Code: resp.Code}}, resp.Status, resp.Code, string(resp.Body), nil
		}
		if resp.Status != http.StatusCreated && resp.Status != http.StatusOK {
			return nil, resp.Status, resp.Code, string(resp.Body), nil
		}
		var u usageapi.Accepted
		if err := resp.Decode(&u); err != nil {
			return nil, resp.Status, "undecodable", err.Error(), nil
		}
		return []usageAnswer{{Status: resp.Status, UsageID: u.UsageId.String(), EventID: u.EventId.String()}}, resp.Status, "", "", nil
	}
	resp, err := ld.client.Do(reqCtx, "usage", http.MethodPost, "/v1/tenants/"+tenant+"/usage:batch", tenant,
		usageapi.BatchRequest{Events: reqs}, nil)
	if err != nil {
		return nil, 0, "", "", err
	}
	if resp.Status != http.StatusOK {
		return nil, resp.Status, resp.Code, string(resp.Body), nil
	}
	var out usageapi.BatchResponse
	if err := resp.Decode(&out); err != nil || len(out.Results) != len(reqs) {
		return nil, resp.Status, "undecodable", fmt.Sprintf("%v: %d results for %d events", err, len(out.Results), len(reqs)), nil
	}
	answers = make([]usageAnswer, len(out.Results))
	for i, r := range out.Results {
		answers[i] = answerOf(r)
	}
	return answers, http.StatusOK, "", "", nil
}

// Versions returns the price version last activated per tenant|meter.
func (ld *Load) Versions() map[string]int64 { return ld.versions }

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
