package outbox

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// refreshLeases records the relay as alive, renews the leases it holds, and
// moves its share of shards towards NumShards / live relays: it gives up
// extra shards and takes free or expired ones. Giving up happens only here,
// between rounds, so a shard is never handed over with a send in flight.
func (r *Relay) refreshLeases(ctx context.Context) error {
	alive, held, err := r.heartbeat(ctx)
	if err != nil {
		return err
	}
	target := (NumShards + max(alive, 1) - 1) / max(alive, 1)
	switch {
	case len(held) > target:
		released, err := r.releaseExtra(ctx, held, len(held)-target)
		if err != nil {
			return fmt.Errorf("release extra shards: %w", err)
		}
		held = slices.DeleteFunc(held, func(s int16) bool { return slices.Contains(released, s) })
	case len(held) < target:
		got, err := r.acquire(ctx, target-len(held))
		if err != nil {
			return fmt.Errorf("acquire shards: %w", err)
		}
		if len(got) > 0 {
			r.log.Debug("acquired outbox shards", "shards", got)
		}
		held = append(held, got...)
	}
	r.hold(held, target)
	return nil
}

// heartbeat records the relay as alive, forgets dead relays and renews the
// relay's leases, in one round trip; it returns the number of live relays
// and the shards the relay holds.
func (r *Relay) heartbeat(ctx context.Context) (alive int, held []int16, err error) {
	ttl := r.cfg.LeaseTTL
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO outbox_relay (owner, seen_at) VALUES ($1, now())
		ON CONFLICT (owner) DO UPDATE SET seen_at = now()`, r.owner)
	b.Queue(`DELETE FROM outbox_relay WHERE seen_at < now() - $1::interval`, ttl)
	b.Queue(`SELECT count(*) FROM outbox_relay`)
	b.Queue(`UPDATE outbox_shard SET lease_until = now() + $2::interval
		WHERE owner = $1 RETURNING shard`, r.owner, ttl)
	res := r.pool.SendBatch(ctx, b)
	defer res.Close()
	if _, err := res.Exec(); err != nil {
		return 0, nil, fmt.Errorf("heartbeat: %w", err)
	}
	if _, err := res.Exec(); err != nil {
		return 0, nil, fmt.Errorf("forget dead relays: %w", err)
	}
	if err := res.QueryRow().Scan(&alive); err != nil {
		return 0, nil, fmt.Errorf("count relays: %w", err)
	}
	held, err = collectShards(res)
	if err != nil {
		return 0, nil, fmt.Errorf("renew leases: %w", err)
	}
	if err := res.Close(); err != nil {
		return 0, nil, fmt.Errorf("renew leases: %w", err)
	}
	r.leasedAt = time.Now()
	return alive, held, nil
}

// releaseExtra gives up n of the held shards and returns them. Idle shards
// go first: a shard with a backlog stays with the relay already sending it,
// so a rebalance never stalls a hot key. The NOTIFY wakes the other relays to
// take the released shards.
func (r *Relay) releaseExtra(ctx context.Context, held []int16, n int) ([]int16, error) {
	rows, err := r.pool.Query(ctx, `
		WITH released AS (
			UPDATE outbox_shard SET owner = NULL, lease_until = '-infinity'
			WHERE owner = $1 AND shard IN (
				SELECT s FROM unnest($2::smallint[]) AS s
				ORDER BY EXISTS (SELECT 1 FROM outbox_pending WHERE shard = s), s DESC
				LIMIT $3)
			RETURNING shard)
		SELECT shard, pg_notify('`+Channel+`', 'rebalance') IS NULL FROM released`, r.owner, held, n)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (int16, error) {
		var s int16
		var ignored bool
		return s, row.Scan(&s, &ignored)
	})
}

// acquire takes up to n free or expired shards and returns them.
func (r *Relay) acquire(ctx context.Context, n int) ([]int16, error) {
	rows, err := r.pool.Query(ctx, `UPDATE outbox_shard SET owner = $1, lease_until = now() + $2::interval
		WHERE shard IN (SELECT shard FROM outbox_shard
		                WHERE owner IS NULL OR lease_until < now()
		                ORDER BY random() LIMIT $3 FOR UPDATE SKIP LOCKED)
		RETURNING shard`, r.owner, r.cfg.LeaseTTL, n)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int16])
}

// hold makes held the relay's shards, forgetting the backoff of shards it no
// longer holds; short records that it holds fewer than its target.
func (r *Relay) hold(held []int16, target int) {
	slices.Sort(held)
	for s := range r.backoff {
		if !slices.Contains(held, s) {
			delete(r.backoff, s)
		}
	}
	r.shards = held
	r.short = len(held) < target
	r.metrics.ownedShards.Set(float64(len(held)))
}

func collectShards(res pgx.BatchResults) ([]int16, error) {
	rows, err := res.Query()
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int16])
}

// releaseAll hands every shard back and leaves the relay table.
func (r *Relay) releaseAll(ctx context.Context) error {
	b := &pgx.Batch{}
	b.Queue(`UPDATE outbox_shard SET owner = NULL, lease_until = '-infinity' WHERE owner = $1`, r.owner)
	b.Queue(`DELETE FROM outbox_relay WHERE owner = $1`, r.owner)
	return r.pool.SendBatch(ctx, b).Close()
}
