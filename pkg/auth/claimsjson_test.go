package auth_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/usagebilling/billing/pkg/auth"
)

// signPayload signs a payload as given, byte for byte, with the issuer's
// key: what a client with a stolen-but-valid signing path, or a lenient
// issuer, could send.
func signPayload(k auth.Key, payload string) string {
	enc := base64.RawURLEncoding
	in := enc.EncodeToString([]byte(`{"alg":"EdDSA","kid":"`+k.ID+`","typ":"JWT"}`)) + "." + enc.EncodeToString([]byte(payload))
	return in + "." + enc.EncodeToString(ed25519.Sign(k.Private, []byte(in)))
}

// Claims that encoding/json (and so the JWT library) would read leniently
// are refused, even correctly signed: exp, iat or nbf as strings, a claim
// named twice or in other letter case.
func TestVerifyStrictClaims(t *testing.T) {
	k := keys(t)
	now := time.Now().Unix()
	body := func(exp, extra string) string {
		return fmt.Sprintf(`{"roles":["operator"],"sub":"alice","iss":%q,"aud":["billing"],"iat":%d,"exp":%s%s}`, issuer, now, exp, extra)
	}
	if _, err := k.Verify(signPayload(key, body(fmt.Sprint(now+600), ""))); err != nil {
		t.Fatalf("a well-formed payload signed by hand: %v", err)
	}
	for _, tt := range []struct{ name, payload string }{
		{"exp as a string", body(fmt.Sprintf("%q", fmt.Sprint(now+600)), "")},
		{"iat as a string", strings.Replace(body(fmt.Sprint(now+600), ""), fmt.Sprintf(`"iat":%d`, now), fmt.Sprintf(`"iat":"%d"`, now), 1)},
		{"nbf as a string", body(fmt.Sprint(now+600), fmt.Sprintf(`,"nbf":"%d"`, now))},
		{"roles named twice", body(fmt.Sprint(now+600), `,"roles":["service"]`)},
		{"sub in capitals", body(fmt.Sprint(now+600), `,"SUB":"mallory"`)},
		{"EXP beside exp", body(fmt.Sprint(now+600), fmt.Sprintf(`,"EXP":%d`, now+99999))},
		{"NUL in sub", strings.Replace(body(fmt.Sprint(now+600), ""), `"alice"`, `"al\u0000ice"`, 1)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := k.Verify(signPayload(key, tt.payload))
			if err == nil || !strings.Contains(auth.Reason(err), "strict JSON") {
				t.Fatalf("Verify: %v (reason %q), want refused as not strict JSON", err, auth.Reason(err))
			}
		})
	}
}

// FuzzVerify: whatever the payload, a correctly signed token is either
// refused or its claims are those of a strict reading.
func FuzzVerify(f *testing.F) {
	now := time.Now().Unix()
	for _, s := range []string{
		fmt.Sprintf(`{"roles":["operator"],"sub":"a","iss":%q,"aud":["billing"],"iat":%d,"exp":%d}`, issuer, now, now+60),
		fmt.Sprintf(`{"roles":["operator"],"sub":"a","iss":%q,"aud":["billing"],"iat":%d,"exp":"%d"}`, issuer, now, now+60),
		`{"exp":1e999}`, `{}`, `[]`, `{"roles":["viewer"],"tenant":"t","tenant":"u"}`,
	} {
		f.Add(s)
	}
	k, err := auth.NewKeys(key)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, payload string) {
		c, err := k.Verify(signPayload(key, payload))
		if err != nil {
			if auth.Reason(err) == "" {
				t.Fatal("a refusal without a reason")
			}
			return
		}
		if c.Subject == "" || c.ExpiresAt == nil || c.IssuedAt == nil {
			t.Fatalf("accepted %q as %+v", payload, c)
		}
	})
}
