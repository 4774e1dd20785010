package httpx

import (
	"encoding/json"
	"net/http"
)

// DecimalText returns the text of a decimal sent as a JSON string, for the
// domain to parse (pkg/money): absent or null is "" (the domain says whether
// the field is required), any other JSON value (a number, which JSON would
// round, an object...) is a 400 problem with the field's code. Keep such a
// field as json.RawMessage in the request type so that a number reaches
// here rather than failing the decoder as a type error.
func DecimalText(field, code string, raw json.RawMessage) (string, *Problem) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", Problemf(http.StatusBadRequest, code, "%s must be a decimal string such as \"12.50\", not a JSON %s", field, rawKind(raw))
	}
	return s, nil
}

// rawKind names the kind of a JSON value by its first byte.
func rawKind(raw json.RawMessage) string {
	switch raw[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "boolean"
	default:
		return "number"
	}
}
