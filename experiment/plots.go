package experiment

import (
	"cmp"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// maxPlottedEpsilon bounds the ε axis: larger (astronomical or unbounded)
// costs are listed in the table and named in the plot's legend instead.
const maxPlottedEpsilon = 1e4

// WritePlots writes up to three PNG plots into dir and returns their file
// names: student accuracy against ε for every aggregator, and, when the
// report has the diagnostics for them, the distribution of top-two vote
// gaps and ensemble accuracy against the number of teachers.
func (r *Report) WritePlots(dir string) ([]string, error) {
	var names []string
	for _, f := range []struct {
		name string
		fn   func() (*plot.Plot, error)
	}{
		{"student-accuracy-vs-epsilon.png", r.plotAccuracyEpsilon},
		{"vote-gaps.png", r.plotGaps},
		{"ensemble-accuracy.png", r.plotEnsembles},
	} {
		p, err := f.fn()
		if err != nil {
			return nil, fmt.Errorf("plot %s: %w", f.name, err)
		}
		if p == nil {
			// Nothing to plot: a report without diagnostics.
			continue
		}
		path := filepath.Join(dir, f.name)
		if err := p.Save(16*vg.Centimeter, 11*vg.Centimeter, path); err != nil {
			return nil, fmt.Errorf("plot %s: %w", f.name, err)
		}
		names = append(names, f.name)
	}
	return names, nil
}

func (r *Report) plotAccuracyEpsilon() (*plot.Plot, error) {
	p := newPlot(fmt.Sprintf("Student accuracy against proven ε (δ as in the table, %d teachers)", r.Teachers), "proven ε (log scale)", "student accuracy (%)")
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{}
	p.Legend.Top = false
	p.Legend.Left = false
	// One line per aggregator and query order (selection on and off).
	key := func(row Row) string {
		if row.Selection == "" {
			return row.Aggregator
		}
		return row.Aggregator + ", " + row.Selection
	}
	var aggs []string
	for _, row := range r.Rows {
		if row.Teachers == r.Teachers && !slices.Contains(aggs, key(row)) && row.Aggregator != CleanVotes && row.Aggregator != GroundTruth {
			aggs = append(aggs, key(row))
		}
	}
	plotted := 0
	var offAxis []string
	for i, a := range aggs {
		var pts plotter.XYs
		var off []string
		for _, row := range r.Rows {
			if key(row) != a || row.Teachers != r.Teachers {
				continue
			}
			if math.IsInf(row.Epsilon, 0) || row.Epsilon > maxPlottedEpsilon || row.Epsilon <= 0 {
				off = append(off, fmtEps(row.Epsilon))
				continue
			}
			pts = append(pts, plotter.XY{X: row.Epsilon, Y: 100 * row.StudentAccuracy})
		}
		label := a
		if len(off) > 0 {
			offAxis = append(offAxis, fmt.Sprintf("%s at ε = %s", a, strings.Join(off, ", ")))
		}
		if len(pts) == 0 {
			continue
		}
		slices.SortFunc(pts, func(x, y plotter.XY) int { return cmp.Compare(x.X, y.X) })
		l, s, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, err
		}
		l.Color, s.Color = plotutil.Color(i), plotutil.Color(i)
		s.Shape = plotutil.Shape(i)
		p.Add(l, s)
		p.Legend.Add(label, l, s)
		plotted++
	}
	for _, row := range r.Rows {
		if (row.Aggregator == CleanVotes && row.Teachers == r.Teachers) || row.Aggregator == GroundTruth {
			// A function has no data range: widen the axis so that the
			// reference line is drawn even above or below every point.
			y := 100 * row.StudentAccuracy
			p.Y.Min, p.Y.Max = min(p.Y.Min, y-0.1), max(p.Y.Max, y+0.1)
			h := plotter.NewFunction(func(float64) float64 { return 100 * row.StudentAccuracy })
			h.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			h.Color = plotutil.Color(plotted)
			plotted++
			p.Add(h)
			p.Legend.Add(fmt.Sprintf("%s (no privacy): %.1f%%", row.Aggregator, 100*row.StudentAccuracy), h)
		}
	}
	p.X.Min, p.X.Max = 0.1, maxPlottedEpsilon
	// The legend sits at the bottom right and its labels are long: leave
	// the lower part of the plot to it, below every point.
	if span := p.Y.Max - p.Y.Min; span > 0 && plotted > 0 {
		p.Y.Min -= 0.1 * span * float64(plotted)
	}
	if len(offAxis) > 0 {
		p.X.Label.Text += "; off the axis: " + strings.Join(offAxis, "; ")
	}
	return p, nil
}

// diagnosed are the ensembles whose vote statistics the report carries:
// the tuning share's (the first is the tuning ensemble), or, in a report
// written before there was one, the ensembles it lists.
func (r *Report) diagnosed() (es []Ensemble, tuning bool) {
	if r.Tuning != nil {
		return r.Tuning.Diagnostics, true
	}
	return r.Ensembles, false
}

func (r *Report) plotGaps() (*plot.Plot, error) {
	es, tuning := r.diagnosed()
	title := "Top-two vote gap of the queries"
	if tuning {
		title = "Top-two vote gap on the tuning pool (tuning ensemble, a diagnostic)"
		es = es[:min(1, len(es))]
	}
	if !slices.ContainsFunc(es, func(e Ensemble) bool { return len(e.GapCounts) > 0 && (tuning || e.TableRows) }) {
		return nil, nil
	}
	p := newPlot(title, "gap as a fraction of the teachers", "fraction of queries")
	i := 0
	for _, e := range es {
		total := 0
		for _, c := range e.GapCounts {
			total += c
		}
		if (!tuning && !e.TableRows) || total == 0 {
			continue
		}
		// A bar's height is the fraction of queries whose gap falls in it.
		var pts plotter.XYs
		for g, c := range e.GapCounts {
			if c > 0 {
				pts = append(pts, plotter.XY{X: float64(g) / float64(e.Teachers), Y: float64(c) / float64(total)})
			}
		}
		h, err := plotter.NewHistogram(pts, 25)
		if err != nil {
			return nil, err
		}
		h.FillColor = nil
		h.LineStyle.Color = plotutil.Color(i)
		h.LineStyle.Width = vg.Points(1.5)
		p.Add(h)
		p.Legend.Add(fmt.Sprintf("%d teachers", e.Teachers), h)
		i++
	}
	p.Legend.Left = true
	p.Legend.Top = true
	return p, nil
}

func (r *Report) plotEnsembles() (*plot.Plot, error) {
	es, tuning := r.diagnosed()
	title := "Ensemble accuracy against number of teachers"
	if tuning {
		title = "Ensemble accuracy against number of teachers (tuning share, a diagnostic)"
	}
	if !slices.ContainsFunc(es, func(e Ensemble) bool { return e.CleanVotesLabelAccuracy > 0 }) {
		return nil, nil
	}
	p := newPlot(title, "teachers (log scale)", "accuracy (%)")
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{}
	es = slices.Clone(es)
	slices.SortFunc(es, func(a, b Ensemble) int { return a.Teachers - b.Teachers })
	// One pair of lines per teacher architecture.
	var models []string
	for _, e := range es {
		if !slices.Contains(models, e.Model) {
			models = append(models, e.Model)
		}
	}
	type series struct {
		name   string
		pts    plotter.XYs
		dashed bool
	}
	var all []series
	for _, m := range models {
		suffix := ""
		if len(models) > 1 && m != "" {
			suffix = " (" + m + ")"
		}
		var mean, clean plotter.XYs
		for _, e := range es {
			if e.Model != m {
				continue
			}
			mean = append(mean, plotter.XY{X: float64(e.Teachers), Y: 100 * e.TeacherMeanAccuracy})
			if e.CleanVotesLabelAccuracy > 0 {
				clean = append(clean, plotter.XY{X: float64(e.Teachers), Y: 100 * e.CleanVotesLabelAccuracy})
			}
		}
		all = append(all, series{"mean single teacher" + suffix, mean, false}, series{"clean plurality vote" + suffix, clean, false})
	}
	var paper plotter.XYs
	pt := PaperTeacherAccuracy()
	for _, e := range es {
		if v, ok := pt[e.Teachers]; ok && r.Dataset == "mnist" {
			paper = append(paper, plotter.XY{X: float64(e.Teachers), Y: v})
		}
	}
	all = append(all, series{"paper: mean single teacher", paper, true})
	for i, s := range all {
		if len(s.pts) == 0 {
			continue
		}
		l, pts, err := plotter.NewLinePoints(s.pts)
		if err != nil {
			return nil, err
		}
		l.Color, pts.Color = plotutil.Color(i), plotutil.Color(i)
		pts.Shape = plotutil.Shape(i)
		if s.dashed {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(l, pts)
		p.Legend.Add(s.name, l, pts)
	}
	p.Legend.Left = true
	p.Legend.Top = false
	return p, nil
}

// newPlot is an empty plot with its title and axis labels.
func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = title, x, y
	return p
}
