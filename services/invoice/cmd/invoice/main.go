// Command invoice runs the invoice service (`invoice` or `invoice serve`), or
// applies its migrations (`invoice migrate`). Configuration is read from the
// environment; see pkg/service.
package main

import (
	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/services/invoice"
)

func main() { service.Main(invoice.Spec) }
