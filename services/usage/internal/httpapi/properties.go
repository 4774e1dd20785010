package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/usagebilling/billing/pkg/httpx"
	"github.com/usagebilling/billing/services/usage/internal/domain"
)

// properties reads a fact's optional properties: absent or null is none;
// anything but an object of strings is 400 invalid_properties. The limits
// (count, names, lengths) are the domain's (catalog.ValidateProperties).
func properties(raw json.RawMessage) (map[string]string, *httpx.Problem) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	bad := func(detail string) *httpx.Problem {
		return httpx.NewProblem(http.StatusBadRequest, domain.CodeInvalidProperties, detail)
	}
	if raw[0] != '{' {
		return nil, bad("properties must be a JSON object of string values")
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(raw, &members); err != nil {
		return nil, bad("properties must be a JSON object of string values")
	}
	props := make(map[string]string, len(members))
	for k, v := range members {
		var s string
		if len(v) == 0 || v[0] != '"' || json.Unmarshal(v, &s) != nil {
			return nil, httpx.Problemf(http.StatusBadRequest, domain.CodeInvalidProperties,
				"property %q must be a string, not a JSON %s", clip(k), kindOf(v))
		}
		props[k] = s
	}
	return props, nil
}

// nonNil is m, or an empty map for none (the API always shows properties).
func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// kindOf names the JSON kind of a value by its first byte.
func kindOf(v json.RawMessage) string {
	if len(v) == 0 {
		return "value"
	}
	switch v[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	case '"':
		return "string"
	default:
		return "number"
	}
}

// clip shortens a client's text quoted in a detail.
func clip(s string) string {
	if len(s) > 64 {
		return strings.ToValidUTF8(s[:64], "") + "..."
	}
	return s
}
