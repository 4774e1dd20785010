package idempotency_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/idempotency"
	"github.com/usagebilling/billing/pkg/pgmigrate"
	"github.com/usagebilling/billing/testkit/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

var tmpl = pgtest.Template{Name: "idempotency", Migrate: func(_ context.Context, url string) error {
	return pgmigrate.Up(url, idempotency.Migrations)
}}

func claim(t *testing.T, pool *pgxpool.Pool, key, body string) (*idempotency.Response, error) {
	t.Helper()
	var r *idempotency.Response
	err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		var err error
		r, err = idempotency.Claim(t.Context(), tx, "acme/prices", key, idempotency.RequestHash("POST", "/p", []byte(body)))
		if err != nil || r != nil {
			return err
		}
		return idempotency.Save(t.Context(), tx, "acme/prices", key, 201, []byte(body))
	})
	return r, err
}

// Keys past the TTL are purged, in batches of the limit, and only those; a
// key that comes back after the TTL is a new command.
func TestPurgeRemovesOnlyKeysPastTheTTL(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, tmpl)
	for _, k := range []string{"old-1", "old-2", "old-3", "fresh"} {
		if r, err := claim(t, pool, k, `{"v":1}`); r != nil || err != nil {
			t.Fatalf("first claim of %s: %v, %v", k, r, err)
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE idempotency_key SET created_at = now() - interval '25 hours' WHERE key LIKE 'old-%'`); err != nil {
		t.Fatal(err)
	}
	ttl := time.Now().Add(-24 * time.Hour)
	for _, want := range []int64{2, 1, 0} {
		n, err := idempotency.Purge(ctx, pool, ttl, 2)
		if err != nil || n != want {
			t.Fatalf("purged %d, %v; want %d", n, err, want)
		}
	}
	// Within the TTL: a replay, and another body is refused.
	if r, err := claim(t, pool, "fresh", `{"v":1}`); err != nil || r == nil || r.Status != 201 {
		t.Fatalf("replay within the TTL: %v, %v", r, err)
	}
	if _, err := claim(t, pool, "fresh", `{"v":2}`); !errors.Is(err, idempotency.ErrKeyReused) {
		t.Fatalf("other body within the TTL: %v", err)
	}
	// After the TTL: a new command, whatever its body.
	if r, err := claim(t, pool, "old-1", `{"v":2}`); err != nil || r != nil {
		t.Fatalf("key after the TTL: %v, %v; want a new command", r, err)
	}
}

func TestMigrationsUpDownUp(t *testing.T) { pgtest.CheckUpDownUp(t, idempotency.Migrations) }

// ClaimReply and SaveReply: the first request runs and its answer is
// stored; a replay gets the stored answer marked Replayed; a key claimed but not answered yet (a command in steps) runs
// again; another request with the key is refused.
func TestClaimReply(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, tmpl)
	hash := idempotency.RequestHash("POST", "/close", nil)
	claimReply := func(key, hash string, save bool) (*idempotency.Reply, error) {
		var r *idempotency.Reply
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			r, err = idempotency.ClaimReply(ctx, tx, "acme/close", key, hash)
			if err != nil || r != nil || !save {
				return err
			}
			saved, err := idempotency.SaveReply(ctx, tx, "acme/close", key, 202, map[string]string{"status": "closed"})
			if err == nil && (saved.Status != 202 || string(saved.Body) != `{"status":"closed"}` || saved.Replayed) {
				t.Errorf("saved %+v", saved)
			}
			return err
		})
		return r, err
	}
	if r, err := claimReply("k", hash, false); r != nil || err != nil {
		t.Fatalf("first claim: %+v, %v; want to run", r, err)
	}
	if r, err := claimReply("k", hash, true); r != nil || err != nil {
		t.Fatalf("claimed, not answered: %+v, %v; want to run again", r, err)
	}
	r, err := claimReply("k", hash, true)
	if err != nil || r == nil || !r.Replayed || r.Status != 202 || string(r.Body) != `{"status":"closed"}` {
		t.Fatalf("replay: %+v, %v", r, err)
	}
	if _, err := claimReply("k", idempotency.RequestHash("POST", "/other", nil), true); !errors.Is(err, idempotency.ErrKeyReused) {
		t.Fatalf("another request: %v; want ErrKeyReused", err)
	}
}

// Steps: a command in several transactions claims the key in each step and
// saves its answer in the last; an attempt that stopped before saving
// leaves the key without an answer and the next carries on; one that ends
// without saving sends its result unstored; an answered key replays.
func TestSteps(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t, tmpl)
	steps := func() *idempotency.Steps {
		return &idempotency.Steps{Scope: "acme/close", Key: "k", Status: 202,
			RequestHash: idempotency.RequestHash("POST", "/close", nil)}
	}
	claim := func(s *idempotency.Steps) bool {
		t.Helper()
		var answered bool
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
			answered, err = s.Claim(ctx, tx)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return answered
	}
	// An attempt that claims and stops: no answer, its result unstored.
	first := steps()
	if claim(first) {
		t.Fatal("first claim answered")
	}
	if r, err := first.Result(map[string]string{"status": "closing"}); err != nil || r.Status != 202 ||
		string(r.Body) != `{"status":"closing"}` || r.Replayed {
		t.Fatalf("unsaved result = %+v, %v", r, err)
	}
	// The next carries on and saves.
	second := steps()
	if claim(second) {
		t.Fatal("a key without an answer answered")
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return second.Save(ctx, tx, map[string]string{"status": "closed"})
	}); err != nil {
		t.Fatal(err)
	}
	if r, err := second.Result(nil); err != nil || r.Status != 202 || string(r.Body) != `{"status":"closed"}` || r.Replayed {
		t.Fatalf("saved result = %+v, %v", r, err)
	}
	// Then the key replays.
	third := steps()
	if !claim(third) {
		t.Fatal("an answered key did not answer")
	}
	if r, err := third.Result(nil); err != nil || !r.Replayed || string(r.Body) != `{"status":"closed"}` {
		t.Fatalf("replay = %+v, %v", r, err)
	}
	other := steps()
	other.RequestHash = idempotency.RequestHash("POST", "/other", nil)
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := other.Claim(ctx, tx)
		return err
	}); !errors.Is(err, idempotency.ErrKeyReused) {
		t.Fatalf("another request: %v; want ErrKeyReused", err)
	}
}
