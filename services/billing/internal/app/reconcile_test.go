package app_test

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/recon"
	bt "github.com/usagebilling/billing/services/billing/internal/billingtest"
)

// readSet reads a whole reconciliation set of billing, page by page, limit
// rows a page (SetMonths is one page).
func readSet[T recon.Row](t *testing.T, sets recon.Sets, set, tenant, period string, limit int) []T {
	t.Helper()
	var out []T
	q := recon.Query{TenantID: tenant, Period: period, Limit: limit}
	for {
		rows, err := sets[set](t.Context(), q)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			out = append(out, r.(T))
		}
		if len(rows) < q.Limit {
			return out
		}
		q.After = rows[len(rows)-1].Pos()
	}
}

// utcFacts are a tenant's rated facts as the other services group them:
// usage event id -> the UTC month it occurred in, and -> its charge's period.
func utcFacts(t *testing.T, pool *pgxpool.Pool, tenant string) (utcMonth, period map[uuid.UUID]string) {
	t.Helper()
	rows, err := pool.Query(t.Context(),
		`SELECT usage_event_id, to_char(occurred_at AT TIME ZONE 'UTC', 'YYYY-MM'), period FROM charge WHERE tenant_id = $1`, tenant)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	utcMonth, period = map[uuid.UUID]string{}, map[uuid.UUID]string{}
	for rows.Next() {
		var id uuid.UUID
		var m, p string
		if err := rows.Scan(&id, &m, &p); err != nil {
			t.Fatal(err)
		}
		utcMonth[id], period[id] = m, p
	}
	return utcMonth, period
}

// Tenants in Asia/Seoul (UTC+9) and America/Los_Angeles (UTC-8, -7 from 8
// March) from February, with usage on both sides of the February/March and
// March/April boundaries, some of it rated into the neighbouring period of
// its UTC month. Billing's reconciliation sets of each period serve every
// charge the reconciliation groups with usage of the UTC month (the
// period's charges and those of the month's usage rated into another
// period), name the months to read for them, and give each charge the
// period its usage occurred in by the tenant's calendar: equal to its
// period when healthy, so nothing reads as a mismatch; a charge moved into
// its UTC month behind billing's back shows the difference.
func TestReconciliationOfTenantsInOtherZones(t *testing.T) {
	t.Parallel()
	pool := bt.NewPool(t)
	clk := newClock(jan10)
	svc := clk.service(pool)
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, pool, ib)
	at := func(s string) time.Time {
		tm, err := time.Parse(time.RFC3339, "2026-"+s+":00Z")
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	tenants := map[string]struct {
		zone  string
		facts map[string]string // UTC occurrence -> period in the tenant's zone
	}{
		"seoul": {"Asia/Seoul", map[string]string{
			"02-15T12:00": "2026-02",
			"02-28T14:59": "2026-02", // 23:59 KST
			"02-28T20:00": "2026-03", // 05:00 KST on 1 March: UTC February, rated into March
			"03-10T12:00": "2026-03",
			"03-31T20:00": "2026-04", // UTC March, rated into April
			"04-02T12:00": "2026-04",
		}},
		"la": {"America/Los_Angeles", map[string]string{
			"02-15T12:00": "2026-02",
			"03-01T04:00": "2026-02", // 20:00 PST on 28 February: UTC March, rated into February
			"03-01T08:00": "2026-03", // 00:00 PST on 1 March
			"03-10T12:00": "2026-03",
			"04-01T03:00": "2026-03", // 20:00 PDT on 31 March: UTC April, rated into March
			"04-02T12:00": "2026-04",
		}},
	}
	for tenant, x := range tenants {
		putSettings(t, svc, tenant, x.zone, "PT1H")
		bt.Decide(t, pool, ib, priceV1(tenant).Raw(t))
		var batch [][]byte
		for when := range x.facts {
			batch = append(batch, usageAt(tenant, 0, "1", at(when)).Raw(t))
		}
		bt.Decide(t, pool, ib, batch...)
		if got := chargePeriods(t, pool, tenant); !mapsEqual(got, x.facts) {
			t.Fatalf("%s: periods = %v, want %v", tenant, got, x.facts)
		}
	}

	sets := svc.Reconciliation()
	check := func(tenant string) (mismatched []uuid.UUID) {
		t.Helper()
		utcMonth, period := utcFacts(t, pool, tenant)
		for _, p := range []string{"2026-02", "2026-03", "2026-04"} {
			months := map[string]bool{}
			for _, m := range readSet[recon.Month](t, sets, recon.SetMonths, tenant, p, recon.MaxPageSize) {
				months[m.Period] = true
			}
			charges := readSet[recon.Charge](t, sets, recon.SetCharges, tenant, p, 1) // pages of one row: the cursor
			served := map[uuid.UUID]bool{}
			for _, c := range charges {
				served[c.UsageEventID] = true
				if c.Late || c.OccurredPeriod != c.Period {
					mismatched = append(mismatched, c.UsageEventID)
				}
			}
			// What the reconciliation of p groups: usage of the UTC month p
			// and the charges rated into p; the months it reads hold both.
			wantMonths := map[string]bool{p: true}
			for id, m := range utcMonth {
				if m != p && period[id] != p {
					continue
				}
				if !served[id] {
					t.Errorf("%s %s: the charge of usage %s (UTC %s, rated into %s) is not served", tenant, p, id, m, period[id])
				}
				wantMonths[m], wantMonths[period[id]] = true, true
				delete(served, id)
			}
			if len(served) != 0 {
				t.Errorf("%s %s: charges served beyond the scope: %v", tenant, p, served)
			}
			if !maps.Equal(months, wantMonths) {
				t.Errorf("%s %s: months %v, want %v", tenant, p, slices.Sorted(maps.Keys(months)), slices.Sorted(maps.Keys(wantMonths)))
			}
		}
		return mismatched
	}
	for tenant := range tenants {
		if m := check(tenant); len(m) != 0 {
			t.Errorf("%s: charges out of their period: %v", tenant, m)
		}
	}

	// A charge moved into the UTC month of its usage (the period a
	// UTC-month reconciliation expected) is out of its period.
	// (Behind billing's back: as the table's owner, past the trigger that
	// keeps charges immutable.)
	var moved uuid.UUID
	if _, err := pool.Exec(t.Context(), `ALTER TABLE charge DISABLE TRIGGER charge_immutable`); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(t.Context(), `
		UPDATE charge SET period = '2026-02'
		WHERE tenant_id = 'seoul' AND occurred_at = '2026-02-28T20:00:00Z' RETURNING usage_event_id`).Scan(&moved); err != nil {
		t.Fatal(err)
	}
	if m := check("seoul"); !slices.Equal(m, []uuid.UUID{moved}) {
		t.Fatalf("after moving %s: out of period %v", moved, m)
	}
}
