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
