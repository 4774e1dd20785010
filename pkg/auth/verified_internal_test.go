package auth

import (
	"crypto/ed25519"
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// An entry is used until its token's expiry, not at it; the memory holds
// at most maxVerified entries.
func TestVerifiedExpiryAndBound(t *testing.T) {
	key := DevKey.Public()
	keyOf := func(string) (ed25519.PublicKey, bool) { return key, true }
	exp := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	c := NewClaims("alice", RoleOperator, "", time.Hour)
	c.ExpiresAt = jwt.NewNumericDate(exp)
	var v verified
	sum := sha256.Sum256([]byte("t"))
	v.put(sum, c, DevKey.ID, key)
	if _, _, ok := v.get(sum, exp.Add(-time.Second), keyOf); !ok {
		t.Fatal("not found a second before its expiry")
	}
	if _, _, ok := v.get(sum, exp, keyOf); ok {
		t.Fatal("used at its expiry")
	}
	if n := v.len(); n != 0 {
		t.Fatalf("%d entries after the expired one was asked for, want 0", n)
	}

	for i := range maxVerified + 10 {
		v.put(sha256.Sum256(fmt.Appendf(nil, "t%d", i)), c, DevKey.ID, key)
	}
	if n := v.len(); n != maxVerified {
		t.Fatalf("%d entries after %d tokens, want the bound %d", n, maxVerified+10, maxVerified)
	}
}
