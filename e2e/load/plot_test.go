package load

import (
	"bytes"
	"encoding/xml"
	"io"
	"testing"
)

func TestWriteSVGIsWellFormed(t *testing.T) {
	var pts []Point
	for i := 1; i <= 30; i++ {
		pts = append(pts, Point{T: float64(i), AcceptedPerSec: 1000, ChargedPerSec: float64(30 * i), Lag: float64(100 * i)})
	}
	for _, d := range []PlotData{
		{Title: `load <run> & "quotes"`, Subtitle: "1m, flat out", Points: pts, SendEnd: 20},
		{Title: "empty"},
	} {
		var buf bytes.Buffer
		if err := WriteSVG(&buf, d); err != nil {
			t.Fatal(err)
		}
		dec := xml.NewDecoder(&buf)
		var root string
		polylines := 0
		for {
			tok, err := dec.Token()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s: not well-formed XML: %v", d.Title, err)
			}
			if se, ok := tok.(xml.StartElement); ok {
				if root == "" {
					root = se.Name.Local
				}
				if se.Name.Local == "polyline" {
					polylines++
				}
			}
		}
		if root != "svg" {
			t.Fatalf("root element %q, want svg", root)
		}
		if want := map[bool]int{true: 2, false: 0}[len(d.Points) > 0]; polylines != want {
			t.Fatalf("%s: %d polylines, want %d", d.Title, polylines, want)
		}
	}
}

func TestPerSecond(t *testing.T) {
	// Sending starts at 1s; the accept at 0.5s (a probe) counts in the lag only.
	acc := []Step{{At: 500e6, N: 1}, {At: 1500e6, N: 10}, {At: 2500e6, N: 10}}
	ch := []Step{{At: 2200e6, N: 5}, {At: 3900e6, N: 16}}
	pts := perSecond(acc, ch, 1e9, 4e9)
	if len(pts) != 3 {
		t.Fatalf("got %d points", len(pts))
	}
	got := []float64{pts[0].AcceptedPerSec, pts[1].AcceptedPerSec, pts[2].AcceptedPerSec, pts[0].ChargedPerSec, pts[1].ChargedPerSec, pts[2].ChargedPerSec, pts[0].Lag, pts[1].Lag, pts[2].Lag}
	want := []float64{10, 10, 0, 0, 5, 16, 11, 16, 0}
	if !equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}
