// Command query runs the query service (`query` or `query serve`), or applies
// its migrations (`query migrate`). Configuration is read from the
// environment; see pkg/service.
package main

import (
	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/services/query"
)

func main() { service.Main(query.Spec) }
