package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/idempotency"
	"github.com/usagebilling/billing/services/billing/internal/app"
	bt "github.com/usagebilling/billing/services/billing/internal/billingtest"
	"github.com/usagebilling/billing/services/billing/internal/domain"
)

// clock is a test's controllable clock, shared by the service instances of
// a test.
type clock struct{ at atomic.Pointer[time.Time] }

func newClock(at time.Time) *clock {
	c := &clock{}
	c.set(at)
	return c
}

func (c *clock) set(at time.Time) { c.at.Store(&at) }
func (c *clock) now() time.Time   { return *c.at.Load() }
func (c *clock) service(pool *pgxpool.Pool) *app.App {
	return app.New(app.Deps{Pool: pool, Clock: c.now}, app.Config{})
}

// putSettingsAs sets a tenant's settings as the HTTP API does, under key.
func putSettingsAs(ctx context.Context, svc *app.App, r app.Request, key string, st domain.Settings) (idempotency.Reply, error) {
	return inKey(ctx, svc, "billing.settings/"+r.TenantID, key, http.StatusOK, func(tx pgx.Tx) (app.SettingsReply, error) {
		return svc.PutSettings(ctx, tx, r, st)
	})
}

func putSettings(t *testing.T, svc *app.App, tenant, zone, grace string) app.SettingsReply {
	t.Helper()
	st, err := domain.ParseSettings(domain.SettingsRequest{TimeZone: &zone, GracePeriod: &grace})
	if err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf(`{"timeZone":%q,"gracePeriod":%q}`, zone, grace)
	reply, err := putSettingsAs(t.Context(), svc, app.Request{TenantID: tenant, Actor: "admin@" + tenant + ".example"},
		"settings-"+body, st)
	if err != nil {
		t.Fatal(err)
	}
	var out app.SettingsReply
	if reply.Status != http.StatusOK || json.Unmarshal(reply.Body, &out) != nil {
		t.Fatalf("settings reply = %d %s", reply.Status, reply.Body)
	}
	return out
}

func chargePeriods(t *testing.T, pool *pgxpool.Pool, tenant string) map[string]string {
	t.Helper()
	rows, err := pool.Query(t.Context(),
		`SELECT to_char(occurred_at AT TIME ZONE 'UTC', 'MM-DD"T"HH24:MI'), period FROM charge WHERE tenant_id = $1`, tenant)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var at, period string
		if err := rows.Scan(&at, &period); err != nil {
			t.Fatal(err)
		}
		out[at] = period
	}
	return out
}

// A tenant in Asia/Seoul from February: a fact at 23:30 UTC on the last day
// of February is 08:30 on 1 March in Seoul, so it counts in March; the
// period in progress when the settings changed (January) keeps UTC, so
// 23:30 UTC on 31 January still counts in January though it is February in
// Seoul. Rated one by one and as a batch alike.
func TestPeriodsInTheTenantsZoneFromTheNextPeriod(t *testing.T) {
	t.Parallel()
	pool := bt.NewPool(t)
	clk := newClock(jan10)
	svc := clk.service(pool)
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, pool, ib)
	got := putSettings(t, svc, "seoul", "Asia/Seoul", "PT1H")
	if got.EffectiveFrom != "2026-02" || got.TimeZone != "Asia/Seoul" || got.GracePeriod != "PT1H" {
		t.Fatalf("settings = %+v, want Asia/Seoul PT1H from 2026-02", got)
	}
	at := func(s string) time.Time {
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	facts := map[string]string{ // UTC occurrence -> period
		"01-31T23:30": "2026-01", // UTC January: the period in progress kept its zone
		"02-01T00:30": "2026-02",
		"02-28T14:59": "2026-02", // 23:59 KST
		"02-28T15:00": "2026-03", // 00:00 KST, 1 March
		"02-28T23:30": "2026-03", // 08:30 KST, 1 March
	}
	bt.Decide(t, pool, ib, priceV1("seoul").Raw(t))
	var batch [][]byte
	for _, when := range []string{"01-31T23:30", "02-01T00:30", "02-28T14:59"} {
		batch = append(batch, usageAt("seoul", 0, "1", at("2026-"+when+":00Z")).Raw(t))
	}
	bt.Decide(t, pool, ib, batch...)
	for _, when := range []string{"02-28T15:00", "02-28T23:30"} { // one at a time
		bt.Decide(t, pool, ib, usageAt("seoul", 0, "1", at("2026-"+when+":00Z")).Raw(t))
	}
	if got := chargePeriods(t, pool, "seoul"); !mapsEqual(got, facts) {
		t.Fatalf("periods = %v, want %v", got, facts)
	}
	// Another tenant without settings is in UTC.
	bt.Decide(t, pool, ib, priceV1("utc").Raw(t), usageAt("utc", 0, "1", at("2026-02-28T23:30:00Z")).Raw(t))
	if got := chargePeriods(t, pool, "utc"); got["02-28T23:30"] != "2026-02" {
		t.Fatalf("UTC tenant's periods = %v", got)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// Settings apply only to periods not yet begun: a change applies from the
// next period, or from the one after when the next begins within
// SettingsLead; a second change before that period begins replaces the
// first; the period in progress keeps its zone and its grace.
func TestSettingsApplyOnlyToFuturePeriods(t *testing.T) {
	t.Parallel()
	pool := bt.NewPool(t)
	clk := newClock(jan10)
	svc := clk.service(pool)
	ctx := t.Context()
	if got := putSettings(t, svc, "t1", "America/New_York", "PT2H"); got.EffectiveFrom != "2026-02" {
		t.Fatalf("effective from %s, want 2026-02", got.EffectiveFrom)
	}
	if got := putSettings(t, svc, "t1", "Asia/Seoul", "P1D"); got.EffectiveFrom != "2026-02" {
		t.Fatalf("effective from %s, want 2026-02", got.EffectiveFrom)
	}
	est, err := svc.PeriodEstimate(ctx, "t1", "2026-01")
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2026, 2, 1, 1, 0, 0, 0, time.UTC); est.Status != "open" || est.ClosesAt == nil || !est.ClosesAt.Equal(want) {
		t.Fatalf("January = %s closes %v, want open closing %s (UTC, PT1H as it began)", est.Status, est.ClosesAt, want)
	}
	est, err = svc.PeriodEstimate(ctx, "t1", "2026-02")
	if err != nil {
		t.Fatal(err)
	}
	// February in Seoul ends 1 March 00:00 KST = 28 February 15:00 UTC; P1D.
	if want := time.Date(2026, 3, 1, 15, 0, 0, 0, time.UTC); !est.ClosesAt.Equal(want) {
		t.Fatalf("February closes %v, want %s", est.ClosesAt, want)
	}
	// Five minutes before January ends: February begins within
	// SettingsLead, so a change applies from March.
	clk.set(time.Date(2026, 1, 31, 23, 55, 0, 0, time.UTC))
	if got := putSettings(t, svc, "t1", "Europe/Berlin", "PT0S"); got.EffectiveFrom != "2026-03" {
		t.Fatalf("effective from %s, want 2026-03", got.EffectiveFrom)
	}
	est, err = svc.PeriodEstimate(ctx, "t1", "2026-02")
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2026, 3, 1, 15, 0, 0, 0, time.UTC); !est.ClosesAt.Equal(want) {
		t.Fatalf("February closes %v after a change from March, want %s", est.ClosesAt, want)
	}
}

func TestSettingsValidation(t *testing.T) {
	t.Parallel()
	str := func(s string) *string { return &s }
	for _, tc := range []struct {
		zone, grace *string
		code        string
	}{
		{nil, nil, ""},
		{str("Asia/Seoul"), str("P7D"), ""},
		{str("UTC"), str("PT0S"), ""},
		{str("America/Argentina/Buenos_Aires"), str("PT90M"), ""},
		{str("Mars/Olympus"), nil, "invalid_time_zone"},
		{str(""), nil, "invalid_time_zone"},
		{str("Local"), nil, "invalid_time_zone"},
		{str("../../etc/passwd"), nil, "invalid_time_zone"},
		{nil, str("1h"), "invalid_grace_period"},
		{nil, str("P1M"), "invalid_grace_period"},
		{nil, str("P"), "invalid_grace_period"},
		{nil, str("PT"), "invalid_grace_period"},
		{nil, str("-PT1H"), "invalid_grace_period"},
		{nil, str("P7DT1S"), "grace_period_out_of_range"},
		{nil, str("P2W"), "grace_period_out_of_range"},
	} {
		_, err := domain.ParseSettings(domain.SettingsRequest{TimeZone: tc.zone, GracePeriod: tc.grace})
		var de *domain.Error
		code := ""
		if errors.As(err, &de) {
			code = de.Code
		} else if err != nil {
			code = err.Error()
		}
		if code != tc.code {
			t.Errorf("ParseSettings(%v, %v) = %q, want %q", deref(tc.zone), deref(tc.grace), code, tc.code)
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return "<absent>"
	}
	return *s
}

// Two scheduler instances (two services on one database, one clock),
// three passes each at once at every step: before the period's end nothing
// happens; in grace BillingPeriodEnded is appended once and the period
// reads grace; at end plus grace it is closed exactly once, by
// system:scheduler, its close counting exactly its charges. A tenant with
// no grace is closed at its end.
func TestSchedulerClosesOnceWithTwoInstances(t *testing.T) {
	t.Parallel()
	pool := bt.NewPoolConns(t, 20)
	clk := newClock(time.Date(2025, 12, 20, 0, 0, 0, 0, time.UTC))
	a, b := clk.service(pool), clk.service(pool)
	putSettings(t, a, "nograce", "UTC", "PT0S") // from 2026-01
	ib := bt.NewInbox(t, a)
	bt.DefineMeters(t, pool, ib)
	for _, tenant := range []string{"t1", "nograce"} {
		bt.Decide(t, pool, ib, priceV1(tenant).Raw(t), usageAt(tenant, 0, "4", jan10).Raw(t), usageAt(tenant, 0, "2", jan20).Raw(t))
	}
	pass := func() app.SchedulerRun {
		t.Helper()
		var mu sync.Mutex
		var all app.SchedulerRun
		var wg sync.WaitGroup
		for i := range 6 {
			svc := []*app.App{a, b}[i%2]
			wg.Go(func() {
				run, err := svc.CloseDuePeriods(t.Context())
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				all.Ended = append(all.Ended, run.Ended...)
				all.Closed = append(all.Closed, run.Closed...)
				mu.Unlock()
			})
		}
		wg.Wait()
		slices.Sort(all.Ended)
		return all
	}
	closes := func() map[string]events.BillingPeriodClosed {
		out := map[string]events.BillingPeriodClosed{}
		for _, p := range bt.Outbox(t, pool) {
			if c, ok := p.Payload.(events.BillingPeriodClosed); ok {
				key := p.Envelope.TenantID + "/" + c.Period
				if _, dup := out[key]; dup {
					t.Fatalf("%s closed twice", key)
				}
				out[key] = c
			}
		}
		return out
	}
	status := func(tenant string) (string, *time.Time) {
		est, err := a.PeriodEstimate(t.Context(), tenant, "2026-01")
		if err != nil {
			t.Fatal(err)
		}
		return est.Status, est.ClosesAt
	}

	clk.set(time.Date(2026, 1, 31, 23, 59, 59, 0, time.UTC))
	if run := pass(); len(run.Ended)+len(run.Closed) > 0 || len(closes()) > 0 {
		t.Fatalf("before the end: %+v", run)
	}
	if s, at := status("t1"); s != "open" || !at.Equal(time.Date(2026, 2, 1, 1, 0, 0, 0, time.UTC)) {
		t.Fatalf("t1 before the end: %s closes %v", s, at)
	}

	clk.set(time.Date(2026, 2, 1, 0, 30, 0, 0, time.UTC)) // t1 in grace; nograce due
	run := pass()
	if !slices.Equal(run.Ended, []string{"t1/2026-01"}) {
		t.Fatalf("ended = %v, want t1/2026-01 once", run.Ended)
	}
	if s, _ := status("t1"); s != domain.StatusGrace {
		t.Fatalf("t1 in grace reads %s", s)
	}
	if c := closes(); len(c) != 1 || c["nograce/2026-01"].Actor != app.SchedulerActor {
		t.Fatalf("closes after nograce's end = %s", bt.JSON(c))
	}
	ended := bt.OfType[events.BillingPeriodEnded](bt.Outbox(t, pool))
	if len(ended) != 1 || ended[0].Period != "2026-01" || !ended[0].ClosesAt.Equal(time.Date(2026, 2, 1, 1, 0, 0, 0, time.UTC)) {
		t.Fatalf("BillingPeriodEnded = %s", bt.JSON(ended))
	}

	clk.set(time.Date(2026, 2, 1, 1, 0, 0, 0, time.UTC)) // t1's end plus grace
	pass()
	pass()
	c := closes()
	if len(c) != 2 || c["t1/2026-01"].Actor != app.SchedulerActor || c["t1/2026-01"].Charges != 2 {
		t.Fatalf("closes = %s", bt.JSON(c))
	}
	for key, cl := range c {
		checkClose(t, pool, key[:len(key)-len("/2026-01")], cl)
	}
	if s, at := status("t1"); s != "closed" || at != nil {
		t.Fatalf("t1 after the close: %s closes %v", s, at)
	}
	if n := len(bt.OfType[events.BillingPeriodEnded](bt.Outbox(t, pool))); n != 1 {
		t.Fatalf("BillingPeriodEnded = %d, want 1", n)
	}
	if run := pass(); len(run.Ended)+len(run.Closed) > 0 {
		t.Fatalf("after the closes: %+v", run)
	}
}

// An explicit close during grace closes the period at once, with its
// caller as the actor; the scheduler then has nothing to do, and usage of
// the period rated after the close is late in February.
func TestExplicitCloseDuringGrace(t *testing.T) {
	t.Parallel()
	pool := bt.NewPool(t)
	clk := newClock(jan10)
	svc := clk.service(pool)
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, pool, ib)
	bt.Decide(t, pool, ib, priceV1("t1").Raw(t), usageAt("t1", 0, "4", jan10).Raw(t))
	clk.set(time.Date(2026, 2, 1, 0, 10, 0, 0, time.UTC))
	if run, err := svc.CloseDuePeriods(t.Context()); err != nil || len(run.Ended) != 1 {
		t.Fatalf("grace pass = %+v, %v", run, err)
	}
	// Usage of January accepted during grace is still January's.
	bt.Decide(t, pool, ib, usageAt("t1", 0, "1", jan20).Raw(t))
	closePeriod(t, svc, "t1", "2026-01", "close-in-grace")
	clk.set(time.Date(2026, 2, 1, 2, 0, 0, 0, time.UTC))
	if run, err := svc.CloseDuePeriods(t.Context()); err != nil || len(run.Closed)+len(run.Ended) > 0 {
		t.Fatalf("pass after the explicit close = %+v, %v", run, err)
	}
	closes := bt.OfType[events.BillingPeriodClosed](bt.Outbox(t, pool))
	if len(closes) != 1 || closes[0].Actor != "closer@t1.example" || closes[0].Charges != 2 {
		t.Fatalf("closes = %s", bt.JSON(closes))
	}
	bt.Decide(t, pool, ib, usageAt("t1", 0, "1", jan20).Raw(t))
	if got := charges(t, svc, "t1", "2026-02"); len(got) != 1 || !got[0].Late {
		t.Fatalf("February charges = %s, want one late", bt.JSON(got))
	}
}

// A close of a period not begun in the tenant's zone is refused, one begun
// is not: at 16:00 UTC on 31 December 2026 it is January 2027 in Seoul.
func TestCloseOfAPeriodNotBegunInTheTenantsZone(t *testing.T) {
	t.Parallel()
	pool := bt.NewPool(t)
	clk := newClock(time.Date(2026, 11, 10, 0, 0, 0, 0, time.UTC))
	svc := clk.service(pool)
	putSettings(t, svc, "seoul", "Asia/Seoul", "PT1H") // from 2026-12
	clk.set(time.Date(2026, 12, 31, 16, 0, 0, 0, time.UTC))
	if _, err := tryClose(t.Context(), svc, "utc", "2027-01", "k"); codeOf(err) != "period_in_future" {
		t.Fatalf("close of 2027-01 in UTC: %v, want period_in_future", err)
	}
	closePeriod(t, svc, "seoul", "2027-01", "k")
}

func codeOf(err error) string {
	var de *domain.Error
	if errors.As(err, &de) {
		return de.Code
	}
	return fmt.Sprint(err)
}

// A close that stopped between its steps (the period left closing) is
// finished by the scheduler's next pass, even before the period's end.
func TestSchedulerFinishesACloseLeftClosing(t *testing.T) {
	t.Parallel()
	pool := bt.NewPool(t)
	clk := newClock(jan10)
	svc := clk.service(pool)
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, pool, ib)
	bt.Decide(t, pool, ib, priceV1("t1").Raw(t), usageAt("t1", 0, "4", jan10).Raw(t))
	// Step 1 of a close, committed, and nothing after it.
	if _, err := pool.Exec(t.Context(),
		`INSERT INTO billing_period (tenant_id, period, status, closing_at) VALUES ('t1', '2026-01', 'closing', now())`); err != nil {
		t.Fatal(err)
	}
	run, err := svc.CloseDuePeriods(t.Context())
	if err != nil || !slices.Equal(run.Closed, []string{"t1/2026-01"}) {
		t.Fatalf("pass = %+v, %v", run, err)
	}
	closes := bt.OfType[events.BillingPeriodClosed](bt.Outbox(t, pool))
	if len(closes) != 1 || closes[0].Actor != app.SchedulerActor || closes[0].Charges != 1 {
		t.Fatalf("closes = %s", bt.JSON(closes))
	}
}

// Tax rates are settings: set during January they apply from February, and
// each period's BillingPeriodClosed carries the rates of its settings (none
// for January), in the order given.
func TestTheCloseCarriesThePeriodsTaxRates(t *testing.T) {
	t.Parallel()
	pool := bt.NewPool(t)
	clk := newClock(jan10)
	svc := clk.service(pool)
	ib := bt.NewInbox(t, svc)
	bt.DefineMeters(t, pool, ib)
	rates := []domain.TaxRateRequest{{Code: "VAT", Name: "VAT 20%", Rate: "0.2"}, {Code: "CITY", Name: "City", Rate: "0.015"}}
	st, err := domain.ParseSettings(domain.SettingsRequest{TaxRates: rates})
	if err != nil {
		t.Fatal(err)
	}
	reply, err := putSettingsAs(t.Context(), svc, app.Request{TenantID: "taxed", Actor: "admin@taxed.example"}, "tax", st)
	if err != nil || reply.Status != http.StatusOK {
		t.Fatalf("settings: %v %d %s", err, reply.Status, reply.Body)
	}
	bt.Decide(t, pool, ib, priceV1("taxed").Raw(t), usageAt("taxed", 0, "4", jan20).Raw(t),
		usageAt("taxed", 0, "8", feb3).Raw(t))
	clk.set(time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC))
	closePeriod(t, svc, "taxed", "2026-01", "c1")
	closePeriod(t, svc, "taxed", "2026-02", "c2")
	got := map[string][]events.TaxRate{}
	for _, c := range bt.OfType[events.BillingPeriodClosed](bt.Outbox(t, pool)) {
		got[c.Period] = c.TaxRates
	}
	if len(got) != 2 || len(got["2026-01"]) != 0 {
		t.Fatalf("closes %s, want January without tax rates", bt.JSON(got))
	}
	if feb := got["2026-02"]; len(feb) != 2 || feb[0].Code != "VAT" || !feb[0].Rate.Equal(bt.Dec(t, "0.2")) ||
		feb[1].Code != "CITY" || feb[1].Name != "City" || !feb[1].Rate.Equal(bt.Dec(t, "0.015")) {
		t.Fatalf("February's close carries %s, want VAT 0.2 then CITY 0.015", bt.JSON(feb))
	}
}
