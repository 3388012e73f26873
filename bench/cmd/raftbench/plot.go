package main

import (
	"fmt"
	"html"
	"math"
	"slices"
	"strings"
	"time"
)

// The latency plot: hand-written SVG in the manner of peerbench's (no
// plotting dependency for one figure). One panel per StoreLogs batch size:
// latency (log scale) against the percentile, on an axis where 90, 99 and
// 99.9 are equally spaced; per engine a solid line for the fresh store and a
// dashed one for the truncated store.

var engineColors = map[string]string{"segkv": "#1f77b4", "raft-wal": "#2ca02c", "raft-boltdb": "#ff7f0e"}

// quantileSteps is how many points a latency curve has: point k is the
// percentile 1 - 10^(-k/20), so k = 20, 40, 60 are p90, p99, p99.9.
const quantileSteps = 60

// quantiles returns the latency in microseconds at each point of the curve.
func quantiles(sorted []time.Duration) []float64 {
	q := make([]float64, quantileSteps+1)
	for k := range q {
		q[k] = us(percentile(sorted, 1-math.Pow(10, -float64(k)/20)))
	}
	return q
}

// curveKey names one latency curve.
type curveKey struct {
	engine, state string
	batch         int
}

func latencyPlot(res *results) string {
	const (
		width   = 900
		left    = 80
		right   = 250
		top     = 78
		plotW   = width - left - right
		plotH   = 260
		gap     = 90
		fontCSS = "font-family:Helvetica,Arial,sans-serif"
	)
	c := res.Config
	height := top + len(c.batches)*(plotH+gap) + 10
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" style="%s">`+"\n", width, height, width, height, fontCSS)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="26" font-size="16" font-weight="bold">%s</text>`+"\n", left,
		html.EscapeString("raftbench: durable StoreLogs latency by percentile"))
	fmt.Fprintf(&b, `<text x="%d" y="44" font-size="11" fill="#555">%s</text>`+"\n", left, html.EscapeString(fmt.Sprintf(
		"sequential appends of %d-byte entries; solid: fresh store; dashed: after %d entries and DeleteRange(1, %d)",
		c.data, c.n, c.truncate)))
	fmt.Fprintf(&b, `<text x="%d" y="58" font-size="11" fill="#555">%s</text>`+"\n", left, html.EscapeString(fmt.Sprintf(
		"%s, %s, %d CPUs, %s", res.Start.UTC().Format("2006-01-02 15:04 MST"), res.Machine.FS, res.Machine.CPUs, res.Machine.OS)))
	px := func(k int) float64 { return left + float64(k)/quantileSteps*plotW }
	for i, bs := range c.batches {
		y0 := float64(top + 18 + i*(plotH+gap))
		var vals []float64
		for _, name := range c.engines {
			for _, st := range []string{stateFresh, stateTruncated} {
				vals = append(vals, res.Quantiles[curveKey{name, st, bs}]...)
			}
		}
		lo, hi := 1.0, 10.0
		if len(vals) > 0 {
			lo = math.Pow(10, math.Floor(math.Log10(max(slices.Min(vals), 1))))
			hi = math.Pow(10, math.Ceil(math.Log10(max(slices.Max(vals), lo*10))))
		}
		py := func(v float64) float64 {
			v = math.Log10(max(v, lo))
			return y0 + plotH - (v-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))*plotH
		}
		unit := "entries"
		if bs == 1 {
			unit = "entry"
		}
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-size="13">%s</text>`+"\n", left, y0-8,
			html.EscapeString(fmt.Sprintf("StoreLogs of %d %s per call: latency, microseconds (log scale)", bs, unit)))
		for d := lo; d <= hi*1.0001; d *= 10 {
			for _, m := range []float64{1, 2, 5} {
				t := d * m
				if t > hi*1.0001 {
					break
				}
				fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, left+plotW, py(t), py(t))
				fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-size="11" text-anchor="end">%s</text>`+"\n", left-6, py(t)+4, commas(t))
			}
		}
		for _, tick := range []struct {
			k     int
			label string
		}{{0, "p0"}, {6, "p50"}, {20, "p90"}, {40, "p99"}, {60, "p99.9"}} {
			x := px(tick.k)
			fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", x, x, y0, y0+plotH)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11" text-anchor="middle">%s</text>`+"\n", x, y0+plotH+16, tick.label)
		}
		fmt.Fprintf(&b, `<rect x="%d" y="%.1f" width="%d" height="%d" fill="none" stroke="#333"/>`+"\n", left, y0, plotW, plotH)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="12" text-anchor="middle">percentile of the calls (90, 99, 99.9 equally spaced)</text>`+"\n", float64(left)+plotW/2, y0+plotH+34)
		legendY := y0 + 14
		for _, name := range c.engines {
			color := engineColors[name]
			if color == "" {
				color = "#777"
			}
			for _, st := range []string{stateFresh, stateTruncated} {
				q := res.Quantiles[curveKey{name, st, bs}]
				r, ok := find(res.Rows, name, "storelogs", st, bs)
				if len(q) == 0 || !ok {
					continue
				}
				dash := ""
				if st == stateTruncated {
					dash = ` stroke-dasharray="6 4"`
				}
				coords := make([]string, len(q))
				for k, v := range q {
					coords[k] = fmt.Sprintf("%.1f,%.1f", px(k), py(v))
				}
				fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>`+"\n", color, dash, strings.Join(coords, " "))
				fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="2"%s/>`+"\n", left+plotW+10, left+plotW+34, legendY, legendY, color, dash)
				fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-size="11">%s <tspan fill="#555">p50 %s</tspan></text>`+"\n",
					left+plotW+40, legendY+4, html.EscapeString(name+", "+st), commas(r.P50us)+" us")
				legendY += 18
			}
		}
	}
	b.WriteString("</svg>\n")
	return b.String()
}
