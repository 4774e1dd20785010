package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The compose demo runs the real dashboard's queries: every one is read,
// with no Grafana variable left in it, and one is the scrape targets'.
func TestDashboardQueries(t *testing.T) {
	qs, err := dashboardQueries("../../../../deploy/grafana/dashboards/usage-billing.json")
	if err != nil {
		t.Fatal(err)
	}
	ups := 0
	for _, q := range qs {
		if strings.Contains(q.Expr, "$") {
			t.Errorf("panel %q: a variable is left in %s", q.Panel, q.Expr)
		}
		if strings.HasPrefix(q.Expr, "up{") {
			ups++
		}
	}
	if len(qs) < 10 || ups != 1 {
		t.Errorf("%d queries, %d on up; want every panel's and one on up", len(qs), ups)
	}
}

// A variable the dashboard does not define is refused, not sent as is.
func TestDashboardQueriesRefuseUnknownVariable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d.json")
	if err := os.WriteFile(path, []byte(`{"panels":[{"title":"p","targets":[{"expr":"rate(x{a=~\"$nope\"}[1m])"}]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := dashboardQueries(path); err == nil || !strings.Contains(err.Error(), "$nope") {
		t.Fatalf("err %v, want the unknown variable named", err)
	}
}
