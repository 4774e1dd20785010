package main

import (
	"context"
	"fmt"
	"time"

	"github.com/usagebilling/billing/e2e/scenario"
	"github.com/usagebilling/billing/e2e/stack"
)

// planStory bills a SaaS customer on a plan (scenario.PlanStory), moving
// every service's clock a month or two ahead, so it runs after every other
// story; it prints the invoice line by line beside the demo's arithmetic
// and returns the problems.
func planStory(ctx context.Context, s *stack.Stack, clk scenario.Clock, progress func(string, ...any)) []string {
	progress("plan story: a SaaS customer on a plan, with a fee, a minimum, VAT and a credit; the services' clock moves forward (decision 0015)")
	res, err := scenario.PlanStory(ctx, scenario.EndpointsFrom(s.URLs()), scenario.Config{Progress: progress}, clk)
	var problems []string
	if res != nil {
		reportPlan(res)
		problems = append(problems, res.Mismatches...)
	}
	if err != nil {
		problems = append(problems, "plan story: "+err.Error())
	}
	return problems
}

func reportPlan(res *scenario.PlanResult) {
	loc, err := time.LoadLocation(res.Zone)
	if err != nil {
		loc = time.UTC
	}
	w := section(fmt.Sprintf("A SaaS plan (meter, billing, invoice): tenant %s from %q (USD %s a month, %s a request) to %q mid-month (USD %s a month, %s %s included then %s, at least %s); VAT %s%%; a USD %s credit",
		res.Tenant, scenario.StarterCode, scenario.StarterFee, scenario.StarterPrice, res.Plan, scenario.PlanFee, scenario.PlanIncluded,
		scenario.PlanMeter, scenario.PlanUnitPrice, scenario.PlanMinimum, scenario.PlanTaxRate.Shift(2), scenario.PlanGrant.StringFixed(2)))
	fmt.Fprintf(w, "settings (zone %s, VAT) apply from\t%s\n", res.Zone, checkString(res.EffectiveFrom, res.WantEffectiveFrom))
	for i, m := range res.ClockMoves {
		fmt.Fprintf(w, "clock move %d: %s\t%s (%s)\n", i+1, m.Why, m.To.In(loc).Format("2006-01-02 15:04 MST"), m.To.UTC().Format("2006-01-02 15:04 UTC"))
	}
	if !res.StarterStartsAt.IsZero() {
		fmt.Fprintf(w, "subscribed to %s (never backdated)\t%s (%s): %d of %d days of %s in %s\n", scenario.StarterCode,
			res.StarterStartsAt.In(loc).Format("2006-01-02 15:04:05 MST"), res.StarterStartsAt.UTC().Format("2006-01-02 15:04:05 UTC"),
			res.StarterDays, res.PeriodDays, res.Period, res.Zone)
	}
	if !res.StartsAt.IsZero() {
		fmt.Fprintf(w, "changed to %s, ending %s\t%s (%s): %d of %d days (counted in UTC: %d)\n", res.Plan, scenario.StarterCode,
			res.StartsAt.In(loc).Format("2006-01-02 15:04:05 MST"), res.StartsAt.UTC().Format("2006-01-02 15:04:05 UTC"),
			res.Days, res.PeriodDays, res.UTCDays)
	}
	fmt.Fprintf(w, "billing's estimate, open period\t%s\n", check(res.Estimate, res.WantEstimate))
	fmt.Fprintf(w, "invoice\tnumber %s, %s, closed in the period's grace\n", checkInt(int(res.Number), 1), res.Status)
	w.Flush()
	w = section(fmt.Sprintf("%s's invoice of %s, line by line", res.Tenant, res.Period))
	fmt.Fprintln(w, "line or figure\tthe demo's arithmetic\tinvoice")
	for _, l := range res.Lines {
		kind := l.Kind
		if l.Plan != "" {
			kind += " (" + l.Plan + ")"
		}
		if l.Figure {
			kind = "= " + kind
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", kind, l.How, checkLine(l))
	}
	fmt.Fprintf(w, "grant after the draw\tbalance, status\t%s %s\n", check(res.Balance, res.WantBalance), checkString(res.GrantStatus, res.WantGrantStatus))
	w.Flush()
	a := res.Alert
	w = section(fmt.Sprintf("Told before the invoice, and traced after it: %s's alert and its own viewer's trace", res.Tenant))
	fmt.Fprintf(w, "alert: %s of %s reach %s\tWebhook-Id %s\ttold %s time(s) (bad signatures %d), at %s\n",
		scenario.PlanMeter, res.Period, a.Threshold, a.WebhookID, checkInt(a.Deliveries, 1), a.BadSignatures, a.Value)
	fmt.Fprintf(w, "charge line %s\ttraced by a viewer token of %s, %d pages\t%d facts %v, quantity %s\n",
		res.ChargeLineID, res.Tenant, a.Pages, len(a.Traced), a.Traced, check(a.Quantity, res.Quantity))
	w.Flush()
	fmt.Printf("(%d facts; the story took %s)\n", res.StarterFacts+res.Facts, res.Took.Round(100*time.Millisecond))
}

// checkLine shows an invoice line or figure beside the demo's: "none" for
// one absent as it should be.
func checkLine(l scenario.PlanLine) string {
	switch {
	case l.OK() && !l.Found:
		return "none ok"
	case l.OK():
		return l.Amount.String() + " ok"
	case !l.Found:
		return "none WANT " + l.WantAmount.String()
	case !l.WantFound:
		return l.Amount.String() + " WANT none"
	}
	return check(l.Amount, l.WantAmount)
}

func checkString(got, want string) string {
	if got == want {
		return got + " ok"
	}
	return fmt.Sprintf("%s WANT %s", got, want)
}
