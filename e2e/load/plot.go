package load

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strings"
)

// PlotData is what load.svg shows: per second, the facts accepted and the
// facts charged end to end, and the lag between them.
type PlotData struct {
	Title    string
	Subtitle string
	Points   []Point
	// SendEnd is when sending stopped, in seconds after the first send.
	SendEnd float64
}

// PlotData returns the plot of the report.
func (r *Report) PlotData() PlotData {
	verdict := "OK"
	if !r.OK {
		verdict = "FAILED"
	}
	return PlotData{
		Title: fmt.Sprintf("make load %s: accepted %.0f/s sustained, end to end %.0f/s, %s",
			r.RunID, r.Throughput.AcceptedPerSec, r.Throughput.EndToEndPerSec, verdict),
		Subtitle: r.ConditionsLine(),
		Points:   r.Series,
		SendEnd:  r.Totals.SendSeconds,
	}
}

// Plot geometry, in SVG user units.
const (
	plotW, plotH     = 960, 640
	plotLeft         = 80
	plotRight        = plotW - 30
	ratesTop, ratesB = 90, 360
	lagTop, lagB     = 420, 580
)

// WriteSVG writes the plot as a standalone SVG document: two panels on one
// time axis, facts/s above (accepted, charged end to end) and the lag
// (accepted - charged) below.
func WriteSVG(w io.Writer, d PlotData) error {
	s := newSVGPlot(w, d)
	s.p(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	s.p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", plotW, plotH, plotW, plotH)
	s.p(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	s.p(`<text x="%d" y="28" font-size="16" font-weight="bold">%s</text>`+"\n", plotLeft, esc(d.Title))
	s.p(`<text x="%d" y="50" fill="#444">%s</text>`+"\n", plotLeft, esc(d.Subtitle))
	s.panel(ratesTop, ratesB, s.rTop, s.rStep, s.yR, "facts per second")
	s.panel(lagTop, lagB, s.lTop, s.lStep, s.yL, "lag (facts)")
	s.p(`<text x="%d" y="%d" text-anchor="middle">seconds since the first send</text>`+"\n", (plotLeft+plotRight)/2, lagB+36)
	s.sendingStops()
	// Charged under accepted, wider: where the two agree (a system keeping
	// up), the accepted line shows on top of the charged band.
	s.rate("#ff7f0e", 5, func(pt Point) float64 { return pt.ChargedPerSec })
	s.rate("#1f77b4", 1.5, func(pt Point) float64 { return pt.AcceptedPerSec })
	s.lag()
	s.legend()
	s.p("</svg>\n")
	return s.w.Flush()
}

// svgPlot is a plot on its way: the data, the writer and the axes' scales.
type svgPlot struct {
	w           *bufio.Writer
	d           PlotData
	tMax, xStep float64 // time axis
	rTop, rStep float64 // rates panel
	lTop, lStep float64 // lag panel
}

func newSVGPlot(w io.Writer, d PlotData) *svgPlot {
	tMax := d.SendEnd
	rMax, lagMax := 0.0, 0.0
	for _, pt := range d.Points {
		tMax = max(tMax, pt.T)
		rMax = max(rMax, pt.AcceptedPerSec, pt.ChargedPerSec)
		lagMax = max(lagMax, pt.Lag)
	}
	tMax = max(tMax, 1)
	s := &svgPlot{w: bufio.NewWriter(w), d: d}
	s.xStep = niceStep(tMax, 10)
	s.tMax = math.Ceil(tMax/s.xStep) * s.xStep
	s.rStep = niceStep(max(rMax, 1), 5)
	s.rTop = math.Ceil(max(rMax, 1)/s.rStep) * s.rStep
	s.lStep = niceStep(max(lagMax, 1), 4)
	s.lTop = math.Ceil(max(lagMax, 1)/s.lStep) * s.lStep
	return s
}

func (s *svgPlot) p(format string, args ...any) { fmt.Fprintf(s.w, format, args...) }

func (s *svgPlot) x(t float64) float64  { return plotLeft + (plotRight-plotLeft)*t/s.tMax }
func (s *svgPlot) yR(v float64) float64 { return ratesB - (ratesB-ratesTop)*v/s.rTop }
func (s *svgPlot) yL(v float64) float64 { return lagB - (lagB-lagTop)*v/s.lTop }

// panel draws a panel's frame, its value grid up to yTop and the time axis
// ticks below it.
func (s *svgPlot) panel(top, bottom float64, yTop, step float64, y func(float64) float64, label string) {
	s.p(`<rect x="%d" y="%.1f" width="%d" height="%.1f" fill="none" stroke="#999"/>`+"\n", plotLeft, top, plotRight-plotLeft, bottom-top)
	for v := 0.0; v <= yTop+step/2; v += step {
		s.p(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e5e5e5"/>`+"\n", plotLeft, y(v), plotRight, y(v))
		s.p(`<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", plotLeft-6, y(v)+4, num(v))
	}
	for t := 0.0; t <= s.tMax+s.xStep/2; t += s.xStep {
		s.p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#999"/>`+"\n", s.x(t), bottom, s.x(t), bottom+4)
		s.p(`<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", s.x(t), bottom+17, num(t))
	}
	s.p(`<text transform="translate(18 %.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", (top+bottom)/2, esc(label))
}

// sendingStops marks when sending stopped, across both panels.
func (s *svgPlot) sendingStops() {
	if s.d.SendEnd <= 0 {
		return
	}
	for _, r := range [][2]float64{{ratesTop, ratesB}, {lagTop, lagB}} {
		s.p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#555" stroke-dasharray="4 3"/>`+"\n", s.x(s.d.SendEnd), r[0], s.x(s.d.SendEnd), r[1])
	}
	s.p(`<text x="%.1f" y="%d" fill="#555">sending stops</text>`+"\n", s.x(s.d.SendEnd)+4, ratesTop+14)
}

// rate draws a rate as a line: each second's count at the middle of its
// second.
func (s *svgPlot) rate(color string, width float64, v func(Point) float64) {
	if len(s.d.Points) == 0 {
		return
	}
	var b strings.Builder
	for _, pt := range s.d.Points {
		fmt.Fprintf(&b, "%.1f,%.1f ", s.x(pt.T-0.5), s.yR(v(pt)))
	}
	s.p(`<polyline fill="none" stroke="%s" stroke-width="%.1f" stroke-linejoin="round" points="%s"/>`+"\n", color, width, strings.TrimSpace(b.String()))
}

// lag draws the lag as an area from zero: each second's (the most it was
// during the second) at the middle of its second, as the rates.
func (s *svgPlot) lag() {
	pts := s.d.Points
	if len(pts) == 0 {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%.1f,%.1f ", s.x(0), s.yL(0))
	for _, pt := range pts {
		fmt.Fprintf(&b, "%.1f,%.1f ", s.x(pt.T-0.5), s.yL(max(pt.Lag, 0)))
	}
	fmt.Fprintf(&b, "%.1f,%.1f", s.x(pts[len(pts)-1].T-0.5), s.yL(0))
	s.p(`<polygon fill="#d62728" fill-opacity="0.25" stroke="#d62728" stroke-width="1.5" points="%s"/>`+"\n", b.String())
}

// legend draws the legend, in one row above the panels.
func (s *svgPlot) legend() {
	legend := []struct{ color, text string }{
		{"#1f77b4", "accepted/s (usage answered 201)"},
		{"#ff7f0e", "charged/s end to end (seen in query)"},
		{"#d62728", "lag = accepted - charged, most in each second (below)"},
	}
	lx := plotLeft
	for _, l := range legend {
		s.p(`<line x1="%d" y1="68" x2="%d" y2="68" stroke="%s" stroke-width="3"/>`+"\n", lx, lx+24, l.color)
		s.p(`<text x="%d" y="72">%s</text>`+"\n", lx+30, esc(l.text))
		lx += 48 + 7*len(l.text)
	}
}

// niceStep returns a round step (1, 2 or 5 times a power of ten) that
// cuts 0..v into about n parts.
func niceStep(v float64, n int) float64 {
	raw := v / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*mag {
			return m * mag
		}
	}
	return 10 * mag
}

func num(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%gM", math.Round(v/1e5)/10)
	case v >= 1e4:
		return fmt.Sprintf("%gk", math.Round(v/100)/10)
	}
	return fmt.Sprintf("%g", math.Round(v*100)/100)
}

func esc(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s))
	return b.String()
}
