// Command billing-next is the billing service's next release in the demo's
// recovery story: it also reads UsageAccepted at schema version 2 (the same
// fields as version 1). The demo rolls it out, then redrives the events the
// running release quarantined as unsupported_schema.
package main

import (
	"github.com/usagebilling/billing/e2e/scenario"
	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/services/billing"
)

func main() {
	spec := billing.Spec
	spec.Register = scenario.RegisterUsageV2
	service.Main(spec)
}
