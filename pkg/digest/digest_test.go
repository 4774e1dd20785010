package digest

import (
	"testing"

	"github.com/google/uuid"
)

func TestSetIsOrderIndependentAndSensitiveToMembers(t *testing.T) {
	ids := make([]uuid.UUID, 50)
	for i := range ids {
		ids[i] = uuid.New()
	}
	var fwd, rev, short Set
	for i, id := range ids {
		fwd.Add(id)
		rev.Add(ids[len(ids)-1-i])
		if i > 0 {
			short.Add(id)
		}
	}
	if fwd.String() != rev.String() || fwd.Len() != rev.Len() {
		t.Fatalf("order changed the digest: %s/%d vs %s/%d", fwd.String(), fwd.Len(), rev.String(), rev.Len())
	}
	if short.String() == fwd.String() {
		t.Fatalf("a missing member left the digest unchanged: %s", fwd.String())
	}
	var empty Set
	if empty.String() != "0" {
		t.Fatalf("empty digest = %q, want 0", empty.String())
	}
}

func TestTermKnownValue(t *testing.T) {
	// sha256("00000000-0000-0000-0000-000000000000") starts 12b9377cbe7e5c; the
	// same value Postgres gives for SQLTerm over the nil uuid.
	if got, want := Term(uuid.Nil), uint64(0x12b9377cbe7e5c); got != want {
		t.Fatalf("Term(nil uuid) = %#x, want %#x", got, want)
	}
}
