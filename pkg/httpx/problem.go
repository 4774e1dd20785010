package httpx

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"github.com/usagebilling/billing/pkg/idempotency"
	"github.com/usagebilling/billing/pkg/rule"
)

// StatusOf is the HTTP status of a broken rule's kind, the one mapping of
// every service: Invalid 400, NotFound 404, Conflict 409, Unprocessable
// 422. A kind it does not know is 400: the request, not the server, is at
// fault.
func StatusOf(k rule.Kind) int {
	switch k {
	case rule.NotFound:
		return http.StatusNotFound
	case rule.Conflict:
		return http.StatusConflict
	case rule.Unprocessable:
		return http.StatusUnprocessableEntity
	default:
		return http.StatusBadRequest
	}
}

// RuleProblem is the problem of a broken rule: StatusOf its kind, its code
// and detail.
func RuleProblem(e *rule.Error) *Problem {
	return NewProblem(StatusOf(e.Kind), e.Code, e.Detail)
}

// ProblemOf maps an error of a request to its problem: a broken rule
// (*rule.Error) by RuleProblem, an Idempotency-Key reused with another
// request (idempotency.ErrKeyReused) to 422 idempotency_key_reused, anything
// else by StoreError (503 timeout or database_unavailable, 500 internal).
func ProblemOf(err error) *Problem {
	if e, ok := rule.As(err); ok {
		return RuleProblem(e)
	}
	if errors.Is(err, idempotency.ErrKeyReused) {
		return NewProblem(http.StatusUnprocessableEntity, CodeIdempotencyKeyReused,
			"this Idempotency-Key was used with a different request")
	}
	return StoreError(err)
}

// WriteError answers a request that failed with err with ProblemOf(err),
// logging the failures that are the server's (5xx) on log (when not nil).
// When the client has gone away it answers nothing.
func WriteError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		return
	}
	p := ProblemOf(err)
	if p.Status >= 500 && log != nil {
		log.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path,
			"status", p.Status, "err", err)
	}
	WriteProblem(w, p)
}
