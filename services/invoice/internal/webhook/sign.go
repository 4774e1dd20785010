package webhook

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strconv"
)

// Delivery headers.
const (
	HeaderID        = "Webhook-Id"        // the idempotency key: the same for every attempt
	HeaderTimestamp = "Webhook-Timestamp" // Unix seconds of this attempt
	HeaderSignature = "Webhook-Signature" // "v1=" + hex HMAC-SHA256(secret, timestamp + "." + body)
	// HeaderReceipt is the receiver's reference for what it accepted, kept
	// with the intent (else the `id` of a JSON object answered).
	HeaderReceipt = "Webhook-Receipt"
)

// SecretPrefix starts every signing secret.
const SecretPrefix = "whsec_"

// NewSecret makes a signing secret: SecretPrefix and 32 random bytes,
// base64url. The whole string, prefix included, is the HMAC key.
func NewSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return SecretPrefix + base64.RawURLEncoding.EncodeToString(b), nil
}

// Sign is the Webhook-Signature of body sent at timestamp (Unix seconds):
// "v1=" and the lowercase hex HMAC-SHA256, keyed with the secret's bytes,
// of the timestamp in decimal, a dot, and the body's exact bytes.
func Sign(secret string, timestamp int64, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(strconv.FormatInt(timestamp, 10)))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "v1=" + hex.EncodeToString(mac.Sum(nil))
}
