package simulate

import (
	"fmt"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// The pictures of an in_flight policy: the leases held at bucket ends, by
// the watched key against the limit, and by all keys together (those of
// crashed holders filled) against the limit times the keys in the window.

// heldSeries returns the step lines of p's leases held at bucket ends:
// by the watched key, by all keys, by crashed holders, and the limit
// times the keys in the window.
func (ax *plotAxes) heldSeries(p *PolicyResult) (watch, all, crashed, limit plotter.XYs) {
	n := len(p.Buckets)
	watch, all, crashed, limit = make(plotter.XYs, n+1), make(plotter.XYs, n+1), make(plotter.XYs, n+1), make(plotter.XYs, n+1)
	watch[0], all[0], crashed[0] = plotter.XY{}, plotter.XY{}, plotter.XY{}
	for i, b := range p.Buckets {
		x := min(ax.x(i+1), ax.xmax)
		watch[i+1] = plotter.XY{X: x, Y: float64(p.Rule.Limit - b.Remaining)}
		all[i+1] = plotter.XY{X: x, Y: float64(b.Held)}
		crashed[i+1] = plotter.XY{X: x, Y: float64(b.Crashed)}
		limit[i] = plotter.XY{X: ax.x(i), Y: float64(p.Rule.Limit * max(b.Keys, 1))}
	}
	limit[n] = plotter.XY{X: ax.xmax, Y: limit[n-1].Y}
	return watch, all, crashed, limit
}

// heldPlot is the leases the watched key held at bucket ends, against
// the limit.
func (ax *plotAxes) heldPlot(p *PolicyResult, _ policySeries, watch string) (*plot.Plot, error) {
	w, _, _, _ := ax.heldSeries(p)
	pl := newPlot(fmt.Sprintf("leases held by key %q at bucket ends", watch), "", ax.unitName, ax.xmax)
	pl.Y.Label.Text = "leases"
	pl.Y.Max = float64(p.Rule.Limit) * 1.45
	held, err := stepLine(w, colLine, nil)
	if err != nil {
		return nil, err
	}
	lim, err := stepLine(plotter.XYs{{X: 0, Y: float64(p.Rule.Limit)}, {X: ax.xmax, Y: float64(p.Rule.Limit)}}, colNominal, nil)
	if err != nil {
		return nil, err
	}
	lim.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	pl.Add(lim, held)
	pl.Legend.Add("held", held)
	pl.Legend.Add(fmt.Sprintf("limit %d", p.Rule.Limit), lim)
	pl.Legend.Top = true
	pl.Legend.Left = true
	return pl, nil
}

// allHeldPlot is the leases all keys held at bucket ends, those of
// crashed holders filled, against the limit times the keys in the window.
func (ax *plotAxes) allHeldPlot(p *PolicyResult, _ policySeries, _ string) (*plot.Plot, error) {
	_, all, crashed, limit := ax.heldSeries(p)
	pl := newPlot(fmt.Sprintf("leases held at bucket ends, all keys together (lease %v)", p.Rule.Window), "", ax.unitName, ax.xmax)
	pl.Y.Label.Text = "leases"
	top := 1.0
	for _, xy := range limit {
		top = max(top, xy.Y)
	}
	pl.Y.Max = top * 1.45
	held, err := stepLine(all, colLine, nil)
	if err != nil {
		return nil, err
	}
	dead, err := stepLine(crashed, colRefused, fillRefused)
	if err != nil {
		return nil, err
	}
	lim, err := stepLine(limit, colNominal, nil)
	if err != nil {
		return nil, err
	}
	lim.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	pl.Add(dead, lim, held)
	pl.Legend.Left = true
	pl.Legend.Add("held", held)
	pl.Legend.Add(fmt.Sprintf("of crashed holders (%d)", p.Crashed), dead)
	pl.Legend.Add(fmt.Sprintf("limit %d × keys", p.Rule.Limit), lim)
	pl.Legend.Top = true
	return pl, nil
}
