package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// The test domain: a Noted event writes one effect row whose origin is
// unique (the business effect's origin constraint); it may need a fact first
// (DeferUntil) or fail permanently. A FactProvided event writes a fact and
// provides its key.

type note struct {
	Origin string `json:"origin"`
	Needs  string `json:"needs,omitempty"`
	Fail   string `json:"fail,omitempty"`
}

var errTransient = errors.New("connection reset (pretend)")

type fact struct {
	Key string `json:"key"`
}

const testSchema = `
CREATE TABLE effect (
    seq       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id  uuid   NOT NULL,
    origin    text   NOT NULL CONSTRAINT effect_origin_key UNIQUE,
    aggregate text   NOT NULL,
    version   bigint NOT NULL
);
CREATE TABLE fact (key text PRIMARY KEY);
`

var tmpl = pgtest.Template{
	Name: "inbox",
	Migrate: func(ctx context.Context, databaseURL string) error {
		if err := inbox.Migrate(ctx, databaseURL); err != nil {
			return err
		}
		conn, err := pgx.Connect(ctx, databaseURL)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, testSchema)
		return err
	},
}

func newRegistry() *envelope.Registry {
	r := envelope.NewRegistry()
	envelope.Register[note](r, "Noted", 1)
	envelope.Register[fact](r, "FactProvided", 1)
	envelope.Register[note](r, "Unhandled", 1) // known to the registry, no handler
	return r
}

// handlers returns the test handlers; with strict false, Noted ignores Fail
// (a handler fixed after a bad deploy).
func handlers(strict bool) map[string]inbox.Handler {
	return map[string]inbox.Handler{
		"Noted": func(ctx context.Context, tx pgx.Tx, d *envelope.Decoded) (inbox.Outcome, error) {
			n := d.Payload.(note)
			e := d.Envelope
			// Write first, so a later error proves the write is undone.
			if _, err := tx.Exec(ctx, `INSERT INTO effect (event_id, origin, aggregate, version) VALUES ($1, $2, $3, $4)`,
				e.EventID, n.Origin, e.AggregateID, e.AggregateVersion); err != nil {
				return inbox.Outcome{}, err
			}
			if n.Needs != "" {
				var ok bool
				if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM fact WHERE key = $1)`, n.Needs).Scan(&ok); err != nil {
					return inbox.Outcome{}, err
				}
				if !ok {
					return inbox.Outcome{}, inbox.DeferUntil(n.Needs)
				}
			}
			if n.Fail == "transient" {
				return inbox.Outcome{}, errTransient
			}
			if strict && n.Fail == "permanent" {
				return inbox.Outcome{}, inbox.Permanent("bad_note", errors.New("told to fail"))
			}
			return inbox.Outcome{}, nil
		},
		"FactProvided": func(ctx context.Context, tx pgx.Tx, d *envelope.Decoded) (inbox.Outcome, error) {
			f := d.Payload.(fact)
			if _, err := tx.Exec(ctx, `INSERT INTO fact (key) VALUES ($1)`, f.Key); err != nil {
				return inbox.Outcome{}, err
			}
			return inbox.Outcome{Provides: []string{f.Key}}, nil
		},
	}
}

func newInbox(t testing.TB, opts inbox.Options) *inbox.Inbox {
	t.Helper()
	if opts.Service == "" {
		opts.Service = "test"
	}
	ib, err := inbox.New(newRegistry(), handlers(true), opts)
	if err != nil {
		t.Fatal(err)
	}
	return ib
}

// ev builds an envelope of tenant t1, aggregate type "thing".
func ev(t testing.TB, eventType string, schema int, aggregate string, version int64, payload any) envelope.Envelope {
	t.Helper()
	e, err := envelope.New(envelope.Meta{
		EventType: eventType, SchemaVersion: schema, TenantID: "t1",
		AggregateType: "thing", AggregateID: aggregate, AggregateVersion: version,
		OccurredAt: time.Now(), Producer: "test",
	}, payload)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func raw(t testing.TB, e envelope.Envelope) []byte {
	t.Helper()
	b, err := e.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// withPayload returns e with another payload and its digest: the same event
// id reused for other content.
func withPayload(t testing.TB, e envelope.Envelope, payload string) envelope.Envelope {
	t.Helper()
	canon, err := envelope.Canonical([]byte(payload))
	if err != nil {
		t.Fatal(err)
	}
	digest, err := envelope.Digest(canon)
	if err != nil {
		t.Fatal(err)
	}
	e.Payload, e.PayloadDigest = canon, digest
	return e
}

func msgs(raws ...[]byte) []inbox.Message {
	out := make([]inbox.Message, len(raws))
	for i, r := range raws {
		out[i] = inbox.Message{Raw: r, Topic: "test.events.v1", Partition: 0, Offset: int64(i)}
	}
	return out
}

// decide decides raws in one committed transaction.
func decide(t testing.TB, ib *inbox.Inbox, pool *pgxpool.Pool, raws ...[]byte) []inbox.Decision {
	t.Helper()
	ds, err := ib.DecideCommit(t.Context(), pool, msgs(raws...))
	if err != nil {
		t.Fatalf("decide: %v", err)
	}
	ib.Observe(ds)
	return ds
}

// outcomes renders decisions as "outcome[:reason][+woken]" for comparison.
func outcomes(ds []inbox.Decision) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		s := d.Outcome
		if d.Reason != "" {
			s += ":" + d.Reason
		}
		if d.Woken {
			s += "+woken"
		}
		out[i] = s
	}
	return out
}

func count(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// effectVersions returns the versions of aggregate's effects in the order
// they were written.
func effectVersions(t testing.TB, pool *pgxpool.Pool, aggregate string) []int64 {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT version FROM effect WHERE aggregate = $1 ORDER BY seq`, aggregate)
	if err != nil {
		t.Fatal(err)
	}
	vs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

func origin(prefix string) string { return fmt.Sprintf("%s-%s", prefix, uuid.NewString()) }

// metricValue returns the value of the counter or gauge name with labels.
func metricValue(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			if m.Counter != nil {
				return m.Counter.GetValue()
			}
			return m.Gauge.GetValue()
		}
	}
	return 0
}
