//go:build money

package money

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/usagebilling/billing/e2e/scenario"
	"github.com/usagebilling/billing/e2e/stack"
	"github.com/usagebilling/billing/e2e/stack/stacktest"
)

// TestMoney runs MONEY_OPS random operations (default 10,000) of seed
// MONEY_SEED (default: from the clock) against the five services, started
// here by the stack launcher on the embedded broker, and the reference
// model. A disagreement prints the seed, then shrinks the operations (by
// halving, against fresh tenants of the same stack) and prints the shortest
// failing sequence found.
func TestMoney(t *testing.T) {
	n := envInt(t, "MONEY_OPS", 10_000)
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("MONEY_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 0, 64)
		if err != nil {
			t.Fatalf("MONEY_SEED=%q: want an unsigned integer", v)
		}
		seed = s
	}
	mutation = os.Getenv("MONEY_MUTATE")
	t.Logf("MONEY_SEED=%d MONEY_OPS=%d (replay: make money-test MONEY_SEED=%d MONEY_OPS=%d)", seed, n, seed, n)

	ctx := t.Context()
	const lead = time.Second
	// Every service reads the test clock the model moves (decision 0015);
	// billing's scheduler looks for due periods every 200ms.
	clk, err := scenario.NewOffsetClock(filepath.Join(t.TempDir(), "clock-offset"))
	if err != nil {
		t.Fatal(err)
	}
	// The tenants' webhook endpoint, on the loopback address the invoice
	// service is told to allow (alerts.go).
	hooks, err := StartHooks()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hooks.Close)
	s := stacktest.Start(t, stack.Options{PostgresFast: true, DirectDB: true,
		Env: map[string]string{"CLOCK_OFFSET_FILE": clk.Path},
		ServiceEnv: map[string]map[string]string{"meter": MeterEnv(lead),
			"billing": BillingEnv, "invoice": HookServiceEnv}})

	cfg := Config{URLs: s.URLs(), Lead: lead, Settle: 90 * time.Second, Logf: t.Logf, Clock: clk,
		Prefix: fmt.Sprintf("m%x", seed&0xffffffff), Hooks: hooks}
	ops := Generate(seed, n)
	runBegan := time.Now()
	stats, f, err := Run(ctx, cfg, ops)
	t.Logf("%s in %s; the clock ran %s ahead of the wall clock at the end", stats, time.Since(runBegan).Round(time.Millisecond),
		time.Until(clk.Now()).Round(time.Hour))
	if err != nil {
		s.Keep()
		t.Fatalf("seed %d: %v (logs kept in %s)", seed, err, s.Dir())
	}
	if f == nil {
		return
	}
	s.Keep()
	t.Errorf("seed %d: the services disagree with the model at op %d: %s\nlast steps:\n%s(service logs kept in %s)",
		seed, f.Op, f.Msg, f.Report(30), s.Dir())
	shrunk, sf := shrink(ctx, t, cfg, ops[:f.Op+1], f, envDuration(t, "MONEY_SHRINK_TIME", 3*time.Minute))
	list := ""
	if len(shrunk) <= 60 {
		list = fmt.Sprintf(" %v", shrunk)
	}
	t.Errorf("seed %d: shortened to %d operations%s, which fail with: %s\nsteps:\n%s", seed, len(shrunk), list, sf.Msg, sf.Report(200))
}

// shrink removes halves, quarters, ... of the failing operations while the
// rest still fails the same way, each try on fresh tenants of the same stack.
// Operations pick their tenant when they run, so the first passes keep every
// new-tenant operation in place (dropping one moves later operations to
// another tenant); a last pass tries to drop those one by one.
func shrink(ctx context.Context, t *testing.T, cfg Config, ops []Op, f *Failure, budget time.Duration) ([]Op, *Failure) {
	deadline := time.Now().Add(budget)
	try := 0
	attempt := func(cand []Op) *Failure {
		try++
		c := cfg
		c.Prefix = fmt.Sprintf("%s-s%d", cfg.Prefix, try)
		c.Logf = nil
		_, g, err := Run(ctx, c, cand)
		if err != nil || g == nil || g.Kind != f.Kind {
			return nil
		}
		return g
	}
	// without drops ops[i:end) but the new-tenant operations among them
	without := func(i, end int, keepTenants bool) []Op {
		cand := append([]Op{}, ops[:i]...)
		if keepTenants {
			for _, o := range ops[i:end] {
				if o.Kind == OpNewTenant {
					cand = append(cand, o)
				}
			}
		}
		return append(cand, ops[end:]...)
	}
	for chunk := len(ops) / 2; chunk >= 1 && time.Now().Before(deadline); chunk /= 2 {
		for i := 1; i < len(ops) && time.Now().Before(deadline); { // op 0 makes the first tenant
			end := min(i+chunk, len(ops))
			cand := without(i, end, true)
			if len(cand) == len(ops) {
				i = end
				continue
			}
			if g := attempt(cand); g != nil {
				ops, f = cand[:min(g.Op+1, len(cand))], g
				t.Logf("shrink: %d operations still fail (%s)", len(ops), g.Kind)
				continue
			}
			i = end
		}
	}
	for i := len(ops) - 1; i >= 1 && time.Now().Before(deadline); i-- {
		if ops[i].Kind != OpNewTenant {
			continue
		}
		if g := attempt(without(i, i+1, false)); g != nil {
			cand := without(i, i+1, false)
			ops, f = cand[:min(g.Op+1, len(cand))], g
			t.Logf("shrink: %d operations still fail (%s)", len(ops), g.Kind)
		}
	}
	t.Logf("shrink: %d tries", try)
	return ops, f
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q: want a duration", name, v)
	}
	return d
}
