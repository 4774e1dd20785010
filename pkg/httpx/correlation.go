package httpx

import (
	"net/http"

	"github.com/usagebilling/billing/pkg/envelope"
)

// HeaderCorrelationID names the header that ties a request to the events it
// writes and to the audit of what it asks.
const HeaderCorrelationID = "X-Correlation-Id"

// The problem codes of CorrelationID, both 400.
const (
	CodeMissingCorrelationID = "missing_correlation_id"
	CodeInvalidCorrelationID = "invalid_correlation_id"
)

// ValidCorrelationID reports whether s is a correlation id an envelope can
// carry: 1 to envelope.MaxIDLength (128) printable ASCII characters without
// spaces (0x21-0x7E).
func ValidCorrelationID(s string) bool {
	if len(s) == 0 || len(s) > envelope.MaxIDLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

// CorrelationID reads the request's X-Correlation-Id, the one rule of every
// service: when present it must be ValidCorrelationID, else 400
// invalid_correlation_id; when absent (or empty) it is "" unless required,
// then 400 missing_correlation_id. Commands take it optionally; operator
// requests, whose audit names it, require it.
func CorrelationID(r *http.Request, required bool) (string, *Problem) {
	id := r.Header.Get(HeaderCorrelationID)
	switch {
	case id == "" && required:
		return "", NewProblem(http.StatusBadRequest, CodeMissingCorrelationID, "the X-Correlation-Id header is required")
	case id == "":
		return "", nil
	case !ValidCorrelationID(id):
		return "", NewProblem(http.StatusBadRequest, CodeInvalidCorrelationID, "X-Correlation-Id must be 1-128 printable ASCII characters without spaces")
	}
	return id, nil
}
