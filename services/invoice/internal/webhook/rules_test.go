package webhook_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/usagebilling/billing/services/invoice/internal/webhook"
)

func TestCheckURL(t *testing.T) {
	ok := []string{"https://erp.example/hooks", "http://127.0.0.1:9000/x?tenant=acme", "https://[::1]:8443/",
		"https://erp.example:1/", "https://erp.example:65535/"}
	for _, u := range ok {
		if _, err := webhook.CheckURL(u); err != nil {
			t.Errorf("%s refused: %v", u, err)
		}
	}
	bad := []string{"", "ftp://erp.example/", "erp.example/hooks", "https://user:pw@erp.example/", "https://tok@erp.example/",
		"https:///path", "https://erp.example/#frag", "https://erp.example/a b", "javascript:alert(1)",
		"https://erp.example/" + string(make([]byte, 2100)),
		"https://erp.example:99999/", "https://erp.example:0/", "https://erp.example:65536/", "https://erp.example:/",
		"https://erp.example:0443/", "https://[::1]:99999/"}
	for _, u := range bad {
		if _, err := webhook.CheckURL(u); !errors.Is(err, webhook.ErrInvalidURL) {
			t.Errorf("%.40q accepted (%v)", u, err)
		}
	}
}

// The signature of a fixed input, computed independently:
// printf '1700000000.{}' | openssl dgst -sha256 -hmac whsec_test
func TestSignKnownVector(t *testing.T) {
	got := webhook.Sign("whsec_test", 1700000000, []byte("{}"))
	if want := "v1=35495024f4ef3f94e5a93e22221544c4b75e9a42300cd965ab81cb85cd994e91"; got != want {
		t.Fatalf("signature %s, want %s", got, want)
	}
	if !verify("whsec_test", "1700000000", got, []byte("{}"), time.Unix(1700000000, 0)) {
		t.Fatalf("signature %s does not verify", got)
	}
	if verify("whsec_other", "1700000000", got, []byte("{}"), time.Unix(1700000000, 0)) ||
		verify("whsec_test", "1700000001", got, []byte("{}"), time.Unix(1700000000, 0)) ||
		verify("whsec_test", "1700000000", got, []byte("{ }"), time.Unix(1700000000, 0)) {
		t.Fatal("a signature verifies for another secret, timestamp or body")
	}
	if verify("whsec_test", "1700000000", got, []byte("{}"), time.Unix(1700000000+600, 0)) {
		t.Fatal("a ten-minute-old timestamp verifies")
	}
	s1, _ := webhook.NewSecret()
	s2, _ := webhook.NewSecret()
	if s1 == s2 || len(s1) < 40 || s1[:6] != webhook.SecretPrefix {
		t.Fatalf("secrets %q %q", s1, s2)
	}
}

func TestClassify(t *testing.T) {
	for code, want := range map[int]string{200: "accepted", 202: "accepted", 204: "accepted", 301: "failed",
		400: "failed", 401: "failed", 404: "failed", 410: "failed", 422: "failed", 408: "retry", 425: "retry",
		429: "retry", 500: "retry", 502: "retry", 503: "retry"} {
		if got := webhook.Classify(code); got != want {
			t.Errorf("%d: %s, want %s", code, got, want)
		}
	}
}

func TestRetryAfterAndBackoff(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{"": 0, "3": 3 * time.Second, "0": 0, "-1": 0, "soon": 0,
		now.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second, now.Add(-time.Minute).Format(http.TimeFormat): 0} {
		if got := webhook.RetryAfter(v, now); got != want {
			t.Errorf("Retry-After %q: %v, want %v", v, got, want)
		}
	}
	if got := webhook.Backoff(time.Second, time.Minute, 3, 7*time.Second); got != 7*time.Second {
		t.Errorf("backoff with Retry-After: %v", got)
	}
	for attempts, max := range map[int32]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 30: time.Minute} {
		for range 50 {
			got := webhook.Backoff(time.Second, time.Minute, attempts, 0)
			if got < max/2 || got > max {
				t.Fatalf("attempt %d: backoff %v outside [%v, %v]", attempts, got, max/2, max)
			}
		}
	}
}
