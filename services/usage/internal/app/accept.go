package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/services/usage/internal/db"
	"github.com/usagebilling/billing/services/usage/internal/domain"
)

// Producer names the usage service in the envelopes it builds.
const Producer = "usage"

// Outcome is how one usage fact of a command was decided.
type Outcome int

const (
	// Created: the fact was accepted now.
	Created Outcome = iota + 1
	// Replayed: the same fact was accepted before; Result describes it.
	Replayed
	// Refused: see Result.Err.
	Refused
)

// Result is the decision on one usage fact.
type Result struct {
	Outcome Outcome
	UsageID uuid.UUID
	EventID uuid.UUID
	Err     *domain.Error // when Refused
}

// maxAttempts bounds the retries of a batch that lost a deadlock or a
// serialization conflict.
const maxAttempts = 3

// Accept decides usage facts of one tenant in one transaction and returns
// one result per fact, in order. New facts and their UsageAccepted events
// are committed together; a fact whose identity was accepted before is a
// replay (same content) or a conflict (other content), never an overwrite.
// Facts that share an identity within the call are decided as if sent one
// after the other. An error means nothing was committed.
func (a *App) Accept(ctx context.Context, tenantID, correlationID string, us []domain.Usage) ([]Result, error) {
	if len(us) == 0 {
		return nil, nil
	}
	for attempt := 1; ; attempt++ {
		res, err := a.accept(ctx, tenantID, correlationID, us)
		if err == nil || attempt == maxAttempts || !retryable(err) {
			return res, err
		}
		a.log.WarnContext(ctx, "usage batch retried", "tenant_id", tenantID, "size", len(us), "attempt", attempt, "err", err)
	}
}

func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}

// candidate is a fact about to be inserted.
type candidate struct {
	usageID uuid.UUID
	env     envelope.Envelope
}

// How a batch is decided, in round trips: read the price evidence of the
// batch's meters; insert every fact that has a price with one INSERT ...
// SELECT FROM unnest ... ON CONFLICT DO NOTHING RETURNING; only when some
// identity was taken (or had no price), read those facts to answer replay
// or conflict; append the new events to the outbox in one statement.
// Repeats of an identity within the batch wait for a next round, which
// finds the fact the first one left.
func (a *App) accept(ctx context.Context, tenantID, correlationID string, us []domain.Usage) ([]Result, error) {
	var res []Result
	err := pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		acceptedAt, err := a.acceptanceTime(ctx, tx)
		if err != nil {
			return err
		}
		var envs []envelope.Envelope
		res, envs, err = a.decideTenant(ctx, db.New(tx), tenantID, correlationID, acceptedAt, us)
		if err != nil {
			return err
		}
		return events.Append(ctx, tx, envs...)
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// acceptanceTime takes the acceptance lock and returns the acceptance time
// of the transaction's facts: now, never before the last cut (a
// watermark's promise, decision 0014).
func (a *App) acceptanceTime(ctx context.Context, tx pgx.Tx) (time.Time, error) {
	cut, err := db.LockAcceptance(ctx, tx)
	if err != nil {
		return time.Time{}, err
	}
	acceptedAt := domain.Instant(a.now())
	if acceptedAt.Before(cut) {
		acceptedAt = cut
	}
	return acceptedAt, nil
}

// decideTenant decides facts of one tenant inside tx and returns one result
// per fact and the UsageAccepted events of the new ones.
func (a *App) decideTenant(ctx context.Context, q *db.Queries, tenantID, correlationID string, acceptedAt time.Time,
	us []domain.Usage) ([]Result, []envelope.Envelope, error) {
	res := make([]Result, len(us))
	evidence, cat, err := loadEvidence(ctx, q, tenantID, us)
	if err != nil {
		return nil, nil, err
	}
	envs := make([]*envelope.Envelope, len(us))
	pending := make([]int, len(us))
	for i := range pending {
		pending[i] = i
	}
	for len(pending) > 0 {
		var round []int
		round, pending = firstOfEachIdentity(us, pending)
		if err := a.decideRound(ctx, q, tenantID, correlationID, acceptedAt, evidence, cat, us, round, res, envs); err != nil {
			return nil, nil, err
		}
	}
	out := make([]envelope.Envelope, 0, len(us))
	for _, e := range envs {
		if e != nil {
			out = append(out, *e)
		}
	}
	return res, out, nil
}

// loadEvidence reads the price evidence and the catalog meters of the
// batch's meter codes.
func loadEvidence(ctx context.Context, q *db.Queries, tenantID string, us []domain.Usage) (domain.Evidence, domain.Catalog, error) {
	seen := make(map[string]bool)
	var meters []string
	for _, u := range us {
		if !seen[u.MeterCode] {
			seen[u.MeterCode] = true
			meters = append(meters, u.MeterCode)
		}
	}
	rows, err := q.PriceEvidenceForMeters(ctx, db.PriceEvidenceForMetersParams{TenantID: tenantID, MeterCodes: meters})
	if err != nil {
		return domain.Evidence{}, domain.Catalog{}, fmt.Errorf("read price evidence: %w", err)
	}
	versions := make([]domain.PriceVersion, len(rows))
	for i, r := range rows {
		versions[i] = domain.PriceVersion{MeterCode: r.MeterCode, Currency: r.Currency, Version: r.Version, EffectiveAt: r.EffectiveAt}
	}
	cat, err := catalogByCode(ctx, q, meters)
	if err != nil {
		return domain.Evidence{}, domain.Catalog{}, err
	}
	return domain.NewEvidence(versions), cat, nil
}

// firstOfEachIdentity splits idx into the first index of each identity and
// the rest, both in order.
func firstOfEachIdentity(us []domain.Usage, idx []int) (first, rest []int) {
	seen := make(map[domain.Identity]bool, len(idx))
	for _, i := range idx {
		id := us[i].Identity()
		if seen[id] {
			rest = append(rest, i)
			continue
		}
		seen[id] = true
		first = append(first, i)
	}
	return first, rest
}

// decideRound decides facts of distinct identities.
func (a *App) decideRound(ctx context.Context, q *db.Queries, tenantID, correlationID string, acceptedAt time.Time,
	evidence domain.Evidence, cat domain.Catalog, us []domain.Usage, round []int, res []Result, envs []*envelope.Envelope) error {
	cands := make(map[int]*candidate, len(round))
	priceErrs := make(map[int]*domain.Error)
	p := db.InsertUsageFactsParams{TenantID: tenantID, AcceptedAt: acceptedAt}
	for _, i := range round {
		u := us[i]
		if verr := cat.CheckValue(u); verr != nil {
			priceErrs[i] = verr
			continue
		}
		currency, perr := evidence.Currency(u, cat)
		if perr != nil {
			priceErrs[i] = perr
			continue
		}
		c, err := newCandidate(tenantID, correlationID, u, currency)
		if err != nil {
			return err
		}
		cands[i] = c
		p.UsageIds = append(p.UsageIds, c.usageID)
		p.SourceSystems = append(p.SourceSystems, u.SourceSystem)
		p.SourceEventIds = append(p.SourceEventIds, u.SourceEventID)
		p.MeterCodes = append(p.MeterCodes, u.MeterCode)
		p.Quantities = append(p.Quantities, u.Quantity)
		p.OccurredAts = append(p.OccurredAts, u.OccurredAt)
		p.Currencies = append(p.Currencies, currency)
		p.EventIds = append(p.EventIds, c.env.EventID)
		p.Properties = append(p.Properties, propertiesJSON(u.Properties))
	}
	inserted := make(map[uuid.UUID]bool, len(cands))
	if len(cands) > 0 {
		ids, err := q.InsertUsageFacts(ctx, p)
		if err != nil {
			return fmt.Errorf("insert %d usage facts: %w", len(cands), err)
		}
		for _, id := range ids {
			inserted[id] = true
		}
	}
	var lookup []int
	for _, i := range round {
		if c, ok := cands[i]; ok && inserted[c.usageID] {
			res[i] = Result{Outcome: Created, UsageID: c.usageID, EventID: c.env.EventID}
			envs[i] = &c.env
			continue
		}
		lookup = append(lookup, i)
	}
	if len(lookup) == 0 {
		return nil
	}
	// Identities already taken, and facts refused here (no price, no
	// value) that may be replays of facts accepted before.
	facts, err := factsBySource(ctx, q, tenantID, us, lookup)
	if err != nil {
		return err
	}
	var missing []int
	for _, i := range lookup {
		u := us[i]
		f, found := facts[u.Identity()]
		switch {
		case found && u.Replays(f):
			res[i] = Result{Outcome: Replayed, UsageID: f.UsageID, EventID: f.EventID}
		case found:
			res[i] = Result{Outcome: Refused, Err: domain.ConflictWith(f)}
		case priceErrs[i] != nil:
			res[i] = Result{Outcome: Refused, Err: priceErrs[i]}
		default:
			missing = append(missing, i)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	// ON CONFLICT skipped these rows, so a committed identity holds each;
	// its fact is in an archived month, or not finding it is a fault
	// worth a retry.
	taken, err := sourcesTaken(ctx, q, tenantID, us, missing)
	if err != nil {
		return err
	}
	for _, i := range missing {
		u := us[i]
		usageID, ok := taken[u.Identity()]
		if !ok {
			return fmt.Errorf("usage fact %s/%s was neither inserted nor found", u.SourceSystem, u.SourceEventID)
		}
		res[i] = Result{Outcome: Refused, Err: domain.ArchivedWith(u.Identity(), usageID)}
	}
	return nil
}

// sourcesTaken reads the usage ids holding the identities of us[idx].
func sourcesTaken(ctx context.Context, q *db.Queries, tenantID string, us []domain.Usage, idx []int) (map[domain.Identity]uuid.UUID, error) {
	p := db.SourcesTakenParams{TenantID: tenantID}
	for _, i := range idx {
		p.SourceSystems = append(p.SourceSystems, us[i].SourceSystem)
		p.SourceEventIds = append(p.SourceEventIds, us[i].SourceEventID)
	}
	rows, err := q.SourcesTaken(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("read usage fact sources: %w", err)
	}
	out := make(map[domain.Identity]uuid.UUID, len(rows))
	for _, r := range rows {
		out[domain.Identity{SourceSystem: r.SourceSystem, SourceEventID: r.SourceEventID}] = r.UsageID
	}
	return out, nil
}

func newCandidate(tenantID, correlationID string, u domain.Usage, currency string) (*candidate, error) {
	usageID, err := uuid.NewV7()
	if err != nil {
		return nil, fmt.Errorf("new usage id: %w", err)
	}
	env, err := events.New(events.UsageAccepted{
		UsageID:       usageID,
		SourceSystem:  u.SourceSystem,
		SourceEventID: u.SourceEventID,
		MeterCode:     u.MeterCode,
		Quantity:      u.Quantity,
		OccurredAt:    u.OccurredAt,
		Currency:      currency,
		Properties:    u.Properties,
	}, events.Meta{
		Producer: Producer, TenantID: tenantID, AggregateID: usageID.String(), OccurredAt: u.OccurredAt,
		CorrelationID: correlationID,
	})
	if err != nil {
		return nil, err
	}
	return &candidate{usageID: usageID, env: env}, nil
}

func factsBySource(ctx context.Context, q *db.Queries, tenantID string, us []domain.Usage, idx []int) (map[domain.Identity]domain.Fact, error) {
	p := db.UsageFactsBySourceParams{TenantID: tenantID}
	for _, i := range idx {
		p.SourceSystems = append(p.SourceSystems, us[i].SourceSystem)
		p.SourceEventIds = append(p.SourceEventIds, us[i].SourceEventID)
	}
	rows, err := q.UsageFactsBySource(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("read usage facts: %w", err)
	}
	out := make(map[domain.Identity]domain.Fact, len(rows))
	for _, r := range rows {
		f, err := factOf(db.GetUsageFactRow(r))
		if err != nil {
			return nil, err
		}
		out[domain.Identity{SourceSystem: f.SourceSystem, SourceEventID: f.SourceEventID}] = f
	}
	return out, nil
}

// factOf reads a fact's row (GetUsageFact's columns; UsageFactsBySource
// reads the same).
func factOf(r db.GetUsageFactRow) (domain.Fact, error) {
	props, err := propertiesOf(r.Properties)
	if err != nil {
		return domain.Fact{}, fmt.Errorf("usage fact %s: %w", r.UsageID, err)
	}
	return domain.Fact{
		UsageID: r.UsageID, TenantID: r.TenantID, SourceSystem: r.SourceSystem, SourceEventID: r.SourceEventID,
		MeterCode: r.MeterCode, Quantity: r.Quantity, OccurredAt: r.OccurredAt.UTC(), Currency: r.Currency,
		Properties: props, EventID: r.EventID, AcceptedAt: r.AcceptedAt.UTC(),
	}, nil
}

// propertiesJSON is the jsonb text of a fact's properties: {} for none.
func propertiesJSON(props map[string]string) string {
	if len(props) == 0 {
		return "{}"
	}
	b, err := json.Marshal(props) // a map of strings always marshals
	if err != nil {
		panic(err)
	}
	return string(b)
}

// propertiesOf reads a fact's properties column: nil for none.
func propertiesOf(raw []byte) (map[string]string, error) {
	var props map[string]string
	if err := json.Unmarshal(raw, &props); err != nil {
		return nil, fmt.Errorf("read properties: %w", err)
	}
	if len(props) == 0 {
		return nil, nil
	}
	return props, nil
}

// ErrNotFound is returned for a usage fact the tenant does not have.
var ErrNotFound = errors.New("usage fact not found")

// Fact returns one of a tenant's usage facts.
func (a *App) Fact(ctx context.Context, tenantID string, usageID uuid.UUID) (domain.Fact, error) {
	r, err := db.New(a.pool).GetUsageFact(ctx, db.GetUsageFactParams{TenantID: tenantID, UsageID: usageID})
	if errors.Is(err, pgx.ErrNoRows) {
		return domain.Fact{}, ErrNotFound
	}
	if err != nil {
		return domain.Fact{}, fmt.Errorf("read usage fact: %w", err)
	}
	return factOf(r)
}
