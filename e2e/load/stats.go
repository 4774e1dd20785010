package load

import (
	"math"
	"slices"
	"time"
)

// Sample is a value observed Weight times (a latency in seconds shared by
// the facts of one batch, say), At the instant its facts were accepted
// (an offset from the run's origin; zero when it does not matter).
type Sample struct {
	Value  float64
	Weight int64
	At     time.Duration
}

// Percentiles returns the nearest-rank percentiles ps (each in (0, 100]) of
// samples: for p, the smallest value whose cumulative weight reaches p% of
// the total weight. ok is false when there is no weight at all. samples is
// sorted in place.
func Percentiles(samples []Sample, ps ...float64) (out []float64, ok bool) {
	var total int64
	for _, s := range samples {
		total += s.Weight
	}
	if total <= 0 {
		return make([]float64, len(ps)), false
	}
	slices.SortFunc(samples, func(a, b Sample) int {
		switch {
		case a.Value < b.Value:
			return -1
		case a.Value > b.Value:
			return 1
		}
		return 0
	})
	out = make([]float64, len(ps))
	for i, p := range ps {
		rank := int64(math.Ceil(p / 100 * float64(total)))
		rank = max(rank, 1)
		var cum int64
		for _, s := range samples {
			if s.Weight <= 0 {
				continue
			}
			cum += s.Weight
			if cum >= rank {
				out[i] = s.Value
				break
			}
		}
	}
	return out, true
}

// Step is N events at one instant At (an offset from the run's origin):
// the facts one response accepted, or the facts one poll saw newly counted.
type Step struct {
	At time.Duration
	N  int64
}

// MatchFIFO pairs the k-th accepted fact with the k-th fact seen reached
// (counted or charged in query), for every k: accepts are sorted by time
// here, reaches must be in the order they were observed. Each pair gives
// a latency, reach minus accept, in seconds (clamped at zero: an estimate
// can fall before the response that accepted the fact); the first skip
// pairs are matched but not sampled (the probe facts). It returns the
// latencies as weighted samples, each at its facts' accept time, the accepted facts not reached, and the
// reaches left over when more were reached than accepted.
//
// The pairing is an estimate: query does not say which facts it counted,
// only how many, so the k-th to arrive is taken to be the k-th accepted.
func MatchFIFO(accepts, reaches []Step, skip int64) (samples []Sample, unreached, extra int64) {
	acc := slices.Clone(accepts)
	slices.SortStableFunc(acc, func(a, b Step) int { return compareDur(a.At, b.At) })
	i, j := 0, 0
	var leftA, leftR int64
	if len(acc) > 0 {
		leftA = acc[0].N
	}
	if len(reaches) > 0 {
		leftR = reaches[0].N
	}
	for i < len(acc) && j < len(reaches) {
		if leftA <= 0 {
			i++
			if i < len(acc) {
				leftA = acc[i].N
			}
			continue
		}
		if leftR <= 0 {
			j++
			if j < len(reaches) {
				leftR = reaches[j].N
			}
			continue
		}
		n := min(leftA, leftR)
		lat := max((reaches[j].At - acc[i].At).Seconds(), 0)
		sampled := n
		if skip > 0 {
			d := min(skip, n)
			skip -= d
			sampled -= d
		}
		if sampled > 0 {
			if k := len(samples) - 1; k >= 0 && samples[k].Value == lat && samples[k].At == acc[i].At {
				samples[k].Weight += sampled
			} else {
				samples = append(samples, Sample{Value: lat, Weight: sampled, At: acc[i].At})
			}
		}
		leftA -= n
		leftR -= n
	}
	for ; i < len(acc); i++ {
		unreached += max(leftA, 0)
		if i+1 < len(acc) {
			leftA = acc[i+1].N
		}
	}
	for ; j < len(reaches); j++ {
		extra += max(leftR, 0)
		if j+1 < len(reaches) {
			leftR = reaches[j+1].N
		}
	}
	return samples, unreached, extra
}

func compareDur(a, b time.Duration) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Total is the sum of the steps' N.
func Total(steps []Step) int64 {
	var n int64
	for _, s := range steps {
		n += s.N
	}
	return n
}

// LatencyWindow is the latency of the facts accepted in one window of the
// run, From and To in seconds after the first send.
type LatencyWindow struct {
	From  float64 `json:"fromSeconds"`
	To    float64 `json:"toSeconds"`
	Facts int64   `json:"facts"`
	P50   float64 `json:"p50Seconds"`
	P95   float64 `json:"p95Seconds"`
	P99   float64 `json:"p99Seconds"`
	Max   float64 `json:"maxSeconds"`
}

// latencyWindowMin is the shortest window of LatencyWindows; a run longer
// than latencyWindowsMax of them gets longer windows, in steps of it.
const (
	latencyWindowMin  = 10 * time.Second
	latencyWindowsMax = 12
)

// LatencyWindows cuts [start, end) into windows of latencyWindowMin (longer
// for a long run, at most latencyWindowsMax windows; the last one takes the
// remainder, less than a window, so a run of 60.002 s has six) and gives the percentiles of the samples accepted in each: a
// tail that comes from the first seconds (a broker warming up) or from the
// last (a backlog) shows where it is. Samples accepted after end go to the
// last window. samples is left as it was.
func LatencyWindows(samples []Sample, start, end time.Duration) []LatencyWindow {
	if end <= start {
		return nil
	}
	every := latencyWindowMin
	for every*latencyWindowsMax < end-start {
		every += latencyWindowMin
	}
	n := max(int((end-start)/every), 1)
	buckets := make([][]Sample, n)
	for _, s := range samples {
		i := min(max(int((s.At-start)/every), 0), n-1)
		buckets[i] = append(buckets[i], s)
	}
	out := make([]LatencyWindow, 0, n)
	for i, b := range buckets {
		w := LatencyWindow{From: (time.Duration(i) * every).Seconds(), To: (time.Duration(i+1) * every).Seconds()}
		if i == n-1 {
			w.To = (end - start).Seconds()
		}
		for _, s := range b {
			w.Facts += s.Weight
		}
		if ps, ok := Percentiles(b, 50, 95, 99, 100); ok {
			w.P50, w.P95, w.P99, w.Max = ps[0], ps[1], ps[2], ps[3]
		}
		out = append(out, w)
	}
	return out
}
