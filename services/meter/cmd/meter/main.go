// Command meter is the meter service of the usage-billing system: immutable
// price versions, activated over HTTP and published as PriceActivated.
package main

import (
	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/services/meter"
)

func main() { service.Main(meter.Spec) }
