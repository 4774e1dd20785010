// Command billing runs the billing service (`billing` or `billing serve`),
// or applies its migrations (`billing migrate`). See service.Config for the
// environment it reads.
package main

import (
	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/services/billing"
)

func main() { service.Main(billing.Spec) }
