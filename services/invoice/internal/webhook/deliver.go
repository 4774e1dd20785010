package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Attempt outcomes.
const (
	outcomeAccepted = "accepted"
	outcomeRetry    = "retry"
	outcomeFailed   = "failed"
	outcomeLost     = "lost"
)

// maxRef bounds the receiver's reference kept with an intent.
const maxRef = 200

// result is what one delivery attempt learnt.
type result struct {
	outcome    string
	statusCode int           // 0: no answer
	ref        string        // the receiver's reference, if any
	err        string        // why it was not accepted
	retryAfter time.Duration // the receiver's Retry-After (429, 503), if any
}

// deliver POSTs body to url, signed with secret, under key, within timeout.
func deliver(ctx context.Context, hc *http.Client, timeout time.Duration, url, secret, key string, body []byte, now time.Time) result {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return result{outcome: outcomeFailed, err: "build request: " + err.Error()}
	}
	ts := now.Unix()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "usagebilling-invoice-webhooks/1")
	req.Header.Set(HeaderID, key)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(HeaderSignature, Sign(secret, ts, body))
	resp, err := hc.Do(req)
	var refused *RefusedError
	if errors.As(err, &refused) {
		// Refused before any connection: the same URL would be refused
		// again, so it fails (an operator retries it once allowed).
		return result{outcome: outcomeFailed, err: "refused by the egress policy before connecting: " + refused.Error()}
	}
	if err != nil {
		msg := err.Error()
		if errors.Is(err, context.DeadlineExceeded) {
			msg = fmt.Sprintf("no answer within %v (the receiver may have acted on it: the next attempt has the same %s)", timeout, HeaderID)
		}
		return result{outcome: outcomeRetry, err: msg}
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	r := result{statusCode: resp.StatusCode, ref: reference(resp.Header, answer)}
	r.outcome = classify(resp.StatusCode)
	if r.outcome != outcomeAccepted {
		r.err = fmt.Sprintf("answered %d", resp.StatusCode)
	}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		r.retryAfter = retryAfter(resp.Header.Get("Retry-After"), now)
	}
	return r
}

// classify maps a status code to an outcome: 2xx accepted; 408, 425, 429
// and 5xx retried; any other answer (3xx, other 4xx) a permanent failure:
// the receiver refused this body at this URL, and the same signed body would
// be refused again. An operator retries it once the receiver is fixed.
func classify(code int) string {
	switch {
	case code >= 200 && code < 300:
		return outcomeAccepted
	case code == http.StatusRequestTimeout, code == http.StatusTooEarly, code == http.StatusTooManyRequests, code >= 500:
		return outcomeRetry
	default:
		return outcomeFailed
	}
}

// reference is the receiver's reference for what it accepted: the
// Webhook-Receipt header, else the string `id` of a JSON object answered.
func reference(h http.Header, body []byte) string {
	ref := h.Get(HeaderReceipt)
	if ref == "" {
		var v struct {
			ID json.RawMessage `json:"id"`
		}
		if json.Unmarshal(body, &v) == nil && len(v.ID) > 0 {
			var s string
			if json.Unmarshal(v.ID, &s) == nil {
				ref = s
			} else {
				ref = string(v.ID) // a number
			}
		}
	}
	if len(ref) > maxRef {
		ref = ref[:maxRef]
	}
	return ref
}

// retryAfter parses a Retry-After header: delay seconds or an HTTP date
// (0: absent or unreadable).
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		return time.Duration(min(n, int64(365*24*3600))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// backoff is the delay before the attempt after attempt number attempts
// (from 1): base doubled per attempt, capped, with jitter (half fixed, half
// random, so a burst of failures spreads out); a receiver's Retry-After
// replaces it, exactly.
func backoff(base, limit time.Duration, attempts int32, retryAfter time.Duration) time.Duration {
	if retryAfter > 0 {
		return retryAfter
	}
	d := base
	for i := int32(1); i < attempts && d < limit; i++ {
		d *= 2
	}
	d = min(d, limit)
	return d/2 + rand.N(d/2+1)
}
