package webhook

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/google/uuid"
)

// sealedPrefix starts a stored secret sealed with a key: "aesgcm:<key
// id>:<base64url of nonce and ciphertext>". A stored secret without it is
// plaintext (written while no key was configured).
const sealedPrefix = "aesgcm:"

var keyIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// SecretKeys seal the endpoints' signing secrets at rest with AES-256-GCM,
// the endpoint's id as additional data (a sealed secret copied to another
// row does not open). The first key seals; every key opens, so a key is
// rotated by putting a new one first and keeping the old ones until the
// worker has resealed every secret under the new one (Reseal).
type SecretKeys struct {
	current string
	aeads   map[string]cipher.AEAD
}

// ParseSecretKeys reads WEBHOOK_SECRET_KEYS: comma-separated "<key
// id>:<32 bytes, standard or URL base64>", the first the one that seals.
// Empty: nil, secrets stored as they are.
func ParseSecretKeys(list []string) (*SecretKeys, error) {
	if len(list) == 0 {
		return nil, nil
	}
	k := &SecretKeys{aeads: map[string]cipher.AEAD{}}
	var errs []error
	for i, item := range list {
		id, b64, ok := strings.Cut(item, ":")
		if !ok || !keyIDPattern.MatchString(id) {
			errs = append(errs, fmt.Errorf("WEBHOOK_SECRET_KEYS: item %d: want <key id>:<base64 of 32 bytes>, the id of 1-64 letters, digits, '.', '_' or '-'", i+1))
			continue
		}
		raw, err := decodeKey(b64)
		if err != nil || len(raw) != 32 {
			errs = append(errs, fmt.Errorf("WEBHOOK_SECRET_KEYS: key %s: want 32 bytes in base64 (openssl rand -base64 32)", id))
			continue
		}
		if _, dup := k.aeads[id]; dup {
			errs = append(errs, fmt.Errorf("WEBHOOK_SECRET_KEYS: key id %s given twice", id))
			continue
		}
		block, err := aes.NewCipher(raw)
		if err != nil {
			return nil, fmt.Errorf("WEBHOOK_SECRET_KEYS: key %s: %w", id, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("WEBHOOK_SECRET_KEYS: key %s: %w", id, err)
		}
		if k.current == "" {
			k.current = id
		}
		k.aeads[id] = aead
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return k, nil
}

func decodeKey(s string) ([]byte, error) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, nil
		}
	}
	return nil, errors.New("not base64")
}

// Seal is what to store for endpoint's secret: sealed with the current key,
// or the secret itself when k is nil.
func (k *SecretKeys) Seal(endpoint uuid.UUID, secret string) (string, error) {
	if k == nil {
		return secret, nil
	}
	aead := k.aeads[k.current]
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(secret)+aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("nonce: %w", err)
	}
	sealed := aead.Seal(nonce, nonce, []byte(secret), endpoint[:])
	return sealedPrefix + k.current + ":" + base64.RawURLEncoding.EncodeToString(sealed), nil
}

// Open is endpoint's secret from what is stored: a plaintext one as it is,
// a sealed one opened with its key.
func (k *SecretKeys) Open(endpoint uuid.UUID, stored string) (string, error) {
	rest, sealed := strings.CutPrefix(stored, sealedPrefix)
	if !sealed {
		return stored, nil
	}
	id, b64, _ := strings.Cut(rest, ":")
	var aead cipher.AEAD
	if k != nil {
		aead = k.aeads[id]
	}
	if aead == nil {
		return "", fmt.Errorf("the signing secret is sealed with key %q, which WEBHOOK_SECRET_KEYS does not have", id)
	}
	raw, err := base64.RawURLEncoding.DecodeString(b64)
	if err != nil || len(raw) < aead.NonceSize() {
		return "", fmt.Errorf("the signing secret sealed with key %q is malformed", id)
	}
	plain, err := aead.Open(nil, raw[:aead.NonceSize()], raw[aead.NonceSize():], endpoint[:])
	if err != nil {
		return "", fmt.Errorf("the signing secret sealed with key %q does not open (another key under that id, or another endpoint's)", id)
	}
	return string(plain), nil
}

// currentPrefix starts every secret sealed with the current key ("" for a
// nil k: nothing to reseal).
func (k *SecretKeys) currentPrefix() string {
	if k == nil {
		return ""
	}
	return sealedPrefix + k.current + ":"
}
