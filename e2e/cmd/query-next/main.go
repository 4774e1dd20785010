// Command query-next is the query service's next release in the demo's
// recovery story: it also reads UsageAccepted at schema version 2 (see
// billing-next).
package main

import (
	"github.com/usagebilling/billing/e2e/scenario"
	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/services/query"
)

func main() {
	spec := query.Spec
	spec.Register = scenario.RegisterUsageV2
	service.Main(spec)
}
