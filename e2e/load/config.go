package load

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/shopspring/decimal"
)

// Services are the five services in the order the report shows them.
var Services = []string{"meter", "usage", "billing", "invoice", "query"}

// Config is one load run.
type Config struct {
	// URLs are the base URLs of the services by name (Services).
	URLs map[string]string
	// Instances, when a service runs as several processes, holds every
	// instance's base URL; requests to that service go to each in turn.
	Instances map[string][]string
	// Token is one bearer token for every call; empty means mint a tenant
	// token per tenant (DevKey) with the environment's signer
	// (auth.SignerFromEnv: the development key unless AUTH_SIGNING_KEY is set).
	Token  string
	DevKey bool

	// RunID prefixes the tenant ids and the source event ids.
	RunID string
	// Tenants is the number of tenants (TenantIDs, when set, name them).
	Tenants   int
	TenantIDs []string
	// Dominant is the share of the facts sent to tenant 0; the others
	// share the rest evenly. Negative means an even spread.
	Dominant float64
	// Rate is the offered load in facts per second; 0 sends flat out.
	Rate     float64
	Duration time.Duration
	// Facts, when positive, stops the sending once that many facts were
	// sent (Duration still bounds it).
	Facts       int64
	Batch       int
	Concurrency int
	// Drain bounds the wait, once sending stops, for query to count and
	// charge every accepted fact.
	Drain time.Duration
	// Close closes every tenant's period after the drain and times the
	// invoice's issue and its arrival in query, up to CloseTimeout each.
	Close        bool
	CloseTimeout time.Duration
	// Alerts, when positive, registers a webhook receiver of the load tool
	// with every tenant and defines that many usage alerts per tenant on
	// MeterCode, at AlertStep, 2 x AlertStep, ... (0: derived from the
	// facts expected), and reports the latency from the commit of each
	// crossing charge to the first delivery of its alert.triggered.
	Alerts    int
	AlertStep int64
	// Poll is the time to poll every tenant's summary once; polls are
	// spaced at least MinPollGap apart whatever the number of tenants.
	Poll time.Duration

	MeterCode string
	UnitPrice decimal.Decimal
	// Properties is the number of properties each fact carries (0 to
	// 16: p0=v.., p1=v..., values from a pool of 50 each), to see what
	// properties cost end to end.
	Properties int

	// Describe are facts about the system under test for the report
	// (Kafka kind, partitions, how it was started).
	Describe map[string]string
	// Out receives the progress lines.
	Out io.Writer

	// Processes, when set, lists the processes of the system under test by
	// group (the stack's, when the load tool started it), for the CPU per
	// fact of each; nil: the report has the machine's all-in figure only,
	// and NoProcesses says why.
	Processes   func() []ProcessGroup
	NoProcesses string
	// Floor is the floor's PostgreSQL CPU-ms per fact (make floor), for the
	// ratios; FloorSource says where it came from. 0: no ratio.
	Floor       float64
	FloorSource string
}

// MinPollGap bounds the polling of query to 50 requests a second.
const MinPollGap = 20 * time.Millisecond

// Defaults fills in what is zero.
func (c *Config) Defaults() {
	if c.Tenants == 0 && len(c.TenantIDs) == 0 {
		c.Tenants = 1
	}
	if c.Duration == 0 {
		c.Duration = time.Minute
	}
	if c.Batch == 0 {
		c.Batch = 500
	}
	if c.Concurrency == 0 {
		c.Concurrency = 4
	}
	if c.Drain == 0 {
		c.Drain = 5 * time.Minute
	}
	if c.CloseTimeout == 0 {
		c.CloseTimeout = 5 * time.Minute
	}
	if c.Poll == 0 {
		c.Poll = 250 * time.Millisecond
	}
	if c.MeterCode == "" {
		c.MeterCode = "load_calls"
	}
	if c.UnitPrice.IsZero() {
		c.UnitPrice = decimal.RequireFromString("0.001")
	}
	if c.RunID == "" {
		c.RunID = "load-" + time.Now().UTC().Format("20060102-150405")
	}
	if len(c.TenantIDs) == 0 {
		for i := range c.Tenants {
			c.TenantIDs = append(c.TenantIDs, fmt.Sprintf("%s-t%d", c.RunID, i))
		}
	}
	c.Tenants = len(c.TenantIDs)
}

// Check reports every unusable setting at once.
func (c *Config) Check() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	for _, s := range Services {
		if !strings.HasPrefix(c.URLs[s], "http://") && !strings.HasPrefix(c.URLs[s], "https://") {
			bad("-%s %q: want a base URL such as http://127.0.0.1:8081", s, c.URLs[s])
		}
	}
	if c.Token == "" && !c.DevKey {
		bad("no token: give -token, or -dev-key to mint tenant tokens with the development key")
	}
	if c.Tenants < 1 {
		bad("-tenants %d: want at least 1", c.Tenants)
	}
	if c.Dominant > 1 {
		bad("-dominant %g: want a share between 0 and 1", c.Dominant)
	}
	if c.Dominant >= 0 && c.Dominant < 1 && c.Tenants == 1 {
		bad("-dominant %g with one tenant: tenant 0 gets everything", c.Dominant)
	}
	if c.Rate < 0 {
		bad("-rate %g: want facts per second, 0 for flat out", c.Rate)
	}
	if c.Properties < 0 || c.Properties > 16 {
		bad("-properties %d: want 0 to 16 (a fact carries at most 16)", c.Properties)
	}
	if c.Alerts < 0 || c.Alerts > 50 {
		bad("-alerts %d: want 0 to 50 alerts per tenant (the invoice service's INVOICE_MAX_ALERTS default)", c.Alerts)
	}
	if c.AlertStep < 0 {
		bad("-alert-step %d: want facts between two thresholds, 0 to derive it", c.AlertStep)
	}
	if c.Alerts > 0 && c.Token != "" && TokenTenant(c.Token) == "" {
		bad("-alerts needs tenant tokens (a billing-admin defines alerts): use -dev-key or a tenant token")
	}
	if c.Batch < 1 || c.Batch > 1000 {
		bad("-batch %d: want 1 to 1000 facts per request", c.Batch)
	}
	if c.Concurrency < 1 {
		bad("-concurrency %d: want at least 1", c.Concurrency)
	}
	if c.Duration <= 0 || c.Drain <= 0 || c.Poll <= 0 {
		bad("-duration, -drain and -poll must be positive")
	}
	if !c.UnitPrice.IsPositive() {
		bad("unit price %s: want a positive price", c.UnitPrice)
	}
	return errors.Join(errs...)
}

// Weights returns each tenant's share of the facts.
func (c *Config) Weights() []float64 {
	w := make([]float64, c.Tenants)
	if c.Tenants == 1 {
		w[0] = 1
		return w
	}
	if c.Dominant < 0 {
		for i := range w {
			w[i] = 1 / float64(c.Tenants)
		}
		return w
	}
	w[0] = c.Dominant
	for i := 1; i < len(w); i++ {
		w[i] = (1 - c.Dominant) / float64(c.Tenants-1)
	}
	return w
}

// picker chooses the tenant of each batch by smooth weighted round robin:
// deterministic, and every tenant's share stays within one batch of its
// weight at all times.
type picker struct {
	weights []float64
	current []float64
}

func newPicker(weights []float64) *picker {
	return &picker{weights: weights, current: make([]float64, len(weights))}
}

func (p *picker) next() int {
	best := 0
	for i, w := range p.weights {
		p.current[i] += w
		if p.current[i] > p.current[best] {
			best = i
		}
	}
	p.current[best] -= 1 // the weights sum to 1
	return best
}
