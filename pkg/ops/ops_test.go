package ops_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/inbox"
	"github.com/usagebilling/billing/pkg/ops"
	"github.com/usagebilling/billing/pkg/outbox"
	"github.com/usagebilling/billing/pkg/pgmigrate"
	"github.com/usagebilling/billing/pkg/recon"
	"github.com/usagebilling/billing/testkit/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// The test service "svc" consumes Noted events: each writes one effect row
// whose origin event is unique.
type note struct {
	Text string `json:"text"`
}

var tmpl = pgtest.Template{
	Name: "ops",
	Migrate: func(ctx context.Context, databaseURL string) error {
		if err := pgmigrate.Up(databaseURL, outbox.Migrations, inbox.Migrations); err != nil {
			return err
		}
		conn, err := pgx.Connect(ctx, databaseURL)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, `CREATE TABLE effect (event_id uuid CONSTRAINT effect_origin_key UNIQUE, text text NOT NULL)`)
		return err
	},
}

// newInbox builds svc's inbox as service.NewInbox does; withV2 registers
// Noted schema version 2 (the fix of a decoder gap).
func newInbox(t *testing.T, withV2 bool) *inbox.Inbox {
	t.Helper()
	reg := envelope.NewRegistry()
	events.Register(reg)
	envelope.Register[note](reg, "Noted", 1)
	if withV2 {
		envelope.Register[note](reg, "Noted", 2)
	}
	r := ops.NewRedriver("svc", nil)
	ib, err := inbox.New(reg, map[string]inbox.Handler{
		"Noted": func(ctx context.Context, tx pgx.Tx, d *envelope.Decoded) (inbox.Outcome, error) {
			text := d.Payload.(note).Text
			if _, err := tx.Exec(ctx, `INSERT INTO effect (event_id, text) VALUES ($1, $2)`, d.Envelope.EventID, text); err != nil {
				return inbox.Outcome{}, err
			}
			switch text { // after the write, so the inbox must undo it
			case "fail":
				return inbox.Outcome{}, inbox.Permanent("bad_note", nil)
			case "wait":
				return inbox.Outcome{}, inbox.DeferUntil("fact/never")
			}
			return inbox.Outcome{}, nil
		},
		events.TypeRedriveRequested: inbox.On(r.Handle),
	}, inbox.Options{Service: "svc", OnQuarantine: ops.PublishQuarantine("svc"), OriginConstraints: []string{"effect_origin_key"}})
	if err != nil {
		t.Fatal(err)
	}
	r.SetInbox(ib)
	return ib
}

func noted(t *testing.T, version int, text string) envelope.Envelope {
	t.Helper()
	id := uuid.Must(uuid.NewV7())
	e, err := envelope.New(envelope.Meta{EventType: "Noted", SchemaVersion: version, TenantID: "acme",
		AggregateType: "note", AggregateID: id.String(), AggregateVersion: 1, OccurredAt: time.Now(), Producer: "test"},
		note{Text: text})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func redrive(t *testing.T, service, action string, eventID uuid.UUID) envelope.Envelope {
	t.Helper()
	id := uuid.Must(uuid.NewV7())
	e, err := envelope.New(envelope.Meta{EventType: events.TypeRedriveRequested, SchemaVersion: 1, TenantID: events.OpsTenant,
		AggregateType: events.AggregateOps, AggregateID: events.RedriveAggregateID(id), AggregateVersion: 1,
		OccurredAt: time.Now(), Producer: "query", CorrelationID: "corr-" + id.String()[:8]},
		events.RedriveRequested{RedriveID: id, Service: service, EventID: eventID.String(), Action: action, Reason: "test", Actor: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func raw(t *testing.T, e envelope.Envelope) []byte {
	t.Helper()
	b, err := e.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decide(t *testing.T, pool *pgxpool.Pool, ib *inbox.Inbox, raws ...[]byte) []inbox.Decision {
	t.Helper()
	msgs := make([]inbox.Message, len(raws))
	for i, r := range raws {
		msgs[i] = inbox.Message{Raw: r, Topic: "some.topic", Partition: 1, Offset: int64(i)}
	}
	var ds []inbox.Decision
	if err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		var err error
		ds, err = ib.Decide(t.Context(), tx, msgs)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return ds
}

// published returns the payloads of the outbox events of eventType, in order.
func published[T any](t *testing.T, pool *pgxpool.Pool, eventType string) []T {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT envelope FROM outbox_event WHERE event_type = $1 ORDER BY id`, eventType)
	if err != nil {
		t.Fatal(err)
	}
	bodies, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil {
		t.Fatal(err)
	}
	reg := envelope.NewRegistry()
	events.Register(reg)
	out := make([]T, len(bodies))
	for i, b := range bodies {
		d, err := reg.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		if d.Envelope.TenantID != events.OpsTenant || d.Envelope.Producer != "svc" {
			t.Fatalf("ops event %+v", d.Envelope)
		}
		out[i] = d.Payload.(T)
	}
	return out
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestQuarantineIsAnnounced(t *testing.T) {
	pool := pgtest.NewPool(t, tmpl)
	ib := newInbox(t, false)
	v2 := noted(t, 2, "from the future")
	unknown := noted(t, 1, "x")
	unknown.EventType = "Retired"
	garbage := []byte("\x00 not json")
	decide(t, pool, ib, raw(t, v2), raw(t, unknown), garbage, raw(t, noted(t, 1, "healthy")))
	decide(t, pool, ib, garbage) // the same bytes again: one row, no second notice

	got := published[events.EventQuarantined](t, pool, events.TypeEventQuarantined)
	want := []struct{ eventID, reason string }{
		{v2.EventID.String(), envelope.ReasonUnsupportedSchema},
		{unknown.EventID.String(), envelope.ReasonUnknownEventType},
		{"", envelope.ReasonMalformed},
	}
	if len(got) != len(want) {
		t.Fatalf("%d notices, want %d: %+v", len(got), len(want), got)
	}
	sum := sha256.Sum256(garbage)
	for i, w := range want {
		if got[i].EventID != w.eventID || got[i].Reason != w.reason || got[i].Service != "svc" || got[i].Topic != "some.topic" {
			t.Errorf("notice %d = %+v, want %+v", i, got[i], w)
		}
	}
	if got[2].RawSHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("notice of garbage names sha %s", got[2].RawSHA256)
	}
	if n := count(t, pool, `SELECT count(*) FROM effect`); n != 1 {
		t.Fatalf("%d effects, want the healthy one", n)
	}
}

func TestRedriveAfterTheFix(t *testing.T) {
	pool := pgtest.NewPool(t, tmpl)
	v2 := noted(t, 2, "from the future")
	decide(t, pool, newInbox(t, false), raw(t, v2))

	// Restarted with a decoder for version 2.
	ib := newInbox(t, true)
	first := redrive(t, "svc", "", v2.EventID)
	other := redrive(t, "elsewhere", "", v2.EventID)
	second := redrive(t, "svc", events.ActionRedrive, v2.EventID)
	missing := redrive(t, "svc", "", uuid.Must(uuid.NewV7()))
	ds := decide(t, pool, ib, raw(t, first), raw(t, other), raw(t, first), raw(t, second), raw(t, missing))
	for i, want := range []string{"applied", "applied", "duplicate", "applied", "applied"} {
		if ds[i].Outcome != want {
			t.Fatalf("decision %d = %+v, want %s", i, ds[i], want)
		}
	}
	got := published[events.RedriveCompleted](t, pool, events.TypeRedriveCompleted)
	want := []events.RedriveCompleted{
		{RedriveID: redriveID(t, first), Service: "svc", EventID: v2.EventID.String(), Action: "redecide", Outcome: "applied"},
		{RedriveID: redriveID(t, second), Service: "svc", EventID: v2.EventID.String(), Action: "redecide", Outcome: "duplicate"},
		{RedriveID: redriveID(t, missing), Service: "svc", EventID: payloadOf(t, missing).EventID, Action: "redecide", Outcome: "not_found"},
	}
	if len(got) != len(want) {
		t.Fatalf("completions %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("completion %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM effect WHERE event_id = $1`, v2.EventID); n != 1 {
		t.Fatalf("%d effects of the redriven event, want exactly 1", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM inbox_quarantine WHERE state = 'redriven'`); n != 1 {
		t.Fatalf("%d quarantine rows redriven, want 1 (kept, never deleted)", n)
	}
	var corr string
	if err := pool.QueryRow(t.Context(), `SELECT convert_from(envelope, 'UTF8')::jsonb->>'correlationId'
		FROM outbox_event WHERE event_type = 'RedriveCompleted' ORDER BY id LIMIT 1`).Scan(&corr); err != nil || corr != first.CorrelationID {
		t.Fatalf("completion correlation id %q (%v), want the request's %q", corr, err, first.CorrelationID)
	}
}

// The redriven event's own failures become the redrive's outcome, and
// leave nothing behind; the requests around it are decided normally.
func TestRedriveOutcomesOfTheHandler(t *testing.T) {
	pool := pgtest.NewPool(t, tmpl)
	fail, wait := noted(t, 2, "fail"), noted(t, 2, "wait")
	decide(t, pool, newInbox(t, false), raw(t, fail), raw(t, wait))
	ib := newInbox(t, true)
	after := noted(t, 1, "after")
	decide(t, pool, ib, raw(t, redrive(t, "svc", "", fail.EventID)), raw(t, redrive(t, "svc", "", wait.EventID)))
	decide(t, pool, ib, raw(t, after))
	got := published[events.RedriveCompleted](t, pool, events.TypeRedriveCompleted)
	if len(got) != 2 || got[0].Outcome != "quarantined" || got[0].Reason != "bad_note" ||
		got[1].Outcome != "deferred" || got[1].Reason != inbox.ReasonMissingFact {
		t.Fatalf("completions %+v", got)
	}
	var texts string
	if err := pool.QueryRow(t.Context(), `SELECT COALESCE(string_agg(text, ','), '') FROM effect`).Scan(&texts); err != nil || texts != "after" {
		t.Fatalf("effects %q (%v), want only the later healthy event's", texts, err)
	}
	rec, err := ops.ReadRecovery(t.Context(), pool)
	if err != nil || rec.Deferred != 1 || rec.Quarantined != 1 {
		t.Fatalf("recovery %+v, %v: want the failing one still quarantined, the waiting one deferred", rec, err)
	}
	// The deferred one can be redriven from the deferred table.
	decide(t, pool, ib, raw(t, redrive(t, "svc", "", wait.EventID)))
	if got := published[events.RedriveCompleted](t, pool, events.TypeRedriveCompleted); got[2].Outcome != "deferred" {
		t.Fatalf("redrive of a deferred event: %+v", got[2])
	}
}

func TestDigestConflictStaysQuarantined(t *testing.T) {
	pool := pgtest.NewPool(t, tmpl)
	ib := newInbox(t, true)
	orig := noted(t, 1, "original")
	forged := orig
	forged.Payload = json.RawMessage(`{"text":"forged"}`)
	var err error
	if forged.PayloadDigest, err = envelope.Digest(forged.Payload); err != nil {
		t.Fatal(err)
	}
	ds := decide(t, pool, ib, raw(t, orig), raw(t, forged))
	if ds[1].Outcome != inbox.OutcomeQuarantined || ds[1].Reason != inbox.ReasonDigestConflict {
		t.Fatalf("forged copy: %+v", ds[1])
	}
	decide(t, pool, ib, raw(t, redrive(t, "svc", "", orig.EventID)))
	got := published[events.RedriveCompleted](t, pool, events.TypeRedriveCompleted)
	if len(got) != 1 || got[0].Outcome != "quarantined" || got[0].Reason != inbox.ReasonDigestConflict {
		t.Fatalf("completions %+v, want still quarantined as digest_conflict", got)
	}
	var text string
	if err := pool.QueryRow(t.Context(), `SELECT string_agg(text, ',') FROM effect`).Scan(&text); err != nil || text != "original" {
		t.Fatalf("effects %q, %v: the forged copy must never apply", text, err)
	}
}

func TestRedriveDeadLetter(t *testing.T) {
	pool := pgtest.NewPool(t, tmpl)
	ib := newInbox(t, false)
	dead := noted(t, 1, "stuck")
	if err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		return outbox.Append(t.Context(), tx, "some.topic", dead)
	}); err != nil {
		t.Fatal(err)
	}
	// A dead letter as the relay makes one: dead_at set, its pending entry deleted.
	if _, err := pool.Exec(t.Context(), `UPDATE outbox_event SET dead_at = now(), attempts = 10, last_error = 'broker says no';
		DELETE FROM outbox_pending`); err != nil {
		t.Fatal(err)
	}
	decide(t, pool, ib, raw(t, redrive(t, "svc", events.ActionRedriveDeadLetter, dead.EventID)),
		raw(t, redrive(t, "svc", events.ActionRedriveDeadLetter, dead.EventID)))
	got := published[events.RedriveCompleted](t, pool, events.TypeRedriveCompleted)
	if len(got) != 2 || got[0].Outcome != events.OutcomeReleased || got[1].Outcome != events.OutcomeNotFound {
		t.Fatalf("completions %+v, want released then not_found", got)
	}
	if n := count(t, pool, `SELECT count(*) FROM outbox_event WHERE event_id = $1 AND dead_at IS NULL AND attempts = 0`, dead.EventID); n != 1 {
		t.Fatal("the dead letter was not redriven")
	}
	if n := count(t, pool, `SELECT count(*) FROM outbox_pending WHERE event_id = $1`, dead.EventID); n != 1 {
		t.Fatal("the redriven dead letter is not pending")
	}
}

func redriveID(t *testing.T, e envelope.Envelope) uuid.UUID { return payloadOf(t, e).RedriveID }

func payloadOf(t *testing.T, e envelope.Envelope) events.RedriveRequested {
	t.Helper()
	var p events.RedriveRequested
	if err := json.Unmarshal(e.Payload, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

// The internal API through the access policy, called by Client with a
// service token.
func TestInternalAPI(t *testing.T) {
	pool := pgtest.NewPool(t, tmpl)
	ib := newInbox(t, false)
	decide(t, pool, ib, raw(t, noted(t, 2, "a")), raw(t, noted(t, 2, "b")), []byte("garbage"), raw(t, noted(t, 1, "ok")))
	keys, err := auth.NewKeys(auth.DevKey)
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	r.Use(auth.Middleware(keys, nil))
	serveFacts := factsAfter(5)
	ops.NewAPI(pool, recon.Sets{recon.SetUsageFacts: recon.Set(serveFacts)}, nil).Routes(r)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	c := ops.NewClient(map[string]string{"svc": srv.URL}, keys, "query")
	ctx := t.Context()

	rec, err := c.Recovery(ctx, "svc")
	// Three quarantined; three notices pending in the outbox.
	if err != nil || rec.Quarantined != 3 || rec.OutboxPending != 3 || rec.Deferred != 0 || rec.DeadLetters != 0 {
		t.Fatalf("recovery %+v, %v", rec, err)
	}
	page, err := c.Quarantine(ctx, "svc", url.Values{"limit": {"2"}})
	if err != nil || len(page.Items) != 2 || page.Next == nil || page.Items[0].Reason != envelope.ReasonUnsupportedSchema {
		t.Fatalf("first page %+v, %v", page, err)
	}
	page, err = c.Quarantine(ctx, "svc", url.Values{"limit": {"2"}, "after": {*page.Next}})
	if err != nil || len(page.Items) != 1 || page.Next != nil || page.Items[0].Reason != envelope.ReasonMalformed || page.Items[0].EventID != "" {
		t.Fatalf("second page %+v, %v", page, err)
	}
	page, err = c.Quarantine(ctx, "svc", url.Values{"reason": {envelope.ReasonMalformed}})
	if err != nil || len(page.Items) != 1 {
		t.Fatalf("by reason %+v, %v", page, err)
	}
	if page, err = c.Quarantine(ctx, "svc", url.Values{"state": {"all"}}); err != nil || len(page.Items) != 3 {
		t.Fatalf("state all %+v, %v", page, err)
	}
	// A state that is none is refused, not read as the default.
	if _, err := c.Quarantine(ctx, "svc", url.Values{"state": {"nonsense"}}); err == nil || !strings.Contains(err.Error(), "invalid_state") {
		t.Fatalf("state nonsense: %v, want invalid_state", err)
	}
	dl, err := c.DeadLetters(ctx, "svc", 0, 10)
	if err != nil || len(dl.Items) != 0 || dl.Next != nil {
		t.Fatalf("dead letters %+v, %v", dl, err)
	}
	// A reconciliation set, page by page in position order.
	var facts []recon.UsageFact
	q := recon.Query{TenantID: "acme", Period: "2026-11", Limit: 2}
	for {
		var page []recon.UsageFact
		if err := c.ReconciliationPage(ctx, "svc", recon.SetUsageFacts, q, &page); err != nil {
			t.Fatal(err)
		}
		facts = append(facts, page...)
		if len(page) < q.Limit {
			break
		}
		q.After = page[len(page)-1].Pos()
	}
	if want, _ := serveFacts(ctx, recon.Query{Limit: 10}); !slices.EqualFunc(facts, want, func(a, b recon.UsageFact) bool {
		return a.EventID == b.EventID && a.Quantity.Equal(b.Quantity)
	}) {
		t.Fatalf("the set read page by page: %+v, want %+v", facts, want)
	}
	if err := c.ReconciliationPage(ctx, "svc", recon.SetUsageFacts, recon.Query{TenantID: "acme", Period: "November", Limit: 1}, &facts); err == nil {
		t.Fatal("a bad period was accepted")
	}
	if err := c.ReconciliationPage(ctx, "svc", recon.SetCharges, recon.Query{TenantID: "acme", Period: "2026-11", Limit: 1}, &facts); err == nil ||
		!strings.Contains(err.Error(), "unknown_set") {
		t.Fatalf("a set the service does not serve: %v", err)
	}
	if _, err := c.Recovery(ctx, "nowhere"); err == nil {
		t.Fatal("an unknown service was called")
	}
	// Without a service token, nothing.
	resp, err := http.Get(srv.URL + "/internal/v1/quarantine")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("anonymous call: %d", resp.StatusCode)
	}
	tenant := auth.Client(auth.DevToken(auth.RoleTenant, "acme"))
	resp, err = tenant.Get(srv.URL + "/internal/v1/quarantine")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("tenant call: %d", resp.StatusCode)
	}
}

// factsAfter serves n usage facts as a reconciliation set does: in position
// order, after the query's position, at most its limit.
func factsAfter(n int) func(context.Context, recon.Query) ([]recon.UsageFact, error) {
	all := make([]recon.UsageFact, n)
	for i := range all {
		all[i] = recon.UsageFact{EventID: uuid.New(), UsageID: uuid.New(), MeterCode: "api_calls", Quantity: decimal.NewFromInt(int64(i)), Period: "2026-11"}
	}
	slices.SortFunc(all, func(a, b recon.UsageFact) int { return a.Pos().Compare(b.Pos()) })
	return func(_ context.Context, q recon.Query) ([]recon.UsageFact, error) {
		var out []recon.UsageFact
		for _, f := range all {
			if f.Pos().Compare(q.After) > 0 && len(out) < q.Limit {
				out = append(out, f)
			}
		}
		return out, nil
	}
}
