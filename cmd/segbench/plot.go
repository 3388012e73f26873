package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"slices"
	"strings"
)

// plotPoint is what the plot reads from one seal row.
type plotPoint struct {
	Protocol             string  `json:"protocol"`
	Segments             int     `json:"segments"`
	USPerSeal            float64 `json:"us_per_seal"`
	ManifestBytesWritten float64 `json:"manifest_bytes_written_per_seal"`
}

func runPlot(_ context.Context, e *env, args []string) error {
	fs := newFlagSet("plot", e)
	in := fs.String("in", "-", "JSON rows of `segbench seal -json` (- for stdin)")
	out := fs.String("out", "-", "SVG file to write (- for stdout)")
	title := fs.String("title", "segkv: sealing a one-record tail, segkv vs the rewrite protocol it replaces", "title of the figure")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var r io.Reader = os.Stdin
	if *in != "-" {
		f, err := os.Open(*in)
		if err != nil {
			return fmt.Errorf("open input: %w", err)
		}
		defer f.Close()
		r = f
	}
	series, err := readSeries(r)
	if err != nil {
		return err
	}
	svg := renderSVG(*title, series)
	if *out == "-" {
		_, err := io.WriteString(e.stdout, svg)
		return err
	}
	if err := os.WriteFile(*out, []byte(svg), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", *out, err)
	}
	return nil
}

// readSeries collects the rewrite and segkv rows of seal -json output, by
// protocol and in segment order. Other rows (the ratio) are skipped.
func readSeries(r io.Reader) (map[string][]plotPoint, error) {
	series := map[string][]plotPoint{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		var p plotPoint
		if err := json.Unmarshal([]byte(text), &p); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if name, ok := protocolName(p.Protocol); ok {
			series[name] = append(series[name], p)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read input: %w", err)
	}
	if len(series) == 0 {
		return nil, fmt.Errorf("no seal rows (protocol segkv or rewrite) in the input")
	}
	for _, pts := range series {
		slices.SortStableFunc(pts, func(a, b plotPoint) int { return a.Segments - b.Segments })
	}
	return series, nil
}

var plotColors = map[string]string{protoRewrite: "#c0392b", protoSegkv: "#1f77b4"}

// renderSVG draws two panels sharing the x axis (segments): microseconds
// per seal, and manifest bytes written per seal. Hand-written SVG: no
// plotting dependency for one figure.
func renderSVG(title string, series map[string][]plotPoint) string {
	const (
		width   = 760
		panelH  = 280
		left    = 90
		right   = 130
		top     = 64
		gap     = 70
		bottom  = 50
		plotW   = width - left - right
		plotH   = panelH - 40
		height  = top + 2*panelH + gap + bottom - 40
		fontCSS = "font-family:Helvetica,Arial,sans-serif"
	)
	protos := []string{protoRewrite, protoSegkv}
	var maxX float64
	for _, pts := range series {
		for _, p := range pts {
			maxX = max(maxX, float64(p.Segments))
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" style="%s">`+"\n", width, height, width, height, fontCSS)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="28" font-size="16" font-weight="bold">%s</text>`+"\n", left, html.EscapeString(title))

	panels := []struct {
		label string
		value func(plotPoint) float64
	}{
		{"microseconds per seal (median)", func(p plotPoint) float64 { return p.USPerSeal }},
		{"manifest bytes written per seal", func(p plotPoint) float64 { return p.ManifestBytesWritten }},
	}
	xTicks, xMax := niceTicks(maxX)
	for i, pn := range panels {
		y0 := float64(top + i*(panelH+gap-40))
		var maxY float64
		for _, pts := range series {
			for _, p := range pts {
				maxY = max(maxY, pn.value(p))
			}
		}
		yTicks, yMax := niceTicks(maxY)
		px := func(x float64) float64 { return left + x/xMax*plotW }
		py := func(y float64) float64 { return y0 + plotH - y/yMax*plotH }
		// Frame, grid and ticks.
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-size="13">%s</text>`+"\n", left, y0-8, pn.label)
		for _, t := range yTicks {
			fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, left+plotW, py(t), py(t))
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-size="11" text-anchor="end">%s</text>`+"\n", left-6, py(t)+4, human(t))
		}
		for _, t := range xTicks {
			fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#999"/>`+"\n", px(t), px(t), y0+plotH, y0+plotH+4)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11" text-anchor="middle">%s</text>`+"\n", px(t), y0+plotH+17, human(t))
		}
		fmt.Fprintf(&b, `<rect x="%d" y="%.1f" width="%d" height="%d" fill="none" stroke="#333"/>`+"\n", left, y0, plotW, plotH)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="12" text-anchor="middle">segments</text>`+"\n", float64(left)+plotW/2, y0+plotH+34)
		// Series.
		legendY := y0 + 16
		for _, name := range protos {
			pts, ok := series[name]
			if !ok {
				continue
			}
			color := plotColors[name]
			coords := make([]string, len(pts))
			for j, p := range pts {
				coords[j] = fmt.Sprintf("%.1f,%.1f", px(float64(p.Segments)), py(pn.value(p)))
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", color, strings.Join(coords, " "))
			// Label the last value, so the flat line's level is readable too.
			last := pts[len(pts)-1]
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11" text-anchor="end" fill="%s">%s</text>`+"\n",
				px(float64(last.Segments))-6, py(pn.value(last))-7, color, human(pn.value(last)))
			for _, p := range pts {
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s, %d segments: %s</title></circle>`+"\n",
					px(float64(p.Segments)), py(pn.value(p)), color, name, p.Segments, human(pn.value(p)))
			}
			fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="2"/>`+"\n", left+plotW+12, left+plotW+32, legendY, legendY, color)
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-size="12">%s</text>`+"\n", left+plotW+38, legendY+4, name)
			legendY += 20
		}
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// niceTicks returns about five round tick values from 0 covering maxV, and
// the axis maximum (the last tick).
func niceTicks(maxV float64) ([]float64, float64) {
	if maxV <= 0 || math.IsNaN(maxV) || math.IsInf(maxV, 0) {
		return []float64{0, 1}, 1
	}
	raw := maxV / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var ticks []float64
	for t := 0.0; ; t += step {
		ticks = append(ticks, t)
		if t >= maxV {
			return ticks, t
		}
	}
}

// human formats an axis value compactly: 1500 -> 1.5k.
func human(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e6:
		return strings.TrimSuffix(strings.TrimSuffix(fmt.Sprintf("%.2f", v/1e6), "0"), ".0") + "M"
	case a >= 1e3:
		return strings.TrimSuffix(strings.TrimSuffix(fmt.Sprintf("%.2f", v/1e3), "0"), ".0") + "k"
	default:
		return strings.TrimSuffix(strings.TrimSuffix(fmt.Sprintf("%.2f", v), "0"), ".0")
	}
}
