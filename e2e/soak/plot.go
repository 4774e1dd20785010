package soak

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strings"
)

// Panel is one chart of the plot: a few named lines on one time axis.
type Panel struct {
	Title string
	// Scale divides every value (1<<20 for MiB); Unit names the result.
	Scale float64
	Unit  string
	Lines []Line
}

// Line is one series of a panel.
type Line struct {
	Name   string
	Points []Point
}

// Band is a stretch of time shaded in every panel (a fault).
type Band struct{ From, To float64 }

// Plot geometry: two columns of panels.
const (
	panelW, panelH = 560, 230
	marginL        = 70
	marginT        = 90
	legendW        = 150
	columns        = 2
)

var palette = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"}

// WriteSVG writes the panels as one standalone SVG document, the faults
// shaded in each; the load tool's plot (e2e/load/plot.go) has two fixed
// panels of its own series, so the soak draws its own.
func WriteSVG(w io.Writer, title, subtitle string, panels []Panel, bands []Band, tMax float64) error {
	bw := bufio.NewWriter(w)
	p := func(format string, args ...any) { fmt.Fprintf(bw, format, args...) }
	rows := (len(panels) + columns - 1) / columns
	width := columns * (marginL + panelW + legendW)
	height := marginT + rows*(panelH+60)
	p(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", width, height, width, height)
	p(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	p(`<text x="%d" y="28" font-size="16" font-weight="bold">%s</text>`+"\n", marginL, esc(title))
	p(`<text x="%d" y="50" fill="#444">%s</text>`+"\n", marginL, esc(subtitle))
	p(`<text x="%d" y="68" fill="#444">shaded: a fault in place; x axis: minutes since the load began</text>`+"\n", marginL)
	if tMax <= 0 {
		tMax = 1
	}
	for i, pn := range panels {
		x0 := float64((i%columns)*(marginL+panelW+legendW) + marginL)
		y0 := float64(marginT + (i/columns)*(panelH+60) + 20)
		drawPanel(p, pn, bands, tMax, x0, y0)
	}
	p("</svg>\n")
	return bw.Flush()
}

func drawPanel(p func(string, ...any), pn Panel, bands []Band, tMax, x0, y0 float64) {
	scale := pn.Scale
	if scale == 0 {
		scale = 1
	}
	vMax := 0.0
	for _, l := range pn.Lines {
		for _, pt := range l.Points {
			vMax = math.Max(vMax, pt.V/scale)
		}
	}
	step := niceStep(vMax, 4)
	top := step * math.Ceil(vMax/step)
	if top == 0 {
		top = 1
	}
	x := func(t float64) float64 { return x0 + panelW*t/tMax }
	y := func(v float64) float64 { return y0 + panelH - panelH*v/top }
	p(`<text x="%.0f" y="%.0f" font-weight="bold">%s</text>`+"\n", x0, y0-6, esc(pn.Title+" ("+pn.Unit+")"))
	for _, b := range bands {
		p(`<rect x="%.1f" y="%.0f" width="%.1f" height="%d" fill="#f2dede"/>`+"\n", x(b.From), y0, math.Max(x(b.To)-x(b.From), 1), panelH)
	}
	p(`<rect x="%.0f" y="%.0f" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n", x0, y0, panelW, panelH)
	for v := 0.0; v <= top+step/2; v += step {
		p(`<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", x0, x0+panelW, y(v), y(v))
		p(`<text x="%.0f" y="%.1f" text-anchor="end">%s</text>`+"\n", x0-4, y(v)+4, num(v))
	}
	mStep := niceStep(tMax/60, 6)
	for m := 0.0; m*60 <= tMax; m += mStep {
		p(`<text x="%.1f" y="%.0f" text-anchor="middle">%s</text>`+"\n", x(m*60), y0+panelH+14, num(m))
	}
	for i, l := range pn.Lines {
		color := palette[i%len(palette)]
		var b strings.Builder
		for _, pt := range l.Points {
			if pt.T < 0 || pt.T > tMax { // before the load, or past the plot's end
				continue
			}
			cmd := "L"
			if b.Len() == 0 {
				cmd = "M"
			}
			fmt.Fprintf(&b, "%s%.1f %.1f ", cmd, x(pt.T), y(pt.V/scale))
		}
		if b.Len() > 0 {
			p(`<path d="%s" fill="none" stroke="%s" stroke-width="1.3"/>`+"\n", b.String(), color)
		}
		ly := y0 + 12 + float64(i)*14
		p(`<line x1="%.0f" x2="%.0f" y1="%.0f" y2="%.0f" stroke="%s" stroke-width="3"/>`+"\n", x0+panelW+8, x0+panelW+22, ly-4, ly-4, color)
		p(`<text x="%.0f" y="%.0f">%s</text>`+"\n", x0+panelW+26, ly, esc(l.Name))
	}
}

// niceStep returns a step of 1, 2 or 5 times a power of ten that cuts v
// into about n parts.
func niceStep(v float64, n int) float64 {
	if v <= 0 {
		return 1
	}
	raw := v / float64(n)
	pow := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*pow >= raw {
			return m * pow
		}
	}
	return 10 * pow
}

func num(v float64) string {
	switch {
	case v == math.Trunc(v) && math.Abs(v) < 1e9:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.0f", v)
	default:
		return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.2f", v), "0"), ".")
	}
}

func esc(s string) string {
	r := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;")
	return r.Replace(s)
}
