package auth_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/usagebilling/billing/pkg/auth"
)

// A token accepted once is remembered, and the memory never speaks for a
// key the document no longer holds: a token whose key is removed, or
// replaced under its id, is refused as it was without the memory. A
// refused token is not remembered, and a caller changing the claims it got
// does not change another caller's.
func TestVerifiedTokensRemembered(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after func() []auth.Key // the document once the token is remembered
	}{
		{"key removed", func() []auth.Key { return []auth.Key{queryKey} }},
		{"key replaced under its id", func() []auth.Key { return []auth.Key{{ID: key.ID, Private: mustKey("x").Private}} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeJWKS(t, key)
			k, err := auth.New(auth.Config{Service: "billing", Issuer: issuer, JWKS: path, Refresh: 20 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			token := sign(t, key, claims("alice", auth.RoleOperator, "", time.Hour))
			c, err := k.Verify(token)
			if err != nil {
				t.Fatal(err)
			}
			if n := auth.Verified(k); n != 1 {
				t.Fatalf("%d tokens remembered after one accepted, want 1", n)
			}
			for range 2 { // the claims of its first check, then of the memory
				c.Roles[0] = auth.RoleTenant
				if c, err = k.Verify(token); err != nil || c.Roles[0] != auth.RoleOperator {
					t.Fatalf("the token again: %v %v, want its own roles", c.Roles, err)
				}
			}
			if _, err := k.Verify(sign(t, mustKey("k9"), claims("eve", auth.RoleOperator, "", time.Hour))); err == nil {
				t.Fatal("a token of an unknown key accepted")
			}
			if n := auth.Verified(k); n != 1 {
				t.Fatalf("%d tokens remembered after a refusal, want 1", n)
			}

			if err := auth.WriteJWKS(path, tc.after()...); err != nil {
				t.Fatal(err)
			}
			// The document is read again in the background once older than
			// Refresh; nothing tells when, so polled.
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				if _, err := k.Verify(token); err != nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the remembered token is still accepted 10 s after its key left the document")
				}
			}
			if n := auth.Verified(k); n != 0 {
				t.Fatalf("%d tokens remembered after the key left, want 0", n)
			}
		})
	}
}

// BenchmarkVerify: a token checked for the first time (signature, claims)
// and one remembered.
func BenchmarkVerify(b *testing.B) {
	path := filepath.Join(b.TempDir(), "jwks.json")
	if err := auth.WriteJWKS(path, key); err != nil {
		b.Fatal(err)
	}
	k, err := auth.New(auth.Config{Service: "billing", Issuer: issuer, JWKS: path})
	if err != nil {
		b.Fatal(err)
	}
	token := func(i int) string {
		s, err := auth.Token(key, claims(fmt.Sprintf("user-%d", i), auth.RoleOperator, "", time.Hour))
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	b.Run("first", func(b *testing.B) {
		tokens := make([]string, b.N)
		for i := range tokens {
			tokens[i] = token(i)
		}
		b.ResetTimer()
		for i := range b.N {
			if _, err := k.Verify(tokens[i]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("remembered", func(b *testing.B) {
		t := token(-1)
		for b.Loop() {
			if _, err := k.Verify(t); err != nil {
				b.Fatal(err)
			}
		}
	})
}
