package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/segkv/segkv/bench/internal/hostinfo"
	"github.com/segkv/segkv/bench/peers"
)

// The scale workload: for each key count of -scalen and each engine, bulk
// load a fresh store while sampling the Go heap, close it, and measure the
// reopen in a fresh child process (this binary re-executed with
// scaleChildArg), whose heap holds nothing but what the engine allocates.

// scaleChildArg, as the first argument, makes peerbench the child that
// measures a reopen (see runScaleChild). It is not a flag of the command.
const scaleChildArg = "-internal-scale-child"

// settleTimeout bounds the wait for an engine's background work after a
// scale load.
const settleTimeout = 30 * time.Minute

// heapSampleEvery is how often the heap is sampled during a scale load.
const heapSampleEvery = 100 * time.Millisecond

// Scale workload names, one per figure.
const (
	scaleLoad         = "scale/load"              // s: first batch to the return of the last (synced)
	scaleSettle       = "scale/settle"            // s: then until no background work is left
	scaleHeapLoad     = "scale/heap_load"         // B: sampled peak heap during the load
	scaleHeapLoadKey  = "scale/heap_load_per_key" // B/key
	scaleLiveLoad     = "scale/live_load"         // B: peak live heap (as the last GC marked it) during the load
	scaleLiveLoadKey  = "scale/live_load_per_key" // B/key
	scaleDisk         = "scale/disk"              // B: store directory after Close
	scaleDiskKey      = "scale/disk_per_key"      // B/key
	scaleOpen         = "scale/open"              // s: Open, in the child
	scaleOpenFirstGet = "scale/open_first_get"    // s: start of Open to the first Get's return
	scaleHeapOpen     = "scale/heap_open"         // B: live heap after Open minus before
	scaleHeapOpenKey  = "scale/heap_open_per_key" // B/key
	scaleRSS          = "scale/rss_open"          // B: child's VmRSS after Open and the first Get
	scaleHWM          = "scale/hwm_open"          // B: child's VmHWM then
	scaleGet          = "scale/get"               // ops/s: Gets of present keys, 1 goroutine
	scaleMiss         = "scale/miss"              // ops/s: Gets of missing keys, 1 goroutine
	scaleScan         = "scale/scan"              // ops/s (scans/s): forward scans, 1 goroutine
)

// parseCounts parses a comma-separated list of key counts such as
// "100k,1M,20M" (suffixes k, M, G: 10^3, 10^6, 10^9, case-insensitive; a
// decimal point is allowed if the count comes out whole: 2.5M) and returns
// them ascending, each once.
func parseCounts(s string) ([]int, error) {
	var out []int
	for _, f := range hostinfo.SplitList(s) {
		n, err := parseCount(f)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no key counts")
	}
	slices.Sort(out)
	return out, nil
}

func parseCount(s string) (int, error) {
	bad := fmt.Errorf("bad key count %q (want a whole number of keys, at least 1, like 300000, 300k, 1M, 2.5M)", s)
	digits, exp := strings.ReplaceAll(s, "_", ""), 0
	if digits == "" {
		return 0, bad
	}
	switch digits[len(digits)-1] {
	case 'k', 'K':
		exp = 3
	case 'm', 'M':
		exp = 6
	case 'g', 'G':
		exp = 9
	}
	if exp > 0 {
		digits = digits[:len(digits)-1]
	}
	if whole, frac, ok := strings.Cut(digits, "."); ok {
		frac = strings.TrimRight(frac, "0")
		if len(frac) > exp || whole == "" && frac == "" {
			return 0, bad
		}
		digits, exp = whole+frac, exp-len(frac)
	}
	if digits == "" || strings.Trim(digits, "0123456789") != "" {
		return 0, bad
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return 0, bad
	}
	for ; exp > 0; exp-- {
		if n > math.MaxInt64/10 {
			return 0, bad
		}
		n *= 10
	}
	if n < 1 || n > 1<<40 {
		return 0, bad
	}
	return int(n), nil
}

// heapBytes is the Go heap's object bytes: live objects and dead ones not
// swept yet (after runtime.GC, live ones only).
func heapBytes() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// liveHeapBytes is the live heap as the last completed GC cycle marked it:
// what the program held then, whatever garbage GOGC let accumulate since.
func liveHeapBytes() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// heapPeaks are the highest samples of heapBytes and liveHeapBytes.
type heapPeaks struct{ objects, live uint64 }

// heapPeak samples heapBytes and liveHeapBytes every period until end is
// called.
type heapPeak struct {
	stop chan struct{}
	peak chan heapPeaks
}

func sampleHeap(period time.Duration) *heapPeak {
	p := &heapPeak{stop: make(chan struct{}), peak: make(chan heapPeaks, 1)}
	go func() {
		t := time.NewTicker(period)
		defer t.Stop()
		var peak heapPeaks
		sample := func() {
			peak.objects = max(peak.objects, heapBytes())
			peak.live = max(peak.live, liveHeapBytes())
		}
		sample()
		for {
			select {
			case <-t.C:
				sample()
			case <-p.stop:
				sample()
				p.peak <- peak
				return
			}
		}
	}()
	return p
}

// end stops the sampling and returns the highest samples.
func (p *heapPeak) end() heapPeaks {
	close(p.stop)
	return <-p.peak
}

// scaleLoadStats is what the parent measures of one load.
type scaleLoadStats struct {
	seconds       float64 // first batch to the last batch's return
	settleSeconds float64 // then until the engine reported no background work
	heapPeak      int64   // sampled peak heap (objects, garbage included) minus the live heap before Open
	livePeak      int64   // sampled peak live heap minus the live heap before Open
	diskBytes     int64
}

// scaleChild is the child's report: one JSON line on its stdout.
type scaleChild struct {
	Kind   string `json:"kind"` // "scale-child"
	Engine string `json:"engine"`
	N      int    `json:"n"`
	// HeapBefore is the live heap before Open, HeapAfter after Open and
	// the first Get (each after runtime.GC; twice for HeapAfter).
	HeapBefore uint64  `json:"heap_before"`
	HeapAfter  uint64  `json:"heap_after"`
	OpenS      float64 `json:"open_s"`
	FirstGetS  float64 `json:"open_first_get_s"`
	// RSS and HWM are VmRSS and VmHWM from /proc/self/status, in bytes,
	// right after HeapAfter; 0 where there is none (not Linux).
	RSS int64 `json:"vm_rss,omitempty"`
	HWM int64 `json:"vm_hwm,omitempty"`
	// The read measurements: operations (for scans, also keys visited) and
	// wall time.
	Gets     int64   `json:"gets"`
	GetS     float64 `json:"get_s"`
	Misses   int64   `json:"misses"`
	MissS    float64 `json:"miss_s"`
	Scans    int64   `json:"scans"`
	ScanKeys int64   `json:"scan_keys"`
	ScanS    float64 `json:"scan_s"`
}

const scaleChildKind = "scale-child"

// scale runs the scale workload: key counts ascending, engines in run order
// within each, one store on disk at a time.
func (b *bench) scale(ctx context.Context) ([]result, error) {
	var rows []result
	for _, n := range b.c.scaleN {
		for _, name := range b.c.engines {
			r, err := b.scaleOne(ctx, name, n)
			if err != nil {
				return nil, fmt.Errorf("scale n=%d %s: %w", n, name, err)
			}
			rows = append(rows, r...)
		}
	}
	return rows, nil
}

func (b *bench) scaleOne(ctx context.Context, name string, n int) (rows []result, err error) {
	dir := filepath.Join(b.root, "scale", strconv.Itoa(n), name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if !b.c.keep {
		defer func() { err = errors.Join(err, os.RemoveAll(dir)) }()
	}
	var ls scaleLoadStats
	err = labelled(ctx, name, "scale", func(context.Context) error {
		w := newBatchWriter(b.c.batch) // allocated before the baseline: the bench's, not the engine's
		runtime.GC()
		base, liveBase := heapBytes(), liveHeapBytes()
		peak := sampleHeap(heapSampleEvery)
		db, err := b.engine[name].Open(dir, peers.Bulk)
		if err != nil {
			peak.end()
			return err
		}
		// The load: the first batch to the return of the last, synced.
		start := time.Now()
		if err := w.write(db, uint64(n), true); err != nil {
			peak.end()
			return errors.Join(err, db.Close())
		}
		ls.seconds = time.Since(start).Seconds()
		// Then the background work the load left (merges, compactions),
		// so that the reads measure the store as it stays, not one
		// being rewritten under them.
		if st, ok := db.(peers.Settler); ok {
			settleStart := time.Now()
			sctx, cancel := context.WithTimeout(ctx, settleTimeout)
			err := st.Settle(sctx, 100*time.Millisecond)
			cancel()
			if err != nil {
				peak.end()
				return errors.Join(fmt.Errorf("settle: %w", err), db.Close())
			}
			ls.settleSeconds = time.Since(settleStart).Seconds()
		}
		err = db.Close()
		peaks := peak.end()
		ls.heapPeak = int64(peaks.objects) - int64(base)
		ls.livePeak = int64(peaks.live) - int64(liveBase)
		if err != nil {
			return fmt.Errorf("close: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if ls.diskBytes, err = dirSize(dir); err != nil {
		return nil, err
	}
	b.progress("%-6s n=%d %-9s load %.2f s, settle %.2f s, heap peak %s (%.1f B/key), live heap peak %s, %s on disk (%.1f B/key)", "scale", n, name,
		ls.seconds, ls.settleSeconds, mib(ls.heapPeak), float64(ls.heapPeak)/float64(n), mib(ls.livePeak), mib(ls.diskBytes), float64(ls.diskBytes)/float64(n))
	ch, err := b.reopenInChild(ctx, name, dir, n)
	if err != nil {
		return nil, err
	}
	heap := int64(ch.HeapAfter) - int64(ch.HeapBefore)
	b.progress("%-6s n=%d %-9s open %.4f s, to first Get %.4f s, heap %s (%.1f B/key), VmRSS %s, VmHWM %s; get %.0f ops/s, miss %.0f ops/s, scan %.0f scans/s",
		"scale", n, name, ch.OpenS, ch.FirstGetS, mib(heap), float64(heap)/float64(n), mib(ch.RSS), mib(ch.HWM),
		float64(ch.Gets)/ch.GetS, float64(ch.Misses)/ch.MissS, float64(ch.Scans)/ch.ScanS)
	return scaleRows(name, n, ls, ch), nil
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// reopenInChild runs the reopen measurements of the store in dir in a fresh
// process and returns its report.
func (b *bench) reopenInChild(ctx context.Context, name, dir string, n int) (scaleChild, error) {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	cmd := exec.CommandContext(ctx, exe, scaleChildArg,
		"-engine", name, "-dir", dir, "-n", strconv.Itoa(n), "-gets", strconv.Itoa(b.c.gets),
		"-scanlen", strconv.Itoa(b.c.scanLen), "-duration", b.c.duration.String())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return scaleChild{}, fmt.Errorf("reopen in a child process: %w; its stderr: %s", err, tail(stderr.String(), 2000))
	}
	ch, err := parseScaleChild(stdout.Bytes())
	if err != nil {
		return scaleChild{}, err
	}
	if ch.Engine != name || ch.N != n {
		return scaleChild{}, fmt.Errorf("child reported engine %q n=%d, want %q n=%d", ch.Engine, ch.N, name, n)
	}
	return ch, nil
}

func tail(s string, max int) string {
	s = strings.TrimSpace(s)
	if len(s) > max {
		s = "..." + s[len(s)-max:]
	}
	if s == "" {
		return "(empty)"
	}
	return s
}

// parseScaleChild finds the child's report in its stdout: the last line
// that is a scale-child object (an engine writing to stdout cannot hide it).
func parseScaleChild(out []byte) (scaleChild, error) {
	var found *scaleChild
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var ch scaleChild
		if json.Unmarshal(sc.Bytes(), &ch) == nil && ch.Kind == scaleChildKind {
			found = &ch
		}
	}
	if err := sc.Err(); err != nil {
		return scaleChild{}, fmt.Errorf("child's output: %w", err)
	}
	if found == nil {
		return scaleChild{}, fmt.Errorf("no %s line in the child's output: %s", scaleChildKind, tail(string(out), 2000))
	}
	return *found, nil
}

// scaleRows turns one engine's figures at one key count into result rows.
func scaleRows(name string, n int, ls scaleLoadStats, ch scaleChild) []result {
	perKey := func(b int64) float64 { return float64(b) / float64(n) }
	heap := int64(ch.HeapAfter) - int64(ch.HeapBefore)
	rows := []result{
		{Workload: scaleLoad, Unit: "s", Value: ls.seconds, Ops: int64(n), Seconds: ls.seconds},
		{Workload: scaleSettle, Unit: "s", Value: ls.settleSeconds, Seconds: ls.settleSeconds},
		{Workload: scaleHeapLoad, Unit: "B", Value: float64(ls.heapPeak)},
		{Workload: scaleHeapLoadKey, Unit: "B/key", Value: perKey(ls.heapPeak)},
		{Workload: scaleLiveLoad, Unit: "B", Value: float64(ls.livePeak)},
		{Workload: scaleLiveLoadKey, Unit: "B/key", Value: perKey(ls.livePeak)},
		{Workload: scaleDisk, Unit: "B", Value: float64(ls.diskBytes), DiskBytes: ls.diskBytes},
		{Workload: scaleDiskKey, Unit: "B/key", Value: perKey(ls.diskBytes)},
		{Workload: scaleOpen, Unit: "s", Value: ch.OpenS, Ops: 1, Seconds: ch.OpenS},
		{Workload: scaleOpenFirstGet, Unit: "s", Value: ch.FirstGetS, Ops: 1, Seconds: ch.FirstGetS},
		{Workload: scaleHeapOpen, Unit: "B", Value: float64(heap)},
		{Workload: scaleHeapOpenKey, Unit: "B/key", Value: perKey(heap)},
	}
	if ch.RSS > 0 {
		rows = append(rows, result{Workload: scaleRSS, Unit: "B", Value: float64(ch.RSS)})
	}
	if ch.HWM > 0 {
		rows = append(rows, result{Workload: scaleHWM, Unit: "B", Value: float64(ch.HWM)})
	}
	rows = append(rows,
		result{Workload: scaleGet, Unit: "ops/s", Value: float64(ch.Gets) / ch.GetS, Ops: ch.Gets, Seconds: ch.GetS},
		result{Workload: scaleMiss, Unit: "ops/s", Value: float64(ch.Misses) / ch.MissS, Ops: ch.Misses, Seconds: ch.MissS},
		result{Workload: scaleScan, Unit: "ops/s", Value: float64(ch.Scans) / ch.ScanS, Ops: ch.Scans, Seconds: ch.ScanS,
			Keys: ch.ScanKeys, KeysPerS: float64(ch.ScanKeys) / ch.ScanS},
	)
	for i := range rows {
		rows[i].Engine, rows[i].N = name, n
	}
	return rows
}

// scaleChildMain is the child process's main: main (and the tests' TestMain)
// call it when the first argument is scaleChildArg. It returns the exit code.
func scaleChildMain(args []string) int {
	if err := runScaleChild(args, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "peerbench scale child:", err)
		return 2
	}
	return 0
}

// runScaleChild opens the store, measures, closes it and prints one
// scaleChild line on stdout.
func runScaleChild(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("peerbench "+scaleChildArg, flag.ContinueOnError)
	engine := fs.String("engine", "", "engine")
	dir := fs.String("dir", "", "store directory")
	n := fs.Int("n", 0, "keys in the store: numbers [0, n)")
	gets := fs.Int("gets", 200_000, "Gets per measurement")
	scanLen := fs.Int("scanlen", 100, "keys per scan")
	duration := fs.Duration("duration", 4*time.Second, "time of the scan measurement")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" || *n < 1 || *gets < 1 || *scanLen < 1 || *duration <= 0 || fs.NArg() > 0 {
		return fmt.Errorf("bad arguments %q", args)
	}
	e, err := peers.Lookup(*engine)
	if err != nil {
		return err
	}
	ch, err := scaleReopen(e, *dir, *n, *gets, *scanLen, *duration)
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(ch)
}

// scaleReopen does the child's measurements.
func scaleReopen(e peers.Engine, dir string, n, gets, scanLen int, duration time.Duration) (ch scaleChild, err error) {
	ch = scaleChild{Kind: scaleChildKind, Engine: e.Name(), N: n}
	var kb [peers.KeySize]byte
	key := peers.Key(kb[:], 0)
	runtime.GC()
	ch.HeapBefore = heapBytes()
	start := time.Now()
	db, err := e.Open(dir, peers.Durable)
	if err != nil {
		return ch, err
	}
	ch.OpenS = time.Since(start).Seconds()
	v, found, err := db.Get(key, nil)
	ch.FirstGetS = time.Since(start).Seconds()
	if err == nil && (!found || len(v) != peers.ValueSize) {
		err = fmt.Errorf("key 0 after reopen: found=%v len=%d", found, len(v))
	}
	if err != nil {
		return ch, errors.Join(err, db.Close())
	}
	defer func() {
		if cerr := db.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("close: %w", cerr))
		}
	}()
	// Twice: objects with finalizers (files) need a second cycle to go.
	runtime.GC()
	runtime.GC()
	ch.HeapAfter = heapBytes()
	ch.RSS, ch.HWM = procMemory()

	// Reads as the get1, miss1 and scan1 workloads do them, after the same
	// untimed warm-ups.
	if _, _, err := getN(db, gets/4+1, 2, 0, uint64(n), true, 1); err != nil {
		return ch, fmt.Errorf("warm-up: %w", err)
	}
	var d time.Duration
	if ch.Gets, d, err = getN(db, gets, 1, 0, uint64(n), true, 2); err != nil {
		return ch, fmt.Errorf("get: %w", err)
	}
	ch.GetS = d.Seconds()
	if ch.Misses, d, err = getN(db, gets, 1, uint64(n), uint64(n), false, 3); err != nil {
		return ch, fmt.Errorf("miss: %w", err)
	}
	ch.MissS = d.Seconds()
	ks := newKeySpace(n)
	if _, err := scanFor(db, ks, scanLen, 1, false, duration/8, true, 99); err != nil {
		return ch, fmt.Errorf("scan warm-up: %w", err)
	}
	st, err := scanFor(db, ks, scanLen, 1, false, duration, false, 100)
	if err != nil {
		return ch, fmt.Errorf("scan: %w", err)
	}
	ch.Scans, ch.ScanKeys, ch.ScanS = st.scans, st.keys, st.elapsed.Seconds()
	return ch, nil
}

// scaleValue is one engine's figure at one key count.
func scaleValue(rows []result, workload string, n int, engine string) (float64, bool) {
	for _, r := range rows {
		if r.Workload == workload && r.N == n && r.Engine == engine {
			return r.Value, true
		}
	}
	return 0, false
}

// scaleRatio is segkv's figure over the peer's at the same key count.
func scaleRatio(rows []result, workload string, n int, peer string) (float64, bool) {
	s, ok1 := scaleValue(rows, workload, n, "segkv")
	p, ok2 := scaleValue(rows, workload, n, peer)
	if !ok1 || !ok2 || p == 0 {
		return 0, false
	}
	return s / p, true
}

// writeScaleTable writes one table per key count, one row per engine.
func writeScaleTable(w io.Writer, res *results) error {
	c := res.Config
	var b strings.Builder
	fmt.Fprintf(&b, "\nscale: %d-byte keys, %d-byte values in random order, bulk-loaded in batches of %d, closed, reopened (durable mode) in a fresh child process.\n",
		peers.KeySize, peers.ValueSize, c.batch)
	b.WriteString("  load: first batch to the return of the last (synced). settle: from then until the engine reported no background work left\n")
	b.WriteString("    (segkv: Seal, then Metrics.MergeBacklog 0; Pebble: Flush, then no flush or compaction for 1 s); then Close. disk: the directory after Close.\n")
	b.WriteString("  heap@load: peak of the Go heap's objects (live and not yet collected, so GOGC's share too) sampled every 100 ms from Open to the end\n")
	b.WriteString("    of Close, minus the live heap before Open; live@load: the same for the live heap as the last GC marked it (/gc/heap/live:bytes),\n")
	b.WriteString("    what the engine held (memory an engine allocates outside the Go heap, such as Pebble's block cache, is in neither).\n")
	b.WriteString("  In the child: open: Open; open-get: start of Open to the return of the first Get; heap@open: live Go heap after Open and the first Get\n")
	b.WriteString("    minus before Open (runtime.GC each time); VmRSS, VmHWM: the child's, right then (Go runtime and non-Go memory included).\n")
	fmt.Fprintf(&b, "  get, miss: %d random Gets of present / missing keys, 1 goroutine; scan: forward scans of %d keys from random keys, 1 goroutine, %v.\n",
		c.gets, c.scanLen, c.duration)
	cols := []struct {
		name, unit, workload string
		format               func(float64) string
	}{
		{"load", "s", scaleLoad, func(v float64) string { return fmt.Sprintf("%.2f", v) }},
		{"settle", "s", scaleSettle, func(v float64) string { return fmt.Sprintf("%.2f", v) }},
		{"heap@load", "B/key", scaleHeapLoadKey, perKeyString},
		{"live@load", "MiB", scaleLiveLoad, func(v float64) string { return fmt.Sprintf("%.0f", v/(1<<20)) }},
		{"disk", "B/key", scaleDiskKey, perKeyString},
		{"open", "ms", scaleOpen, msString},
		{"open-get", "ms", scaleOpenFirstGet, msString},
		{"heap@open", "B/key", scaleHeapOpenKey, perKeyString},
		{"VmRSS", "MiB", scaleRSS, func(v float64) string { return fmt.Sprintf("%.0f", v/(1<<20)) }},
		{"VmHWM", "MiB", scaleHWM, func(v float64) string { return fmt.Sprintf("%.0f", v/(1<<20)) }},
		{"get", "ops/s", scaleGet, func(v float64) string { return commas(int64(v + 0.5)) }},
		{"miss", "ops/s", scaleMiss, func(v float64) string { return commas(int64(v + 0.5)) }},
		{"scan", "scans/s", scaleScan, func(v float64) string { return commas(int64(v + 0.5)) }},
	}
	for _, n := range c.scaleN {
		table := [][]string{{"engine"}, {""}}
		for _, col := range cols {
			table[0] = append(table[0], col.name)
			table[1] = append(table[1], col.unit)
		}
		for _, name := range c.engines {
			row := []string{name}
			for _, col := range cols {
				cell := "-"
				if v, ok := scaleValue(res.Scale, col.workload, n, name); ok {
					cell = col.format(v)
				}
				row = append(row, cell)
			}
			table = append(table, row)
		}
		fmt.Fprintf(&b, "\nn = %s keys\n", commas(int64(n)))
		writeAligned(&b, table)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeAligned writes cells in columns: the first left-aligned, the others
// right-aligned, two spaces apart.
func writeAligned(b *strings.Builder, table [][]string) {
	var width []int
	for _, row := range table {
		for i, cell := range row {
			if i == len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], len(cell))
		}
	}
	for _, row := range table {
		var line strings.Builder
		for i, cell := range row {
			if i == 0 {
				fmt.Fprintf(&line, "%-*s", width[i], cell)
				continue
			}
			fmt.Fprintf(&line, "  %*s", width[i], cell)
		}
		b.WriteString(strings.TrimRight(line.String(), " ") + "\n")
	}
}

func perKeyString(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 1:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func msString(v float64) string {
	switch ms := v * 1000; {
	case ms >= 100:
		return fmt.Sprintf("%.0f", ms)
	case ms >= 10:
		return fmt.Sprintf("%.1f", ms)
	default:
		return fmt.Sprintf("%.2f", ms)
	}
}
