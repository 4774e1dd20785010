package outbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// Config tunes a relay. Zero values take the defaults shown.
type Config struct {
	// Brokers are the Kafka bootstrap servers (required).
	Brokers []string
	// Name identifies the relay in logs and as the Kafka client id ("outbox-relay").
	Name string
	// BatchSize is the most rows sent in one round (500).
	BatchSize int
	// Linger is how long the producer gathers a round's messages before it
	// sends a round smaller than BatchSize (2ms); a full round is sent as
	// soon as its last message is handed over. Either way a round goes to
	// each broker in one produce request (see send).
	Linger time.Duration
	// PollInterval is the fallback poll when no notification arrives (1s).
	PollInterval time.Duration
	// LeaseTTL is how long a shard lease lasts without renewal (15s); a dead
	// relay's shards are taken over after it.
	LeaseTTL time.Duration
	// BackoffMin and BackoffMax bound the jittered exponential backoff of a
	// shard whose sends fail (200ms, 30s).
	BackoffMin, BackoffMax time.Duration
	// MaxAttempts is how many failed sends a row survives before it becomes a
	// dead letter (10). Only failures that blame the message itself count
	// towards it; a broker outage is retried for as long as it lasts.
	MaxAttempts int
	// Retention is how long sent rows are kept, from their creation, before
	// they are purged (24h).
	Retention time.Duration
	// PurgeInterval is how often sent rows are purged (1m), PurgeBatch
	// how many rows one purge statement deletes (1000).
	PurgeInterval time.Duration
	PurgeBatch    int
	// StatsInterval is how often the backlog gauges are refreshed (5s).
	StatsInterval time.Duration
	// Logger receives the relay's logs (discarded when nil).
	Logger *slog.Logger
	// Registerer receives the relay's metrics (none registered when nil).
	Registerer prometheus.Registerer
}

func (c Config) withDefaults() Config {
	set := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if c.Name == "" {
		c.Name = "outbox-relay"
	}
	if c.BatchSize <= 0 {
		c.BatchSize = 500
	}
	set(&c.Linger, 2*time.Millisecond)
	set(&c.PollInterval, time.Second)
	set(&c.LeaseTTL, 15*time.Second)
	set(&c.BackoffMin, 200*time.Millisecond)
	set(&c.BackoffMax, 30*time.Second)
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 10
	}
	set(&c.Retention, 24*time.Hour)
	set(&c.PurgeInterval, time.Minute)
	if c.PurgeBatch <= 0 {
		c.PurgeBatch = 1000
	}
	set(&c.StatsInterval, 5*time.Second)
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c
}

// Relay sends outbox rows to Kafka. Any number of relays may run against one
// database; they divide the shards between them.
type Relay struct {
	pool    *pgxpool.Pool
	cfg     Config
	log     *slog.Logger
	owner   uuid.UUID
	metrics *metrics

	producer sarama.SyncProducer
	shards   []int16             // shards this relay holds, refreshed with the leases
	leasedAt time.Time           // last lease refresh
	backoff  map[int16]shardWait // shards whose last send failed
	rotate   int                 // start offset into shards, for fairness between them
	short    bool                // holds fewer shards than its share
}

// shortRefresh is the least time between lease refreshes of a relay short of
// its share of shards.
const shortRefresh = 100 * time.Millisecond

type shardWait struct {
	failures int
	until    time.Time
}

// NewRelay returns a relay over the database of pool. Start it with Run.
func NewRelay(pool *pgxpool.Pool, cfg Config) (*Relay, error) {
	cfg = cfg.withDefaults()
	if len(cfg.Brokers) == 0 {
		return nil, errors.New("new outbox relay: no Kafka brokers configured")
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("new outbox relay: %w", err)
	}
	owner, err := uuid.NewV7()
	if err != nil {
		return nil, fmt.Errorf("new outbox relay: owner token: %w", err)
	}
	return &Relay{
		pool:    pool,
		cfg:     cfg,
		log:     cfg.Logger.With("relay", cfg.Name, "owner", owner),
		owner:   owner,
		metrics: m,
		backoff: map[int16]shardWait{},
	}, nil
}

// Run relays until ctx is done, then gives up its leases so that other
// relays take its shards over at once. It returns nil on a clean stop; a
// failing database or broker is logged and retried, never returned.
func (r *Relay) Run(ctx context.Context) error {
	wake := make(chan struct{}, 1)
	bg, stopBG := context.WithCancel(ctx)
	done := make(chan struct{}, 3)
	go func() { r.listen(bg, wake); done <- struct{}{} }()
	go func() { r.every(bg, r.cfg.PurgeInterval, r.purge); done <- struct{}{} }()
	go func() { r.every(bg, r.cfg.StatsInterval, r.refreshStats); done <- struct{}{} }()
	defer func() {
		stopBG()
		for range 3 {
			<-done
		}
		r.shutdown()
	}()

	r.log.Info("outbox relay started", "batch", r.cfg.BatchSize, "leaseTTL", r.cfg.LeaseTTL)
	for ctx.Err() == nil {
		// Renew leases every LeaseTTL/3; a relay short of its share of
		// shards looks again as soon as it is woken (another relay released
		// some) or polls.
		if since := time.Since(r.leasedAt); since > r.cfg.LeaseTTL/3 || (r.short && since > shortRefresh) {
			if err := r.refreshLeases(ctx); err != nil {
				if ctx.Err() != nil {
					break
				}
				r.log.Warn("refresh outbox leases", "err", err)
				r.sleep(ctx, wake, r.cfg.BackoffMin)
				continue
			}
		}
		sent, err := r.round(ctx)
		if err != nil && ctx.Err() == nil {
			r.log.Warn("outbox relay round", "err", err)
		}
		if sent == r.cfg.BatchSize && err == nil {
			continue // more is waiting
		}
		r.sleep(ctx, wake, r.nextWait())
	}
	return nil
}

// sleep waits for a notification, the duration d, or the end of ctx.
func (r *Relay) sleep(ctx context.Context, wake <-chan struct{}, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-wake:
	case <-t.C:
	}
}

// nextWait is the time until the next poll: the poll interval, or sooner if
// a backed-off shard becomes due.
func (r *Relay) nextWait() time.Duration {
	wait := r.cfg.PollInterval
	refresh := r.cfg.LeaseTTL / 3
	if r.short {
		refresh = r.cfg.PollInterval
	}
	if lease := refresh - time.Since(r.leasedAt); lease < wait {
		wait = max(lease, time.Millisecond)
	}
	now := time.Now()
	for _, w := range r.backoff {
		if d := w.until.Sub(now); d < wait {
			wait = max(d, time.Millisecond)
		}
	}
	return wait
}

// every runs fn every interval until ctx is done.
func (r *Relay) every(ctx context.Context, interval time.Duration, fn func(context.Context)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		fn(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// listen forwards notifications of committed appends to wake, reconnecting
// with backoff when the connection breaks. The fallback poll covers the gaps.
func (r *Relay) listen(ctx context.Context, wake chan<- struct{}) {
	delay := r.cfg.BackoffMin
	for ctx.Err() == nil {
		err := r.listenOnce(ctx, wake)
		if ctx.Err() != nil {
			return
		}
		r.log.Warn("outbox listen connection lost; polling until it is back", "err", err)
		r.sleep(ctx, nil, jitter(delay))
		delay = min(delay*2, r.cfg.BackoffMax)
	}
}

func (r *Relay) listenOnce(ctx context.Context, wake chan<- struct{}) error {
	conn, err := pgx.ConnectConfig(ctx, r.pool.Config().ConnConfig.Copy())
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+Channel); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return fmt.Errorf("wait for notification: %w", err)
		}
		select {
		case wake <- struct{}{}:
		default:
		}
	}
}

// shutdown closes the producer and hands the relay's shards back.
func (r *Relay) shutdown() {
	if r.producer != nil {
		_ = r.producer.Close()
		r.producer = nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.releaseAll(ctx); err != nil {
		r.log.Warn("release outbox leases; other relays take over when they expire", "err", err)
	}
	r.metrics.ownedShards.Set(0)
	r.log.Info("outbox relay stopped")
}

// jitter spreads d over [d/2, d).
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2)
}
