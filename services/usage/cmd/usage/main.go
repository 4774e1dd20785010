// Command usage is the usage service of the usage-billing system: usage
// facts accepted once, priced from replicated price evidence, published as
// UsageAccepted.
package main

import (
	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/services/usage"
)

func main() { service.Main(usage.Spec) }
