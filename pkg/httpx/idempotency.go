package httpx

import (
	"net/http"

	"github.com/usagebilling/billing/pkg/idempotency"
)

// The headers of an idempotent command: the client's key, and the mark on a
// replayed answer.
const (
	HeaderIdempotencyKey = "Idempotency-Key"
	HeaderReplayed       = "Idempotent-Replayed"
)

// The problem codes of IdempotencyKey (400) and of a key reused with another
// request (422, ProblemOf).
const (
	CodeMissingIdempotencyKey = "missing_idempotency_key"
	CodeInvalidIdempotencyKey = "invalid_idempotency_key"
	CodeIdempotencyKeyReused  = "idempotency_key_reused"
)

// IdempotencyKey reads the Idempotency-Key header a command requires: 400
// missing_idempotency_key without one, 400 invalid_idempotency_key when it is
// not idempotency.ValidKey (1-255 printable ASCII).
func IdempotencyKey(r *http.Request) (string, *Problem) {
	key := r.Header.Get(HeaderIdempotencyKey)
	if key == "" {
		return "", NewProblem(http.StatusBadRequest, CodeMissingIdempotencyKey, "send an Idempotency-Key header")
	}
	if !idempotency.ValidKey(key) {
		return "", NewProblem(http.StatusBadRequest, CodeInvalidIdempotencyKey, "Idempotency-Key must be 1-255 printable ASCII characters")
	}
	return key, nil
}

// Command is what every idempotent command's request carries besides its
// own input.
type Command struct {
	// IdempotencyKey is the client's key (IdempotencyKey).
	IdempotencyKey string
	// CorrelationID is the optional X-Correlation-Id (CorrelationID).
	CorrelationID string
	// RequestHash identifies the request, its method, path and body
	// (idempotency.RequestHash), to tell a replay from a reused key.
	RequestHash string
}

// ReadCommand reads an idempotent command's request, in this order: its
// Idempotency-Key (IdempotencyKey), its optional X-Correlation-Id
// (CorrelationID) and, unless dst is nil (a command without a body), its
// JSON body into dst (ReadJSON, at most MaxCommandBody bytes). The first
// problem found is the answer.
func ReadCommand(w http.ResponseWriter, r *http.Request, dst any) (Command, *Problem) {
	key, p := IdempotencyKey(r)
	if p != nil {
		return Command{}, p
	}
	corr, p := CorrelationID(r, false)
	if p != nil {
		return Command{}, p
	}
	var body []byte
	if dst != nil {
		if body, p = ReadJSON(w, r, dst, MaxCommandBody); p != nil {
			return Command{}, p
		}
	}
	return Command{IdempotencyKey: key, CorrelationID: corr, RequestHash: idempotency.RequestHash(r.Method, r.URL.Path, body)}, nil
}

// WriteReply writes an idempotent command's answer, a JSON body with its
// status; a replay of the stored first answer is marked Idempotent-Replayed:
// true and is otherwise the same.
func WriteReply(w http.ResponseWriter, reply idempotency.Reply) {
	w.Header().Set("Content-Type", "application/json")
	if reply.Replayed {
		w.Header().Set(HeaderReplayed, "true")
	}
	w.WriteHeader(reply.Status)
	_, _ = w.Write(reply.Body)
}
