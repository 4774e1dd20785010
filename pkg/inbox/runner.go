package inbox

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/usagebilling/billing/pkg/kafkaconf"
)

// RunnerConfig configures a Runner. Zero durations and sizes take the
// defaults named on each field.
type RunnerConfig struct {
	// Brokers are the Kafka bootstrap addresses.
	Brokers []string
	// Group is the consumer group id.
	Group string
	// Topics are the topics to consume.
	Topics []string
	// BatchSize is the most messages decided in one transaction (500),
	// from any of the partitions the consumer holds.
	BatchSize int
	// MaxWait is how long a batch waits for more messages after its first
	// (15ms) once a second one has come within loneWait of it; a message
	// that no other follows within loneWait (5ms, or MaxWait when shorter)
	// is decided alone then. A batch is decided once it holds BatchSize
	// messages or its wait has passed. What arrives while a batch is decided
	// waits for the next, so the busier the consumer, the larger its
	// batches. The longer wait of a burst makes larger batches of what a
	// producer's relay sends (each batch pays its transaction whatever its
	// size); the short one keeps a lone event's latency low
	// (docs/cpu-per-fact.md, step 31).
	MaxWait time.Duration
	// Lanes is how many batches are decided at once (1): each partition the
	// consumer holds is given to one lane, whose batches take from its
	// partitions only, one batch after the other. More lanes overlap one
	// batch's database round trips with another's work, at the cost of
	// smaller batches, each paying its begin, claims and commit.
	Lanes int
	// SweepInterval is the period of the deferred sweep and of the gauge
	// refresh (2s).
	SweepInterval time.Duration
	// SweepLimit is the most deferred events one sweep decides again (500).
	SweepLimit int
	// MinBackoff and MaxBackoff bound the jittered exponential backoff after
	// a transient failure (100ms, 5s).
	MinBackoff time.Duration
	MaxBackoff time.Duration
	// Sarama, when set, is the client configuration to start from (TLS,
	// SASL, timeouts); its consumer settings, fetch sizes included
	// (kafkaconf.SetSizeLimits), are overridden. Nil means kafkaconf.New.
	Sarama *sarama.Config
	// Logger receives the runner's logs. Nil discards.
	Logger *slog.Logger
	// Registerer registers inbox_batch_duration_seconds,
	// inbox_batch_messages and inbox_transient_errors_total; nil registers
	// none.
	Registerer prometheus.Registerer
}

// Runner consumes topics through a Kafka consumer group and decides the
// messages of every partition it holds in batches through an Inbox, one
// transaction per batch, one batch at a time, each partition's messages in
// their order. A message's offset is marked only after its batch committed. A
// transient failure (the database is down) is retried with backoff, the same
// batch again, never quarantined and never marked; a quarantined message is
// marked like any decided one, so the healthy events behind it keep flowing.
// A handler that fails with an unclassified error is retried the same way
// until its event's budget (Options.RetryBudget) is used up, then its event
// is quarantined; one that panics has its event quarantined at once. Neither
// stops the consumer.
type Runner struct {
	pool    *pgxpool.Pool
	ib      *Inbox
	cfg     RunnerConfig
	log     *slog.Logger
	metrics *runnerMetrics
}

// NewRunner returns a Runner deciding with ib in transactions on pool.
func NewRunner(pool *pgxpool.Pool, ib *Inbox, cfg RunnerConfig) (*Runner, error) {
	var problems []error
	if pool == nil {
		problems = append(problems, errors.New("nil pool"))
	}
	if ib == nil {
		problems = append(problems, errors.New("nil inbox"))
	}
	if len(cfg.Brokers) == 0 {
		problems = append(problems, errors.New("no brokers"))
	}
	if cfg.Group == "" {
		problems = append(problems, errors.New("no consumer group"))
	}
	if len(cfg.Topics) == 0 {
		problems = append(problems, errors.New("no topics"))
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("new inbox runner: %w", errors.Join(problems...))
	}
	setDefault(&cfg.BatchSize, 500)
	setDefault(&cfg.MaxWait, 15*time.Millisecond)
	setDefault(&cfg.Lanes, 1)
	setDefault(&cfg.SweepInterval, 2*time.Second)
	setDefault(&cfg.SweepLimit, 500)
	setDefault(&cfg.MinBackoff, 100*time.Millisecond)
	setDefault(&cfg.MaxBackoff, 5*time.Second)
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = cfg.MinBackoff
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "inbox_runner", "service", ib.opts.Service, "group", cfg.Group)
	m, err := newRunnerMetrics(cfg.Registerer, ib.opts.Service)
	if err != nil {
		return nil, fmt.Errorf("new inbox runner: register metrics: %w", err)
	}
	return &Runner{pool: pool, ib: ib, cfg: cfg, log: log, metrics: m}, nil
}

func setDefault[T int | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// Run consumes and sweeps until ctx is done, then leaves the group cleanly
// (committing the marked offsets) and returns. Broker failures are logged and
// retried; the error reports only a failure to leave the group.
func (r *Runner) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() { r.maintain(ctx) })
	err := r.consume(ctx)
	wg.Wait()
	return err
}

func (r *Runner) saramaConfig() *sarama.Config {
	c := r.cfg.Sarama
	if c == nil {
		c = kafkaconf.New("inbox-" + r.ib.opts.Service)
	} else {
		copied := *c
		c = &copied
	}
	c.Version = kafkaconf.Version
	// Fetch whole batches and never skip one as too big: an envelope over
	// envelope.MaxBytes is read and quarantined as too_large by the decoder.
	kafkaconf.SetSizeLimits(c)
	c.Consumer.Offsets.Initial = sarama.OffsetOldest
	c.Consumer.Offsets.AutoCommit.Enable = true
	c.Consumer.Return.Errors = true
	c.ChannelBufferSize = max(c.ChannelBufferSize, r.cfg.BatchSize)
	return c
}

func (r *Runner) consume(ctx context.Context) error {
	var group sarama.ConsumerGroup
	for attempt := 0; ; attempt++ {
		g, err := sarama.NewConsumerGroup(r.cfg.Brokers, r.cfg.Group, r.saramaConfig())
		if err == nil {
			group = g
			break
		}
		d := r.backoff(attempt)
		r.log.WarnContext(ctx, "join consumer group failed; retrying", "err", err, "backoff", d)
		if !sleep(ctx, d) {
			return nil
		}
	}
	logged := make(chan struct{})
	go func() {
		defer close(logged)
		for err := range group.Errors() {
			r.log.WarnContext(ctx, "consumer group error", "err", err)
		}
	}()
	h := &groupHandler{r: r}
	for attempt := 0; ctx.Err() == nil; {
		err := group.Consume(ctx, r.cfg.Topics, h)
		if err == nil || ctx.Err() != nil {
			attempt = 0
			continue // a rebalance ended the session, or we are stopping
		}
		if errors.Is(err, sarama.ErrClosedConsumerGroup) {
			break
		}
		d := r.backoff(attempt)
		attempt++
		r.log.WarnContext(ctx, "consume failed; retrying", "err", err, "backoff", d)
		sleep(ctx, d)
	}
	err := group.Close()
	<-logged
	if err != nil {
		return fmt.Errorf("leave consumer group %s: %w", r.cfg.Group, err)
	}
	return nil
}

// maintain sweeps deferred events and refreshes the gauges periodically.
func (r *Runner) maintain(ctx context.Context) {
	t := time.NewTicker(r.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := r.ib.Sweep(ctx, r.pool, r.cfg.SweepLimit)
		if err != nil && ctx.Err() == nil {
			r.metrics.transientErrors.Inc()
			r.log.WarnContext(ctx, "sweep of deferred events failed", "err", err)
		}
		if n > 0 {
			r.log.InfoContext(ctx, "sweep applied deferred events", "applied", n)
		}
		if _, err := r.ib.RefreshGauges(ctx, r.pool); err != nil && ctx.Err() == nil {
			r.log.WarnContext(ctx, "refresh inbox gauges failed", "err", err)
		}
	}
}

// backoff returns the jittered delay before retry number attempt (from 0):
// exponential from MinBackoff to MaxBackoff, then drawn from [d/2, d].
func (r *Runner) backoff(attempt int) time.Duration {
	d := r.cfg.MinBackoff
	for i := 0; i < attempt && d < r.cfg.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, r.cfg.MaxBackoff)
	return d/2 + rand.N(d/2+1)
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// groupHandler decides the messages of the partitions a session claims in
// Lanes streams of batches. Each claim's goroutine only forwards its
// messages, in order, to its partition's lane, which cuts batches of up to
// BatchSize out of all its partitions together: at a given rate a batch
// holds the messages of every partition of the lane that arrived while the
// previous one was decided, not one partition's share, and every batch pays
// its begin, claims, savepoints and commit once. A lane decides one batch at
// a time, so a partition's messages are still decided in their order, each
// batch after the previous one committed.
type groupHandler struct {
	r *Runner
	// lanes are the session's gatherers, set by Setup before any claim
	// starts and left alone until Cleanup, after every claim returned.
	lanes []*gatherer
}

// gatherer is one session's stream of messages and the goroutine deciding
// them.
type gatherer struct {
	in   chan *sarama.ConsumerMessage
	done chan struct{}
}

// Setup starts the session's lanes.
func (h *groupHandler) Setup(s sarama.ConsumerGroupSession) error {
	h.lanes = make([]*gatherer, h.r.cfg.Lanes)
	for i := range h.lanes {
		g := &gatherer{in: make(chan *sarama.ConsumerMessage, h.r.cfg.BatchSize), done: make(chan struct{})}
		h.lanes[i] = g
		go func() {
			defer close(g.done)
			h.r.decideStream(s, g.in)
		}()
	}
	return nil
}

// Cleanup waits for the lanes, which stop deciding once the session's
// context is done (before Cleanup is called), then commits the offsets
// marked in the ending session synchronously.
func (h *groupHandler) Cleanup(s sarama.ConsumerGroupSession) error {
	for _, g := range h.lanes {
		<-g.done
	}
	s.Commit()
	return nil
}

// lane returns the gatherer of a topic's partition: the same one for the
// whole session, so the partition's messages stay in one ordered stream.
func (h *groupHandler) lane(topic string, partition int32) *gatherer {
	f := fnv.New32a()
	_, _ = f.Write([]byte(topic))
	return h.lanes[(uint64(f.Sum32())+uint64(partition))%uint64(len(h.lanes))]
}

// ConsumeClaim forwards the claim's messages, in order, to the session's
// gatherer until the claim or the session ends.
func (h *groupHandler) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	ctx := s.Context()
	in := h.lane(claim.Topic(), claim.Partition()).in
	for {
		select {
		case m, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			select {
			case in <- m:
			case <-ctx.Done():
				return nil
			}
		case <-ctx.Done():
			return nil
		}
	}
}

// loneWait is how long a batch's first message waits for a second before
// it is decided alone (RunnerConfig.MaxWait).
const loneWait = 5 * time.Millisecond

// decideStream gathers a batch (see gather), decides and commits it, and
// marks the last message of each partition in it; it repeats until the
// session ends.
func (r *Runner) decideStream(s sarama.ConsumerGroupSession, in <-chan *sarama.ConsumerMessage) {
	ctx := s.Context()
	batch := make([]*sarama.ConsumerMessage, 0, r.cfg.BatchSize)
	linger := time.NewTimer(r.cfg.MaxWait) // gather stops it on every return
	for {
		var ok bool
		if batch, ok = r.gather(ctx, in, batch[:0], linger); !ok {
			return
		}
		if !r.handle(ctx, s, batch) {
			return
		}
	}
}

// gather appends the next batch to batch: it blocks for the first message,
// then takes what arrives within loneWait of it, or within MaxWait of it once
// a second has come, up to BatchSize, from any partition. It returns false
// when ctx ends first. linger is the lane's timer, stopped on return.
func (r *Runner) gather(ctx context.Context, in <-chan *sarama.ConsumerMessage, batch []*sarama.ConsumerMessage, linger *time.Timer) ([]*sarama.ConsumerMessage, bool) {
	defer linger.Stop()
	select {
	case m := <-in:
		batch = append(batch, m)
	case <-ctx.Done():
		return batch, false
	}
	first := time.Now()
	linger.Reset(min(loneWait, r.cfg.MaxWait))
	for len(batch) < r.cfg.BatchSize {
		select {
		case m := <-in:
			batch = append(batch, m)
			if len(batch) == 2 { // a burst: wait for the rest of it
				linger.Reset(r.cfg.MaxWait - time.Since(first))
			}
		case <-linger.C:
			return batch, true
		case <-ctx.Done():
			return batch, false
		}
	}
	return batch, true
}

// handle decides batch until it commits (true) or the session ends (false).
func (r *Runner) handle(ctx context.Context, s sarama.ConsumerGroupSession, batch []*sarama.ConsumerMessage) bool {
	msgs := make([]Message, len(batch))
	for i, m := range batch {
		msgs[i] = Message{Raw: m.Value, Topic: m.Topic, Partition: m.Partition, Offset: m.Offset}
	}
	for attempt := 0; ; attempt++ {
		start := time.Now()
		ds, err := r.decide(ctx, msgs)
		if err == nil {
			r.metrics.batchDuration.Observe(time.Since(start).Seconds())
			r.metrics.batchMessages.Observe(float64(len(batch)))
			r.ib.Observe(ds)
			for _, m := range lastOfEachPartition(batch) {
				s.MarkMessage(m, "")
			}
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		r.metrics.transientErrors.Inc()
		d := r.backoff(attempt)
		msg := "inbox batch failed; retrying the same batch"
		if retry := (*RetryError)(nil); errors.As(err, &retry) {
			msg = "handler failed; retrying the same batch within the event's budget"
		}
		first, last := batch[0], batch[len(batch)-1]
		r.log.WarnContext(ctx, msg, "err", err, "messages", len(batch),
			"first", position(first), "last", position(last),
			"attempt", attempt+1, "backoff", d)
		if !sleep(ctx, d) {
			return false
		}
	}
}

// lastOfEachPartition returns the last message of each partition in batch,
// which holds each partition's messages in their order: marking it commits
// that partition's offsets up to it.
func lastOfEachPartition(batch []*sarama.ConsumerMessage) []*sarama.ConsumerMessage {
	var last []*sarama.ConsumerMessage
next:
	for i := len(batch) - 1; i >= 0; i-- {
		m := batch[i]
		for _, l := range last {
			if l.Partition == m.Partition && l.Topic == m.Topic {
				continue next
			}
		}
		last = append(last, m)
	}
	return last
}

// position names a message's topic, partition and offset for the logs.
func position(m *sarama.ConsumerMessage) string {
	return fmt.Sprintf("%s/%d@%d", m.Topic, m.Partition, m.Offset)
}

func (r *Runner) decide(ctx context.Context, msgs []Message) ([]Decision, error) {
	return r.ib.DecideCommit(ctx, r.pool, msgs)
}

// DecideTx begins every transaction events are decided in: a consumed
// batch, a sweep's chunk. Its statements run on plans made once per
// connection (plan_cache_mode force_generic_plan, for this transaction
// only). Left to choose, PostgreSQL planned the handlers' set-based
// statements (query's Project, billing's RateUsages, invoice's AddCharges)
// afresh for every batch, 0.6-2.5 ms each, and the plans it made were no
// better than the generic one: they take arrays, whose contents no plan
// sees (decision 0017, step 15).
var DecideTx = pgx.TxOptions{BeginQuery: "BEGIN; SET LOCAL plan_cache_mode = force_generic_plan"}

// DecideCommit decides msgs in a transaction of its own on pool (DecideTx)
// and commits it: how the runner decides a batch. An error is transient,
// as Decide's, and nothing of the batch is committed.
func (ib *Inbox) DecideCommit(ctx context.Context, pool *pgxpool.Pool, msgs []Message) ([]Decision, error) {
	tx, err := pool.BeginTx(ctx, DecideTx)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	ds, err := ib.Decide(ctx, tx, msgs)
	if err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	return ds, nil
}
