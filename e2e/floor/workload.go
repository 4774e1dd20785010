package floor

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/outbox"
)

// The one tenant, meter and price of the floor, as the load tool's.
const (
	tenantID     = "floor-t0"
	meterCode    = "load_calls"
	currency     = "USD"
	sourceSystem = "floor"
)

var unitPrice = decimal.RequireFromString("0.001")

// workload is the per-fact database work, on one connection per service
// database.
type workload struct {
	cfg     Config
	q       map[string]sqlcQuery
	usage   *pgx.Conn
	billing *pgx.Conn
	invoice *pgx.Conn
	query   *pgx.Conn
	owner   uuid.UUID // the relays' owner token (one relay per database holds every shard)
	shards  []int16
	rotate  int
	seq     int // facts made so far, for unique source event ids
	batches int

	// Encoded envelopes of a real UsageAccepted and ChargeRated: the bytes
	// the outbox stores and the payload query projects. The floor stores
	// the same bytes for every fact (PostgreSQL does not look inside the
	// bytea; the jsonb payload is parsed whatever it says).
	usageEnv, chargeEnv     []byte
	usagePayload, chargePay []byte
	usageDigest, chargeDig  string

	commitsPerBatch int
}

func newWorkload(ctx context.Context, cfg Config, qs map[string]sqlcQuery, conns map[string]*pgx.Conn) (*workload, error) {
	w := &workload{cfg: cfg, q: qs, usage: conns["usage"], billing: conns["billing"],
		invoice: conns["invoice"], query: conns["query"], owner: uuid.Must(uuid.NewV7())}
	for s := range outbox.NumShards {
		w.shards = append(w.shards, int16(s))
	}
	for _, name := range []string{"LockAcceptanceShared", "AcceptanceCut", "PriceEvidenceForMeters", "usage.InsertUsageFacts",
		"TenantSettings", "LockPeriodsShared", "RateUsages", "billing.FoldParts", "AddCharges", "invoice.FoldParts", "Project", "LockMetersShared",
		"query.InsertUsageFacts", "AddUsageHourly",
		"LastDeltaSeq", "ListTenantsToFold", "LockTenantSummary", "FoldDeltas", "CountPendingDeltas"} {
		if _, ok := qs[name]; !ok {
			return nil, fmt.Errorf("no statement %s in the services' queries.sql: the floor needs updating", name)
		}
	}
	if err := w.templates(); err != nil {
		return nil, err
	}
	return w, w.seed(ctx)
}

// templates builds one real UsageAccepted and the ChargeRated it causes.
func (w *workload) templates() error {
	now := time.Now().UTC()
	u := events.UsageAccepted{UsageID: uuid.Must(uuid.NewV7()), SourceSystem: sourceSystem, SourceEventID: "f-000000000",
		MeterCode: meterCode, Quantity: decimal.NewFromInt(1), OccurredAt: now, Currency: currency}
	ue, err := events.New(u, events.Meta{Producer: "usage", TenantID: tenantID, AggregateID: u.UsageID.String(), OccurredAt: now})
	if err != nil {
		return fmt.Errorf("build a UsageAccepted: %w", err)
	}
	c := events.ChargeRated{ChargeID: uuid.Must(uuid.NewV7()), UsageEventID: ue.EventID, UsageID: u.UsageID,
		MeterCode: meterCode, Currency: currency, Quantity: u.Quantity, UnitPrice: unitPrice, PriceVersion: 1,
		Amount: unitPrice, Period: events.Period(now), OccurredAt: now}
	ce, err := events.Caused(&ue, c, events.Meta{Producer: "billing", TenantID: tenantID, AggregateID: c.ChargeID.String(), OccurredAt: now})
	if err != nil {
		return fmt.Errorf("build a ChargeRated: %w", err)
	}
	for _, e := range []struct {
		env     envelope.Envelope
		bytes   *[]byte
		payload *[]byte
		digest  *string
	}{{ue, &w.usageEnv, &w.usagePayload, &w.usageDigest}, {ce, &w.chargeEnv, &w.chargePay, &w.chargeDig}} {
		b, err := e.env.Marshal()
		if err != nil {
			return err
		}
		*e.bytes, *e.payload, *e.digest = b, e.env.Payload, e.env.PayloadDigest
	}
	return nil
}

// seed writes what a fact needs to exist already: the price in usage's
// and billing's evidence, billing's schedule known through the run, and the
// relays' leases on every shard.
func (w *workload) seed(ctx context.Context) error {
	since := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	stmts := []struct {
		conn *pgx.Conn
		sql  string
		args []any
	}{
		{w.usage, `INSERT INTO price_evidence (tenant_id, meter_code, currency, version, price_id, unit_price, effective_at, event_id)
			VALUES ($1, $2, $3, 1, $4, $5, $6, $7)`, []any{tenantID, meterCode, currency, uuid.New(), unitPrice, since, uuid.New()}},
		{w.billing, `INSERT INTO price_evidence (tenant_id, meter_code, currency, version, unit_price, effective_at, price_id, event_id)
			VALUES ($1, $2, $3, 1, $4, $5, $6, $7)`, []any{tenantID, meterCode, currency, unitPrice, since, uuid.New(), uuid.New()}},
		{w.billing, `UPDATE schedule_shard SET known_through = '2100-01-01' WHERE shard = $1`,
			[]any{events.ScheduleShard(tenantID)}},
		{w.billing, `INSERT INTO meters (code, aggregation, event_id, defined_at) VALUES ($1, 'sum', $2, $3)`,
			[]any{meterCode, uuid.New(), since}},
		{w.query, `INSERT INTO meter_definition (code, aggregation, event_type, defined_at) VALUES ($1, 'sum', $1, $2)`,
			[]any{meterCode, since}},
	}
	for _, c := range []*pgx.Conn{w.usage, w.billing} {
		stmts = append(stmts, struct {
			conn *pgx.Conn
			sql  string
			args []any
		}{c, `UPDATE outbox_shard SET owner = $1, lease_until = 'infinity'`, []any{w.owner}})
	}
	for _, s := range stmts {
		if _, err := s.conn.Exec(ctx, s.sql, s.args...); err != nil {
			return fmt.Errorf("seed: %w", err)
		}
	}
	return nil
}

// batch is one batch's facts, as every stage sees them.
type batch struct {
	n                                    int
	usageIDs, usageEvents                []uuid.UUID
	chargeIDs, chargeEvents, newInvoices []uuid.UUID
	sourceIDs, usageKeys, chargeKeys     []string
	usageShards, chargeShards            []int16
	occurred                             []time.Time
	quantities, amounts                  []decimal.Decimal
	period                               string
}

func (w *workload) newBatch(n int) *batch {
	now := time.Now().UTC()
	b := &batch{n: n, period: events.Period(now)}
	one := decimal.NewFromInt(1)
	for range n {
		w.seq++
		uid, ueid := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
		cid, ceid := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
		b.usageIDs, b.usageEvents = append(b.usageIDs, uid), append(b.usageEvents, ueid)
		b.chargeIDs, b.chargeEvents = append(b.chargeIDs, cid), append(b.chargeEvents, ceid)
		b.newInvoices = append(b.newInvoices, uuid.Must(uuid.NewV7()))
		b.sourceIDs = append(b.sourceIDs, fmt.Sprintf("f-%09d", w.seq))
		uk := tenantID + "|" + events.AggregateUsage + "|" + uid.String()
		ck := tenantID + "|" + events.AggregateCharge + "|" + cid.String()
		b.usageKeys, b.chargeKeys = append(b.usageKeys, uk), append(b.chargeKeys, ck)
		b.usageShards, b.chargeShards = append(b.usageShards, int16(outbox.Shard(uk))), append(b.chargeShards, int16(outbox.Shard(ck)))
		b.occurred = append(b.occurred, now)
		b.quantities, b.amounts = append(b.quantities, one), append(b.amounts, unitPrice)
	}
	return b
}

// facts runs n facts through every stage, a batch at a time, printing
// progress to out (when not nil) every five seconds.
func (w *workload) facts(ctx context.Context, n int, out io.Writer) error {
	last := time.Now()
	for done := 0; done < n; {
		size := min(w.cfg.Batch, n-done)
		if err := w.batch(ctx, w.newBatch(size)); err != nil {
			return err
		}
		done += size
		if out != nil && time.Since(last) >= 5*time.Second {
			fmt.Fprintf(out, "    %d of %d facts\n", done, n)
			last = time.Now()
		}
	}
	return nil
}

// batch is one batch through the design, in the order the system does it.
func (w *workload) batch(ctx context.Context, b *batch) error {
	commits := 0
	step := func(name string, fn func(context.Context, *batch) (int, error)) error {
		c, err := fn(ctx, b)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		commits += c
		return nil
	}
	steps := []struct {
		name string
		fn   func(context.Context, *batch) (int, error)
	}{
		{"usage accept", w.accept},
		{"usage relay", func(ctx context.Context, b *batch) (int, error) { return w.relay(ctx, w.usage, b.n) }},
		{"billing rate", w.rate},
		{"billing relay", func(ctx context.Context, b *batch) (int, error) { return w.relay(ctx, w.billing, b.n) }},
		{"invoice charges", w.invoiceCharges},
		{"query project UsageAccepted", func(ctx context.Context, b *batch) (int, error) { return w.project(ctx, b, false) }},
		{"query project ChargeRated", func(ctx context.Context, b *batch) (int, error) { return w.project(ctx, b, true) }},
	}
	for _, s := range steps {
		if err := step(s.name, s.fn); err != nil {
			return err
		}
	}
	w.commitsPerBatch = commits // the fold's aside
	w.batches++
	if w.batches%w.cfg.FoldEvery == 0 {
		if err := step("query fold", w.fold); err != nil {
			return err
		}
	}
	return nil
}

// stmt returns a named service statement and its arguments in order.
func (w *workload) stmt(name string, named map[string]any) (string, []any, error) {
	q := w.q[name]
	args, err := q.args(named)
	return q.sql, args, err
}

// accept is usage's Accept of one request: the acceptance lock and cut
// (db.LockAcceptance), the price evidence of the batch's meters, the facts
// (InsertUsageFacts) and their UsageAccepted in the outbox, one commit.
func (w *workload) accept(ctx context.Context, b *batch) (int, error) {
	tx, err := w.usage.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	lock, _, _ := w.stmt("LockAcceptanceShared", map[string]any{})
	cut, _, _ := w.stmt("AcceptanceCut", map[string]any{})
	pb := &pgx.Batch{}
	pb.Queue(lock)
	pb.Queue(cut)
	if err := tx.SendBatch(ctx, pb).Close(); err != nil {
		return 0, fmt.Errorf("lock acceptance: %w", err)
	}
	sql, args, err := w.stmt("PriceEvidenceForMeters", map[string]any{"tenant_id": tenantID, "meter_codes": []string{meterCode}})
	if err != nil {
		return 0, err
	}
	if err := drain(tx.Query(ctx, sql, args...)); err != nil {
		return 0, fmt.Errorf("price evidence: %w", err)
	}
	sql, args, err = w.stmt("usage.InsertUsageFacts", map[string]any{
		"tenant_id": tenantID, "accepted_at": time.Now().UTC(), "usage_ids": b.usageIDs,
		"source_systems": repeat(sourceSystem, b.n), "source_event_ids": b.sourceIDs,
		"meter_codes": repeat(meterCode, b.n), "quantities": b.quantities, "occurred_ats": b.occurred,
		"currencies": repeat(currency, b.n), "event_ids": b.usageEvents, "properties": repeat("{}", b.n),
	})
	if err != nil {
		return 0, err
	}
	if n, err := count(tx.Query(ctx, sql, args...)); err != nil || n != b.n {
		return 0, fmt.Errorf("insert usage facts: %d of %d: %v", n, b.n, err)
	}
	if _, err := tx.Exec(ctx, outbox.AppendStatement, events.TopicUsage, b.usageEvents, b.usageKeys, b.usageShards,
		repeat(events.TypeUsageAccepted, b.n), repeat(w.usageEnv, b.n)); err != nil {
		return 0, fmt.Errorf("append to outbox: %w", err)
	}
	return 1, tx.Commit(ctx)
}

// relay is one outbox relay round on conn: the claim of a batch from the
// shards it holds, and, once the broker would have acknowledged it, the
// mark: the deletion of the rows' pending entries (outbox.SentStatement,
// its own commit).
func (w *workload) relay(ctx context.Context, conn *pgx.Conn, n int) (int, error) {
	due := make([]int16, len(w.shards))
	for i := range w.shards {
		due[i] = w.shards[(i+w.rotate)%len(w.shards)]
	}
	w.rotate++
	rows, err := conn.Query(ctx, outbox.ClaimStatement, due, w.cfg.Batch, w.owner)
	if err != nil {
		return 0, fmt.Errorf("claim: %w", err)
	}
	var (
		shards []int16
		ids    []int64
	)
	for rows.Next() {
		var (
			id, attempts   int64
			eventID        uuid.UUID
			topic, key, et string
			shard          int16
			env            []byte
			created        time.Time
		)
		if err := rows.Scan(&id, &eventID, &topic, &key, &et, &shard, &env, &created, &attempts); err != nil {
			rows.Close()
			return 0, err
		}
		shards, ids = append(shards, shard), append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("claim: %w", err)
	}
	if len(ids) != n {
		return 0, fmt.Errorf("claimed %d rows, want %d", len(ids), n)
	}
	tag, err := conn.Exec(ctx, outbox.SentStatement, shards, ids, w.owner)
	if err != nil {
		return 0, fmt.Errorf("mark sent: %w", err)
	}
	if tag.RowsAffected() != int64(n) {
		return 0, fmt.Errorf("marked %d rows sent, want %d", tag.RowsAffected(), n)
	}
	return 1, nil
}

// decide is one consumed batch in the inbox's healthy path (pkg/inbox
// Runner and Decide): begin as the inbox does (inbox.DecideTx, generic
// plans); savepoint, claims and lookups in one round trip; the handler's
// statements; the publications and the savepoint's release in one round
// trip; commit.
func (w *workload) decide(ctx context.Context, conn *pgx.Conn, ids []uuid.UUID, eventType, aggregateType string,
	aggregateIDs []uuid.UUID, digest string, handle func(pgx.Tx) error, publish func(*pgx.Batch)) (int, error) {
	tx, err := conn.BeginTx(ctx, inbox.DecideTx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	n := len(ids)
	aggIDs := make([]string, n)
	for i, id := range aggregateIDs {
		aggIDs[i] = id.String()
	}
	los, his, sinces := make([]uuid.UUID, n), make([]uuid.UUID, n), make([]uuid.UUID, n)
	for i, id := range ids {
		los[i], his[i] = inbox.EventParts.Span.Around(id)
		sinces[i] = inbox.HolderSince(aggIDs[i], slices.Contains(events.MintedAggregates, aggregateType))
	}
	claimed := 0
	pb := &pgx.Batch{}
	pb.Queue("SAVEPOINT " + inbox.Savepoint)
	pb.Queue(inbox.PlainClaimStatement, ids, repeat(digest, n), repeat(eventType, n), repeat(tenantID, n),
		repeat(aggregateType, n), aggIDs, repeat(int64(1), n), los, his, sinces).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var id uuid.UUID
			var mine, taken bool
			var d pgtype.Text
			if err := rows.Scan(&id, &mine, &d, &taken); err != nil {
				return err
			}
			if mine && !taken {
				claimed++
			}
		}
		return rows.Err()
	})
	pb.Queue(inbox.DeferredStatement, ids).Query(func(rows pgx.Rows) error { return drain(rows, nil) })
	if err := tx.SendBatch(ctx, pb).Close(); err != nil {
		return 0, fmt.Errorf("claim %d events: %w", n, err)
	}
	if claimed != n {
		return 0, fmt.Errorf("claimed %d of %d events", claimed, n)
	}
	if err := handle(tx); err != nil {
		return 0, err
	}
	pb = &pgx.Batch{}
	if publish != nil {
		publish(pb)
	}
	pb.Queue("RELEASE SAVEPOINT " + inbox.Savepoint)
	if err := tx.SendBatch(ctx, pb).Close(); err != nil {
		return 0, fmt.Errorf("record decisions: %w", err)
	}
	return 1, tx.Commit(ctx)
}

// rate is billing's consumed batch of UsageAccepted: the tenants'
// calendars, the periods' shared locks, the charges and their lines'
// parts (RateUsages) and the parts' fold (FoldParts), the ChargeRated in
// the outbox.
func (w *workload) rate(ctx context.Context, b *batch) (int, error) {
	handle := func(tx pgx.Tx) error {
		sql, args, err := w.stmt("TenantSettings", map[string]any{"tenant_ids": []string{tenantID}})
		if err != nil {
			return err
		}
		if err := drain(tx.Query(ctx, sql, args...)); err != nil {
			return fmt.Errorf("tenant settings: %w", err)
		}
		tenants, periods := repeat(tenantID, b.n), repeat(b.period, b.n)
		lock, largs, err := w.stmt("LockPeriodsShared", map[string]any{"tenant_ids": tenants, "periods": periods})
		if err != nil {
			return err
		}
		rate, rargs, err := w.stmt("RateUsages", map[string]any{
			"tenant_ids": tenants, "meter_codes": repeat(meterCode, b.n), "currencies": repeat(currency, b.n),
			"periods": periods, "charge_ids": b.chargeIDs, "event_ids": b.chargeEvents, "usage_event_ids": b.usageEvents,
			"usage_ids": b.usageIDs, "quantities": b.quantities, "occurred_ats": b.occurred,
			"lates": repeat(false, b.n), "properties": repeat("{}", b.n), "source_systems": repeat(sourceSystem, b.n),
			"source_event_ids": b.sourceIDs, "shards": repeat(events.ScheduleShard(tenantID), b.n),
		})
		if err != nil {
			return err
		}
		fold, fargs, err := w.stmt("billing.FoldParts", map[string]any{
			"tenant_ids": tenants, "periods": periods, "most": int32(foldPartsAt)})
		if err != nil {
			return err
		}
		pb := &pgx.Batch{}
		pb.Queue(lock, largs...)
		rated := 0
		pb.Queue(rate, rargs...).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var defined, known, tenantKnown, priced bool
				var version int64
				var price, priceUnit decimal.Decimal
				var aggregation, value, model, dimsKey, plan, status string
				var dims []byte
				if err := rows.Scan(&defined, &aggregation, &value, &known, &tenantKnown, &priced, &version, &price, &priceUnit, &model,
					&dims, &dimsKey, &plan, &status); err != nil {
					return err
				}
				if defined && known && priced && status == "open" {
					rated++
				}
			}
			return rows.Err()
		})
		pb.Queue(fold, fargs...)
		if err := tx.SendBatch(ctx, pb).Close(); err != nil {
			return fmt.Errorf("rate: %w", err)
		}
		if rated != b.n {
			return fmt.Errorf("rated %d of %d facts", rated, b.n)
		}
		return nil
	}
	publish := func(pb *pgx.Batch) {
		pb.Queue(outbox.AppendStatement, events.TopicBilling, b.chargeEvents, b.chargeKeys, b.chargeShards,
			repeat(events.TypeChargeRated, b.n), repeat(w.chargeEnv, b.n))
	}
	return w.decide(ctx, w.billing, b.usageEvents, events.TypeUsageAccepted, events.AggregateUsage, b.usageIDs,
		w.usageDigest, handle, publish)
}

// foldPartsAt is invoice's and billing's PartsFoldAt (internal to the
// services).
const foldPartsAt = 32

// invoiceCharges is invoice's consumed batch of ChargeRated: the charges
// on the open invoice (AddCharges) and the fold of its lines' parts
// (FoldParts).
func (w *workload) invoiceCharges(ctx context.Context, b *batch) (int, error) {
	handle := func(tx pgx.Tx) error {
		sql, args, err := w.stmt("AddCharges", map[string]any{
			"origin_event_ids": b.chargeEvents, "charge_ids": b.chargeIDs, "usage_event_ids": b.usageEvents,
			"tenant_ids": repeat(tenantID, b.n), "periods": repeat(b.period, b.n), "currencies": repeat(currency, b.n),
			"meter_codes": repeat(meterCode, b.n), "price_versions": repeat(int64(1), b.n),
			"unit_prices": repeat(unitPrice, b.n), "quantities": b.quantities, "amounts": b.amounts,
			"new_invoice_ids": b.newInvoices, "aggregations": repeat("sum", b.n), "dimensions_keys": repeat("", b.n),
			"occurred_ats": b.occurred, "source_systems": repeat(sourceSystem, b.n), "source_event_ids": b.sourceIDs,
			"uniq_values": repeat("", b.n), "unpriceds": repeat(false, b.n),
		})
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, sql, args...)
		if err != nil {
			return fmt.Errorf("add charges: %w", err)
		}
		added := 0
		for rows.Next() {
			var closed, ok, known bool
			if err := rows.Scan(&closed, &ok, &known); err != nil {
				rows.Close()
				return err
			}
			if ok {
				added++
			}
		}
		if err := rows.Err(); err != nil || added != b.n {
			return fmt.Errorf("add charges: %d of %d: %v", added, b.n, err)
		}
		sql, args, err = w.stmt("invoice.FoldParts", map[string]any{
			"tenant_ids": repeat(tenantID, b.n), "periods": repeat(b.period, b.n), "most": int32(foldPartsAt)})
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, sql, args...); err != nil {
			return fmt.Errorf("fold parts: %w", err)
		}
		return nil
	}
	return w.decide(ctx, w.invoice, b.chargeEvents, events.TypeChargeRated, events.AggregateCharge, b.chargeIDs,
		w.chargeDig, handle, nil)
}

// project is query's consumed batch of UsageAccepted or of ChargeRated:
// the projected events and their summary deltas (Project); for the facts
// also the usage analytics' rows (the meter's shared lock and definition,
// a usage_fact row per fact, their hourly rollup: one here, the batch's
// facts being of one hour and no dimensions).
func (w *workload) project(ctx context.Context, b *batch, charges bool) (int, error) {
	n := b.n
	ids, subjects, eventType, aggType, digest, payload := b.usageEvents, b.usageIDs, events.TypeUsageAccepted, events.AggregateUsage, w.usageDigest, w.usagePayload
	origins, unitPrices, amounts := repeat("", n), repeat("", n), repeat("", n)
	kind, key, deltas := "usage", meterCode, b.quantities
	if charges {
		ids, subjects, eventType, aggType, digest, payload = b.chargeEvents, b.chargeIDs, events.TypeChargeRated, events.AggregateCharge, w.chargeDig, w.chargePay
		for i := range n {
			origins[i], unitPrices[i], amounts[i] = b.usageEvents[i].String(), unitPrice.String(), b.amounts[i].String()
		}
		kind, key, deltas = "charged", currency, b.amounts
	}
	handle := func(tx pgx.Tx) error {
		subjectText, quantities := make([]string, n), make([]string, n)
		for i := range n {
			subjectText[i], quantities[i] = subjects[i].String(), b.quantities[i].String()
		}
		aggIDs := subjectText
		sql, args, err := w.stmt("Project", map[string]any{
			"event_ids": ids, "event_types": repeat(eventType, n), "tenant_ids": repeat(tenantID, n),
			"aggregate_types": repeat(aggType, n), "aggregate_ids": aggIDs, "aggregate_versions": repeat(int64(1), n),
			"occurred_ats": b.occurred, "subject_ids": subjectText, "origin_event_ids": origins,
			"periods": repeat(b.period, n), "meter_codes": repeat(meterCode, n), "currencies": repeat(currency, n),
			"quantities": quantities, "unit_prices": unitPrices, "amounts": amounts, "payloads": repeat(payload, n),
			"delta_kinds": repeat(kind, n), "delta_keys": repeat(key, n), "delta_amounts": deltas,
		})
		if err != nil {
			return err
		}
		if got, err := count(tx.Query(ctx, sql, args...)); err != nil || got != n {
			return fmt.Errorf("project: %d of %d: %v", got, n, err)
		}
		if charges {
			return nil
		}
		return w.analytics(ctx, tx, b)
	}
	return w.decide(ctx, w.query, ids, eventType, aggType, subjects, digest, handle, nil)
}

// analytics writes query's usage analytics rows of a batch of facts.
func (w *workload) analytics(ctx context.Context, tx pgx.Tx, b *batch) error {
	n := b.n
	lock, largs, err := w.stmt("LockMetersShared", map[string]any{"codes": []string{meterCode}})
	if err != nil {
		return err
	}
	defs, dargs, err := w.stmt("GetMeterDefinitions", map[string]any{"codes": []string{meterCode}})
	if err != nil {
		return err
	}
	facts, fargs, err := w.stmt("query.InsertUsageFacts", map[string]any{
		"tenant_ids": repeat(tenantID, n), "source_systems": repeat(sourceSystem, n), "source_event_ids": b.sourceIDs,
		"meter_codes": repeat(meterCode, n), "occurred_ats": b.occurred, "event_ids": b.usageEvents,
		"quantities": b.quantities, "properties": repeat("{}", n), "dims": repeat("[]", n), "known": repeat(true, n),
		"values": repeat("", n),
	})
	if err != nil {
		return err
	}
	hour := b.occurred[0].UTC().Truncate(time.Hour)
	sum := decimal.Zero
	for _, q := range b.quantities {
		sum = sum.Add(q)
	}
	last := n - 1
	hourly, hargs, err := w.stmt("AddUsageHourly", map[string]any{
		"tenant_ids": []string{tenantID}, "meter_codes": []string{meterCode}, "hours": []time.Time{hour},
		"dims": []string{"[]"}, "facts": []int64{int64(n)}, "sums": []decimal.Decimal{sum}, "maxes": []decimal.Decimal{b.quantities[0]},
		"latest_ats": []time.Time{b.occurred[last]}, "latest_source_systems": []string{sourceSystem},
		"latest_source_event_ids": []string{b.sourceIDs[last]}, "latest_quantities": []decimal.Decimal{b.quantities[last]},
	})
	if err != nil {
		return err
	}
	pb := &pgx.Batch{}
	pb.Queue(lock, largs...)
	pb.Queue(defs, dargs...)
	inserted := 0
	pb.Queue(facts, fargs...).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			inserted++
		}
		return rows.Err()
	})
	pb.Queue(hourly, hargs...)
	if err := tx.SendBatch(ctx, pb).Close(); err != nil {
		return fmt.Errorf("usage analytics: %w", err)
	}
	if inserted != n {
		return fmt.Errorf("usage analytics: %d of %d facts recorded", inserted, n)
	}
	return nil
}

// fold is one round of query's Folder: the last delta of the round, the
// tenants with pending deltas, one chunk of one tenant's fold in its
// transaction (a chunk of query's default, app.DefaultFoldChunk: the
// floor's backlog is one chunk), the pending count.
func (w *workload) fold(ctx context.Context, _ *batch) (int, error) {
	sql, _, _ := w.stmt("LastDeltaSeq", map[string]any{})
	var through int64
	if err := w.query.QueryRow(ctx, sql).Scan(&through); err != nil {
		return 0, fmt.Errorf("last delta: %w", err)
	}
	sql, args, err := w.stmt("ListTenantsToFold", map[string]any{"scan": 10000})
	if err != nil {
		return 0, err
	}
	if err := drain(w.query.Query(ctx, sql, args...)); err != nil {
		return 0, fmt.Errorf("list tenants to fold: %w", err)
	}
	tx, err := w.query.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	for _, st := range []struct {
		name string
		args map[string]any
	}{
		{"LockTenantSummary", map[string]any{"tenant_id": tenantID}},
		{"FoldDeltas", map[string]any{"tenant_id": tenantID, "after": int64(0), "through": through, "chunk_size": 10000}},
	} {
		sql, args, err := w.stmt(st.name, st.args)
		if err != nil {
			return 0, err
		}
		if err := drain(tx.Query(ctx, sql, args...)); err != nil {
			return 0, fmt.Errorf("%s: %w", st.name, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	sql, _, _ = w.stmt("CountPendingDeltas", map[string]any{})
	if err := drain(w.query.Query(ctx, sql)); err != nil {
		return 0, fmt.Errorf("count pending deltas: %w", err)
	}
	return 1, nil
}

// drain reads and discards every row.
func drain(rows pgx.Rows, err error) error {
	if err != nil {
		return err
	}
	for rows.Next() {
	}
	return rows.Err()
}

// count counts the rows.
func count(rows pgx.Rows, err error) (int, error) {
	if err != nil {
		return 0, err
	}
	n := 0
	for rows.Next() {
		n++
	}
	return n, rows.Err()
}

func repeat[T any](v T, n int) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = v
	}
	return out
}
