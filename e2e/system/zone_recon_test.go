package system_test

import (
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/clock"
	"github.com/usagebilling/billing/testkit/servicetest"
)

// The operator's reconciliation of tenants in Asia/Seoul and
// America/Los_Angeles on the running system (five services, one broker),
// time driven forward through CLOCK_OFFSET_FILE (decision 0015): usage on
// both sides of the boundary between the tenant's first two periods in its
// zone, one fact of each pair rated into another period than the UTC month
// it occurred in. Both periods reconcile with no mismatch; a charge deleted
// and a charge moved into its UTC month behind billing's back are named.
func TestReconciliationOfTenantsInOtherZones(t *testing.T) {
	offsets := filepath.Join(t.TempDir(), "clock-offset")
	t.Setenv("CLOCK_OFFSET_FILE", offsets) // read from the process's environment by every service
	s := newStack(t)
	ctx := t.Context()
	op := auth.Client(mustToken(t, auth.NewClaims("alice", auth.RoleOperator, "", time.Hour)))

	type tenant struct {
		id, zone string
		first    string    // the first period in the zone (effectiveFrom)
		boundary time.Time // where the first ends and the second begins
		before   accepted  // a fact just before the boundary
		after    accepted  // and one just after
	}
	tenants := []*tenant{{id: "seoul", zone: "Asia/Seoul"}, {id: "la", zone: "America/Los_Angeles"}}
	for _, x := range tenants {
		admin := auth.Client(auth.DevToken(auth.RoleBillingAdmin, x.id))
		var st struct{ EffectiveFrom string }
		if status, code := call(t, admin, "PUT", s.URL("billing")+"/v1/tenants/"+x.id+"/settings",
			map[string]string{"Idempotency-Key": "zone-" + x.id},
			map[string]string{"timeZone": x.zone, "gracePeriod": "P7D"}, &st); status != http.StatusOK {
			t.Fatalf("settings of %s: %d %s", x.id, status, code)
		}
		first, err := time.Parse("2006-01", st.EffectiveFrom)
		if err != nil {
			t.Fatal(err)
		}
		loc, err := time.LoadLocation(x.zone)
		if err != nil {
			t.Fatal(err)
		}
		x.first = st.EffectiveFrom
		x.boundary = time.Date(first.Year(), first.Month()+1, 1, 0, 0, 0, 0, loc).UTC()
		if status, code := call(t, auth.Client(auth.DevToken(auth.RoleTenant, x.id)), "POST", s.URL("meter")+"/v1/tenants/"+x.id+"/prices",
			map[string]string{"Idempotency-Key": "price-" + x.id},
			map[string]string{"meterCode": "api_calls", "currency": "USD", "unitPrice": "0.01"}, nil); status != http.StatusCreated {
			t.Fatalf("price of %s: %d %s", x.id, status, code)
		}
	}
	// Seoul's boundary comes first (15:00 UTC on the last day of the
	// month), Los Angeles' later (08:00 UTC on the first).
	for _, x := range tenants {
		if err := clock.SetOffset(offsets, time.Until(x.boundary.Add(10*time.Minute))); err != nil {
			t.Fatal(err)
		}
		c := auth.Client(auth.DevToken(auth.RoleTenant, x.id))
		post := func(source string, at time.Time) accepted {
			var a accepted
			last := ""
			defer func() { t.Logf("%s %s: last refusal %q", x.id, source, last) }()
			servicetest.Eventually(t, x.id+" "+source+" accepted", time.Minute, func() bool {
				status, code := call(t, c, "POST", s.URL("usage")+"/v1/tenants/"+x.id+"/usage", nil, map[string]string{
					"sourceSystem": "crm", "sourceEventId": source, "meterCode": "api_calls", "quantity": "10",
					"occurredAt": at.Format(time.RFC3339Nano)}, &a)
				last = code
				if status != http.StatusCreated && code != "unknown_meter" && code != "no_price_in_effect" && code != "occurred_in_future" {
					t.Fatalf("usage %s of %s: %d %s", source, x.id, status, code)
				}
				return status == http.StatusCreated
			})
			return a
		}
		x.before = post("before", x.boundary.Add(-30*time.Minute))
		x.after = post("after", x.boundary.Add(5*time.Minute))
	}

	second := func(x *tenant) string { return x.boundary.In(mustZone(t, x.zone)).Format("2006-01") }
	type recon struct {
		Counts     map[string]int
		Mismatches []struct{ Kind, OriginEventID, Detail string }
	}
	reconcile := func(x *tenant, period string) recon {
		var r recon
		if status, code := call(t, op, "GET", s.URL("query")+"/v1/operator/reconciliation?tenantId="+x.id+"&period="+period, nil, nil, &r); status != 200 {
			t.Fatalf("reconciliation of %s %s: %d %s", x.id, period, status, code)
		}
		return r
	}
	chargePeriod := func(x *tenant, a accepted) string {
		var p string
		_ = s.Pool("billing").QueryRow(ctx, `SELECT period FROM charge WHERE usage_event_id = $1`, a.EventID).Scan(&p)
		return p
	}
	for _, x := range tenants {
		servicetest.Eventually(t, x.id+"'s facts charged", time.Minute, func() bool {
			return chargePeriod(x, x.before) == x.first && chargePeriod(x, x.after) == second(x)
		})
		for _, p := range []string{x.first, second(x)} {
			servicetest.Eventually(t, x.id+" "+p+" reconciles", time.Minute, func() bool {
				r := reconcile(x, p)
				if len(r.Mismatches) != 0 {
					t.Logf("%s %s: %+v", x.id, p, r.Mismatches)
				}
				return len(r.Mismatches) == 0 && r.Counts["charges"] > 0
			})
		}
	}

	has := func(r recon, kind, id string) bool {
		for _, m := range r.Mismatches {
			if m.Kind == kind && (id == "" || m.OriginEventID == id) {
				return true
			}
		}
		return false
	}
	// Seoul: the charge of the fact after the boundary (UTC month: the
	// first period) moved into the first period.
	seoul, la := tenants[0], tenants[1]
	// Behind billing's back: as the table's owner, past the trigger that
	// keeps charges immutable.
	if _, err := s.Pool("billing").Exec(ctx, `ALTER TABLE charge DISABLE TRIGGER charge_immutable`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool("billing").Exec(ctx, `UPDATE charge SET period = $2 WHERE usage_event_id = $1`, seoul.after.EventID, seoul.first); err != nil {
		t.Fatal(err)
	}
	if r := reconcile(seoul, seoul.first); !has(r, "charge_period_mismatch", "") {
		t.Errorf("Seoul %s after moving a charge into it: %+v, want charge_period_mismatch", seoul.first, r.Mismatches)
	}
	// Los Angeles: the charge of the fact before the boundary (UTC month:
	// the second period, rated into the first) deleted.
	if _, err := s.Pool("billing").Exec(ctx, `DELETE FROM charge WHERE usage_event_id = $1`, la.before.EventID); err != nil {
		t.Fatal(err)
	}
	if r := reconcile(la, second(la)); !has(r, "missing_charge", la.before.EventID.String()) {
		t.Errorf("Los Angeles %s after deleting a charge: %+v, want missing_charge of %s", second(la), r.Mismatches, la.before.EventID)
	}
}

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}
