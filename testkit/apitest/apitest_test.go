package apitest_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/usagebilling/billing/pkg/api/meterapi"
	"github.com/usagebilling/billing/testkit/apitest"
)

// recordingT keeps the errors a check reports instead of failing.
type recordingT struct {
	testing.TB
	errs []string
}

func (r *recordingT) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestHandlerFindsWhatIsNotDocumented: the wrapper passes an exchange as
// documented and reports each kind of departure from the document.
func TestHandlerFindsWhatIsNotDocumented(t *testing.T) {
	cases := []struct {
		name, method, target, body string
		status                     int
		ctype, answer              string
		wantErr                    string // "" when the exchange is as documented
	}{
		{"documented list", "GET", "/v1/tenants/acme/prices?limit=5", "", 200, "application/json", `{"prices":[]}`, ""},
		{"undocumented field", "GET", "/v1/tenants/acme/prices", "", 200, "application/json", `{"prices":[],"extra":1}`, "not as documented"},
		{"wrong shape", "GET", "/v1/tenants/acme/prices", "", 200, "application/json", `{"prices":{}}`, "not as documented"},
		{"undocumented status", "GET", "/v1/tenants/acme/prices", "", 418, "application/problem+json",
			`{"type":"about:blank","title":"x","status":418,"code":"teapot"}`, "not as documented"},
		{"problem as documented", "GET", "/v1/tenants/acme/prices?limit=0", "", 400, "application/problem+json",
			`{"type":"about:blank","title":"Bad Request","status":400,"code":"invalid_limit"}`, ""},
		{"refused request accepted", "GET", "/v1/tenants/acme/prices?limit=0", "", 200, "application/json", `{"prices":[]}`, "refuses the request"},
		{"undocumented query parameter accepted", "GET", "/v1/tenants/acme/prices?colour=red", "", 200, "application/json", `{"prices":[]}`, "refuses the request"},
		{"undocumented request field accepted", "POST", "/v1/tenants/acme/prices", `{"meterCode":"m","currency":"USD","unitPrice":"1","x":1}`, 201,
			"application/json", `{}`, "refuses the request"},
		{"no such operation, 404 problem", "GET", "/v1/nothing", "", 404, "application/problem+json",
			`{"type":"about:blank","title":"Not Found","status":404,"code":"not_found"}`, ""},
		{"no such operation, 200", "GET", "/v1/nothing", "", 200, "application/json", `{}`, "no operation"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rt := &recordingT{TB: t}
			h := apitest.Handler(rt, meterapi.YAML(), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", c.ctype)
				w.WriteHeader(c.status)
				_, _ = w.Write([]byte(c.answer))
			}))
			req := httptest.NewRequest(c.method, c.target, strings.NewReader(c.body))
			if c.body != "" {
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Idempotency-Key", "k1")
			}
			h.ServeHTTP(httptest.NewRecorder(), req)
			got := strings.Join(rt.errs, "\n")
			switch {
			case c.wantErr == "" && got != "":
				t.Errorf("reported %s", got)
			case c.wantErr != "" && !strings.Contains(got, c.wantErr):
				t.Errorf("reported %q, want an error with %q", got, c.wantErr)
			}
		})
	}
}
