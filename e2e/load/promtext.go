package load

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Series is one line of the Prometheus text exposition format: a metric
// name, its labels and its value.
type Series struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// ParseText reads the Prometheus text exposition format (version 0.0.4):
// comments and blank lines are skipped, a timestamp after the value is
// ignored.
func ParseText(r io.Reader) ([]Series, error) {
	var out []Series
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		s, err := parseLine(line)
		if err != nil {
			return nil, fmt.Errorf("metrics line %d: %w: %q", n, err, line)
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

func parseLine(line string) (Series, error) {
	s := Series{Labels: map[string]string{}}
	end := strings.IndexAny(line, "{ \t")
	if end <= 0 {
		return s, fmt.Errorf("no value")
	}
	s.Name = line[:end]
	rest := line[end:]
	if rest[0] == '{' {
		var err error
		rest, err = parseLabels(rest[1:], s.Labels)
		if err != nil {
			return s, err
		}
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return s, fmt.Errorf("no value")
	}
	v, err := parseValue(fields[0])
	if err != nil {
		return s, err
	}
	s.Value = v
	return s, nil
}

// parseLabels reads `name="value",...}` into labels and returns what
// follows the closing brace.
func parseLabels(s string, labels map[string]string) (string, error) {
	for {
		s = strings.TrimLeft(s, " \t,")
		if s == "" {
			return "", fmt.Errorf("unterminated labels")
		}
		if s[0] == '}' {
			return s[1:], nil
		}
		eq := strings.IndexByte(s, '=')
		if eq <= 0 || eq+1 >= len(s) || s[eq+1] != '"' {
			return "", fmt.Errorf("malformed label")
		}
		name := strings.TrimSpace(s[:eq])
		var val strings.Builder
		i := eq + 2
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' && i+1 < len(s) {
				i++
				switch s[i] {
				case 'n':
					val.WriteByte('\n')
				default:
					val.WriteByte(s[i])
				}
				continue
			}
			val.WriteByte(s[i])
		}
		if i >= len(s) {
			return "", fmt.Errorf("unterminated label value")
		}
		labels[name] = val.String()
		s = s[i+1:]
	}
}

func parseValue(v string) (float64, error) {
	switch v {
	case "+Inf", "Inf":
		return math.Inf(1), nil
	case "-Inf":
		return math.Inf(-1), nil
	case "NaN":
		return math.NaN(), nil
	}
	return strconv.ParseFloat(v, 64)
}

// Histogram is a Prometheus histogram: cumulative counts per upper bound
// (ascending, the last one +Inf), the count and the sum.
type Histogram struct {
	Bounds []float64
	Counts []float64
	Count  float64
	Sum    float64
}

// MarshalJSON writes the buckets as {le, count} with le a string, as the
// exposition format has it: JSON has no +Inf.
func (h Histogram) MarshalJSON() ([]byte, error) {
	type bucket struct {
		LE    string  `json:"le"`
		Count float64 `json:"count"`
	}
	out := struct {
		Buckets []bucket `json:"buckets"`
		Count   float64  `json:"count"`
		Sum     float64  `json:"sum"`
	}{Buckets: []bucket{}, Count: h.Count, Sum: h.Sum}
	for i, b := range h.Bounds {
		le := strconv.FormatFloat(b, 'g', -1, 64)
		if math.IsInf(b, 1) {
			le = "+Inf"
		}
		out.Buckets = append(out.Buckets, bucket{LE: le, Count: h.Counts[i]})
	}
	return json.Marshal(out)
}

// HistogramOf gathers the histogram name from series, summing over every
// label set (le aside): a service's histogram may come in several series.
func HistogramOf(series []Series, name string) (Histogram, bool) {
	byLE := map[float64]float64{}
	var h Histogram
	found := false
	for _, s := range series {
		switch s.Name {
		case name + "_bucket":
			le, err := parseValue(s.Labels["le"])
			if err != nil {
				continue
			}
			byLE[le] += s.Value
			found = true
		case name + "_count":
			h.Count += s.Value
		case name + "_sum":
			h.Sum += s.Value
		}
	}
	if !found {
		return h, false
	}
	for le := range byLE {
		h.Bounds = append(h.Bounds, le)
	}
	slices.Sort(h.Bounds)
	for _, le := range h.Bounds {
		h.Counts = append(h.Counts, byLE[le])
	}
	return h, true
}

// Sub returns h minus an earlier reading of the same histogram: what was
// observed in between. Buckets missing from before count as zero.
func (h Histogram) Sub(before Histogram) Histogram {
	prev := map[float64]float64{}
	for i, b := range before.Bounds {
		prev[b] = before.Counts[i]
	}
	d := Histogram{Bounds: slices.Clone(h.Bounds), Count: h.Count - before.Count, Sum: h.Sum - before.Sum}
	for i, b := range h.Bounds {
		d.Counts = append(d.Counts, h.Counts[i]-prev[b])
	}
	return d
}

// Quantile estimates the q-quantile (0 < q <= 1) the way Prometheus's
// histogram_quantile does: find the bucket holding rank q*count and
// interpolate linearly inside it (the first bucket from zero). When the
// rank falls in the +Inf bucket it returns the highest finite bound and
// over = true: the value is above it. ok is false without observations.
func (h Histogram) Quantile(q float64) (v float64, over, ok bool) {
	if len(h.Bounds) == 0 {
		return 0, false, false
	}
	total := h.Counts[len(h.Counts)-1]
	if total <= 0 {
		return 0, false, false
	}
	rank := q * total
	for i, upper := range h.Bounds {
		if h.Counts[i] < rank {
			continue
		}
		if math.IsInf(upper, 1) {
			if i == 0 {
				return 0, true, true
			}
			return h.Bounds[i-1], true, true
		}
		lower, below := 0.0, 0.0
		if i > 0 {
			lower, below = h.Bounds[i-1], h.Counts[i-1]
		}
		inBucket := h.Counts[i] - below
		if inBucket <= 0 {
			return upper, false, true
		}
		return lower + (upper-lower)*(rank-below)/inBucket, false, true
	}
	return h.Bounds[len(h.Bounds)-1], true, true
}
