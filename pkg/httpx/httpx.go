// Package httpx holds the HTTP conventions every service shares: RFC 9457
// problem responses with a stable machine-readable code, strict JSON request
// decoding, and path parameter checks. Handlers map domain errors to problems
// here, at the edge; domain code never sees HTTP.
package httpx

import (
	"bytes"
	"context"
	"net"

	"encoding/json"
	"errors"
	"fmt"
	"github.com/jackc/pgx/v5/pgconn"
	"io"
	"net/http"
	"regexp"
	"strings"
)

// DefaultMaxBody is the largest request body DecodeJSON accepts by default.
const DefaultMaxBody = 64 << 10

// MaxCommandBody is the largest body of one command (a price activation, a
// usage fact, an adjustment, settings): far above any valid one.
const MaxCommandBody = 16 << 10

// Problem is an RFC 9457 problem detail with a stable code.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	Code   string `json:"code"`
}

// Error makes a Problem usable as an error.
func (p *Problem) Error() string { return p.Code + ": " + p.Detail }

// NewProblem builds a problem; the type URI is derived from the code.
func NewProblem(status int, code, detail string) *Problem {
	return &Problem{
		Type:   "https://usagebilling.dev/problems/" + strings.ReplaceAll(code, "_", "-"),
		Title:  http.StatusText(status),
		Status: status,
		Detail: detail,
		Code:   code,
	}
}

// Problemf builds a problem with a formatted detail.
func Problemf(status int, code, format string, args ...any) *Problem {
	return NewProblem(status, code, fmt.Sprintf(format, args...))
}

// WriteProblem writes p as application/problem+json.
func WriteProblem(w http.ResponseWriter, p *Problem) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// WriteJSON writes v as JSON with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// DecodeJSON reads exactly one JSON value from the body into dst, strictly:
// bodies over maxBytes (DefaultMaxBody when 0) are refused before they are
// parsed, then CheckJSON's rules (no duplicate or case-variant members, no
// NUL, invalid UTF-8, huge numbers or trailing data), then encoding/json
// with unknown fields refused. The problem names what is wrong: codes
// body_too_large (413), unsupported_media_type (415), malformed_json,
// unknown_field, invalid_field and CheckJSON's (400). The Content-Type,
// when given, must be application/json with no charset or charset=utf-8.
func DecodeJSON(w http.ResponseWriter, r *http.Request, dst any, maxBytes int64) *Problem {
	_, p := ReadJSON(w, r, dst, maxBytes)
	return p
}

// ReadJSON is DecodeJSON for a command that also needs the body it read:
// an idempotent one hashes it (idempotency.RequestHash) to tell a replay
// from a reused key.
func ReadJSON(w http.ResponseWriter, r *http.Request, dst any, maxBytes int64) ([]byte, *Problem) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBody
	}
	if p := checkMediaType(r.Header.Get("Content-Type")); p != nil {
		return nil, p
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBytes))
	if err != nil {
		var maxErr *http.MaxBytesError
		if errors.As(err, &maxErr) {
			return nil, Problemf(http.StatusRequestEntityTooLarge, "body_too_large", "body exceeds %d bytes", maxBytes)
		}
		return nil, NewProblem(http.StatusBadRequest, "malformed_json", "could not read the body")
	}
	return body, Unmarshal(body, dst)
}

// Unmarshal decodes body into dst as DecodeJSON does, for a body already
// read.
func Unmarshal(body []byte, dst any) *Problem {
	if p := CheckJSON(body, dst); p != nil {
		return p
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err := dec.Decode(dst)
	if err == nil {
		return nil
	}
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			return NewProblem(http.StatusBadRequest, "malformed_json", "body must be a JSON object")
		}
		return Problemf(http.StatusBadRequest, "invalid_field", "field %q must be a %s", field, jsonKind(typeErr.Type.Kind().String()))
	case errors.As(err, &syntaxErr), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return NewProblem(http.StatusBadRequest, "malformed_json", "body is not valid JSON")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return Problemf(http.StatusBadRequest, "unknown_field", "unknown field %s", clipText(strings.TrimPrefix(err.Error(), "json: unknown field ")))
	default:
		return NewProblem(http.StatusBadRequest, "malformed_json", "body is not valid JSON")
	}
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "string"
	case "slice", "array":
		return "array"
	case "struct", "map":
		return "object"
	case "bool":
		return "boolean"
	default:
		return "number"
	}
}

var tenantID = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// TenantID checks a tenant id from a path: 1-128 of [A-Za-z0-9_-] (the
// envelope's rule), else a 400 invalid_tenant_id problem.
func TenantID(s string) (string, *Problem) {
	if !tenantID.MatchString(s) {
		return "", NewProblem(http.StatusBadRequest, "invalid_tenant_id", "tenant id must be 1-128 characters of A-Z a-z 0-9 _ -")
	}
	return s, nil
}

// Required returns a missing_field problem for the
// first empty value among name/value pairs.
func Required(pairs ...string) *Problem {
	for i := 0; i+1 < len(pairs); i += 2 {
		if strings.TrimSpace(pairs[i+1]) == "" {
			return Problemf(http.StatusBadRequest, "missing_field", "field %q is required", pairs[i])
		}
	}
	return nil
}

// StoreError maps an unexpected error from the database to a problem: 503
// timeout when a statement ran past statement_timeout (or lock_timeout) and
// was cancelled, 503 database_unavailable when the database cannot be
// reached (either way the request changed nothing and may be retried), 500
// internal otherwise.
func StoreError(err error) *Problem {
	var netErr net.Error
	var connErr *pgconn.ConnectError
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && (pgErr.Code == "57014" || pgErr.Code == "55P03"): // query_canceled, lock_not_available
		return NewProblem(http.StatusServiceUnavailable, "timeout", "the database statement ran too long and was cancelled; nothing was changed, retry later")
	case errors.As(err, &connErr), errors.As(err, &netErr), pgconn.SafeToRetry(err),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, io.ErrUnexpectedEOF):
		return NewProblem(http.StatusServiceUnavailable, "database_unavailable", "the database is unreachable; nothing was changed, retry later")
	default:
		return NewProblem(http.StatusInternalServerError, "internal", "internal error")
	}
}
