package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"regexp"
	"slices"
	"strings"

	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/httpx"
	"github.com/usagebilling/billing/services/usage/internal/app"
	"github.com/usagebilling/billing/services/usage/internal/domain"
)

// The media types of CloudEvents' structured JSON mode: one event, or a
// batch (an array of them).
const (
	MediaCloudEvent      = "application/cloudevents+json"
	MediaCloudEventBatch = "application/cloudevents-batch+json"
)

// maxEventBody bounds one event's body; a batch is bounded as usage:batch
// is (MaxBatch events, maxBatchBody bytes).
const maxEventBody = httpx.DefaultMaxBody

// codeEventsRefused is the answer's code when its events are refused for
// different reasons (400, 422 or 409: see writeRefusals).
const codeEventsRefused = "events_refused"

// ingestAccess decides who may send a CloudEvent for a tenant (its
// subject): an ingest token of that tenant, or a platform-ingest token
// (a company's gateway) for any. The route carries the tenant in its body,
// so the handler asks this guard per subject (Admits) rather than the
// router asking it per path.
var ingestAccess = auth.Allow(func(http.ResponseWriter, *http.Request) {}, auth.RoleIngest, auth.RolePlatformIngest)

// eventError names one refused event of a request.
type eventError struct {
	Index  int    `json:"index"`
	Status int    `json:"status"`
	Code   string `json:"code"`
	Detail string `json:"detail"`
}

// eventsProblem is the answer to a request with a refused event: nothing of
// it was written.
type eventsProblem struct {
	*httpx.Problem
	Errors []eventError `json:"errors"`
}

// ingestEvents is POST /v1/events (and /api/v1/events, OpenMeter's path):
// structured CloudEvents 1.0, one or a batch, accepted all or nothing. The
// route admits ingest and platform-ingest tokens (auth.AllowAnyTenant);
// each event's subject is then checked against the token (ingestAccess).
func (api *API) ingestEvents(w http.ResponseWriter, r *http.Request) {
	c, _ := auth.FromContext(r.Context())
	correlationID, p := httpx.CorrelationID(r, false)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	evs, errs, p := readCloudEvents(w, r)
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	if len(errs) > 0 {
		writeRefusals(w, errs)
		return
	}
	var denied []eventError
	for i, ev := range evs {
		if !ingestAccess.Admits(c, ev.Subject) {
			denied = append(denied, eventError{Index: i, Status: http.StatusForbidden, Code: "forbidden",
				Detail: "the credential does not allow usage of tenant " + ev.Subject})
		}
	}
	if len(denied) > 0 {
		if httpx.Limit(w, r, httpx.CallerKey(r, c.Issuer, c.Tenant, c.Subject)) {
			forbidden(w, denied)
		}
		return
	}
	key := httpx.CallerKey(r, c.Issuer, c.Tenant, c.Subject) // a gateway's own bucket
	if !c.Has(auth.RolePlatformIngest) {
		key = httpx.TenantKey(c.Tenant)
	}
	if !httpx.Limit(w, r, key) {
		return
	}
	refused, err := api.app.Ingest(r.Context(), correlationID, evs)
	if err != nil {
		httpx.WriteError(w, r, api.log, err)
		return
	}
	if len(refused) > 0 {
		writeRefusals(w, refusalErrors(refused))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func refusalErrors(refused []app.Refusal) []eventError {
	out := make([]eventError, len(refused))
	for i, x := range refused {
		p := httpx.RuleProblem(x.Err)
		out[i] = eventError{Index: x.Index, Status: p.Status, Code: p.Code, Detail: p.Detail}
	}
	return out
}

// writeRefusals answers a request with refused events: 400 when any is
// invalid, else 422 when any cannot be accepted as it stands, else 409 (a
// conflict); the code is the refusals' own when they share one, else
// events_refused.
func writeRefusals(w http.ResponseWriter, errs []eventError) {
	rank := map[int]int{http.StatusConflict: 1, http.StatusUnprocessableEntity: 2, http.StatusBadRequest: 3}
	status, code := errs[0].Status, errs[0].Code
	for _, e := range errs {
		if e.Code != code {
			code = codeEventsRefused
		}
		if rank[e.Status] > rank[status] {
			status = e.Status
		}
	}
	writeEventsProblem(w, httpx.Problemf(status, code, "%d of the events are refused; nothing was written", len(errs)), errs)
}

func forbidden(w http.ResponseWriter, errs []eventError) {
	writeEventsProblem(w, httpx.NewProblem(http.StatusForbidden, "forbidden", "the credential does not allow this request"), errs)
}

func writeEventsProblem(w http.ResponseWriter, p *httpx.Problem, errs []eventError) {
	if errs == nil {
		httpx.WriteProblem(w, p)
		return
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(eventsProblem{Problem: p, Errors: errs})
}

// readCloudEvents reads the body by its media type: one event or a batch.
// A problem refuses the request as a whole (media type, size, JSON syntax,
// batch bounds); errs name the events that are not valid CloudEvents.
func readCloudEvents(w http.ResponseWriter, r *http.Request) (evs []domain.CloudEvent, errs []eventError, p *httpx.Problem) {
	batch, p := cloudEventsMedia(r.Header.Get("Content-Type"))
	if p != nil {
		return nil, nil, p
	}
	limit := int64(maxEventBody)
	if batch {
		limit = maxBatchBody
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var maxErr *http.MaxBytesError
		if errors.As(err, &maxErr) {
			return nil, nil, httpx.Problemf(http.StatusRequestEntityTooLarge, "body_too_large", "body exceeds %d bytes", limit)
		}
		return nil, nil, httpx.NewProblem(http.StatusBadRequest, "malformed_json", "could not read the body")
	}
	// Strict JSON (no repeated member, NUL, invalid UTF-8 or huge number)
	// before anything decodes it.
	if p := httpx.CheckJSON(body, nil); p != nil {
		return nil, nil, p
	}
	var raws []json.RawMessage
	if batch {
		if err := json.Unmarshal(body, &raws); err != nil {
			return nil, nil, httpx.NewProblem(http.StatusBadRequest, "malformed_json", "a batch must be a JSON array of CloudEvents")
		}
		switch n := len(raws); {
		case n == 0:
			return nil, nil, httpx.Problemf(http.StatusBadRequest, "missing_field", "a batch must hold 1 to %d events", MaxBatch)
		case n > MaxBatch:
			return nil, nil, httpx.Problemf(http.StatusBadRequest, "batch_too_large", "%d events: a batch holds at most %d", n, MaxBatch)
		}
	} else {
		raws = []json.RawMessage{body}
	}
	evs = make([]domain.CloudEvent, len(raws))
	for i, raw := range raws {
		ev, p := parseCloudEvent(raw)
		if p != nil {
			errs = append(errs, eventError{Index: i, Status: p.Status, Code: p.Code, Detail: p.Detail})
			continue
		}
		evs[i] = ev
	}
	return evs, errs, nil
}

// cloudEventsMedia reads the request's Content-Type: true for a batch; any
// other type than CloudEvents' JSON ones (UTF-8) is 415.
func cloudEventsMedia(ct string) (batch bool, p *httpx.Problem) {
	mt, params, err := mime.ParseMediaType(ct)
	if err == nil && (mt == MediaCloudEvent || mt == MediaCloudEventBatch) {
		if cs, ok := params["charset"]; !ok || strings.EqualFold(cs, "utf-8") {
			return mt == MediaCloudEventBatch, nil
		}
	}
	return false, httpx.Problemf(http.StatusUnsupportedMediaType, "unsupported_media_type",
		"send %s (one event) or %s (a JSON array of events), in UTF-8, not %q", MediaCloudEvent, MediaCloudEventBatch,
		clip(strings.ToValidUTF8(ct, "?")))
}

// attributeName is the rule of CloudEvents attribute names: lower-case
// ASCII letters and digits (data_base64 is the one member besides).
var attributeName = regexp.MustCompile(`^[a-z0-9]{1,20}$`)

// Required and optional string attributes this route reads. subject (the
// tenant) and time (occurredAt) are optional in CloudEvents and required
// here.
var (
	requiredAttributes = []string{"specversion", "id", "source", "type", "subject", "time"}
	stringAttributes   = []string{"specversion", "id", "source", "type", "subject", "time", "datacontenttype", "dataschema"}
)

// parseCloudEvent checks one structured CloudEvent and reads its data's
// members. Numbers keep their exact JSON text (UseNumber): a quantity is
// never a float's rounding.
func parseCloudEvent(raw json.RawMessage) (domain.CloudEvent, *httpx.Problem) {
	bad := func(code, format string, args ...any) *httpx.Problem {
		return httpx.Problemf(http.StatusBadRequest, code, format, args...)
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return domain.CloudEvent{}, bad("malformed_json", "a CloudEvent must be a JSON object")
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(raw, &members); err != nil {
		return domain.CloudEvent{}, bad("malformed_json", "a CloudEvent must be a JSON object")
	}
	attrs := map[string]string{}
	for name, v := range members {
		if name == "data" || name == "data_base64" {
			continue
		}
		if !attributeName.MatchString(name) {
			return domain.CloudEvent{}, bad(domain.CodeInvalidField,
				"attribute %q: CloudEvents attribute names are 1 to 20 lower-case letters and digits", clip(name))
		}
		if !slices.Contains(stringAttributes, name) {
			continue // an extension attribute: not read
		}
		var s string
		if len(v) == 0 || v[0] != '"' || json.Unmarshal(v, &s) != nil {
			return domain.CloudEvent{}, bad(domain.CodeInvalidField, "attribute %q must be a string, not a JSON %s", name, kindOf(v))
		}
		attrs[name] = s
	}
	for _, name := range requiredAttributes {
		if attrs[name] == "" {
			return domain.CloudEvent{}, bad(domain.CodeMissingField, "attribute %q is required", name)
		}
	}
	if v := attrs["specversion"]; v != "1.0" {
		return domain.CloudEvent{}, bad(domain.CodeInvalidField, "specversion %q: this route takes CloudEvents 1.0", clip(v))
	}
	if _, p := httpx.TenantID(attrs["subject"]); p != nil {
		return domain.CloudEvent{}, bad(p.Code, "subject (the tenant id) must be 1-128 characters of A-Z a-z 0-9 _ -")
	}
	if _, ok := members["data_base64"]; ok {
		return domain.CloudEvent{}, bad(domain.CodeInvalidField, "data_base64: this route takes JSON data only")
	}
	if ct, ok := attrs["datacontenttype"]; ok && !jsonMedia(ct) {
		return domain.CloudEvent{}, bad(domain.CodeInvalidField, "datacontenttype %q: this route takes JSON data only", clip(ct))
	}
	ev := domain.CloudEvent{ID: attrs["id"], Source: attrs["source"], Subject: attrs["subject"], Type: attrs["type"], Time: attrs["time"]}
	data, p := parseData(members["data"])
	if p != nil {
		return domain.CloudEvent{}, p
	}
	ev.Data = data
	return ev, nil
}

// parseData reads data's top-level members: absent or null is no data;
// anything but an object is 400.
func parseData(raw json.RawMessage) (map[string]domain.DataValue, *httpx.Problem) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if raw[0] != '{' {
		return nil, httpx.Problemf(http.StatusBadRequest, domain.CodeInvalidField, "data must be a JSON object, not a JSON %s", kindOf(raw))
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var members map[string]any
	if err := dec.Decode(&members); err != nil {
		return nil, httpx.NewProblem(http.StatusBadRequest, domain.CodeInvalidField, "data must be a JSON object")
	}
	data := make(map[string]domain.DataValue, len(members))
	for k, v := range members {
		switch x := v.(type) {
		case string:
			data[k] = domain.DataValue{Text: x, Kind: domain.DataString}
		case json.Number:
			data[k] = domain.DataValue{Text: x.String(), Kind: domain.DataNumber}
		default:
			data[k] = domain.DataValue{Kind: domain.DataOther}
		}
	}
	return data, nil
}

// jsonMedia reports whether a datacontenttype is JSON: application/json or
// a +json type.
func jsonMedia(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/json" || mt == "text/json" || strings.HasSuffix(mt, "+json"))
}
