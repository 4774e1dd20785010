// Package collector holds what the packages that export Prometheus metrics
// share: registering a collector that several instances of one component in
// one process (two inboxes of a service, a relay per test) may register
// under the same name and labels.
package collector

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c with reg, or returns the collector already
// registered under its name and labels, so that several instances in one
// process share their metrics. Any other error is joined into *errp and c
// is returned unregistered.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C, errp *error) C {
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	*errp = errors.Join(*errp, err)
	return c
}
