package httpapi

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/httpx"
	"github.com/usagebilling/billing/pkg/page"
	"github.com/usagebilling/billing/services/query/internal/domain"
)

type usageReportJSON struct {
	MeterCode   string         `json:"meterCode"`
	Aggregation string         `json:"aggregation"`
	WindowSize  string         `json:"windowSize"`
	TimeZone    string         `json:"timeZone"`
	Rows        []usageRowJSON `json:"rows"`
	Next        *string        `json:"next,omitempty"`
}

type usageRowJSON struct {
	From       time.Time          `json:"from"`
	To         time.Time          `json:"to"`
	Dimensions map[string]*string `json:"dimensions"`
	Value      decimal.Decimal    `json:"value"`
}

// usage: GET /v1/tenants/{tenantId}/meters/{meterCode}/usage?from=&to=
// &windowSize=&timeZone=&groupBy=&filter=&limit=&cursor= — the meter's
// aggregation per window and group (DESIGN.md section 7). groupBy and
// filter repeat (httpx.ListParameters); groupBy may also name several
// dimensions separated by commas, filter is <dimension>:<value>, and
// filter[<dimension>]=<value> names a filter too. A group value a fact
// does not have is null.
func (a *API) usage(w http.ResponseWriter, r *http.Request) {
	tenantID, p := httpx.TenantID(chi.URLParam(r, "tenantId"))
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	q, p := parseUsageQuery(r.URL.Query())
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	q.TenantID, q.MeterCode = tenantID, chi.URLParam(r, "meterCode")
	req, p := page.Parse(r.URL.Query())
	if p != nil {
		httpx.WriteProblem(w, p)
		return
	}
	var after *domain.UsagePosition
	if !req.First() {
		after = &domain.UsagePosition{}
		if p := req.After(after); p != nil {
			httpx.WriteProblem(w, p)
			return
		}
	}
	rep, err := a.reader.Usage(r.Context(), q, req.Limit, after)
	if err != nil {
		httpx.WriteError(w, r, a.log, err)
		return
	}
	out := usageReportJSON{MeterCode: rep.MeterCode, Aggregation: rep.Aggregation, WindowSize: rep.WindowSize,
		TimeZone: rep.TimeZone, Rows: make([]usageRowJSON, len(rep.Rows))}
	for i, row := range rep.Rows {
		dims := make(map[string]*string, len(q.GroupBy))
		for j, name := range q.GroupBy {
			if v := row.Dimensions[j]; v != "" {
				dims[name] = &v
			} else {
				dims[name] = nil
			}
		}
		out.Rows[i] = usageRowJSON{From: row.From.UTC(), To: row.To.UTC(), Dimensions: dims, Value: row.Value}
	}
	if rep.Next != nil {
		next := page.Encode(rep.Next)
		out.Next = &next
	}
	httpx.WriteJSON(w, http.StatusOK, out)
}

// parseUsageQuery reads from, to, windowSize, timeZone, groupBy and the
// filters. Problems: invalid_time, invalid_window_size, invalid_time_zone,
// invalid_filter, invalid_dimension (a name that could be no dimension);
// the range and the names against the meter are the reader's to check.
func parseUsageQuery(v url.Values) (domain.UsageQuery, *httpx.Problem) {
	var q domain.UsageQuery
	bad := func(code, format string, args ...any) (domain.UsageQuery, *httpx.Problem) {
		return domain.UsageQuery{}, httpx.Problemf(http.StatusBadRequest, code, format, args...)
	}
	for _, f := range []struct {
		name string
		dst  *time.Time
	}{{"from", &q.From}, {"to", &q.To}} {
		s := v.Get(f.name)
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return bad(domain.CodeInvalidTime, "%s must be an RFC 3339 time, not %q", f.name, s)
		}
		*f.dst = t
	}
	q.WindowSize = v.Get("windowSize")
	switch q.WindowSize {
	case domain.WindowHour, domain.WindowDay, domain.WindowMonth:
	default:
		return bad(domain.CodeInvalidWindowSize, "windowSize must be hour, day or month, not %q", q.WindowSize)
	}
	if z := v.Get("timeZone"); z != "" {
		loc, err := time.LoadLocation(z)
		if err != nil || z == "Local" {
			return bad(domain.CodeInvalidTimeZone, "timeZone must be an IANA time zone name such as Europe/Paris, not %q", z)
		}
		q.Zone = loc
	}
	for _, g := range v["groupBy"] {
		for _, name := range strings.Split(g, ",") {
			if name == "" {
				return bad(domain.CodeInvalidDimension, "groupBy names dimensions, separated by commas: %q has an empty one", g)
			}
			if !slices.Contains(q.GroupBy, name) {
				q.GroupBy = append(q.GroupBy, name)
			}
		}
	}
	q.Filters = map[string][]string{}
	for _, f := range v["filter"] {
		name, value, err := domain.ParseFilter(f)
		if err != nil {
			return domain.UsageQuery{}, httpx.RuleProblem(err)
		}
		q.Filters[name] = append(q.Filters[name], value)
	}
	for k, vs := range v {
		name, ok := strings.CutPrefix(k, "filter[")
		if !ok {
			continue
		}
		name, ok = strings.CutSuffix(name, "]")
		if !ok || name == "" {
			return bad(domain.CodeInvalidFilter, "a filter parameter is filter=<dimension>:<value> or filter[<dimension>]=<value>, not %q", k)
		}
		for _, value := range vs {
			if value == "" {
				return bad(domain.CodeInvalidFilter, "filter[%s] needs a value", name)
			}
			q.Filters[name] = append(q.Filters[name], value)
		}
	}
	return q, nil
}
