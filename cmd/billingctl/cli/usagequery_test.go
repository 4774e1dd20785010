package cli

import (
	"net/url"
	"strings"
	"testing"
)

// TestUsageQueryParams: groups in one groupBy, filters in parameters
// given once each (the service edge refuses a repeated one).
func TestUsageQueryParams(t *testing.T) {
	for _, tc := range []struct {
		name    string
		groupBy []string
		filters filtersFlag
		want    url.Values
	}{
		{"none", nil, nil, url.Values{}},
		{"one of each", []string{"model"}, filtersFlag{{"region", "eu"}},
			url.Values{"groupBy": {"model"}, "filter": {"region:eu"}}},
		{"several", []string{"model", "region"}, filtersFlag{{"region", "eu"}, {"model", "gpt-4"}, {"region", "us"}},
			url.Values{"groupBy": {"model,region"}, "filter[region]": {"eu"}, "filter[model]": {"gpt-4"}, "filter": {"region:us"}}},
		{"a value with a colon", nil, filtersFlag{{"model", "a:b"}}, url.Values{"filter": {"model:a:b"}}},
	} {
		got, err := usageQueryParams(tc.groupBy, tc.filters)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got.Encode() != tc.want.Encode() {
			t.Errorf("%s: %s, want %s", tc.name, got.Encode(), tc.want.Encode())
		}
	}
	_, err := usageQueryParams(nil, filtersFlag{{"m", "a"}, {"m", "b"}, {"m", "c"}})
	if err == nil || !strings.Contains(err.Error(), "at most two values") {
		t.Errorf("three values of one dimension: %v, want refused", err)
	}
	var f filtersFlag
	for _, bad := range []string{"model", ":x", "model:"} {
		if f.Set(bad) == nil {
			t.Errorf("-filter %q accepted", bad)
		}
	}
}
