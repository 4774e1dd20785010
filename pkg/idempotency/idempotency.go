// Package idempotency makes a command safe to retry: the first request with
// an Idempotency-Key runs and its response is stored in the same transaction
// as its effect; a replay with the same key and body gets that response back;
// the same key with another body is refused. Keys are kept for a TTL
// (IDEMPOTENCY_TTL, 24 hours by default) and then purged (Purge): a replay
// after the TTL is a new command.
package idempotency

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/usagebilling/billing/pkg/envelope"
	"github.com/usagebilling/billing/pkg/pgmigrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations is the idempotency schema, tracked in its own migrations table.
var Migrations = pgmigrate.Set{FS: migrationFiles, Dir: "migrations", Table: "idempotency_schema_migrations"}

// ErrKeyReused is returned when a key comes back with a different request.
var ErrKeyReused = errors.New("idempotency key already used with a different request")

// Response is a stored first response.
type Response struct {
	Status int
	Body   []byte
}

// RequestHash identifies a request by its method, path and body; bodies that
// are JSON compare in canonical form, so whitespace and key order don't count.
func RequestHash(method, path string, body []byte) string {
	if c, err := envelope.Canonical(body); err == nil {
		body = c
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n", method, path)
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// ValidKey reports whether a key is acceptable: 1-255 printable ASCII.
func ValidKey(key string) bool {
	if len(key) == 0 || len(key) > 255 {
		return false
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return false
		}
	}
	return true
}

// Claim reserves key within scope (e.g. the tenant and command) in tx. It
// returns nil when the caller is first and must run the command and Save its
// response in the same tx; the stored response for a replay; or ErrKeyReused.
// A concurrent first request holds the key until it commits or rolls back, so
// identical concurrent requests act once.
func Claim(ctx context.Context, tx pgx.Tx, scope, key, requestHash string) (*Response, error) {
	tag, err := tx.Exec(ctx, `INSERT INTO idempotency_key (scope, key, request_hash) VALUES ($1, $2, $3)
		ON CONFLICT DO NOTHING`, scope, key, requestHash)
	if err != nil {
		return nil, fmt.Errorf("claim idempotency key: %w", err)
	}
	if tag.RowsAffected() == 1 {
		return nil, nil
	}
	var hash string
	var r Response
	err = tx.QueryRow(ctx, `SELECT request_hash, status, body FROM idempotency_key WHERE scope = $1 AND key = $2`,
		scope, key).Scan(&hash, &r.Status, &r.Body)
	if err != nil {
		return nil, fmt.Errorf("read idempotency key: %w", err)
	}
	if hash != requestHash {
		return nil, ErrKeyReused
	}
	return &r, nil
}

// ClaimReply is Claim for a command that answers a Reply, with the one rule
// of what a replay is: it returns nil when the caller is to run the command
// (it is first, or an earlier attempt of a command in steps claimed the key
// and has not saved an answer yet), the stored answer marked Replayed, or
// ErrKeyReused.
func ClaimReply(ctx context.Context, tx pgx.Tx, scope, key, requestHash string) (*Reply, error) {
	prev, err := Claim(ctx, tx, scope, key, requestHash)
	if err != nil || prev == nil || prev.Status == 0 {
		return nil, err
	}
	return &Reply{Status: prev.Status, Body: prev.Body, Replayed: true}, nil
}

// Save stores the response of the command that claimed key.
func Save(ctx context.Context, tx pgx.Tx, scope, key string, status int, body []byte) error {
	_, err := tx.Exec(ctx, `UPDATE idempotency_key SET status = $3, body = $4 WHERE scope = $1 AND key = $2`,
		scope, key, status, body)
	if err != nil {
		return fmt.Errorf("save idempotent response: %w", err)
	}
	return nil
}

// SaveReply answers the command that claimed key: v encoded as JSON, with
// status, stored in tx (Save) and returned as the Reply to send.
func SaveReply(ctx context.Context, tx pgx.Tx, scope, key string, status int, v any) (Reply, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return Reply{}, fmt.Errorf("encode reply: %w", err)
	}
	if err := Save(ctx, tx, scope, key, status, body); err != nil {
		return Reply{}, err
	}
	return Reply{Status: status, Body: body}, nil
}

// Run runs a command in tx, the one way an HTTP edge makes a command
// idempotent: it claims key within scope (a replay answers the stored first
// reply without running the command), runs run, and saves its status and
// body, JSON-encoded, as the key's reply. An error of run is returned: the
// caller rolls tx back, and nothing is written, the key included.
func Run(ctx context.Context, tx pgx.Tx, scope, key, requestHash string, run func() (status int, body any, err error)) (Reply, error) {
	replay, err := ClaimReply(ctx, tx, scope, key, requestHash)
	if err != nil {
		return Reply{}, err
	}
	if replay != nil {
		return *replay, nil
	}
	status, body, err := run()
	if err != nil {
		return Reply{}, err
	}
	return SaveReply(ctx, tx, scope, key, status, body)
}

// Steps makes a command that runs in several transactions idempotent, as
// Run does one that runs in one: the command calls Claim in each
// transaction that may change something before its last, and Save in its
// last, which stores its result with Status as the key's answer. Claim
// reports whether the key has an answer already (the command ran to its
// end before and does nothing more); a key claimed by an attempt that
// stopped before Save (a crash between steps) has none, and the command
// carries on. A command that ends without Save (a close still waiting)
// leaves the key without an answer. The caller sends Result.
type Steps struct {
	Scope, Key, RequestHash string
	// Status is what the answer is stored and sent with.
	Status int
	// reply is the key's answer: the stored one Claim found, or the one
	// Save stored.
	reply *Reply
}

// Claim claims the key in tx (ClaimReply): true when it has an answer, to
// send again; ErrKeyReused when it came with another request.
func (s *Steps) Claim(ctx context.Context, tx pgx.Tx) (bool, error) {
	r, err := ClaimReply(ctx, tx, s.Scope, s.Key, s.RequestHash)
	if err != nil {
		return false, err
	}
	s.reply = r
	return r != nil, nil
}

// Save stores v, JSON-encoded with Status, as the key's answer in tx.
func (s *Steps) Save(ctx context.Context, tx pgx.Tx, v any) error {
	r, err := SaveReply(ctx, tx, s.Scope, s.Key, s.Status, v)
	if err != nil {
		return err
	}
	s.reply = &r
	return nil
}

// Result is the reply to send once the command returned v: the key's
// answer (a replay, or the one Save stored), or, when it has none, v
// JSON-encoded with Status and not stored.
func (s *Steps) Result(v any) (Reply, error) {
	if s.reply != nil {
		return *s.reply, nil
	}
	body, err := json.Marshal(v)
	if err != nil {
		return Reply{}, fmt.Errorf("encode reply: %w", err)
	}
	return Reply{Status: s.Status, Body: body}, nil
}

// Purge deletes up to limit keys created before olderThan (the TTL) and
// returns how many it deleted; call it again while it returns limit. A
// request that comes back with a purged key is a new command: it runs again.
func Purge(ctx context.Context, db interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}, olderThan time.Time, limit int) (int64, error) {
	tag, err := db.Exec(ctx, `
		DELETE FROM idempotency_key WHERE (scope, key) IN (
			SELECT scope, key FROM idempotency_key WHERE created_at < $1
			LIMIT $2 FOR UPDATE SKIP LOCKED)`, olderThan, limit)
	if err != nil {
		return 0, fmt.Errorf("purge idempotency keys: %w", err)
	}
	return tag.RowsAffected(), nil
}

// Reply is an idempotent command's answer: the one it gave first, or, on a
// replay of the same key and request, that stored answer again (Replayed;
// the HTTP edge marks it, httpx.WriteReply).
type Reply struct {
	Status   int
	Body     []byte
	Replayed bool
}
