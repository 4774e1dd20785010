package httpapi_test

import (
	"crypto/rand"
	"encoding/binary"
	"testing"
	"time"

	"github.com/google/uuid"
)

// A fact whose month was archived (decision 0025) is no longer here to
// tell a replay from a conflict: sending its identity again, with the same
// content or another, is refused 409 source_event_archived, and nothing is
// written.
func TestArchivedIdentityRefused(t *testing.T) {
	e := newEnv(t)
	twoVersions(t, e)
	at := rfc(time.Now().Add(-time.Minute).Truncate(time.Second))
	u := usage{SourceSystem: "gw", SourceEventID: "ev-1", MeterCode: "api", Quantity: "1.50", OccurredAt: at}
	r := e.do(t, "POST", path, u.json(t))
	if r.status != 201 {
		t.Fatalf("first: %d %s", r.status, r.body)
	}
	// Its usage id made two months ago puts the fact in the first partition,
	// which ends at this month on a new database and so can be archived.
	old := time.Now().AddDate(0, -2, 0)
	var id uuid.UUID
	if _, err := rand.Read(id[:]); err != nil {
		t.Fatal(err)
	}
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(old.UnixMilli()))
	copy(id[:6], ms[2:])
	id[6], id[8] = id[6]&0x0f|0x70, id[8]&0x3f|0x80
	a := decode[accepted](t, r.body)
	for _, q := range []string{
		`UPDATE usage_fact SET usage_id = $1 WHERE usage_id = $2`,
		`UPDATE usage_fact_source SET usage_id = $1 WHERE usage_id = $2`,
	} {
		if _, err := e.Pool.Exec(t.Context(), q, id, a.UsageID); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.Pool.Exec(t.Context(), `UPDATE usage_watermark_cut SET through = now(), published = true`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Pool.Exec(t.Context(), `SELECT usage_fact_archive($1)`, old); err != nil {
		t.Fatalf("archive: %v", err)
	}
	written := e.written(t)
	for i, again := range []usage{u, {SourceSystem: "gw", SourceEventID: "ev-1", MeterCode: "api", Quantity: "2", OccurredAt: at}} {
		if r := e.do(t, "POST", path, again.json(t)); r.status != 409 || !hasCode(r.body, "source_event_archived") {
			t.Fatalf("resend %d: %d %s, want 409 source_event_archived", i, r.status, r.body)
		}
	}
	if n := e.written(t); n != written {
		t.Fatalf("%d rows after the resends, %d before", n, written)
	}
}
