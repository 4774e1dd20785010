package webhook

// SetCrashAfterCall makes w drop the results of the calls f says so, as a
// worker killed between the call and its recording would.
func SetCrashAfterCall(w *Worker, f func(key string) bool) { w.crashAfterCall = f }

// Classify, RetryAfter and Backoff expose the delivery rules to the tests.
var (
	Classify   = classify
	RetryAfter = retryAfter
	Backoff    = backoff
)

// NewEgressForTest is NewEgress with connect called on each address the
// policy lets through, just before connect(2) (an error stops it there).
func NewEgressForTest(cfg Config, r Resolver, connect func(address string) error) *Egress {
	e := NewEgress(cfg, r)
	e.connect = connect
	return e
}

// SetEgress makes w deliver through e.
func SetEgress(w *Worker, e *Egress) { w.hc = e.Client() }
