// Package pgsession is the session every PostgreSQL connection of the
// services runs with, and every test's connection too, so that a test plans
// and encodes its statements as production does:
//   - decimals and ids are sent in binary (pgcodec.Register);
//   - JIT compilation is off: the services' statements are short, and JIT
//     compiles a statement whose estimated cost passes jit_above_cost
//     (100,000) at every execution, which took the outbox's gauges 400 ms a
//     refresh where the statement itself took 40 ms (docs/cpu-per-fact.md,
//     step 16);
//   - random_page_cost is 1.1, not PostgreSQL's 4: a service's working set
//     is in memory, where a page read out of key order costs about what the
//     next page does. At 4 the planner priced each row an index scan reads
//     at four pages, and read a relay's claim (a shard's oldest pending
//     entries, LIMIT a batch) by reading the shard's whole queue with a
//     bitmap and sorting it whenever the queue's pages were not all-visible,
//     which is always while relays run: 3,200 entries read for a batch of
//     500 (pkg/outbox's TestClaimQueryDoesNotScanTheBacklog).
package pgsession

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/usagebilling/billing/pkg/pgcodec"
)

// Params are the run-time parameters each connection starts with.
func Params() map[string]string {
	return map[string]string{"jit": "off", "random_page_cost": "1.1"}
}

// Configure sets Params on cfg's connections and registers the binary
// codecs on each new connection (after any AfterConnect cfg already has).
func Configure(cfg *pgxpool.Config) {
	for k, v := range Params() {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	after := cfg.AfterConnect
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		pgcodec.Register(conn.TypeMap())
		if after != nil {
			return after(ctx, conn)
		}
		return nil
	}
}
