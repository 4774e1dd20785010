package money

import (
	"fmt"
	"math/rand/v2"
)

// Kind is an operation's kind.
type Kind int

const (
	OpNewTenant Kind = iota
	OpActivate
	OpUsage
	OpBatch
	OpReplay
	OpConflict
	OpToBound
	OpAdjust
	OpAdjReplay
	OpCheck
	OpClose
	OpSettings
	OpAdvance
	OpPlan
	OpSubscribe
	OpTaxes
	OpGrant
	OpAlert
	OpToThreshold
)

var kindNames = [...]string{"new-tenant", "activate", "usage", "batch", "replay", "conflict", "to-bound",
	"adjust", "adj-replay", "check", "close", "settings", "advance", "plan", "subscribe", "taxes", "grant", "alert", "to-threshold"}

func (k Kind) String() string { return kindNames[k] }

// Op is one abstract operation: its kind and the seed of its own choices,
// resolved against the model when it runs (which tenant, meter, fact,
// amount, time). Any subsequence of ops is a valid test, which is what
// shrinking needs.
type Op struct {
	Kind Kind
	Seed uint64
}

func (o Op) String() string { return fmt.Sprintf("%s#%x", o.Kind, o.Seed) }

// weights of the kinds after the first op (a new tenant); new tenants and
// closes are rare, so each tenant lives about 300 operations, in which the
// clock moves to the next period end or close of some tenant about five
// times, the tenant changes its zone and grace about once or twice and its
// tax rates about twice (besides the rates two tenants in three start
// with) and subscribes to a plan (or changes plan) about three times while
// the run's plans gain about two versions; it gets about five prepaid
// credit grants (far from invoice's limit of 100 live ones), and about
// five alert operations (create, or delete: the money stack's limit is
// four live alerts) and three facts aimed at a usage alert's threshold.
var weights = []struct {
	k Kind
	w int
}{
	{OpNewTenant, 3}, {OpActivate, 50}, {OpUsage, 420}, {OpBatch, 40}, {OpReplay, 60}, {OpConflict, 30},
	{OpToBound, 60}, {OpAdjust, 110}, {OpAdjReplay, 20}, {OpCheck, 12}, {OpClose, 6},
	{OpSettings, 5}, {OpAdvance, 16}, {OpPlan, 8}, {OpSubscribe, 10}, {OpTaxes, 6}, {OpGrant, 16},
	{OpAlert, 16}, {OpToThreshold, 10},
}

// Generate is the operation sequence of seed: n ops, the first a new tenant.
func Generate(seed uint64, n int) []Op {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	total := 0
	for _, w := range weights {
		total += w.w
	}
	ops := make([]Op, 0, n)
	ops = append(ops, Op{OpNewTenant, rng.Uint64()})
	for len(ops) < n {
		x := rng.IntN(total)
		for _, w := range weights {
			if x < w.w {
				ops = append(ops, Op{w.k, rng.Uint64()})
				break
			}
			x -= w.w
		}
	}
	return ops
}
