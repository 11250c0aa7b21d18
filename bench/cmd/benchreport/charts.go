package main

import (
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Colours per library, the same in every chart.
var libColors = map[string]color.Color{
	"redlock-5":         color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	"redlock+rueidis-5": color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	"redlock-1":         color.RGBA{R: 0xff, G: 0x98, B: 0x96, A: 0xff},
	"redsync-5":         color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	"redislock-1":       color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	"redlock+rueidis-1": color.RGBA{R: 0xc5, G: 0xb0, B: 0xd5, A: 0xff},
	"transport-1":       color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff},
	"redlock":           color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	"redsync":           color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
}

func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = font.Length(15)
	p.X.Label.Text = x
	p.Y.Label.Text = y
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font.Size = font.Length(13)
		a.Tick.Label.Font.Size = font.Length(12)
	}
	p.Legend.TextStyle.Font.Size = font.Length(12)
	p.Add(plotter.NewGrid())
	return p
}

// barGroups draws one bar per series in each group; values[s][g] is the
// height of series s in group g (NaN draws nothing).
func barGroups(p *plot.Plot, groups, series []string, values [][]float64) error {
	width := vg.Length(min(22, 130/float64(len(series)))) // groups stay apart
	for s, name := range series {
		vs := make(plotter.Values, len(groups))
		for g := range groups {
			v := values[s][g]
			if math.IsNaN(v) {
				v = 0
			}
			vs[g] = v
		}
		bars, err := plotter.NewBarChart(vs, width)
		if err != nil {
			return err
		}
		bars.Color = libColors[name]
		bars.LineStyle.Width = 0
		bars.Offset = width * (vg.Length(s) - vg.Length(len(series)-1)/2)
		p.Add(bars)
		p.Legend.Add(name, bars)
	}
	p.NominalX(groups...)
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.XOffs = vg.Points(6)
	// Headroom above the tallest bar for the legend and the labels.
	top := 0.0
	for _, vs := range values {
		for _, v := range vs {
			if !math.IsNaN(v) {
				top = max(top, v)
			}
		}
	}
	p.Y.Max = top * (1 + 0.1*float64(len(series)+1))
	p.Y.Tick.Marker = linearTicks{}
	return nil
}

// linearTicks puts about six round ticks on a linear axis.
type linearTicks struct{}

func (linearTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) {
		return nil
	}
	raw := (hi - lo) / 6
	step := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*step >= raw {
			step *= m
			break
		}
	}
	var ts []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi; v += step {
		ts = append(ts, plot.Tick{Value: v, Label: fmt.Sprintf("%g", v)})
	}
	return ts
}

// throughputChart: uncontended lock+unlock pairs per second by library and
// goroutines.
func throughputChart(r *results, file string) error {
	p := newPlot("Uncontended lock+unlock throughput (distinct keys)", "goroutines", "lock+unlock pairs per second (median)")
	groups := []string{"1", "16", "64"}
	values := make([][]float64, len(lockUnlockLibs))
	for s, lib := range lockUnlockLibs {
		for _, g := range groups {
			values[s] = append(values[s], r.med(fmt.Sprintf("LockUnlock/lib=%s/g=%s/key=fresh", lib, g), "ops/s"))
		}
	}
	if err := barGroups(p, groups, lockUnlockLibs, values); err != nil {
		return err
	}
	if err := labelBars(p, values, "%.0f"); err != nil {
		return err
	}
	p.Y.Min = 0
	return p.Save(20*vg.Centimeter, 12*vg.Centimeter, file)
}

// mastersChart: lock+unlock latency against the number of masters.
func mastersChart(r *results, file string) error {
	p := newPlot("Lock+unlock latency vs number of masters (1 goroutine)", "masters", "latency (µs, log scale)")
	for _, lib := range []string{"redlock", "redsync"} {
		for j, q := range []string{"p50", "p99"} {
			var pts plotter.XYs
			for _, n := range mastersN {
				v := r.med(fmt.Sprintf("Masters/lib=%s/masters=%d", lib, n), q+"-ns")
				if !math.IsNaN(v) {
					pts = append(pts, plotter.XY{X: float64(n), Y: v / 1e3})
				}
			}
			if len(pts) == 0 {
				continue
			}
			line, points, err := plotter.NewLinePoints(pts)
			if err != nil {
				return err
			}
			c := libColors[lib]
			line.Color, points.Color = c, c
			line.Width = vg.Points(2)
			points.Shape = draw.CircleGlyph{}
			points.Radius = vg.Points(3)
			if j == 1 {
				line.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
				points.Shape = draw.TriangleGlyph{}
			}
			p.Add(line, points)
			p.Legend.Add(fmt.Sprintf("%s %s", lib, q), line, points)
		}
	}
	p.Legend.Top = true
	p.Legend.Left = true
	p.X.Min, p.X.Max = 0, 10
	p.X.Tick.Marker = plot.ConstantTicks(ticks(mastersN))
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = logTicks{}
	p.Y.Max *= 4 // room for the legend
	p.Legend.YOffs = -vg.Points(6)
	return p.Save(20*vg.Centimeter, 12*vg.Centimeter, file)
}

// logTicks labels 1, 2 and 5 times each power of ten.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, e)
			if v >= lo && v <= hi {
				ts = append(ts, plot.Tick{Value: v, Label: fmt.Sprintf("%g", v)})
			}
		}
	}
	return ts
}

func ticks(ns []int) []plot.Tick {
	t := make([]plot.Tick, len(ns))
	for i, n := range ns {
		t[i] = plot.Tick{Value: float64(n), Label: fmt.Sprint(n)}
	}
	return t
}

// slowChart: acquire latency percentiles, healthy against one slow master
// (redsync waits for the slow master, redlock should not). Each bar is
// labelled with its value.
func slowChart(r *results, file string) error {
	p := newPlot("Acquire latency, 5 masters, master 0 slowed by 20ms", "", "acquire latency (ms, median of runs)")
	groups := []string{"p50 healthy", "p50 slow", "p99 healthy", "p99 slow"}
	libs := []string{"redlock-5", "redsync-5"}
	values := make([][]float64, len(libs))
	for s, lib := range libs {
		for _, q := range []string{"p50", "p99"} {
			for _, slow := range []string{"0ms", "20ms"} {
				v := r.med(fmt.Sprintf("SlowMaster/lib=%s/slow=%s", lib, slow), q+"-ns")
				values[s] = append(values[s], v/1e6)
			}
		}
	}
	if err := barGroups(p, groups, libs, values); err != nil {
		return err
	}
	if err := labelBars(p, values, "%.2f"); err != nil {
		return err
	}
	p.Y.Min = 0
	return p.Save(20*vg.Centimeter, 12*vg.Centimeter, file)
}

// labelBars writes each bar's value above it (the layout of barGroups).
func labelBars(p *plot.Plot, values [][]float64, format string) error {
	const width = 22.0 // points, as in barGroups
	for s, vs := range values {
		var xys plotter.XYs
		var texts []string
		for g, v := range vs {
			if math.IsNaN(v) {
				continue
			}
			xys = append(xys, plotter.XY{X: float64(g), Y: v})
			texts = append(texts, fmt.Sprintf(format, v))
		}
		if len(xys) == 0 {
			continue
		}
		labels, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: texts})
		if err != nil {
			return err
		}
		off := vg.Points(width * (float64(s) - float64(len(values)-1)/2))
		for i := range labels.TextStyle {
			labels.TextStyle[i].Font.Size = font.Length(10)
			labels.TextStyle[i].XAlign = draw.XCenter
		}
		labels.Offset = vg.Point{X: off, Y: vg.Points(3)}
		p.Add(labels)
	}
	return nil
}

// contendedChart: acquisitions per second with 16 goroutines on one key.
func contendedChart(r *results, file string) error {
	p := newPlot("16 goroutines contending for one key (5 masters)", "", "acquisitions per second (median)")
	libs := []string{"redlock-5", "redsync-5"}
	values := make([][]float64, len(libs))
	for s, lib := range libs {
		values[s] = []float64{r.med(fmt.Sprintf("Contended/lib=%s/g=16", lib), "ops/s")}
	}
	if err := barGroups(p, []string{"lock+unlock, own retry loop"}, libs, values); err != nil {
		return err
	}
	if err := labelBars(p, values, "%.0f"); err != nil {
		return err
	}
	p.Y.Min = 0
	return p.Save(14*vg.Centimeter, 12*vg.Centimeter, file)
}
