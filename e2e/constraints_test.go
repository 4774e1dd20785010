package e2e

import (
	"slices"
	"testing"

	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/services/billing"
	"github.com/usagebilling/billing/services/invoice"
	"github.com/usagebilling/billing/services/meter"
	"github.com/usagebilling/billing/services/query"
	"github.com/usagebilling/billing/services/usage"
	"github.com/usagebilling/billing/testkit/servicetest"
)

// Every constraint name a service's Spec lists (OriginConstraints, which
// the inbox compares with a unique violation's constraint name) is a unique
// constraint or unique index of the schema its migrations make; a name
// that is not, made up here, is reported missing. The table is here, in the
// one module that imports all five services.
func TestSpecConstraintsExistInTheSchema(t *testing.T) {
	const madeUp = "charge_no_such_constraint_key"
	for _, tc := range []struct {
		spec service.Spec
		min  int // how many names the Spec lists at least
	}{
		{meter.Spec, 0}, // the meter consumes no events
		{usage.Spec, 1},
		{billing.Spec, 2},
		{invoice.Spec, 1},
		{query.Spec, 4},
	} {
		t.Run(tc.spec.Name, func(t *testing.T) {
			t.Parallel()
			names := tc.spec.OriginConstraints
			if len(names) < tc.min {
				t.Fatalf("%s lists %d origin constraints %v, want at least %d", tc.spec.Name, len(names), names, tc.min)
			}
			pool := servicetest.NewPool(t, tc.spec)
			missing, err := servicetest.MissingConstraints(t.Context(), pool, append(slices.Clone(names), madeUp))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(missing, []string{madeUp}) {
				t.Fatalf("missing from the %s schema: %v, want only the made-up %s", tc.spec.Name, missing, madeUp)
			}
		})
	}
}
