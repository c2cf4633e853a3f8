package simulate

import (
	"fmt"
	"image/color"
	"io"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Picture formats.
const (
	SVG = "svg"
	PNG = "png"
)

var (
	colAllowed  = color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}
	colRefused  = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	fillAllowed = color.RGBA{R: 0x98, G: 0xdf, B: 0x8a, A: 0xff}
	fillRefused = color.RGBA{R: 0xff, G: 0x98, B: 0x96, A: 0xff}
	colLine     = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	colNominal  = color.RGBA{R: 0x55, G: 0x55, B: 0x55, A: 0xff}
)

// Picture sizes: one row of three panels per policy.
const (
	picWidth  = 12 * vg.Inch
	rowHeight = 1.9 * vg.Inch
	titleH    = 0.45 * vg.Inch
	pngDPI    = 80
)

// WritePicture draws the result, one row per policy, and writes it in
// format (SVG or PNG). The columns are: requests allowed and refused per
// bucket; the watched key's remaining units; the rate admitted to all keys
// together over the rate window (the units in it divided by the whole
// window) against the nominal rate times the keys that sent requests in
// that window.
func WritePicture(w io.Writer, r *Result, format string) error {
	h := titleH + rowHeight*vg.Length(len(r.Policies))
	var c interface {
		vg.CanvasSizer
		io.WriterTo
	}
	switch format {
	case SVG:
		c = vgsvg.New(picWidth, h)
	case PNG:
		img := vgimg.NewWith(vgimg.UseWH(picWidth, h), vgimg.UseDPI(pngDPI), vgimg.UseBackgroundColor(color.White))
		c = vgimg.PngCanvas{Canvas: img}
	default:
		return fmt.Errorf("unknown picture format %q (want svg or png)", format)
	}
	dc := draw.New(c)
	if err := drawResult(dc, r); err != nil {
		return err
	}
	_, err := c.WriteTo(w)
	return err
}

// timeUnit picks the unit of the time axis.
func timeUnit(d time.Duration) (time.Duration, string) {
	switch {
	case d <= 3*time.Minute:
		return time.Second, "s"
	case d <= 3*time.Hour:
		return time.Minute, "min"
	}
	return time.Hour, "h"
}

// drawResult draws the title, then a row of three plots per policy.
func drawResult(dc draw.Canvas, r *Result) error {
	body := drawTitle(dc, r)
	ax := newPlotAxes(r)
	rows := make([][]*plot.Plot, len(r.Policies))
	for row, p := range r.Policies {
		var err error
		if rows[row], err = ax.row(p, r.Watch); err != nil {
			return err
		}
	}
	tiles := draw.Tiles{Rows: len(rows), Cols: 3, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 3,
		PadTop: vg.Millimeter, PadBottom: vg.Millimeter, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align(rows, tiles, body)
	for i := range rows {
		for j := range rows[i] {
			if canvases[i][j] != (draw.Canvas{}) {
				rows[i][j].Draw(canvases[i][j])
			}
		}
	}
	return nil
}

// row is the three plots of p's row: requests, then for a rate policy the
// watched key's remaining units and the admitted rate, for an in_flight
// one the leases held by the watched key and by all keys.
func (ax *plotAxes) row(p *PolicyResult, watch string) ([]*plot.Plot, error) {
	s := ax.series(p)
	reqs, err := ax.requestsPlot(p, s)
	if err != nil {
		return nil, err
	}
	second, third := ax.remainingPlot, ax.ratePlot
	if p.InFlight() {
		second, third = ax.heldPlot, ax.allHeldPlot
	}
	mid, err := second(p, s, watch)
	if err != nil {
		return nil, err
	}
	last, err := third(p, s, watch)
	if err != nil {
		return nil, err
	}
	return []*plot.Plot{reqs, mid, last}, nil
}

// drawTitle writes the title across the top and returns the canvas below.
func drawTitle(dc draw.Canvas, r *Result) draw.Canvas {
	sty := text.Style{Color: color.Black, Font: plot.DefaultFont, Handler: plot.DefaultTextHandler}
	sty.Font.Size = vg.Points(12)
	title := fmt.Sprintf("%d policies on the same traffic: %s  (buckets of %v over %v)",
		len(r.Policies), strings.Join(r.Traffic, " + "), r.Bucket, r.Duration)
	if len(r.Policies) == 1 {
		title = strings.Replace(title, "1 policies", "1 policy", 1)
	}
	sty.XAlign, sty.YAlign = draw.XCenter, draw.YCenter
	dc.FillText(sty, vg.Point{X: (dc.Min.X + dc.Max.X) / 2, Y: dc.Max.Y - titleH/2}, title)
	return draw.Crop(dc, 0, 0, 0, -titleH)
}

// plotAxes are the scales every row shares: the time axis and the tops of
// the request and rate plots.
type plotAxes struct {
	bucket          time.Duration
	unit            time.Duration
	unitName        string
	xmax            float64
	maxReq, maxRate float64
}

func newPlotAxes(r *Result) *plotAxes {
	ax := &plotAxes{bucket: r.Bucket}
	ax.unit, ax.unitName = timeUnit(r.Duration)
	ax.xmax = float64(r.Duration) / float64(ax.unit)
	for _, p := range r.Policies {
		for _, b := range p.Buckets {
			ax.maxReq = max(ax.maxReq, float64(b.Requests))
			ax.maxRate = max(ax.maxRate, b.Admitted, p.Nominal*float64(b.Keys))
		}
		ax.maxRate = max(ax.maxRate, p.Nominal)
	}
	return ax
}

// x is the start of bucket i on the time axis.
func (ax *plotAxes) x(i int) float64 { return float64(ax.bucket*time.Duration(i)) / float64(ax.unit) }

// policySeries are the lines of one policy's row.
type policySeries struct {
	total, allowed, remaining, admitted, limit plotter.XYs
}

// series returns the lines of p, the steps closed at the end.
func (ax *plotAxes) series(p *PolicyResult) policySeries {
	n := len(p.Buckets)
	s := policySeries{total: make(plotter.XYs, n+1), allowed: make(plotter.XYs, n+1),
		remaining: make(plotter.XYs, n+1), admitted: make(plotter.XYs, n), limit: make(plotter.XYs, n+1)}
	for i, b := range p.Buckets {
		s.total[i] = plotter.XY{X: ax.x(i), Y: float64(b.Requests)}
		s.allowed[i] = plotter.XY{X: ax.x(i), Y: float64(b.Allowed)}
		s.remaining[i] = plotter.XY{X: ax.x(i + 1), Y: float64(b.Remaining)}
		// Each admitted rate is measured up to the end of its bucket.
		s.admitted[i] = plotter.XY{X: min(ax.x(i+1), ax.xmax), Y: b.Admitted}
		s.limit[i] = plotter.XY{X: ax.x(i), Y: p.Nominal * float64(b.Keys)}
	}
	s.limit[n] = plotter.XY{X: ax.xmax, Y: s.limit[n-1].Y}
	// Close the steps at the end.
	s.total[n] = plotter.XY{X: ax.xmax, Y: s.total[n-1].Y}
	s.allowed[n] = plotter.XY{X: ax.xmax, Y: s.allowed[n-1].Y}
	s.remaining = append(plotter.XYs{{X: 0, Y: float64(p.Rule.Limit)}}, s.remaining[:n]...)
	return s
}

// requestsPlot is the requests allowed and refused per bucket, headed by
// the policy's name and rule.
func (ax *plotAxes) requestsPlot(p *PolicyResult, s policySeries) (*plot.Plot, error) {
	shadow := ""
	if p.Shadow {
		shadow = " [shadow: drawn as enforced]"
	}
	head := fmt.Sprintf("%s: %v%s", p.Name, p.Rule, shadow)
	if strings.HasPrefix(p.Rule.String(), p.Name+"(") {
		head = p.Rule.String() + shadow
	}
	reqs := newPlot(head, "", ax.unitName, ax.xmax)
	reqs.Y.Label.Text = "requests per bucket"
	reqs.Y.Max = max(ax.maxReq*1.08, 1)
	lt, err := stepLine(s.total, colRefused, fillRefused)
	if err != nil {
		return nil, err
	}
	la, err := stepLine(s.allowed, colAllowed, fillAllowed)
	if err != nil {
		return nil, err
	}
	reqs.Add(lt, la)
	reqs.Legend.Add(fmt.Sprintf("allowed (%d)", p.Allowed), la)
	reqs.Legend.Add(fmt.Sprintf("refused (%d)", p.Refused), lt)
	reqs.Legend.Top = true
	reqs.Legend.Left = false
	return reqs, nil
}

// remainingPlot is the watched key's remaining units at bucket ends.
func (ax *plotAxes) remainingPlot(p *PolicyResult, s policySeries, watch string) (*plot.Plot, error) {
	rem := newPlot(fmt.Sprintf("remaining for key %q at bucket ends", watch), "", ax.unitName, ax.xmax)
	rem.Y.Label.Text = "units"
	rem.Y.Max = float64(p.Rule.Limit) * 1.08
	lr, err := stepLine(s.remaining, colLine, nil)
	if err != nil {
		return nil, err
	}
	rem.Add(lr)
	return rem, nil
}

// ratePlot is the rate admitted to all keys together against the nominal
// rate times the keys in the window.
func (ax *plotAxes) ratePlot(p *PolicyResult, s policySeries, _ string) (*plot.Plot, error) {
	rate := newPlot(fmt.Sprintf("admitted per second over the last %v, all keys together", p.RateWindow), "", ax.unitName, ax.xmax)
	rate.Y.Label.Text = "units/s"
	rate.Y.Max = max(ax.maxRate*1.1, 1)
	lad, err := plotter.NewLine(s.admitted)
	if err != nil {
		return nil, err
	}
	lad.Color = colAllowed
	lad.Width = vg.Points(1.5)
	nom, err := stepLine(s.limit, colNominal, nil)
	if err != nil {
		return nil, err
	}
	nom.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	rate.Add(nom, lad)
	rate.Legend.Add("admitted", lad)
	rate.Legend.Add(fmt.Sprintf("nominal %.4g/s × keys in the window", p.Nominal), nom)
	rate.Legend.Top = true
	return rate, nil
}

func newPlot(title, ylabel, unit string, xmax float64) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(9)
	p.X.Label.Text = "time (" + unit + ")"
	p.X.Label.TextStyle.Font.Size = vg.Points(8)
	p.Y.Label.TextStyle.Font.Size = vg.Points(8)
	p.X.Tick.Label.Font.Size = vg.Points(7)
	p.Y.Tick.Label.Font.Size = vg.Points(7)
	p.Legend.TextStyle.Font.Size = vg.Points(7)
	p.X.Min, p.X.Max = 0, xmax
	p.Y.Min = 0
	p.Y.Label.Text = ylabel
	return p
}

// stepLine draws xys as a step line, filled below with fill unless nil.
func stepLine(xys plotter.XYs, c, fill color.Color) (*plotter.Line, error) {
	l, err := plotter.NewLine(xys)
	if err != nil {
		return nil, err
	}
	l.StepStyle = plotter.PostStep
	l.Color = c
	l.Width = vg.Points(1)
	l.FillColor = fill
	return l, nil
}
