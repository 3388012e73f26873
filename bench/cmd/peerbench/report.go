package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/segkv/segkv/bench/peers"
)

// target is one line of the brief's "Performance targets" table, checked
// against figures from this run.
type target struct {
	Workload string  `json:"workload"`
	Against  string  `json:"against"` // peer engine, or "" for an absolute bound
	Op       string  `json:"op"`      // ">=" or "<="
	Bound    float64 `json:"bound"`   // ratio segkv/peer, or ops/s or seconds when Against is ""
	Text     string  `json:"text"`
}

var targets = []target{
	{"put1", "pebble", ">=", 1.3, ">= 1.3x Pebble ops/s"},
	{"put32", "pebble", ">=", 1.2, ">= 1.2x Pebble ops/s"},
	{"bulk", "pebble", "<=", 0.8, "<= 0.8x Pebble's time"},
	{"get1", "bbolt", ">=", 1.0, ">= bbolt ops/s"},
	{"get2", "bbolt", ">=", 1.0, ">= bbolt ops/s"},
	// The brief's bar is goleveldb's 476k/s; compare with goleveldb in the
	// same run (the disk and CPU drift), and show the absolute figure too.
	{"miss1", "goleveldb", ">=", 1.0, ">= goleveldb ops/s (476k/s in the brief)"},
	{"miss2", "goleveldb", ">=", 1.0, ">= goleveldb ops/s (476k/s in the brief)"},
	{"miss1", "", ">=", 476_000, ">= 476k ops/s absolute"},
	{"reopen", "", "<=", 0.05, "<= 0.05 s"},
}

// verdict is a target evaluated on this run's figures.
type verdict struct {
	target
	Measured float64 `json:"measured"` // ratio, or the absolute figure
	Met      bool    `json:"met"`
	// Factor is how far segkv is from the bound: the speed-up (or time cut)
	// it still needs when missed, the headroom when met.
	Factor float64 `json:"factor"`
}

func find(rows []result, workload, engine string) (result, bool) {
	for _, r := range rows {
		if r.Workload == workload && r.Engine == engine {
			return r, true
		}
	}
	return result{}, false
}

// ratio is segkv's figure over the peer's for a workload (for seconds, lower
// is better for segkv; for ops/s, higher).
func ratio(rows []result, workload, peer string) (float64, bool) {
	s, ok1 := find(rows, workload, "segkv")
	p, ok2 := find(rows, workload, peer)
	if !ok1 || !ok2 || p.Value == 0 {
		return 0, false
	}
	return s.Value / p.Value, true
}

func verdicts(rows []result) []verdict {
	var out []verdict
	for _, t := range targets {
		var m float64
		if t.Against == "" {
			r, ok := find(rows, t.Workload, "segkv")
			if !ok {
				continue
			}
			m = r.Value
		} else {
			var ok bool
			if m, ok = ratio(rows, t.Workload, t.Against); !ok {
				continue
			}
		}
		v := verdict{target: t, Measured: m}
		if t.Op == ">=" {
			v.Met = m >= t.Bound
			v.Factor = t.Bound / m
		} else {
			v.Met = m <= t.Bound
			v.Factor = m / t.Bound
		}
		out = append(out, v)
	}
	return out
}

func formatValue(r result) string {
	if r.Unit == "s" {
		switch {
		case r.Value >= 10:
			return fmt.Sprintf("%.1f s", r.Value)
		case r.Value >= 1:
			return fmt.Sprintf("%.2f s", r.Value)
		}
		return fmt.Sprintf("%.4f s", r.Value)
	}
	return commas(int64(r.Value+0.5)) + " ops/s"
}

func commas(v int64) string {
	s := fmt.Sprint(v)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func writeTable(w io.Writer, res *results) error {
	c := res.Config
	var b strings.Builder
	if len(res.Rows) > 0 {
		fmt.Fprintf(&b, "peerbench: n=%d keys (%d-byte keys, %d-byte values, random order), bulk batches of %d, puts %v per engine in %d rounds, %d Gets per read measurement\n",
			c.n, peers.KeySize, peers.ValueSize, c.batch, c.duration, c.rounds, c.gets)
	} else {
		var only []string
		for _, w := range optionalWorkloads {
			if contains(c.workloads, w) {
				only = append(only, w)
			}
		}
		fmt.Fprintf(&b, "peerbench: %s workload only\n", strings.Join(only, " and "))
	}
	fmt.Fprintf(&b, "machine: %s %s, %d CPUs, load average %s at start, %s at end\n", res.Machine.GoVersion, res.Machine.OS, res.Machine.CPUs, res.Machine.LoadStart, res.Machine.LoadEnd)
	fmt.Fprintf(&b, "stores under %s: %s\n\n", res.Root, res.Machine.FS)
	fmt.Fprintf(&b, "engine configurations:\n")
	for _, name := range c.engines {
		cfg := res.Configs[name]
		fmt.Fprintf(&b, "  %-9s durable: %s\n  %-9s bulk:    %s\n", name, cfg[0], "", cfg[1])
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	if len(res.Rows) > 0 {
		if err := writeMainTable(w, res); err != nil {
			return err
		}
	}
	if len(res.Scale) > 0 {
		if err := writeScaleTable(w, res); err != nil {
			return err
		}
	}
	if len(res.Space) > 0 {
		return writeSpaceTable(w, res)
	}
	return nil
}

// writeMainTable writes the table of every workload but scale, and the
// targets checked on it.
func writeMainTable(w io.Writer, res *results) error {
	c := res.Config
	var b strings.Builder
	b.WriteString("\nsegkv/peer: on ops/s rows above 1 means segkv is faster; on seconds rows below 1 means segkv is faster.\n")
	if slices.ContainsFunc(res.Rows, func(r result) bool { return r.Keys > 0 }) {
		fmt.Fprintf(&b, "scan rows: one op = one iterator + seek to a random key + up to %d key/value reads, for %v per workload; keys/s counts the keys read.\n", c.scanLen, c.duration)
		if slices.ContainsFunc(res.Rows, func(r result) bool { return isFresh(r.Workload) }) {
			fmt.Fprintf(&b, "fscan/frscan: a fresh store per engine, %d keys written unsynced in batches of %d, scanned without a close or reopen.\n", c.freshKeys, c.batch)
		}
	}
	b.WriteString("\n")
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	// Workload-major, engines in run order, whatever order they were measured.
	rows := slices.Clone(res.Rows)
	slices.SortStableFunc(rows, func(a, b result) int {
		if d := slices.Index(allWorkloads, a.Workload) - slices.Index(allWorkloads, b.Workload); d != 0 {
			return d
		}
		return slices.Index(c.engines, a.Engine) - slices.Index(c.engines, b.Engine)
	})
	var t strings.Builder
	line := func(cols ...string) {
		fmt.Fprintf(&t, "%-8s %-10s %15s %13s %9s %9s %9s %11s\n", cols[0], cols[1], cols[2], cols[3], cols[4], cols[5], cols[6], cols[7])
	}
	line("workload", "engine", "result", "keys/s", "p50", "p99", "disk", "segkv/peer")
	prev := ""
	for _, r := range rows {
		if prev != "" && r.Workload != prev {
			t.WriteString("\n")
		}
		prev = r.Workload
		keys, lat50, lat99, disk, rat := "", "", "", "", ""
		if r.Keys > 0 {
			keys = commas(int64(r.KeysPerS + 0.5))
		}
		if r.P50us > 0 {
			lat50, lat99 = fmt.Sprintf("%.0f us", r.P50us), fmt.Sprintf("%.0f us", r.P99us)
		}
		if r.DiskBytes > 0 {
			disk = fmt.Sprintf("%d MiB", r.DiskBytes>>20)
		}
		if r.Engine != "segkv" {
			if x, ok := ratio(res.Rows, r.Workload, r.Engine); ok {
				rat = fmt.Sprintf("%.2fx", x)
			}
		}
		line(r.Workload, r.Engine, formatValue(r), keys, lat50, lat99, disk, rat)
	}
	if _, err := io.WriteString(w, t.String()); err != nil {
		return err
	}
	vs := verdicts(res.Rows)
	if len(vs) == 0 {
		return nil
	}
	if _, err := io.WriteString(w, "\ntargets (DESIGN-BRIEF.md, checked on this run's figures):\n"); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, v := range vs {
		meas := fmt.Sprintf("segkv/%s = %.2fx", v.Against, v.Measured)
		if v.Against == "" {
			meas = "segkv = " + formatValue(result{Value: v.Measured, Unit: unitOf(res.Rows, v.Workload)})
		}
		verdict := fmt.Sprintf("met (%.2fx headroom)", 1/v.Factor)
		if !v.Met {
			verdict = fmt.Sprintf("MISSED: segkv needs %.2fx", v.Factor)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", v.Workload, v.Text, meas, verdict)
	}
	return tw.Flush()
}

func unitOf(rows []result, workload string) string {
	for _, r := range rows {
		if r.Workload == workload {
			return r.Unit
		}
	}
	return ""
}

// writeJSON prints one object per line: a "run" line, one "engine" line per
// engine, one "result" line per measurement and one "target" line per target.
func writeJSON(w io.Writer, res *results) error {
	enc := json.NewEncoder(w)
	c := res.Config
	lines := []any{map[string]any{
		"kind": "run", "n": c.n, "key_bytes": 32, "value_bytes": 100, "batch": c.batch,
		"put_seconds": c.duration.Seconds(), "rounds": c.rounds, "writers": c.writers, "gets": c.gets,
		"scan_seconds": c.duration.Seconds(), "scan_len": c.scanLen, "fresh_keys": c.freshKeys,
		"dir": res.Root, "machine": res.Machine, "workloads": c.workloads, "engines": c.engines,
	}}
	if contains(c.workloads, "scale") {
		lines[0].(map[string]any)["scale_n"] = c.scaleN
	}
	if contains(c.workloads, "space") {
		run := lines[0].(map[string]any)
		run["space_n"] = c.spaceN
		run["space_settle_seconds"] = c.spaceSettle.Seconds()
		run["space_key_bytes"] = peers.ShortKeySize
		run["space_value_bytes"] = spaceValueSize
	}
	for _, name := range c.engines {
		cfg := res.Configs[name]
		lines = append(lines, map[string]any{"kind": "engine", "engine": name, "durable": cfg[0], "bulk": cfg[1]})
	}
	type resultLine struct {
		Kind string `json:"kind"`
		result
		Ratio float64 `json:"segkv_over_peer,omitempty"`
	}
	for _, r := range res.Rows {
		l := resultLine{Kind: "result", result: r}
		if r.Engine != "segkv" {
			l.Ratio, _ = ratio(res.Rows, r.Workload, r.Engine)
		}
		lines = append(lines, l)
	}
	for _, r := range res.Scale {
		l := resultLine{Kind: "result", result: r}
		if r.Engine != "segkv" {
			l.Ratio, _ = scaleRatio(res.Scale, r.Workload, r.N, r.Engine)
		}
		lines = append(lines, l)
	}
	for _, r := range res.Space {
		l := resultLine{Kind: "result", result: r}
		if r.Engine != "segkv" {
			l.Ratio, _ = scaleRatio(res.Space, r.Workload, r.N, r.Engine)
		}
		lines = append(lines, l)
	}
	type targetLine struct {
		Kind string `json:"kind"`
		verdict
	}
	for _, v := range verdicts(res.Rows) {
		lines = append(lines, targetLine{Kind: "target", verdict: v})
	}
	for _, l := range lines {
		if err := enc.Encode(l); err != nil {
			return err
		}
	}
	return nil
}
