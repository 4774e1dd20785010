// Package servicetest builds what a service's tests need the way package
// service builds it at run time, from the service's own Spec: a database
// migrated with Spec.Sets (cloned per test from a template, package pgtest),
// the event registry with Spec.Register, and the inbox from
// service.NewInbox, so the tests decide events through the production
// constructor, with the Spec's OriginConstraints, the ops redriver and the
// quarantine announcements. Outbox and Events read back what the service
// published; MissingConstraints holds a Spec's constraint names to its
// migrated schema.
//
// Each service's harness (billingtest, invoicetest, querytest, usagetest)
// adds its own events on top of this package.
package servicetest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/pgmigrate"
	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// Template is spec's database migrated with every set the service applies
// (Spec.Sets: the shared outbox, inbox and idempotency schemas, then its
// own), once per test process.
func Template(spec service.Spec) pgtest.Template {
	return pgtest.Template{
		Name:    spec.Name,
		Migrate: func(_ context.Context, url string) error { return pgmigrate.Up(url, spec.Sets()...) },
	}
}

// NewDB returns the URL of a fresh database of spec, dropped when the test
// ends.
func NewDB(t testing.TB, spec service.Spec) string {
	t.Helper()
	return pgtest.NewDB(t, Template(spec))
}

// NewPool returns a pool on a fresh database of spec, closed when the test
// ends.
func NewPool(t testing.TB, spec service.Spec) *pgxpool.Pool {
	t.Helper()
	return pgtest.NewPool(t, Template(spec))
}

// NewPoolConns is NewPool with at most maxConns connections, for tests that
// run more transactions at once than the default pool size allows.
func NewPoolConns(t testing.TB, spec service.Spec, maxConns int32) *pgxpool.Pool {
	t.Helper()
	return pgtest.NewPoolConns(t, Template(spec), maxConns)
}

// Registry returns the event registry the service decodes with: the
// contract's schema version 1 and spec.Register's additions.
func Registry(spec service.Spec) *envelope.Registry {
	r := envelope.NewRegistry()
	events.Register(r)
	if spec.Register != nil {
		spec.Register(r)
	}
	return r
}

// Deps are the dependencies the service's Build gets, on pool, with a
// logger that discards and a metrics registry of its own.
func Deps(spec service.Spec, pool *pgxpool.Pool) service.Deps {
	return service.Deps{
		Config: service.Config{Name: spec.Name}, Logger: slog.New(slog.DiscardHandler), Pool: pool,
		Metrics: prometheus.NewRegistry(), Registry: Registry(spec),
	}
}

// NewInbox returns the inbox service.NewInbox builds for spec over the
// handlers of parts (what the service's Build returns, or the handlers of
// an application the test configured itself).
func NewInbox(t testing.TB, spec service.Spec, parts service.Parts) *inbox.Inbox {
	t.Helper()
	ib, _, err := service.NewInbox(spec, Deps(spec, nil), parts, nil)
	if err != nil {
		t.Fatalf("build the %s inbox: %v", spec.Name, err)
	}
	return ib
}

// Decide decides msgs through ib in one committed transaction, as the
// consumer does with a batch of one partition, and fails the test on an
// error.
func Decide(t testing.TB, pool *pgxpool.Pool, ib *inbox.Inbox, msgs ...inbox.Message) []inbox.Decision {
	t.Helper()
	ds, err := TryDecide(t.Context(), pool, ib, msgs...)
	if err != nil {
		t.Fatalf("decide: %v", err)
	}
	return ds
}

// TryDecide is Decide returning its error.
func TryDecide(ctx context.Context, pool *pgxpool.Pool, ib *inbox.Inbox, msgs ...inbox.Message) ([]inbox.Decision, error) {
	return ib.DecideCommit(ctx, pool, msgs)
}

// Messages numbers raw envelopes as consecutive offsets of one partition of
// topic.
func Messages(topic string, raws ...[]byte) []inbox.Message {
	msgs := make([]inbox.Message, len(raws))
	for i, r := range raws {
		msgs[i] = inbox.Message{Raw: r, Topic: topic, Offset: int64(i)}
	}
	return msgs
}

// Delivered numbers raw envelopes as consecutive offsets of one partition,
// each on its event type's own topic (events.Topic), as the broker would
// deliver them: the inbox refuses an event from another topic
// (service.AuthorizeProducer). A raw message that names no event type of the
// contract comes on no topic.
func Delivered(raws ...[]byte) []inbox.Message {
	msgs := make([]inbox.Message, len(raws))
	for i, r := range raws {
		var head struct {
			EventType string `json:"eventType"`
		}
		_ = json.Unmarshal(r, &head) // undecodable: no topic, quarantined anyway
		msgs[i] = inbox.Message{Raw: r, Topic: events.Topic(head.EventType), Offset: int64(i)}
	}
	return msgs
}

// MissingConstraints returns the names among names that are neither a
// unique (or primary key, or exclusion) constraint nor a unique index in
// the database q reads: a unique violation reports one of those as its
// constraint name, so a name that is neither can never match.
func MissingConstraints(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, names []string) ([]string, error) {
	rows, err := q.Query(ctx, `
		SELECT conname::text FROM pg_constraint WHERE contype IN ('u', 'p', 'x') AND conname::text = ANY($1)
		UNION
		SELECT c.relname::text FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		WHERE i.indisunique AND c.relname::text = ANY($1)`, names)
	if err != nil {
		return nil, fmt.Errorf("read constraints: %w", err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read constraints: %w", err)
	}
	var missing []string
	for _, n := range names {
		if !slices.Contains(found, n) {
			missing = append(missing, n)
		}
	}
	return missing, nil
}

// Published is an event the service appended to its outbox, decoded.
type Published struct {
	Topic string
	*envelope.Decoded
}

// Outbox returns the events in the service's outbox, in append order,
// decoded with spec's registry; an envelope its consumers could not decode
// fails the test.
func Outbox(t testing.TB, spec service.Spec, pool *pgxpool.Pool) []Published {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT topic, envelope FROM outbox_event ORDER BY id`)
	if err != nil {
		t.Fatalf("read the outbox: %v", err)
	}
	defer rows.Close()
	reg := Registry(spec)
	var out []Published
	for rows.Next() {
		var topic string
		var raw []byte
		if err := rows.Scan(&topic, &raw); err != nil {
			t.Fatal(err)
		}
		d, err := reg.Decode(raw)
		if err != nil {
			t.Fatalf("%s published an envelope its consumers cannot decode: %v\n%s", spec.Name, err, raw)
		}
		out = append(out, Published{Topic: topic, Decoded: d})
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// Events returns the events the service published on topic, from its
// outbox, in append order. The announcements of quarantines on
// ops.events.v1 (service.NewInbox) are left out; a row on any other topic
// fails the test.
func Events(t testing.TB, spec service.Spec, pool *pgxpool.Pool, topic string) []*envelope.Decoded {
	t.Helper()
	var out []*envelope.Decoded
	for _, p := range Outbox(t, spec, pool) {
		switch p.Topic {
		case topic:
			out = append(out, p.Decoded)
		case events.TopicOps:
		default:
			t.Fatalf("%s's outbox has a row on topic %s, want %s", spec.Name, p.Topic, topic)
		}
	}
	return out
}
