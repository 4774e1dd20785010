package load

import (
	"bytes"
	"encoding/xml"
	"io"
	"testing"
	"time"
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
		var strokes []string
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
					for _, a := range se.Attr {
						if a.Name.Local == "stroke" {
							strokes = append(strokes, a.Value)
						}
					}
				}
			}
		}
		if root != "svg" {
			t.Fatalf("root element %q, want svg", root)
		}
		if want := map[bool]int{true: 2, false: 0}[len(d.Points) > 0]; polylines != want {
			t.Fatalf("%s: %d polylines, want %d", d.Title, polylines, want)
		}
		// The accepted line (blue) is drawn last, over the charged one:
		// where they agree it still shows.
		if polylines > 0 && strokes[len(strokes)-1] != "#1f77b4" {
			t.Fatalf("%s: polylines drawn in the order %v, want accepted (#1f77b4) last", d.Title, strokes)
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
	// The lag is the most it was during each second: 11 after the accept
	// at 1.5s, 16 after the one at 2.5s, and 16 still in the third second
	// until the charges catch up at 3.9s.
	want := []float64{10, 10, 0, 0, 5, 16, 11, 16, 16}
	if !equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// TestPerSecondLagBetweenPolls: 1,000 facts/s accepted in steps of 100, and
// query polled once a second, each poll seeing every fact accepted until
// just before it. At each second's boundary the charges have just caught
// up, so the lag there is 0; the facts waited all the same, and the lag
// sampled is the most it was during the second: 1,000.
func TestPerSecondLagBetweenPolls(t *testing.T) {
	const ms = time.Millisecond
	var acc, ch []Step
	for s := range 10 {
		base := time.Duration(s) * time.Second
		for i := range 10 {
			acc = append(acc, Step{At: base + time.Duration(i)*100*ms, N: 100})
		}
		ch = append(ch, Step{At: base + 999*ms, N: 1000}) // the poll's estimated instant
	}
	pts := perSecond(acc, ch, 0, 10*time.Second)
	if len(pts) != 10 {
		t.Fatalf("got %d points", len(pts))
	}
	for _, pt := range pts {
		if pt.AcceptedPerSec != 1000 || pt.ChargedPerSec != 1000 || pt.Lag != 1000 {
			t.Fatalf("second %g: accepted %g, charged %g, lag %g; want 1000, 1000, 1000", pt.T, pt.AcceptedPerSec, pt.ChargedPerSec, pt.Lag)
		}
	}
}
