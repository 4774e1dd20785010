package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"
)

// ShardSet is every outbox shard of one database, taken from its relays
// (see ShardHijack): nothing of that service is published until Release.
type ShardSet struct {
	pool   *pgxpool.Pool
	shards []*ShardHijack
}

// HijackAllShards takes every outbox shard of the database at pool.
func HijackAllShards(ctx context.Context, pool *pgxpool.Pool) (*ShardSet, error) {
	rows, err := pool.Query(ctx, `
		UPDATE outbox_shard SET owner = gen_random_uuid(), lease_until = now() + interval '10 minutes'
		RETURNING shard, owner::text`)
	if err != nil {
		return nil, fmt.Errorf("hijack the outbox shards: %w", err)
	}
	shards, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*ShardHijack, error) {
		h := &ShardHijack{pool: pool}
		return h, row.Scan(&h.Shard, &h.owner)
	})
	if err != nil {
		return nil, fmt.Errorf("hijack the outbox shards: %w", err)
	}
	return &ShardSet{pool: pool, shards: shards}, nil
}

// PendingOfTenant returns tenant's unpublished rows (those with a pending
// entry; a dead letter has none), oldest first.
func (s *ShardSet) PendingOfTenant(ctx context.Context, tenant string) ([]OutboxRow, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT e.event_id::text, e.topic, e.partition_key, e.envelope
		FROM outbox_event e JOIN outbox_pending p ON p.shard = e.shard AND p.id = e.id
		WHERE split_part(e.partition_key, '|', 1) = $1 ORDER BY e.id`, tenant)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (r OutboxRow, err error) {
		err = row.Scan(&r.EventID, &r.Topic, &r.Key, &r.Envelope)
		return
	})
}

// MarkPublished marks rows published, as the relay would after the ack.
func (s *ShardSet) MarkPublished(ctx context.Context, ids []string) error {
	if len(s.shards) == 0 {
		return errors.New("no shard held")
	}
	return s.shards[0].MarkPublished(ctx, ids)
}

// Release hands every shard back to the relays.
func (s *ShardSet) Release(ctx context.Context) error {
	var errs []error
	for _, h := range s.shards {
		errs = append(errs, h.Release(ctx))
	}
	return errors.Join(errs...)
}

// SendFacts sends n usage facts of meter m for tenant in one usage:batch
// request, now, retried like the load's until accepted (at most two
// minutes). They are the ledger's like the load's.
func (ld *Load) SendFacts(ctx context.Context, tenant string, m Meter, n int) ([]*Fact, error) {
	facts := make([]*Fact, n)
	ld.ledger.mu.Lock()
	for i := range facts {
		f := &Fact{Tenant: tenant, SourceEventID: fmt.Sprintf("%s-%s-%04d", tenant, m.Code, i), Meter: m.Code,
			Quantity: decimal.New(int64(1+(i*613)%9000), -2)}
		k := factKey(f.Tenant, f.SourceEventID)
		if _, dup := ld.ledger.facts[k]; dup {
			ld.ledger.mu.Unlock()
			return nil, fmt.Errorf("fact %s made twice", k)
		}
		ld.ledger.facts[k] = f
		ld.ledger.order = append(ld.ledger.order, f)
		facts[i] = f
	}
	ld.ledger.mu.Unlock()
	if err := ld.send(ctx, item{tenant: tenant, facts: facts, batch: true}, time.Now().Add(2*time.Minute), nil); err != nil {
		return nil, err
	}
	ld.ledger.mu.Lock()
	defer ld.ledger.mu.Unlock()
	for _, f := range facts {
		if !f.Accepted {
			return nil, fmt.Errorf("usage fact %s/%s not accepted within two minutes", tenant, f.SourceEventID)
		}
	}
	return facts, nil
}

// ClosePeriod closes tenant's period through billing's API (202), retried
// through outages with one Idempotency-Key.
func (h *Harness) ClosePeriod(ctx context.Context, tenant, period string) error {
	_, err := h.command(ctx, "billing", "/v1/tenants/"+tenant+"/periods/"+period+"/close", tenant, nil,
		fmt.Sprintf("chaos-close-%s-%s", tenant, period), http.StatusAccepted)
	return err
}

// Poll calls cond every 200ms until it is true, it fails, or timeout.
func Poll(ctx context.Context, timeout time.Duration, what string, cond func() (bool, string, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, status, err := cond()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %s (%s)", what, timeout, status)
		}
		if !sleepCtx(ctx, 200*time.Millisecond) {
			return ctx.Err()
		}
	}
}
