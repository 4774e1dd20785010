//go:build chaos

package chaos_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/usagebilling/billing/e2e/chaos"
	"github.com/usagebilling/billing/e2e/stack"
	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
)

// 1. The broker's TCP path cut (connections refused), later blackholed
// (bytes silently dropped), for every producer and consumer at once.
func brokerCut() chaos.Scenario {
	return chaos.Scenario{
		Key: "s1", Title: "broker path cut", Load: load(45 * time.Second),
		Faults: func(ctx context.Context, r *chaos.Run) error {
			p := r.H.Stack.Proxy(stack.ProxyKafka)
			if p == nil {
				return errors.New("no Kafka proxy")
			}
			outage := func(name string, start func() error, d time.Duration) error {
				return r.Fault(ctx, name, func() error {
					before, _ := r.H.Work(ctx)
					if err := start(); err != nil {
						return err
					}
					sleepOrDone(ctx, d)
					during, _ := r.H.Work(ctx)
					r.Note("%s: relays could not publish (outbox pending %d -> %d) and consumers could not consume (billing charged %d facts in %s)",
						name, before.OutboxPending, during.OutboxPending, during.Charges-before.Charges, d)
					return p.Restore()
				})
			}
			if !r.At(ctx, 12*time.Second) {
				return ctx.Err()
			}
			if err := outage("Kafka path cut 8s", p.Cut, 8*time.Second); err != nil {
				return err
			}
			if !r.At(ctx, 28*time.Second) {
				return ctx.Err()
			}
			return outage("Kafka path blackholed 6s", p.Blackhole, 6*time.Second)
		},
	}
}

// 2. The broker process SIGKILLed mid-load, restarted from its log dirs.
func brokerKill() chaos.Scenario {
	return chaos.Scenario{
		Key: "s2", Title: "broker SIGKILL", Load: load(50 * time.Second),
		Faults: func(ctx context.Context, r *chaos.Run) error {
			b := r.H.Stack.Broker()
			if b == nil {
				return errors.New("scenario 2 needs the Apache Kafka broker (KAFKA=apache)")
			}
			if !r.At(ctx, 15*time.Second) {
				return ctx.Err()
			}
			return r.Fault(ctx, "Kafka broker SIGKILL, restarted after 5s", func() error {
				if err := b.Kill(); err != nil {
					return err
				}
				sleepOrDone(ctx, 5*time.Second)
				t := time.Now()
				if err := b.Start(ctx); err != nil {
					return err
				}
				r.Note("the broker was SIGKILLed and took %s to start again", time.Since(t).Round(100*time.Millisecond))
				return nil
			})
		},
	}
}

// 3. One service's database path cut: usage (HTTP commands), then billing
// (a consumer, and its commands).
func databaseCut() chaos.Scenario {
	var (
		usageAnswers      []chaos.Answer
		billingAnswers    []*chaos.Response
		cutFrom, restored time.Time
	)
	return chaos.Scenario{
		Key: "s3", Title: "database path cut", Load: load(45 * time.Second),
		Faults: func(ctx context.Context, r *chaos.Run) error {
			if !r.At(ctx, 10*time.Second) {
				return ctx.Err()
			}
			up := r.H.Stack.Proxy(stack.ProxyDB("usage"))
			err := r.Fault(ctx, "usage database path cut 8s", func() error {
				if err := up.Cut(); err != nil {
					return err
				}
				cutFrom = time.Now()
				r.Ledger.WatchAnswers()
				sleepOrDone(ctx, 8*time.Second)
				usageAnswers = r.Ledger.StopWatch()
				restored = time.Now()
				return up.Restore()
			})
			if err != nil {
				return err
			}
			if !r.At(ctx, 28*time.Second) {
				return ctx.Err()
			}
			bp := r.H.Stack.Proxy(stack.ProxyDB("billing"))
			return r.Fault(ctx, "billing database path cut 8s", func() error {
				if err := bp.Cut(); err != nil {
					return err
				}
				// billing's commands while its database is away: an
				// adjustment (nothing it names exists, so nothing could
				// be written in any case).
				for end := time.Now().Add(8 * time.Second); time.Now().Before(end); {
					sleepOrDone(ctx, 500*time.Millisecond)
					resp, err := r.H.Client.Do(ctx, "billing", http.MethodPost, "/v1/tenants/s3-probe/adjustments", "s3-probe",
						map[string]string{"correctionOf": "0190a1b2-0000-7000-8000-000000000000", "amount": "-1", "currency": "USD", "reason": "probe"},
						map[string]string{"Idempotency-Key": fmt.Sprintf("s3-probe-%d", time.Now().UnixNano())})
					if err == nil {
						billingAnswers = append(billingAnswers, resp)
					}
				}
				return bp.Restore()
			})
		},
		Verify: func(ctx context.Context, r *chaos.Run) error {
			// Every request sent while the database was cut must be answered
			// the clear 503 (requests sent in the cut's first 100ms may
			// still have found a connection working).
			n503, other := 0, map[string]int{}
			for _, a := range usageAnswers {
				switch {
				case a.At.Before(cutFrom.Add(100 * time.Millisecond)):
				case a.Status == http.StatusServiceUnavailable && a.Code == "database_unavailable":
					n503++
				default:
					other[fmt.Sprintf("%d %s %s", a.Status, a.Code, a.Detail)]++
				}
			}
			if n503 == 0 {
				r.NotProven("usage answered no command while its database was cut")
			} else {
				r.Note("usage's database cut: %d commands answered 503 database_unavailable (problem+json)", n503)
			}
			for k, v := range other {
				r.Fail("usage answered %q x%d while its database was cut, want 503 database_unavailable", k, v)
			}
			b503 := 0
			for _, a := range billingAnswers {
				if a.Status == http.StatusServiceUnavailable && a.Code == "database_unavailable" {
					b503++
				} else {
					r.Fail("billing answered %s to a command while its database was cut, want 503 database_unavailable", a)
				}
			}
			if b503 == 0 {
				r.NotProven("billing answered no command while its database was cut")
			} else {
				r.Note("billing's database cut: %d commands answered 503 database_unavailable", b503)
			}
			ambiguous := 0
			var back time.Time
			for _, f := range r.Ledger.Facts() {
				if f.Ambiguous && f.After503 {
					ambiguous++
				}
				if f.AcceptedAt.After(restored) && (back.IsZero() || f.AcceptedAt.Before(back)) {
					back = f.AcceptedAt
				}
			}
			if !back.IsZero() {
				r.Note("usage accepted usage facts again %s after its database path was restored", back.Sub(restored).Round(10*time.Millisecond))
			}
			if ambiguous > 0 {
				r.Note("%d usage facts answered 503 (\"nothing was changed\") had in fact been committed: the connection broke after the commit; the client's retry found each as a replay, so nothing was lost or doubled", ambiguous)
			}
			// Nothing written by the probe adjustments.
			var n int
			if err := r.H.DB["billing"].QueryRow(ctx, `SELECT count(*) FROM adjustment WHERE tenant_id = 's3-probe'`).Scan(&n); err != nil {
				return err
			}
			if n != 0 {
				r.Fail("billing wrote %d adjustments for the probe answered 503", n)
			}
			return nil
		},
	}
}

// 4. SIGKILL of each service in turn, restarted: relays held between the
// broker's ack and their mark, consumers between their commit and their
// offset commit.
func killEach() chaos.Scenario {
	type kill struct {
		service                 string
		relayHeld, republished  int
		heldTopic               string
		consumerDup, attempts   int
		relayWindow, consumerOn bool
	}
	kills := []*kill{
		{service: "meter", relayWindow: true, heldTopic: events.TopicMeter},
		{service: "usage", relayWindow: true, heldTopic: events.TopicUsage},
		{service: "billing", relayWindow: true, heldTopic: events.TopicBilling, consumerOn: true},
		{service: "invoice", consumerOn: true},
		{service: "query", consumerOn: true},
	}
	held := map[string][]string{}
	const redeliveryWatch = 30 * time.Second
	return chaos.Scenario{
		Key: "s4", Title: "SIGKILL each service", Load: load(70 * time.Second), NeedDuplicates: true,
		Setup: func(ctx context.Context, r *chaos.Run) error {
			r.Extra = append(r.Extra, "s4-probe")
			return nil
		},
		Faults: func(ctx context.Context, r *chaos.Run) error {
			probeVersions, probeEff := map[string]int64{}, map[string]time.Time{}
			probe := chaos.Meter{Code: "probe_units", Currency: "USD", Prices: []string{"0.01"}}
			var probeMu sync.Mutex
			poke := func(ctx context.Context) {
				probeMu.Lock()
				defer probeMu.Unlock()
				_, _ = chaos.ActivatePrice(ctx, r.H.Client, r.Ledger, probeVersions, probeEff, "s4-probe", probe, 0)
			}
			for i, k := range kills {
				if !r.At(ctx, time.Duration(5+12*i)*time.Second) {
					return ctx.Err()
				}
				name := "SIGKILL " + k.service
				if k.relayWindow {
					name += " (relay between ack and mark)"
				} else {
					name += " (consumer between commit and offset)"
				}
				err := r.Fault(ctx, name, func() error {
					for attempt := 1; attempt <= 3; attempt++ {
						k.attempts = attempt
						before := r.H.Decisions.Total()
						var hold *chaos.RelayHold
						if k.relayWindow {
							var p func(context.Context)
							if k.service == "meter" {
								p = poke
							}
							var err error
							hold, err = chaos.HoldRelayAfterAck(ctx, r.H.Stack.DatabaseURL(k.service), r.H.DB[k.service], p, 20*time.Second)
							if err != nil {
								r.Note("%s: %v", k.service, err)
							}
						}
						if k.consumerOn && !r.H.WaitApplied(ctx, k.service, 0, 10*time.Second) {
							r.Note("%s: its consumer applied nothing for 10s before the kill", k.service)
						}
						if err := r.H.Kill(ctx, k.service, 0); err != nil {
							return err
						}
						if hold != nil {
							k.relayHeld = len(hold.Events)
							held[k.heldTopic] = append(held[k.heldTopic], hold.Events...)
							if err := hold.Abort(ctx); err != nil {
								return err
							}
						}
						sleepOrDone(ctx, time.Second)
						if err := r.H.Stack.Restart(ctx, k.service, 0); err != nil {
							return err
						}
						if !k.consumerOn {
							return nil
						}
						// The restarted consumer starts from the last committed
						// offsets: what it had applied after them comes again.
						// It consumes only once the group has expelled the killed
						// member (its session timeout, 10 s) and rebalanced, so
						// the redelivery is watched for well past that.
						for end := time.Now().Add(redeliveryWatch); time.Now().Before(end); {
							sleepOrDone(ctx, 500*time.Millisecond)
							r.H.Decisions.Flush(ctx, k.service, 0)
							k.consumerDup = r.H.Decisions.Total().Sub(before).Outcome(k.service, "duplicate")
							if k.consumerDup > 0 {
								return nil
							}
						}
						r.Note("%s: kill %d redelivered nothing to its consumer within %s of the restart (it had committed its offsets); killing again", k.service, attempt, redeliveryWatch)
					}
					return nil
				})
				if err != nil {
					return err
				}
			}
			return nil
		},
		Verify: func(ctx context.Context, r *chaos.Run) error {
			for _, k := range kills {
				if k.relayWindow {
					ids := held[k.heldTopic]
					seen := r.H.Kafka.Seen(k.heldTopic, ids)
					for _, n := range seen {
						if n > 1 {
							k.republished++
						}
					}
					if k.republished == 0 {
						r.NotProven("%s's relay was killed between ack and mark, but no held event was published twice on %s", k.service, k.heldTopic)
					} else {
						r.Note("%s killed with its relay between ack and mark: of the %d pending outbox rows held, the relay had sent %d (acked, mark waiting); each was published again after the restart",
							k.service, k.relayHeld, k.republished)
					}
				}
				if k.consumerOn {
					if k.consumerDup == 0 {
						r.NotProven("%s's consumer was killed %d times, and no event was delivered to it again", k.service, k.attempts)
					} else {
						r.Note("%s killed with its consumer between commit and offset (kill %d): %d events delivered again and absorbed as DUPLICATE",
							k.service, k.attempts, k.consumerDup)
					}
				}
			}
			return nil
		},
	}
}

// 5. Two processes of every service (relays sharing the shards, consumer
// groups of two), one of each SIGKILLed in turn mid-load and restarted.
func twoInstances() chaos.Scenario {
	var counting sync.WaitGroup
	var hooks *chaos.Webhooks
	return chaos.Scenario{
		Key: "s5", Title: "two instances each, webhook endpoints failing", Load: load(75 * time.Second),
		Setup: func(ctx context.Context, r *chaos.Run) error {
			var err error
			hooks, err = chaos.StartWebhooks(ctx, r)
			return err
		},
		Verify: func(ctx context.Context, r *chaos.Run) error {
			if err := hooks.Verify(ctx, r); err != nil {
				return err
			}
			counting.Wait()
			s, err := r.H.Sharing(ctx)
			if err != nil {
				return err
			}
			r.Note("at rest: %s", s)
			return nil
		},
		Faults: func(ctx context.Context, r *chaos.Run) error {
			if !r.At(ctx, 6*time.Second) {
				return ctx.Err()
			}
			if s, err := r.H.Sharing(ctx); err == nil {
				r.Note("before the kills, outbox shards held per live relay and consumer group members: %s", s)
			}
			for i, service := range stack.Services {
				if !r.At(ctx, time.Duration(8+10*i)*time.Second) {
					return ctx.Err()
				}
				err := r.Fault(ctx, "SIGKILL "+service+".1 of 2", func() error {
					// Consumers with traffic are killed right after a batch
					// committed, before its offsets are (meter's and usage's
					// consumers have next to none: redrive commands, prices).
					busy := service != "meter" && service != "usage"
					if busy {
						r.H.WaitApplied(ctx, service, 1, 10*time.Second)
					}
					before := r.H.Decisions.Total()
					if err := r.H.Kill(ctx, service, 1); err != nil {
						return err
					}
					if busy {
						counting.Go(func() {
							sleepOrDone(ctx, 20*time.Second)
							n := r.H.Decisions.Total().Sub(before).Outcome(service, "duplicate")
							r.Note("%s.1 killed: %d events delivered again to %s's group within 20s and absorbed as DUPLICATE", service, n, service)
						})
					}
					sleepOrDone(ctx, 3*time.Second)
					return r.H.Stack.Restart(ctx, service, 1)
				})
				if err != nil {
					return err
				}
			}
			return nil
		},
	}
}

// 6. Latency with jitter on the broker path, and a slow database.
func slowPaths() chaos.Scenario {
	return chaos.Scenario{
		Key: "s6", Title: "latency and slow database", Load: load(45 * time.Second),
		Faults: func(ctx context.Context, r *chaos.Run) error {
			kp := r.H.Stack.Proxy(stack.ProxyKafka)
			dp := r.H.Stack.Proxy(stack.ProxyDB("billing"))
			var wg sync.WaitGroup
			var e1, e2 error
			wg.Go(func() {
				if !r.At(ctx, 5*time.Second) {
					return
				}
				e1 = r.Fault(ctx, "Kafka path latency 100ms ±80ms for 20s", func() error {
					if err := kp.Latency(100*time.Millisecond, 80*time.Millisecond); err != nil {
						return err
					}
					sleepOrDone(ctx, 20*time.Second)
					return kp.Clear()
				})
			})
			wg.Go(func() {
				if !r.At(ctx, 18*time.Second) {
					return
				}
				e2 = r.Fault(ctx, "billing database latency 40ms ±30ms for 20s", func() error {
					if err := dp.Latency(40*time.Millisecond, 30*time.Millisecond); err != nil {
						return err
					}
					sleepOrDone(ctx, 20*time.Second)
					return dp.Clear()
				})
			})
			wg.Wait()
			return errors.Join(e1, e2)
		},
	}
}

// 7. Out-of-order delivery, on purpose, of the two orders the system
// depends on. The suite takes outbox shards from the relays (as a relay
// instance holds one), lets the service append the events, publishes them
// itself in the order it wants, marks them published and hands the shards
// back.
//
//   - A price series (versions 2-4 of one meter; usage, billing and query
//     consume it), published newest first: each consumer must defer the
//     versions whose predecessor is missing and apply them in order.
//   - A period's close before the charges it counts: charges are their own
//     aggregates (decision 0007), so nothing orders them; what must hold is
//     that invoice does not issue an invoice from a close whose tally its
//     charges do not reach yet. A tenant of its own (s7-closer) sends
//     facts while billing's every shard is held; once billing has rated
//     them and the period is closed, BillingPeriodClosed is published
//     first, then the ChargeRated newest first. Invoice must defer the
//     close and issue the invoice, counting every charge, once they came.
func outOfOrder() chaos.Scenario {
	const closer = "s7-closer"
	const closerFacts = 60
	var (
		priceKey       string
		priceHijack    *chaos.ShardHijack
		reversedPrices int
		closeFirst     []string // the close, then the charges, as published
		t0             time.Time
	)
	cfg := load(45 * time.Second)
	cfg.PriceChanges = nil // this scenario's price changes are the reversed ones
	return chaos.Scenario{
		Key: "s7", Title: "out-of-order delivery", Load: cfg,
		Setup: func(ctx context.Context, r *chaos.Run) error {
			r.Extra = append(r.Extra, closer)
			acme := r.Tenants[0]
			m := chaos.Meters[0]
			priceKey = envelope.PartitionKey(acme, events.AggregatePrice, events.PriceSeriesID(m.Code, m.Currency))
			var err error
			if priceHijack, err = chaos.HijackShard(ctx, r.H.DB["meter"], priceKey); err != nil {
				return err
			}
			// Versions 2, 3 and 4, effective while the load runs.
			for i, lead := range []time.Duration{8 * time.Second, 16 * time.Second, 24 * time.Second} {
				if _, err := r.Load.ActivatePrice(ctx, acme, m, lead); err != nil {
					return fmt.Errorf("activate version %d: %w", i+2, err)
				}
			}
			rows, err := priceHijack.Pending(ctx, priceKey)
			if err != nil {
				return err
			}
			if len(rows) != 3 {
				return fmt.Errorf("meter's outbox holds %d pending events of %s, want 3", len(rows), priceKey)
			}
			if err := publishReversed(ctx, r, priceHijack, rows); err != nil {
				return err
			}
			reversedPrices = len(rows)
			r.Note("published PriceActivated v4, v3, v2 of %s in that order", priceKey)
			// The closer's price, effective before its facts are sent.
			rec, err := r.Load.ActivatePrice(ctx, closer, m, 0)
			if err != nil {
				return err
			}
			select {
			case <-time.After(time.Until(rec.EffectiveAt) + time.Millisecond):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
		Faults: func(ctx context.Context, r *chaos.Run) error {
			if !r.At(ctx, 20*time.Second) {
				return ctx.Err()
			}
			return r.Fault(ctx, "a period's close published before its charges", func() error {
				billing := r.H.DB["billing"]
				shards, err := chaos.HijackAllShards(ctx, billing)
				if err != nil {
					return err
				}
				released := false
				defer func() {
					if !released {
						_ = shards.Release(context.WithoutCancel(ctx))
					}
				}()
				facts, err := r.Load.SendFacts(ctx, closer, chaos.Meters[0], closerFacts)
				if err != nil {
					return err
				}
				period := events.Period(facts[0].OccurredAt)
				for _, f := range facts {
					if events.Period(f.OccurredAt) != period {
						return fmt.Errorf("the closer's facts straddle a month boundary (%s, %s)", period, events.Period(f.OccurredAt))
					}
				}
				if err := chaos.Poll(ctx, time.Minute, "billing rates the closer's facts", func() (bool, string, error) {
					var n int
					err := billing.QueryRow(ctx, `SELECT count(*) FROM charge WHERE tenant_id = $1`, closer).Scan(&n)
					return n == len(facts), fmt.Sprintf("%d of %d charged", n, len(facts)), err
				}); err != nil {
					return err
				}
				if err := r.H.ClosePeriod(ctx, closer, period); err != nil {
					return err
				}
				if err := chaos.Poll(ctx, time.Minute, "billing closes "+closer+" "+period, func() (bool, string, error) {
					var status string
					err := billing.QueryRow(ctx, `SELECT status FROM billing_period WHERE tenant_id = $1 AND period = $2`,
						closer, period).Scan(&status)
					return status == "closed", status, err
				}); err != nil {
					return err
				}
				rows, err := shards.PendingOfTenant(ctx, closer)
				if err != nil {
					return err
				}
				var close []chaos.OutboxRow
				var charges []chaos.OutboxRow
				for _, row := range rows {
					var env struct {
						EventType string `json:"eventType"`
					}
					if err := json.Unmarshal(row.Envelope, &env); err != nil {
						return err
					}
					switch env.EventType {
					case events.TypeBillingPeriodClosed:
						close = append(close, row)
					case events.TypeChargeRated:
						charges = append(charges, row)
					default:
						return fmt.Errorf("billing's outbox holds a pending %s of %s", env.EventType, closer)
					}
				}
				if len(close) != 1 || len(charges) != len(facts) {
					return fmt.Errorf("billing's outbox holds %d closes and %d charges of %s pending, want 1 and %d",
						len(close), len(charges), closer, len(facts))
				}
				msgs := []chaos.KeyValue{{Key: close[0].Key, Value: close[0].Envelope}}
				closeFirst = []string{close[0].EventID}
				for i := len(charges) - 1; i >= 0; i-- {
					msgs = append(msgs, chaos.KeyValue{Key: charges[i].Key, Value: charges[i].Envelope})
					closeFirst = append(closeFirst, charges[i].EventID)
				}
				t0 = time.Now()
				if err := r.H.Kafka.Publish(ctx, close[0].Topic, msgs); err != nil {
					return err
				}
				if err := shards.MarkPublished(ctx, closeFirst); err != nil {
					return err
				}
				released = true
				if err := shards.Release(ctx); err != nil {
					return err
				}
				r.Note("published the close of %s %s, then its %d ChargeRated newest first, in %s", closer, period, len(charges),
					time.Since(t0).Round(100*time.Millisecond))
				return nil
			})
		},
		Verify: func(ctx context.Context, r *chaos.Run) error {
			for _, service := range []string{"usage", "billing", "query"} {
				n := r.Decisions.Outcome(service, "deferred", events.TypePriceActivated)
				if n < reversedPrices-1 {
					r.NotProven("%s deferred %d PriceActivated; the %d reversed versions should have made it wait %d times",
						service, n, reversedPrices, reversedPrices-1)
				} else {
					r.Note("%s deferred %d PriceActivated and applied them in version order", service, n)
				}
			}
			var evidence []int64
			if err := r.H.DB["usage"].QueryRow(ctx, `
				SELECT array_agg(version ORDER BY version) FROM price_evidence WHERE tenant_id = $1 AND meter_code = $2`,
				r.Tenants[0], chaos.Meters[0].Code).Scan(&evidence); err != nil {
				return err
			}
			if !slices.Equal(evidence, []int64{1, 2, 3, 4}) {
				r.Fail("usage holds price versions %v of the reversed series, want 1-4", evidence)
			}
			if len(closeFirst) == 0 {
				r.Fail("the close was never published before its charges")
				return nil
			}
			if n := r.Decisions.Outcome("invoice", "deferred", events.TypeBillingPeriodClosed); n < 1 {
				r.NotProven("invoice never deferred a BillingPeriodClosed: nothing shows that a close ahead of its charges waits for them")
			} else {
				r.Note("invoice deferred BillingPeriodClosed %d times until the charges it counts came", n)
			}
			var issued int
			if err := r.H.DB["invoice"].QueryRow(ctx, `
				SELECT count(*) FROM invoice WHERE tenant_id = $1 AND status = 'issued'`, closer).Scan(&issued); err != nil {
				return err
			}
			if issued != 1 {
				r.Fail("%s has %d issued invoices, want 1", closer, issued)
			}
			return nil
		},
	}
}

// publishReversed publishes the rows newest first, marks them published
// and gives the shard back.
func publishReversed(ctx context.Context, r *chaos.Run, h *chaos.ShardHijack, rows []chaos.OutboxRow) error {
	msgs := make([]chaos.KeyValue, 0, len(rows))
	ids := make([]string, 0, len(rows))
	for i := len(rows) - 1; i >= 0; i-- {
		msgs = append(msgs, chaos.KeyValue{Key: rows[i].Key, Value: rows[i].Envelope})
		ids = append(ids, rows[i].EventID)
	}
	if err := r.H.Kafka.Publish(ctx, rows[0].Topic, msgs); err != nil {
		return err
	}
	if err := h.MarkPublished(ctx, ids); err != nil {
		return err
	}
	return h.Release(ctx)
}

func sleepOrDone(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
