package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// diskLabel names a disk sample in the table.
func diskLabel(c *config, phase string) string {
	switch phase {
	case diskAfterIdle:
		return fmt.Sprintf("%v after DeleteRange", c.idle)
	case diskFirstDrop:
		return "at the first removal during the appends"
	}
	return phase
}

// Targets of the issue, checked on segkv's figures of this run.
const (
	getLogTargetUs     = 3.0   // GetLog mean <= 3 us
	deleteTargetS      = 0.010 // head truncation < 10 ms
	reclaimedFraction  = 0.5   // "segment files gone": files holding at least half the store's bytes removed when DeleteRange returns
	afterFreshMinRatio = 0.9   // entries/s after preload + truncation within 10% of fresh
)

// verdict is one target checked on this run's figures.
type verdict struct {
	Target   string `json:"target"`
	Measured string `json:"measured"`
	Met      bool   `json:"met"`
}

func find(rows []row, engine, measure, state string, batch int) (row, bool) {
	for _, r := range rows {
		if r.Engine == engine && r.Measure == measure && r.State == state && r.Batch == batch {
			return r, true
		}
	}
	return row{}, false
}

func verdicts(res *results) []verdict {
	rows := res.Rows
	var out []verdict
	const s = "segkv"
	for _, bs := range res.Config.batches {
		for _, st := range []string{stateFresh, stateTruncated} {
			a, ok1 := find(rows, s, "storelogs", st, bs)
			w, ok2 := find(rows, "raft-wal", "storelogs", st, bs)
			if !ok1 || !ok2 {
				continue
			}
			out = append(out, verdict{
				Target:   fmt.Sprintf("StoreLogs p50, batches of %d, %s store: segkv <= raft-wal", bs, st),
				Measured: fmt.Sprintf("%.0f us vs %.0f us (%.2fx)", a.P50us, w.P50us, a.P50us/w.P50us),
				Met:      a.P50us <= w.P50us,
			})
		}
	}
	if g, ok := find(rows, s, "getlog", statePreloaded, 0); ok {
		out = append(out, verdict{
			Target:   fmt.Sprintf("GetLog at a random index of %d, mean <= %.0f us", res.Config.n, getLogTargetUs),
			Measured: fmt.Sprintf("mean %.2f us (p50 %.2f, p99 %.2f)", g.MeanUs, g.P50us, g.P99us),
			Met:      g.MeanUs <= getLogTargetUs,
		})
	}
	if d, ok := find(rows, s, "deleterange", "", 0); ok {
		out = append(out, verdict{
			Target:   fmt.Sprintf("DeleteRange(1, %d) < %.0f ms", res.Config.truncate, deleteTargetS*1e3),
			Measured: fmtSeconds(d.Seconds),
			Met:      d.Seconds < deleteTargetS,
		})
	}
	before, ok1 := find(rows, s, "disk", diskBefore, 0)
	after, ok2 := find(rows, s, "disk", diskAfterDelete, 0)
	if ok1 && ok2 {
		out = append(out, verdict{
			Target: fmt.Sprintf("the truncated segment files gone when DeleteRange returns (files removed holding >= %.0f%% of the store's bytes)", reclaimedFraction*100),
			Measured: fmt.Sprintf("%d of %d files removed, %s of %s", after.Removed, before.Files,
				mib(after.RemovedBytes), mib(before.Bytes)),
			Met: float64(after.RemovedBytes) >= reclaimedFraction*float64(before.Bytes),
		})
	}
	for _, bs := range res.Config.batches {
		f, ok1 := find(rows, s, "storelogs", stateFresh, bs)
		t, ok2 := find(rows, s, "storelogs", stateTruncated, bs)
		if !ok1 || !ok2 {
			continue
		}
		out = append(out, verdict{
			Target: fmt.Sprintf("entries/s after preload + truncation >= %.1fx fresh, batches of %d", afterFreshMinRatio, bs),
			Measured: fmt.Sprintf("%.2fx (%s vs %s; by round: median %.2fx; p99 %.0f vs %.0f us)", t.EntriesPerS/f.EntriesPerS,
				commas(t.EntriesPerS), commas(f.EntriesPerS), t.RoundRatioMedian, t.P99us, f.P99us),
			Met: t.EntriesPerS >= afterFreshMinRatio*f.EntriesPerS,
		})
	}
	return out
}

func commas(f float64) string {
	v := int64(f + 0.5)
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

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func fmtSeconds(s float64) string {
	switch {
	case s >= 1:
		return fmt.Sprintf("%.2f s", s)
	case s >= 0.001:
		return fmt.Sprintf("%.1f ms", s*1e3)
	}
	return fmt.Sprintf("%.0f us", s*1e6)
}

func fmtUs(v float64) string {
	if v < 10 {
		return fmt.Sprintf("%.2f", v)
	}
	return commas(v)
}

// grid prints rows of cells aligned: the first column to the left, the
// others to the right.
func grid(w io.Writer, cells [][]string) error { return gridAligned(w, cells, false) }

// gridAligned prints rows of cells aligned: the first column to the left,
// the others to the right unless allLeft.
func gridAligned(w io.Writer, cells [][]string, allLeft bool) error {
	var width []int
	for _, r := range cells {
		for i, c := range r {
			if i >= len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	for _, r := range cells {
		if len(r) == 0 {
			b.WriteString("\n")
			continue
		}
		for i, c := range r {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			switch {
			case i == 0:
				b.WriteString(c + pad)
			case allLeft && i == len(r)-1:
				b.WriteString("  " + c)
			case allLeft:
				b.WriteString("  " + c + pad)
			default:
				b.WriteString("  " + pad + c)
			}
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeTable(w io.Writer, res *results) error {
	c := res.Config
	var b strings.Builder
	fmt.Fprintf(&b, "raftbench: %d entries of %d data bytes preloaded in durable StoreLogs batches of %d, then DeleteRange(1, %d); appends %v per engine, store and batch size in %d rounds; %d GetLogs per measurement\n",
		c.n, c.data, c.preloadBatch, c.truncate, c.duration, c.rounds, c.gets)
	fmt.Fprintf(&b, "run: %s to %s\n", res.Start.UTC().Format("2006-01-02 15:04:05"), res.End.UTC().Format("15:04:05 MST"))
	fmt.Fprintf(&b, "machine: %s %s, %d CPUs, load average %s at start, %s at end\n", res.Machine.GoVersion, res.Machine.OS, res.Machine.CPUs, res.Machine.LoadStart, res.Machine.LoadEnd)
	fmt.Fprintf(&b, "stores under %s: %s\n", res.Root, res.Machine.FS)
	b.WriteString("versions:")
	for _, v := range res.Versions {
		fmt.Fprintf(&b, " %s %s;", v[0], v[1])
	}
	b.WriteString("\nengines:\n")
	for _, name := range c.engines {
		e, _ := lookupEngine(name)
		fmt.Fprintf(&b, "  %-12s %s\n", name, e.config)
	}
	b.WriteString("\n")
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}

	cells := [][]string{append([]string{""}, c.engines...)}
	line := func(label string, f func(name string) string) {
		r := []string{label}
		for _, name := range c.engines {
			r = append(r, f(name))
		}
		cells = append(cells, r)
	}
	blank := func() { cells = append(cells, nil) }
	get := func(name, measure, state string, batch int) row {
		r, _ := find(res.Rows, name, measure, state, batch)
		return r
	}
	for _, bs := range c.batches {
		for _, st := range []string{stateFresh, stateTruncated} {
			label := fmt.Sprintf("StoreLogs x%d, %s", bs, st)
			line(label+": p50 / p99 us", func(n string) string {
				r := get(n, "storelogs", st, bs)
				return fmtUs(r.P50us) + " / " + fmtUs(r.P99us)
			})
			line(label+": max us", func(n string) string { return fmtUs(get(n, "storelogs", st, bs).MaxUs) })
			line(label+": entries/s", func(n string) string { return commas(get(n, "storelogs", st, bs).EntriesPerS) })
		}
		line(fmt.Sprintf("StoreLogs x%d: entries/s truncated/fresh", bs), func(n string) string {
			f, t := get(n, "storelogs", stateFresh, bs), get(n, "storelogs", stateTruncated, bs)
			return fmt.Sprintf("%.2fx", t.EntriesPerS/f.EntriesPerS)
		})
		line(fmt.Sprintf("StoreLogs x%d: the same by round: median (min-max)", bs), func(n string) string {
			t := get(n, "storelogs", stateTruncated, bs)
			if len(t.RoundRatios) == 0 {
				return ""
			}
			return fmt.Sprintf("%.2fx (%.2f-%.2f)", t.RoundRatioMedian, t.RoundRatios[0], t.RoundRatios[len(t.RoundRatios)-1])
		})
		line(fmt.Sprintf("StoreLogs x%d: p99 truncated/fresh", bs), func(n string) string {
			f, t := get(n, "storelogs", stateFresh, bs), get(n, "storelogs", stateTruncated, bs)
			return fmt.Sprintf("%.2fx", t.P99us/f.P99us)
		})
		blank()
	}
	for _, st := range []string{statePreloaded, stateTruncated} {
		label := fmt.Sprintf("GetLog over %d entries", c.n)
		if st == stateTruncated {
			label = fmt.Sprintf("GetLog over the %d left", c.n-c.truncate)
		}
		line(label+": mean / p50 / p99 us", func(n string) string {
			r := get(n, "getlog", st, 0)
			return fmtUs(r.MeanUs) + " / " + fmtUs(r.P50us) + " / " + fmtUs(r.P99us)
		})
	}
	blank()
	line(fmt.Sprintf("preload of %d (batches of %d): s", c.n, c.preloadBatch), func(n string) string {
		return fmt.Sprintf("%.2f", get(n, "preload", "", 0).Seconds)
	})
	line(fmt.Sprintf("DeleteRange(1, %d)", c.truncate), func(n string) string {
		return fmtSeconds(get(n, "deleterange", "", 0).Seconds)
	})
	blank()
	cells = append(cells, []string{"disk of the preloaded store: MiB (files)"})
	for _, ph := range diskPhases {
		line("  "+diskLabel(c, ph), func(n string) string {
			r, ok := find(res.Rows, n, "disk", ph, 0)
			if !ok {
				return "none"
			}
			return fmt.Sprintf("%.1f (%d)", float64(r.Bytes)/(1<<20), r.Files)
		})
	}
	cells = append(cells, []string{"files of \"before\" removed: files (MiB)"})
	for _, ph := range diskPhases[1:] {
		line("  "+diskLabel(c, ph), func(n string) string {
			r, ok := find(res.Rows, n, "disk", ph, 0)
			if !ok {
				return "none"
			}
			return fmt.Sprintf("%d (%.1f)", r.Removed, float64(r.RemovedBytes)/(1<<20))
		})
	}
	line("entries appended after the truncation, at the first removal", func(n string) string {
		r, ok := find(res.Rows, n, "disk", diskFirstDrop, 0)
		if !ok {
			return "none"
		}
		return commas(float64(r.Entries))
	})
	line("entries appended after the truncation, in all", func(n string) string {
		r, _ := find(res.Rows, n, "disk", diskAfterAppend, 0)
		return commas(float64(r.Entries))
	})
	if err := grid(w, cells); err != nil {
		return err
	}
	if err := writeBarriers(w, res); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(w, "\ndisk: du of the preloaded store's directory (allocated blocks: preallocated space counts).\n"+
		"first removal: the first sample, polled every %v while appends to the truncated store run, that finds more\n"+
		"files of \"before\" removed than the sample %v after DeleteRange (\"none\": no such sample); its entries\n"+
		"appended are counted after it looked: the files went before that many.\n", dropPoll, c.idle); err != nil {
		return err
	}
	vs := verdicts(res)
	if len(vs) == 0 {
		return nil
	}
	cells = [][]string{{"verdict", "target (checked on segkv's figures of this run)", "measured"}}
	for _, v := range vs {
		verdict := "met"
		if !v.Met {
			verdict = "MISSED"
		}
		cells = append(cells, []string{verdict, v.Target, v.Measured})
	}
	if _, err := io.WriteString(w, "\n"); err != nil {
		return err
	}
	return gridAligned(w, cells, true)
}

// writeJSON prints one object per line: a "run" line, one "engine" line per
// engine, one "result" line per measurement (fields as in row) and one
// "target" line per target.
func writeJSON(w io.Writer, res *results) error {
	enc := json.NewEncoder(w)
	c := res.Config
	versions := map[string]string{}
	for _, v := range res.Versions {
		versions[v[0]] = v[1]
	}
	batches := c.batches
	lines := []any{map[string]any{
		"kind": "run", "n": c.n, "truncate": c.truncate, "data_bytes": c.data, "preload_batch": c.preloadBatch,
		"gets": c.gets, "batches": batches, "append_seconds": c.duration.Seconds(), "rounds": c.rounds,
		"idle_seconds": c.idle.Seconds(), "engines": c.engines, "dir": res.Root, "machine": res.Machine,
		"start": res.Start.UTC(), "end": res.End.UTC(), "versions": versions,
	}}
	for _, name := range c.engines {
		e, _ := lookupEngine(name)
		lines = append(lines, map[string]any{"kind": "engine", "engine": name, "config": e.config, "version": moduleVersion(e.module)})
	}
	type resultLine struct {
		Kind string `json:"kind"`
		row
	}
	for _, r := range res.Rows {
		lines = append(lines, resultLine{Kind: "result", row: r})
	}
	type targetLine struct {
		Kind string `json:"kind"`
		verdict
	}
	for _, v := range verdicts(res) {
		lines = append(lines, targetLine{Kind: "target", verdict: v})
	}
	for _, l := range lines {
		if err := enc.Encode(l); err != nil {
			return err
		}
	}
	return nil
}

// writeBarriers writes the probe of the disk's own barrier.
func writeBarriers(w io.Writer, res *results) error {
	var cells [][]string
	for _, p := range barrierPatterns {
		r, ok := find(res.Rows, "disk", "barrier", p, 0)
		if !ok {
			continue
		}
		label := map[string]string{
			"zeroed+fdatasync": "  overwrite of preallocated, zeroed space + fdatasync (segkv's live file)",
			"fallocated+fsync": "  write into fallocated space + fsync (raft-wal's segments)",
		}[p]
		cells = append(cells, []string{label, fmt.Sprintf("p50 %s us", fmtUs(r.P50us)), fmt.Sprintf("p99 %s us", fmtUs(r.P99us)), fmt.Sprintf("max %s us", fmtUs(r.MaxUs))})
	}
	if len(cells) == 0 {
		return nil
	}
	c := res.Config
	if _, err := fmt.Fprintf(w, "\nthe disk's own barrier: sequential writes of %d B, a sync after each, %d per pattern in slices between the append rounds:\n",
		c.data+32, c.barriers/c.rounds*c.rounds); err != nil {
		return err
	}
	return grid(w, cells)
}
