package soak

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/usagebilling/billing/e2e/chaos"
	"github.com/usagebilling/billing/e2e/stack"
)

// Kinds are the fault kinds the soak draws from: the faults of the chaos
// suite's scenarios 1-4 and 6 (e2e/chaos/scenarios_test.go), each on a
// target and for a time drawn at random. Scenario 5's second instances and
// scenario 7's hand-ordered publication are not among them.
var Kinds = []string{
	"kafka-cut",       // the broker's TCP path refused (scenario 1)
	"kafka-blackhole", // the broker's TCP path silently dropping bytes (scenario 1)
	"broker-kill",     // the broker SIGKILLed, restarted 5 s later (scenario 2)
	"db-cut",          // one service's database path refused (scenario 3)
	"service-kill",    // one service SIGKILLed, restarted 1 s later (scenario 4)
	"kafka-latency",   // 100 ms ± 80 ms on the broker path (scenario 6)
	"db-latency",      // 40 ms ± 30 ms on one service's database path (scenario 6)
}

// Fault is one fault the soak injected.
type Fault struct {
	Kind, Target string
	Start, End   time.Time
	// Overlapping: the previous fault's facts were not all charged yet
	// when this one began.
	Overlapping bool
	// Recovery is the time from End until every fact accepted from
	// shortly before Start to End was charged in billing; RecoverErr when
	// that did not happen within the deadline.
	Recovery   time.Duration
	RecoverErr error
	Err        error
}

// Plan is the fault schedule of a run, drawn from its seed: one fault a
// minute, at a random second of the first third of the minute; now and
// then (one in four) a second one 5-15 s after the first ends, while it is
// surely still recovering.
type Plan struct {
	rng *rand.Rand
}

// NewPlan returns the plan of seed.
func NewPlan(seed uint64) *Plan {
	return &Plan{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// Next draws a fault: its kind, its target service and how long it lasts.
func (p *Plan) Next(services []string) (kind, target string, d time.Duration) {
	kind = Kinds[p.rng.IntN(len(Kinds))]
	target = services[p.rng.IntN(len(services))]
	d = time.Duration(5+p.rng.IntN(16)) * time.Second
	switch kind {
	case "kafka-cut", "kafka-blackhole", "broker-kill", "kafka-latency":
		target = "kafka"
	}
	return kind, target, d
}

// Offset draws the second of the minute a fault starts at.
func (p *Plan) Offset() time.Duration { return time.Duration(p.rng.IntN(20)) * time.Second }

// Storm draws whether a second fault follows the first within the minute,
// and after how long.
func (p *Plan) Storm() (bool, time.Duration) {
	return p.rng.IntN(4) == 0, time.Duration(5+p.rng.IntN(11)) * time.Second
}

// inject applies one fault to the running stack for d, then removes it.
func inject(ctx context.Context, h *chaos.Harness, kind, target string, d time.Duration) error {
	s := h.Stack
	proxy := func(name string) (interface {
		Cut() error
		Restore() error
		Blackhole() error
		Latency(l, j time.Duration) error
		Clear() error
	}, error) {
		p := s.Proxy(name)
		if p == nil {
			return nil, fmt.Errorf("no proxy %s", name)
		}
		return p, nil
	}
	switch kind {
	case "kafka-cut", "kafka-blackhole", "kafka-latency":
		p, err := proxy(stack.ProxyKafka)
		if err != nil {
			return err
		}
		switch kind {
		case "kafka-cut":
			err = p.Cut()
		case "kafka-blackhole":
			err = p.Blackhole()
		default:
			err = p.Latency(100*time.Millisecond, 80*time.Millisecond)
		}
		if err != nil {
			return err
		}
		sleep(ctx, d)
		if kind == "kafka-latency" {
			return p.Clear()
		}
		return errors.Join(p.Restore(), p.Clear())
	case "broker-kill":
		b := s.Broker()
		if b == nil {
			return errors.New("broker-kill needs the Apache Kafka broker (KAFKA=apache)")
		}
		if err := b.Kill(); err != nil {
			return err
		}
		sleep(ctx, 5*time.Second)
		return b.Start(context.WithoutCancel(ctx))
	case "db-cut", "db-latency":
		p, err := proxy(stack.ProxyDB(target))
		if err != nil {
			return err
		}
		if kind == "db-cut" {
			err = p.Cut()
		} else {
			err = p.Latency(40*time.Millisecond, 30*time.Millisecond)
		}
		if err != nil {
			return err
		}
		sleep(ctx, d)
		if kind == "db-cut" {
			return p.Restore()
		}
		return p.Clear()
	case "service-kill":
		if err := h.Kill(ctx, target, 0); err != nil {
			return err
		}
		sleep(ctx, time.Second)
		return s.Restart(context.WithoutCancel(ctx), target, 0)
	}
	return fmt.Errorf("unknown fault kind %q", kind)
}

// recovered waits until every fact accepted from from to end is charged in
// billing and returns the time from end until then.
func recovered(ctx context.Context, h *chaos.Harness, ledger *chaos.Ledger, from, end time.Time, deadline time.Duration) (time.Duration, error) {
	ids := ledger.AcceptedBetween(from, end)
	if _, err := waitCharged(ctx, h.DB["billing"], ids, time.Until(end.Add(deadline)), time.Second, nil); err != nil {
		return time.Since(end), fmt.Errorf("after the fault: %w", err)
	}
	return time.Since(end), nil
}

func sleep(ctx context.Context, d time.Duration) bool {
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
