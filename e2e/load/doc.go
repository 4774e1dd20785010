// Package load drives usage facts into a running system over HTTP and
// reports what the system really does with them: how many facts usage
// accepts per second, how many the query service counts and how many
// billing charges (as query sees them), the lag between the two, an
// estimate of each fact's latency from usage to query, the outbox and
// inbox latency histograms the services export on /metrics, and the CPU
// spent per fact charged. It checks at the end that no accepted fact was
// lost and none was charged twice.
//
// The pieces: config.go (the knobs), client.go (HTTP and tokens),
// setup.go (prices, the probe fact), driver.go (the senders), sampler.go
// (query polls and the progress line), promtext.go (/metrics histograms),
// stats.go (percentiles, FIFO matching, latency by window), cpu.go (CPU per fact, all-in and
// per process group, from /proc, and its ratio to the floor of make
// floor), report.go and plot.go (the report and its SVG), run.go (the
// whole run). e2e/cmd/load is the command; `make load` runs it.
package load
