package auth

import (
	"crypto/ed25519"
	"crypto/sha256"
	"slices"
	"sync"
	"time"
)

// maxVerified bounds the verified-token cache: a token's digest, claims and
// key are about 300 bytes, so at most about 1.2 MB a process.
const maxVerified = 4096

// verified remembers the tokens verify accepted, so a reader polling with
// one token pays one signature check, not one a request (Ed25519 was half
// of what the query service spent answering its polls). An entry is used
// only until the token's expiry and only while the token's key id still
// names the key that checked its signature: a key removed from the JWKS
// document or replaced under its id refuses its tokens as before. Refused
// tokens are not remembered.
type verified struct {
	mu      sync.Mutex
	entries map[[sha256.Size]byte]verifiedEntry
}

type verifiedEntry struct {
	claims Claims
	kid    string
	key    ed25519.PublicKey
	exp    time.Time
}

// get returns the claims of token when it was accepted before, has not
// expired and keyOf(kid) is still the key that accepted it.
func (v *verified) get(sum [sha256.Size]byte, now time.Time, keyOf func(kid string) (ed25519.PublicKey, bool)) (Claims, string, bool) {
	v.mu.Lock()
	e, ok := v.entries[sum]
	if ok && !now.Before(e.exp) {
		delete(v.entries, sum)
		ok = false
	}
	v.mu.Unlock()
	if !ok {
		return Claims{}, "", false
	}
	if k, found := keyOf(e.kid); !found || !k.Equal(e.key) {
		v.mu.Lock()
		delete(v.entries, sum)
		v.mu.Unlock()
		return Claims{}, "", false
	}
	return e.claims.clone(), e.kid, true
}

// put remembers an accepted token; when full it first forgets one entry
// (any: a map's iteration starts anywhere).
func (v *verified) put(sum [sha256.Size]byte, c Claims, kid string, key ed25519.PublicKey) {
	if c.ExpiresAt == nil {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.entries == nil {
		v.entries = make(map[[sha256.Size]byte]verifiedEntry)
	}
	if _, ok := v.entries[sum]; !ok && len(v.entries) >= maxVerified {
		for old := range v.entries {
			delete(v.entries, old)
			break
		}
	}
	v.entries[sum] = verifiedEntry{claims: c.clone(), kid: kid, key: key, exp: c.ExpiresAt.Time}
}

func (v *verified) len() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.entries)
}

// clone is c with slices of its own: a handler changing its request's
// claims cannot change another request's.
func (c Claims) clone() Claims {
	c.Roles = slices.Clone(c.Roles)
	c.Audience = slices.Clone(c.Audience)
	return c
}
