package app_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/usagebilling/billing/pkg/catalog"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/services/meter/internal/app"
	"github.com/usagebilling/billing/services/meter/internal/domain"
	"github.com/usagebilling/billing/testkit/pgtest"
)

// publishPlan publishes a version of plan code "pro" with the given
// charges, taking effect at eff (zero: as soon as it may).
func publishPlan(t *testing.T, a *app.App, r domain.PlanRequest) (app.Plan, error) {
	t.Helper()
	p, err := domain.ParsePlan(r)
	if err != nil {
		return app.Plan{}, err
	}
	var out app.Plan
	err = a.InTx(t.Context(), func(tx pgx.Tx) error {
		var err error
		out, err = a.PublishPlan(t.Context(), tx, app.PublishPlan{Plan: p, Actor: "catalog@example.com"})
		return err
	})
	return out, err
}

func defineMeter(t *testing.T, a *app.App, m catalog.Meter) {
	t.Helper()
	if err := a.InTx(t.Context(), func(tx pgx.Tx) error {
		_, _, err := a.DefineMeter(t.Context(), tx, app.DefineMeter{Meter: m.Normalized(), Actor: "catalog@example.com"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

func pro(eff string, charges ...domain.ChargeRequest) domain.PlanRequest {
	return domain.PlanRequest{Code: "pro", Name: "Pro", Currency: "USD", MinimumSpend: "100", EffectiveAt: eff,
		FixedFees: []domain.FeeRequest{{Code: "base", Name: "Base fee", Amount: "49.00"}}, Charges: charges}
}

// Plan versions are numbered per code and placed in the plans' schedule
// shard as price versions are in a tenant's: never backdated, never inside
// a published watermark, in order; each publishes a PlanPublished carrying
// its place in the shard and the watermark with it, and the shard's
// watermark is published with the tenants' shards.
func TestPlanVersionsInThePlansScheduleShard(t *testing.T) {
	pool := pgtest.NewPool(t, tmpl)
	t0 := time.Date(2026, 11, 5, 10, 0, 0, 0, time.UTC)
	c := &clock{t: t0}
	a := app.New(app.Deps{Pool: pool, Clock: c.now}, app.Config{ScheduleLead: 5 * time.Second})
	defineMeter(t, a, catalog.Meter{Code: "tokens", Name: "Tokens", Aggregation: catalog.Sum, Dimensions: []string{"model"}})
	tokens := domain.ChargeRequest{MeterCode: "tokens", Model: "graduated", Tiers: []domain.TierRequest{
		{UpTo: "1000000", UnitPrice: "0"}, {UnitPrice: "0.000002"}}}
	big := domain.ChargeRequest{MeterCode: "tokens", UnitPrice: "0.00001", Dimensions: map[string]string{"model": "big"}}

	v1, err := publishPlan(t, a, pro("", tokens, big))
	if err != nil {
		t.Fatal(err)
	}
	if v1.Version != 1 || !v1.EffectiveAt.Equal(t0) {
		t.Fatalf("v1 %+v, want version 1 effective now", v1)
	}
	var pp events.PlanPublished
	for _, d := range published(t, pool) {
		if p, ok := d.Payload.(events.PlanPublished); ok {
			pp = p
			if d.Envelope.TenantID != events.CatalogTenant || d.Envelope.AggregateType != events.AggregatePlan ||
				d.Envelope.AggregateID != "pro" || d.Envelope.AggregateVersion != 1 {
				t.Fatalf("PlanPublished on %s/%s/%s v%d", d.Envelope.TenantID, d.Envelope.AggregateType,
					d.Envelope.AggregateID, d.Envelope.AggregateVersion)
			}
		}
	}
	if pp.ScheduleSeq != 1 || !pp.KnownThrough.Equal(t0.Add(5*time.Second)) || len(pp.Charges) != 2 ||
		pp.Charges[1].Dimensions["model"] != "big" || pp.FixedFees[0].Amount.String() != "49" || pp.MinimumSpend.String() != "100" {
		t.Fatalf("PlanPublished %+v", pp)
	}
	// The plans' shard is published with the tenants' and holds its promise.
	if _, err := a.PublishWatermarks(t.Context()); err != nil {
		t.Fatal(err)
	}
	c.set(t0.Add(3 * time.Second))
	if _, err := a.PublishWatermarks(t.Context()); err != nil {
		t.Fatal(err)
	}
	var planMark *events.PriceScheduleWatermark
	for _, d := range published(t, pool) {
		if w, ok := d.Payload.(events.PriceScheduleWatermark); ok && w.Shard == events.PlanShard {
			planMark = &w
		}
	}
	if planMark == nil || planMark.Seq != 1 || !planMark.KnownThrough.Equal(t0.Add(8*time.Second)) {
		t.Fatalf("the plans' watermark %+v, want version 1 through t0+8s", planMark)
	}
	_, err = publishPlan(t, a, pro(t0.Add(7*time.Second).Format(time.RFC3339Nano), tokens))
	if de, ok := errors.AsType[*domain.Error](err); !ok || de.Code != domain.CodeSchedulePublished {
		t.Fatalf("a version inside the published schedule: %v, want %s", err, domain.CodeSchedulePublished)
	}
	_, err = publishPlan(t, a, pro(t0.Add(-time.Second).Format(time.RFC3339Nano), tokens))
	if de, ok := errors.AsType[*domain.Error](err); !ok || de.Code != domain.CodePriceBackdated {
		t.Fatalf("a backdated version: %v, want %s", err, domain.CodePriceBackdated)
	}
	v2, err := publishPlan(t, a, pro("", tokens))
	if err != nil {
		t.Fatal(err)
	}
	if v2.Version != 2 || !v2.EffectiveAt.Equal(t0.Add(8*time.Second+time.Microsecond)) {
		t.Fatalf("v2 %+v, want version 2 right after the watermark", v2)
	}
	versions, err := a.ListPlanVersions(t.Context(), "pro", 0, 10)
	if err != nil || len(versions) != 2 || versions[1].Version != 2 || len(versions[0].Charges) != 2 {
		t.Fatalf("versions %+v, %v", versions, err)
	}
	latest, err := a.ListPlans(t.Context(), "", 10)
	if err != nil || len(latest) != 1 || latest[0].Version != 2 {
		t.Fatalf("latest %+v, %v", latest, err)
	}
	if _, err := a.ListPlanVersions(t.Context(), "basic", 0, 10); !isCode(err, domain.CodePlanNotFound) {
		t.Fatalf("versions of a plan never published: %v, want not found", err)
	}
}

// A plan's charges are checked against the catalog with nothing written: an
// unknown meter, a dimension the meter does not have, two charges that
// could price the same fact.
func TestPlanChargesCheckedAgainstTheCatalog(t *testing.T) {
	pool := pgtest.NewPool(t, tmpl)
	a := app.New(app.Deps{Pool: pool}, app.Config{})
	defineMeter(t, a, catalog.Meter{Code: "tokens", Name: "Tokens", Aggregation: catalog.Sum, Dimensions: []string{"model", "region"}})
	unit := func(dims map[string]string) domain.ChargeRequest {
		return domain.ChargeRequest{MeterCode: "tokens", UnitPrice: "1", Dimensions: dims}
	}
	for _, tc := range []struct {
		name    string
		charges []domain.ChargeRequest
		code    string
	}{
		{"unknown meter", []domain.ChargeRequest{{MeterCode: "seats", UnitPrice: "1"}}, domain.CodeMeterNotFound},
		{"unknown dimension", []domain.ChargeRequest{unit(map[string]string{"color": "red"})}, catalog.CodeInvalidDimensions},
		{"twice the default", []domain.ChargeRequest{unit(nil), unit(nil)}, domain.CodeAmbiguousPrice},
		{"overlapping", []domain.ChargeRequest{unit(map[string]string{"model": "a"}), unit(map[string]string{"region": "eu"})}, domain.CodeAmbiguousPrice},
	} {
		_, err := publishPlan(t, a, pro("", tc.charges...))
		if de, ok := errors.AsType[*domain.Error](err); !ok || de.Code != tc.code {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.code)
		}
	}
	var n int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM plan_version`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d versions written by refused plans (%v)", n, err)
	}
	if _, err := publishPlan(t, a, pro("", unit(nil), unit(map[string]string{"model": "a"}))); err != nil {
		t.Fatalf("a default and a more specific charge: %v", err)
	}
}

func isCode(err error, code string) bool {
	de, ok := errors.AsType[*domain.Error](err)
	return ok && de.Code == code
}
