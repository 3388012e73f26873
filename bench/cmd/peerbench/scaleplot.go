package main

import (
	"fmt"
	"html"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/segkv/segkv/bench/peers"
)

// The scale plot: hand-written SVG in the manner of cmd/segbench's plot (no
// plotting dependency for one figure). Two panels share a logarithmic x
// axis, the key count: live heap after Open per key, and Open to the first
// Get. One line per engine.

var engineColors = map[string]string{
	"segkv": "#1f77b4", "pebble": "#d62728", "goleveldb": "#2ca02c", "badger": "#9467bd", "bbolt": "#ff7f0e",
}

// scalePoint is one engine's figure at one key count.
type scalePoint struct {
	n int
	v float64
}

// scaleSeries returns, per engine in run order, the workload's figures by
// ascending key count.
func scaleSeries(res *results, workload string) ([]string, map[string][]scalePoint) {
	var names []string
	series := map[string][]scalePoint{}
	for _, name := range res.Config.engines {
		for _, n := range res.Config.scaleN {
			if v, ok := scaleValue(res.Scale, workload, n, name); ok {
				series[name] = append(series[name], scalePoint{n, v})
			}
		}
		if len(series[name]) > 0 {
			names = append(names, name)
		}
	}
	return names, series
}

// scalePlot renders the SVG.
func scalePlot(res *results) string {
	const (
		width    = 780
		left     = 90
		right    = 130
		top      = 70
		plotW    = width - left - right
		plotH    = 240
		panelGap = 90
		height   = top + 2*plotH + panelGap + 60
		fontCSS  = "font-family:Helvetica,Arial,sans-serif"
	)
	ns := res.Config.scaleN
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" style="%s">`+"\n", width, height, width, height, fontCSS)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="26" font-size="16" font-weight="bold">%s</text>`+"\n", left,
		html.EscapeString("peerbench scale: reopen cost against the key count"))
	fmt.Fprintf(&b, `<text x="%d" y="46" font-size="11" fill="#555">%s</text>`+"\n", left, html.EscapeString(fmt.Sprintf(
		"%d-byte keys, %d-byte values, bulk-loaded, closed, reopened in a fresh process; %s, %d CPUs",
		peers.KeySize, peers.ValueSize, res.Machine.OS, res.Machine.CPUs)))
	if len(ns) == 0 {
		b.WriteString("</svg>\n")
		return b.String()
	}
	// Log x axis, padded by a factor of 1.6 on either side.
	lx0, lx1 := math.Log10(float64(ns[0])/1.6), math.Log10(float64(ns[len(ns)-1])*1.6)
	px := func(n int) float64 { return left + (math.Log10(float64(n))-lx0)/(lx1-lx0)*plotW }

	panels := []struct{ workload, label string }{
		{scaleHeapOpenKey, "live Go heap after Open, bytes per key"},
		{scaleOpenFirstGet, "start of Open to the first Get's return, seconds"},
	}
	for i, pn := range panels {
		y0 := float64(top + i*(plotH+panelGap))
		names, series := scaleSeries(res, pn.workload)
		var vals []float64
		for _, pts := range series {
			for _, p := range pts {
				vals = append(vals, p.v)
			}
		}
		ticks, lo, hi, logY := yAxis(vals)
		py := func(v float64) float64 {
			if logY {
				v = math.Log10(max(v, lo))
				return y0 + plotH - (v-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))*plotH
			}
			return y0 + plotH - (v-lo)/(hi-lo)*plotH
		}
		label := pn.label
		if logY {
			label += " (log scale)"
		}
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-size="13">%s</text>`+"\n", left, y0-8, html.EscapeString(label))
		for _, t := range ticks {
			fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, left+plotW, py(t), py(t))
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-size="11" text-anchor="end">%s</text>`+"\n", left-6, py(t)+4, axisLabel(t))
		}
		// x ticks at the measured key counts, skipping any too close to the
		// previous label to be read.
		lastX := math.Inf(-1)
		for _, n := range ns {
			x := px(n)
			fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", x, x, y0, y0+plotH)
			fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#999"/>`+"\n", x, x, y0+plotH, y0+plotH+4)
			if x-lastX >= 40 {
				fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11" text-anchor="middle">%s</text>`+"\n", x, y0+plotH+17, axisLabel(float64(n)))
				lastX = x
			}
		}
		fmt.Fprintf(&b, `<rect x="%d" y="%.1f" width="%d" height="%d" fill="none" stroke="#333"/>`+"\n", left, y0, plotW, plotH)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="12" text-anchor="middle">keys in the store (log scale)</text>`+"\n", float64(left)+plotW/2, y0+plotH+34)
		legendY := y0 + 16
		for _, name := range names {
			pts := series[name]
			color := engineColors[name]
			if color == "" {
				color = "#777"
			}
			coords := make([]string, len(pts))
			for j, p := range pts {
				coords[j] = fmt.Sprintf("%.1f,%.1f", px(p.n), py(p.v))
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", color, strings.Join(coords, " "))
			for _, p := range pts {
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s, %s keys: %s</title></circle>`+"\n",
					px(p.n), py(p.v), color, name, commas(int64(p.n)), axisLabel(p.v))
			}
			last := pts[len(pts)-1]
			fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="2"/>`+"\n", left+plotW+12, left+plotW+32, legendY, legendY, color)
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-size="12">%s <tspan fill="#555">%s</tspan></text>`+"\n", left+plotW+38, legendY+4, name, axisLabel(last.v))
			legendY += 20
		}
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// yAxis chooses the y axis for vals: logarithmic when the positive ones span
// more than a factor of 30 (one engine's fixed cost would flatten the others
// otherwise; values <= 0, such as a heap that shrank by a few bytes, are
// then drawn on the bottom edge), linear from 0 (or the lowest value, if
// negative) otherwise. It returns the ticks and the axis range.
func yAxis(vals []float64) (ticks []float64, lo, hi float64, logY bool) {
	if len(vals) == 0 {
		return []float64{0, 1}, 0, 1, false
	}
	vmin, vmax := slices.Min(vals), slices.Max(vals)
	var pos []float64
	for _, v := range vals {
		if v > 0 {
			pos = append(pos, v)
		}
	}
	if len(pos) > 0 && slices.Max(pos)/slices.Min(pos) > 30 {
		vmin = slices.Min(pos)
		lo = math.Pow(10, math.Floor(math.Log10(vmin)))
		hi = math.Pow(10, math.Ceil(math.Log10(vmax)))
		dense := hi/lo <= 1000 // few decades: 2 and 5 too
		for d := lo; d <= hi*1.0001; d *= 10 {
			ticks = append(ticks, d)
			if dense && d < hi {
				ticks = append(ticks, 2*d, 5*d)
			}
		}
		return ticks, lo, hi, true
	}
	lo, hi = min(0, vmin), max(0, vmax)
	if hi == lo {
		hi = lo + 1
	}
	raw := (hi - lo) / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := 10 * mag
	for _, m := range []float64{1, 2, 2.5, 5} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	lo = math.Floor(lo/step) * step
	for t := lo; ; t += step {
		t = math.Round(t/step) * step // no drift: 0.30000000000000004
		ticks = append(ticks, t)
		if t >= hi {
			return ticks, lo, t, false
		}
	}
}

// axisLabel formats a value compactly: 1500.3 -> 1500, 25000 -> 25k,
// 2000000 -> 2M, 12.345 -> 12.35, 0.0042 -> 0.0042.
func axisLabel(v float64) string {
	trim := func(s string) string {
		if strings.Contains(s, ".") {
			s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
		}
		return s
	}
	switch a := math.Abs(v); {
	case a >= 1e9:
		return trim(fmt.Sprintf("%.2f", v/1e9)) + "G"
	case a >= 1e6:
		return trim(fmt.Sprintf("%.2f", v/1e6)) + "M"
	case a >= 1e4:
		return trim(fmt.Sprintf("%.1f", v/1e3)) + "k"
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 1 || a == 0:
		return trim(fmt.Sprintf("%.2f", v))
	default:
		return strconv.FormatFloat(v, 'g', 2, 64)
	}
}
