package httpx

import (
	"mime"
	"net/http"
	"strings"

	"github.com/google/uuid"

	"github.com/usagebilling/billing/pkg/rule"
)

// The problem codes of the input rules every route shares, all 400.
const (
	// CodeRepeatedQueryParameter: a query parameter given more than once
	// (?limit=1&limit=500) other than ListParameters; taking the first
	// would hide the client's mistake.
	CodeRepeatedQueryParameter = "repeated_query_parameter"
	// CodeControlCharacter: a control character in free text that is stored
	// and shown to operators (rule.FreeText).
	CodeControlCharacter = rule.CodeControlCharacter
	// CodeInvalidEventID: an event id that is not a UUID in its canonical
	// form (36 characters, 8-4-4-4-12 hexadecimal digits) or is the nil
	// UUID. Braced, "urn:uuid:" and bare 32-digit forms are refused, so one
	// event has one spelling.
	CodeInvalidEventID = "invalid_event_id"
)

// ParseUUID reads a UUID in its canonical form only (36 characters,
// hyphens at 8, 13, 18 and 23, either letter case), refusing the nil UUID:
// uuid.Parse also takes "{...}", "urn:uuid:..." and 32 bare digits.
func ParseUUID(s string) (uuid.UUID, bool) {
	if len(s) != 36 {
		return uuid.Nil, false
	}
	id, err := uuid.Parse(s)
	if err != nil || id == uuid.Nil {
		return uuid.Nil, false
	}
	return id, true
}

// EventID is ParseUUID for an event id named field: 400 invalid_event_id
// otherwise.
func EventID(field, s string) (uuid.UUID, *Problem) {
	id, ok := ParseUUID(s)
	if !ok {
		return uuid.Nil, Problemf(http.StatusBadRequest, CodeInvalidEventID,
			"%s must be a UUID in its canonical form (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx), not the nil UUID", field)
	}
	return id, nil
}

// FreeText checks text a client gives to be stored and shown (a reason, an
// actor): no control character (400 control_character naming field).
// CheckJSON has already refused NUL and invalid UTF-8.
func FreeText(field, s string) *Problem {
	if e := rule.FreeText(field, s); e != nil {
		return RuleProblem(e)
	}
	return nil
}

// checkMediaType accepts a request body's Content-Type when it is absent or
// application/json, with no charset or charset utf-8 (RFC 8259: JSON
// exchanged between systems is UTF-8); anything else is 415
// unsupported_media_type.
func checkMediaType(ct string) *Problem {
	if ct == "" {
		return nil
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err == nil && mt == "application/json" {
		cs, ok := params["charset"]
		if !ok || strings.EqualFold(cs, "utf-8") {
			return nil
		}
		return Problemf(http.StatusUnsupportedMediaType, "unsupported_media_type",
			"send application/json in UTF-8 (no charset, or charset=utf-8), not charset %q", clipText(strings.ToValidUTF8(cs, "?")))
	}
	return Problemf(http.StatusUnsupportedMediaType, "unsupported_media_type", "send application/json, not %q", clipText(strings.ToValidUTF8(ct, "?")))
}

// ListParameters are the query parameters a route takes as a list, one
// value per occurrence (query's usage analytics: groupBy=model&groupBy=region,
// filter=model:gpt-4&filter=region:eu); any other may be given once.
var ListParameters = []string{"groupBy", "filter"}

// repeatedParameter is the problem of a query parameter given twice.
func repeatedParameter(name string) *Problem {
	return Problemf(http.StatusBadRequest, CodeRepeatedQueryParameter,
		"query parameter %q is given more than once; give it once", clipText(strings.ToValidUTF8(name, "?")))
}
