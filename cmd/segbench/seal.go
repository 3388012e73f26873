package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/segkv/segkv/cmd/segbench/internal/legacy"
	"github.com/segkv/segkv/segstore"
	"github.com/segkv/segkv/vfs"
)

// Defaults of the seal subcommand: what `make bench` runs. Sized so that
// both protocols together finish well under a minute on this machine's
// virtual disk (the rewrite protocol pays six fsyncs per seal).
const (
	defaultSealSegments = 1000
	defaultSealStep     = 250
	// sealChunk bounds how many seals one protocol runs before the other
	// takes a turn, so that drift of the disk hits both alike.
	sealChunk = 25
)

// The two seal protocols, by the names the output uses.
const (
	// protoSegkv is the store itself.
	protoSegkv = "segkv"
	// protoRewrite is the reference design segkv replaces: every file of a
	// seal written to a temporary name, fsynced, renamed and its directory
	// fsynced, the manifest rewritten whole (cmd/segbench/internal/legacy).
	protoRewrite = "rewrite"
)

// protocolName maps a -protocol value (or a protocol field of older JSON
// output, which said "new" and "legacy") to the current name.
func protocolName(s string) (string, bool) {
	switch s {
	case protoSegkv, "new":
		return protoSegkv, true
	case protoRewrite, "legacy":
		return protoRewrite, true
	}
	return "", false
}

// sealRow is one step of one protocol.
type sealRow struct {
	Protocol string `json:"protocol"`
	Segments int    `json:"segments"`
	// Wall time of Seal alone, over the seals of this step.
	USPerSeal float64 `json:"us_per_seal"` // median
	USP99     float64 `json:"us_p99"`
	// Median over the step of the time each seal spent inside its own
	// fsyncs: how much of us_per_seal is the barriers.
	FsyncUSPerSeal float64 `json:"fsync_us_per_seal"`
	// Barriers on the seal's critical path, per seal, averaged over the step.
	// fsyncs counts file and directory syncs alike, as strace does.
	FsyncsPerSeal   float64 `json:"fsyncs_per_seal"`
	DirsyncsPerSeal float64 `json:"dirsyncs_per_seal"`
	RenamesPerSeal  float64 `json:"renames_per_seal"`
	// Barriers of the store's background goroutine (making the next live
	// file ahead of need), per seal. Zero for legacy, which has none.
	BgFsyncsPerSeal   float64 `json:"bg_fsyncs_per_seal"`
	BgDirsyncsPerSeal float64 `json:"bg_dirsyncs_per_seal"`
	// Seals of the step that found no spare live file ready and made one on
	// their critical path (new only).
	SpareMisses int64 `json:"spare_misses"`
	// Manifest bytes at the end of the step: the bytes written into the
	// manifest files that exist now, and those files' size on disk, which
	// for new includes space preallocated ahead of the log's tail.
	ManifestBytes     int64 `json:"manifest_bytes"`
	ManifestFileBytes int64 `json:"manifest_file_bytes"`
	// Manifest bytes written over the step per seal, checkpoints and
	// temporary files included.
	ManifestBytesWrittenPerSeal float64 `json:"manifest_bytes_written_per_seal"`
}

// sealNarrowRow is the default table's view of a sealRow: the columns a
// first-time reader needs, each explained by sealLegend. -wide (and -json)
// print everything.
type sealNarrowRow struct{ sealRow }

func (sealNarrowRow) Header() []string {
	return []string{"protocol", "segments", "median us/seal", "p99 us/seal", "fsyncs/seal", "manifest bytes/seal"}
}

func (r sealNarrowRow) Cells() []string {
	return []string{r.Protocol, itoa(r.Segments), ftoa(r.USPerSeal, 0), ftoa(r.USP99, 0), ftoa(r.FsyncsPerSeal, 2),
		ftoa(r.ManifestBytesWrittenPerSeal, 0)}
}

// sealLegend explains the default table, one line per column.
var sealLegend = []string{
	"protocol: segkv = this store's seal; rewrite = the reference design it replaces (each file written to a",
	"  temporary name, fsynced, renamed, directory fsynced; the whole manifest rewritten on every seal)",
	"segments: segments sealed so far; each row covers the seals since the previous row",
	"median us/seal, p99 us/seal: wall time of one Seal call, in microseconds",
	"fsyncs/seal: file and directory syncs on the seal's critical path (what a caller waits for)",
	"manifest bytes/seal: bytes written to the manifest per seal (flat for segkv, growing for rewrite)",
	"ratio: rewrite divided by segkv at the last row; -wide shows every column, -json every field",
}

func (sealRow) Header() []string {
	return []string{"protocol", "segments", "us/seal", "p99 us", "fsync us/seal", "fsyncs/seal", "dirsyncs/seal", "renames/seal",
		"bg fsyncs/seal", "bg dirsyncs/seal", "spare misses", "manifest B", "manifest file B", "manifest B written/seal"}
}

func (r sealRow) Cells() []string {
	return []string{r.Protocol, itoa(r.Segments), ftoa(r.USPerSeal, 0), ftoa(r.USP99, 0), ftoa(r.FsyncUSPerSeal, 0), ftoa(r.FsyncsPerSeal, 2),
		ftoa(r.DirsyncsPerSeal, 2), ftoa(r.RenamesPerSeal, 2), ftoa(r.BgFsyncsPerSeal, 2), ftoa(r.BgDirsyncsPerSeal, 2),
		itoa(r.SpareMisses), itoa(r.ManifestBytes), itoa(r.ManifestFileBytes), ftoa(r.ManifestBytesWrittenPerSeal, 0)}
}

// sealRatioRow is the final row: rewrite divided by segkv, at the last step.
type sealRatioRow struct {
	Protocol                    string  `json:"protocol"` // "ratio"
	Segments                    int     `json:"segments"`
	USPerSeal                   float64 `json:"us_per_seal"`
	FsyncsPerSeal               float64 `json:"fsyncs_per_seal"`
	ManifestBytesWrittenPerSeal float64 `json:"manifest_bytes_written_per_seal"`
}

func (sealRatioRow) Header() []string {
	return []string{"rewrite/segkv", "segments", "median us/seal", "fsyncs/seal", "manifest bytes/seal"}
}

func (r sealRatioRow) Cells() []string {
	return []string{r.Protocol, itoa(r.Segments), ftoa(r.USPerSeal, 2), ftoa(r.FsyncsPerSeal, 2), ftoa(r.ManifestBytesWrittenPerSeal, 2)}
}

type sealConfig struct {
	segments    int
	step        int
	protocols   []string
	segmentSize int64
	timeOps     bool
}

// sealOpRow (seal -ops) is the mean time per seal one protocol's critical
// path spent in one kind of vfs operation, over the whole run.
type sealOpRow struct {
	Breakdown    string  `json:"breakdown"` // the protocol
	Op           string  `json:"op"`
	CallsPerSeal float64 `json:"calls_per_seal"`
	USPerSeal    float64 `json:"us_per_seal"` // mean
}

func (sealOpRow) Header() []string {
	return []string{"breakdown", "op", "calls/seal", "mean us/seal"}
}

func (r sealOpRow) Cells() []string {
	return []string{r.Breakdown, r.Op, ftoa(r.CallsPerSeal, 2), ftoa(r.USPerSeal, 1)}
}

func runSeal(ctx context.Context, e *env, args []string) error {
	var c common
	fs := newFlagSet("seal", e)
	c.register(fs, true)
	segments := fs.Int("segments", defaultSealSegments, "seal this many segments with each protocol")
	step := fs.Int("step", defaultSealStep, "report every this many segments")
	protocol := fs.String("protocol", "both", "segkv (this store), rewrite (the reference design it replaces) or both")
	wide := fs.Bool("wide", false, "print every column (background syncs, renames, manifest sizes), not the default few")
	segSize := fs.Int64("segment-size", 0, "new protocol: Options.SegmentSize, how much each live file preallocates (0: the store's default)")
	timeOps := fs.Bool("ops", false, "also break each protocol's mean seal time down by vfs operation (costs a stack walk per read and write)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := c.validate(); err != nil {
		return err
	}
	cfg := sealConfig{segments: *segments, step: *step, segmentSize: *segSize, timeOps: *timeOps}
	if *protocol == "both" {
		cfg.protocols = []string{protoRewrite, protoSegkv}
	} else if name, ok := protocolName(*protocol); ok {
		cfg.protocols = []string{name}
	} else {
		return usagef("-protocol must be segkv, rewrite or both, not %q", *protocol)
	}
	if cfg.segments < 1 {
		return usagef("-segments must be at least 1, not %d", cfg.segments)
	}
	if cfg.step < 1 || cfg.step > cfg.segments {
		return usagef("-step must be between 1 and -segments (%d), not %d", cfg.segments, cfg.step)
	}
	if cfg.segmentSize != 0 && cfg.segmentSize < 4<<10 {
		return usagef("-segment-size must be 0 or at least 4096, not %d", cfg.segmentSize)
	}

	ws, err := c.open()
	if err != nil {
		return err
	}
	defer ws.cleanup()
	stop, err := c.startProfiles()
	if err != nil {
		return err
	}
	rows, totals, err := sealBench(ctx, ws, cfg, e)
	if serr := stop(); err == nil {
		err = serr
	}
	if err != nil {
		return err
	}
	p := newPrinter(e.stdout, c.json)
	if err := p.Note("segbench seal: %d segments per protocol, rows every %d, in %s", cfg.segments, cfg.step, ws.desc); err != nil {
		return err
	}
	for _, r := range rows {
		if sr, ok := r.(sealRow); ok && !*wide && !c.json {
			r = sealNarrowRow{sr}
		}
		if err := p.Print(r); err != nil {
			return err
		}
	}
	if err := p.Flush(); err != nil {
		return err
	}
	if !*wide {
		for _, l := range sealLegend {
			if err := p.Note("%s", l); err != nil {
				return err
			}
		}
		totals = nil // whole-run syscall totals are a detail: -wide
	}
	for _, t := range totals {
		if err := p.Note("%s", t); err != nil {
			return err
		}
	}
	return ws.cleanup()
}

// sealer is one protocol under test.
type sealer interface {
	// sealOne puts record i and seals it. It returns the wall time of the
	// seal alone and the barriers on its critical path.
	sealOne(ctx context.Context, i int) (time.Duration, opCounts, error)
	// quiesce waits (briefly, bounded) until background work of the last
	// seal is done, so that the next seal starts from a steady state.
	quiesce(ctx context.Context) error
	// background returns the background goroutine's counts so far.
	background() opCounts
	// totals returns the counting vfs's totals so far (every goroutine), and
	// manifest bytes written.
	totals() (opCounts, int64)
	// foreground returns all non-background counts so far, seal or not.
	foreground() opCounts
	spareMisses() int64
	// manifestOnDisk returns the bytes written into the manifest files that
	// exist now, and their size on disk.
	manifestOnDisk() (logical, file int64, err error)
	close() error
}

// stepState accumulates one protocol's current step.
type stepState struct {
	samples        []time.Duration
	syncTimes      []time.Duration
	fg             opCounts // critical-path counts of the step's seals
	startBg        opCounts
	startFg        opCounts
	startManifestW int64
	startMisses    int64
}

func (st *stepState) begin(s sealer) {
	st.samples = st.samples[:0]
	st.syncTimes = st.syncTimes[:0]
	st.fg = opCounts{}
	st.startBg = s.background()
	st.startFg = s.foreground()
	_, st.startManifestW = s.totals()
	st.startMisses = s.spareMisses()
}

// sealBench runs the protocols interleaved in chunks and returns the rows,
// ordered by segment count, then protocol, then the ratio row; and, per
// protocol, a line with the counting vfs's totals over the whole run (open
// and close included), which is what strace -c counts.
func sealBench(ctx context.Context, ws *workspace, cfg sealConfig, e *env) ([]row, []string, error) {
	sealers := make([]sealer, len(cfg.protocols))
	for k, name := range cfg.protocols {
		dir := filepath.Join(ws.root, name)
		err := ws.mkdir(dir)
		switch {
		case err != nil:
		case name == protoRewrite:
			sealers[k], err = openLegacySealer(ws.newFS(), dir, cfg.timeOps)
		case name == protoSegkv:
			sealers[k], err = openNewSealer(ctx, ws.newFS(), dir, cfg.segmentSize, cfg.timeOps)
		}
		if err != nil {
			for _, s := range sealers[:k] {
				s.close()
			}
			return nil, nil, fmt.Errorf("open %s store: %w", name, err)
		}
	}
	defer func() {
		for _, s := range sealers {
			if s != nil {
				s.close()
			}
		}
	}()

	prog := e.progress()
	done := make([]int, len(sealers))
	states := make([]stepState, len(sealers))
	// Whole-run sums of the critical path, for -ops.
	runFg := make([]opCounts, len(sealers))
	runWall := make([]time.Duration, len(sealers))
	byProto := make(map[string][]sealRow)
	for k, s := range sealers {
		if err := s.quiesce(ctx); err != nil {
			return nil, nil, err
		}
		states[k].begin(s)
	}
	for round := 0; ; round++ {
		progressed := false
		for j := range sealers {
			// Alternate which protocol goes first, so that neither always
			// follows the other's burst of I/O.
			k := j
			if round%2 == 1 {
				k = len(sealers) - 1 - j
			}
			s, st := sealers[k], &states[k]
			for c := 0; c < sealChunk && done[k] < cfg.segments; c++ {
				if err := ctx.Err(); err != nil {
					return nil, nil, err
				}
				d, fg, err := s.sealOne(ctx, done[k])
				if err != nil {
					return nil, nil, fmt.Errorf("%s: seal %d: %w", cfg.protocols[k], done[k]+1, err)
				}
				st.samples = append(st.samples, d)
				st.syncTimes = append(st.syncTimes, time.Duration(fg.SyncNanos))
				st.fg = st.fg.add(fg)
				runFg[k] = runFg[k].add(fg)
				runWall[k] += d
				done[k]++
				progressed = true
				if err := s.quiesce(ctx); err != nil {
					return nil, nil, err
				}
				if done[k]%cfg.step == 0 || done[k] == cfg.segments {
					r, err := finishStep(cfg.protocols[k], done[k], s, st, e)
					if err != nil {
						return nil, nil, err
					}
					byProto[cfg.protocols[k]] = append(byProto[cfg.protocols[k]], r)
					st.begin(s)
				}
			}
		}
		if !progressed {
			break
		}
		status := ""
		for k, name := range cfg.protocols {
			status += fmt.Sprintf(" %s %d/%d", name, done[k], cfg.segments)
		}
		prog.Update("seal:%s", status)
	}
	prog.Done()
	var totals []string
	for k, s := range sealers {
		sealers[k] = nil
		if err := s.close(); err != nil {
			return nil, nil, fmt.Errorf("close %s store: %w", cfg.protocols[k], err)
		}
		// Everything is quiet now (Close waits for background work): the
		// split by caller must account for exactly what the counting vfs saw.
		t, _ := s.totals()
		if split := s.foreground().add(s.background()); !split.sameOps(t) {
			fmt.Fprintf(e.stderr, "segbench seal: warning: %s: counts by caller %+v differ from the counting vfs %+v\n",
				cfg.protocols[k], split, t)
		}
		totals = append(totals, fmt.Sprintf("%s, whole run with open and close (compare strace -c): %d fsyncs+fdatasyncs (%d of directories), %d renames",
			cfg.protocols[k], t.fsyncs(), t.DirSyncs, t.Renames))
	}

	var rows []row
	for i := range byProto[cfg.protocols[0]] {
		for _, name := range cfg.protocols {
			rows = append(rows, byProto[name][i])
		}
	}
	if l, n := byProto[protoRewrite], byProto[protoSegkv]; len(l) > 0 && len(n) > 0 {
		a, b := l[len(l)-1], n[len(n)-1]
		rows = append(rows, sealRatioRow{
			Protocol:                    "ratio",
			Segments:                    a.Segments,
			USPerSeal:                   ratio(a.USPerSeal, b.USPerSeal),
			FsyncsPerSeal:               ratio(a.FsyncsPerSeal, b.FsyncsPerSeal),
			ManifestBytesWrittenPerSeal: ratio(a.ManifestBytesWrittenPerSeal, b.ManifestBytesWrittenPerSeal),
		})
	}
	if cfg.timeOps {
		for k, name := range cfg.protocols {
			rows = append(rows, opBreakdown(name, done[k], runFg[k], runWall[k])...)
		}
	}
	return rows, totals, nil
}

// opBreakdown turns a protocol's whole-run critical-path timings into rows:
// the mean wall time of a seal, each kind of operation, and what is left
// (CPU, scheduling, locks).
func opBreakdown(name string, seals int, fg opCounts, wall time.Duration) []row {
	n := float64(seals)
	perSeal := func(ns int64) float64 { return round(float64(ns)/1e3/n, 1) }
	rows := []row{sealOpRow{Breakdown: name, Op: "seal (wall)", CallsPerSeal: 1, USPerSeal: perSeal(int64(wall))}}
	rest := int64(wall)
	for op := range numOps {
		if fg.Calls[op] == 0 {
			continue
		}
		rest -= fg.Nanos[op]
		rows = append(rows, sealOpRow{Breakdown: name, Op: op.String(), CallsPerSeal: round(float64(fg.Calls[op])/n, 2), USPerSeal: perSeal(fg.Nanos[op])})
	}
	return append(rows, sealOpRow{Breakdown: name, Op: "outside the vfs", USPerSeal: perSeal(rest)})
}

// finishStep turns a step's samples and counters into a row, and checks
// that every foreground barrier of the step happened inside a Seal.
func finishStep(name string, segments int, s sealer, st *stepState, e *env) (sealRow, error) {
	n := float64(len(st.samples))
	bg := s.background().sub(st.startBg)
	fgAll := s.foreground().sub(st.startFg)
	_, manifestW := s.totals()
	if !fgAll.sameOps(st.fg) {
		// Barriers outside Seal on the benchmark's own goroutine (a Put that
		// synced, say) would be neither critical path nor background.
		fmt.Fprintf(e.stderr, "segbench seal: warning: %s at %d: %+v of foreground barriers happened outside Seal\n",
			name, segments, fgAll.sub(st.fg))
	}
	logical, file, err := s.manifestOnDisk()
	if err != nil {
		return sealRow{}, err
	}
	d := summarize(slices.Clone(st.samples))
	ds := summarize(slices.Clone(st.syncTimes))
	return sealRow{
		Protocol:                    name,
		Segments:                    segments,
		USPerSeal:                   round(us(d.p50), 0),
		USP99:                       round(us(d.p99), 0),
		FsyncUSPerSeal:              round(us(ds.p50), 0),
		FsyncsPerSeal:               round(float64(st.fg.fsyncs())/n, 3),
		DirsyncsPerSeal:             round(float64(st.fg.DirSyncs)/n, 3),
		RenamesPerSeal:              round(float64(st.fg.Renames)/n, 3),
		BgFsyncsPerSeal:             round(float64(bg.fsyncs())/n, 3),
		BgDirsyncsPerSeal:           round(float64(bg.DirSyncs)/n, 3),
		SpareMisses:                 s.spareMisses() - st.startMisses,
		ManifestBytes:               logical,
		ManifestFileBytes:           file,
		ManifestBytesWrittenPerSeal: round(float64(manifestW-st.startManifestW)/n, 1),
	}, nil
}

// sealRecord returns the one record sealed as segment i: a 32-byte key and a
// 100-byte value, the sizes of the peer measurements.
func sealRecord(i int) (key, value []byte) {
	key = fmt.Appendf(nil, "seal-%027d", i)
	value = make([]byte, 100)
	for j := range value {
		value[j] = byte('a' + (i+j)%26)
	}
	return key, value
}

// counted is the stack every protocol runs on: the classifier above the
// counting vfs above the real (or in-memory) file system.
type counted struct {
	cnt *vfs.Counting
	cls *classifyFS
}

func newCounted(base vfs.FS, timeOps bool) counted {
	cnt := vfs.NewCounting(base)
	return counted{cnt: cnt, cls: newClassifyFS(cnt, timeOps)}
}

// manifestOnDisk sums over the manifest files in dir (the legacy manifest,
// or the new log and its checkpoint generations): what was written into
// them through this vfs, and their size. The new manifest files are written
// in place, append only, so the bytes written into one that still exists
// are its logical size, however much is preallocated past them. A file that
// got its name by a rename (legacy) was written whole: its size is its
// logical size.
func (c counted) manifestOnDisk(dir string) (logical, file int64, err error) {
	names, err := c.cnt.List(dir)
	if err != nil {
		return 0, 0, fmt.Errorf("list %s: %w", dir, err)
	}
	written := c.cnt.Counts().BytesWritten
	for _, name := range names {
		if !isManifest(name) {
			continue
		}
		p := filepath.Join(dir, name)
		sz, err := c.cnt.Stat(p)
		if err != nil {
			return 0, 0, fmt.Errorf("stat manifest: %w", err)
		}
		file += sz
		if w, ok := written[p]; ok {
			logical += min(w, sz)
		} else {
			logical += sz
		}
	}
	return logical, file, nil
}

func (c counted) background() opCounts { return c.cls.Background() }
func (c counted) foreground() opCounts { return c.cls.Foreground() }

func (c counted) totals() (opCounts, int64) {
	k := c.cnt.Counts()
	var manifest int64
	for name, b := range k.BytesWritten {
		if isManifest(name) {
			manifest += b
		}
	}
	return opCounts{Syncs: k.Syncs, DirSyncs: k.DirSyncs, Renames: k.Renames, Creates: k.Creates}, manifest
}

// legacySealer drives the re-enactment of the reference protocol.
type legacySealer struct {
	counted
	st *legacy.Store
}

func openLegacySealer(base vfs.FS, dir string, timeOps bool) (*legacySealer, error) {
	c := newCounted(base, timeOps)
	st, err := legacy.Open(c.cls, dir)
	if err != nil {
		return nil, err
	}
	return &legacySealer{counted: c, st: st}, nil
}

func (l *legacySealer) sealOne(_ context.Context, i int) (time.Duration, opCounts, error) {
	k, v := sealRecord(i)
	if err := l.st.Put(k, v); err != nil {
		return 0, opCounts{}, err
	}
	before := l.cls.Foreground()
	t0 := time.Now()
	err := l.st.Seal()
	d := time.Since(t0)
	return d, l.cls.Foreground().sub(before), err
}

func (l *legacySealer) quiesce(context.Context) error { return nil }
func (l *legacySealer) spareMisses() int64            { return 0 }

func (l *legacySealer) manifestOnDisk() (int64, int64, error) {
	return l.counted.manifestOnDisk(filepath.Dir(l.st.ManifestPath()))
}

func (l *legacySealer) close() error { return l.st.Close() }

// newSealer drives the real store.
type newSealer struct {
	counted
	st  *segstore.Store
	dir string
	// spareLead is how many more spares than seals the store has made when
	// a spare is ready (one used by the first live file, one waiting).
	spareLead int64
	closed    bool
}

func openNewSealer(ctx context.Context, base vfs.FS, dir string, segmentSize int64, timeOps bool) (*newSealer, error) {
	c := newCounted(base, timeOps)
	st, err := segstore.Open(dir, &segstore.Options{
		FS: c.cls,
		// Writes reach the disk only at the seal, which then pays the data
		// file's fdatasync itself, as the legacy protocol does: the two
		// seals do the same job.
		Sync:        segstore.SyncManual,
		SegmentSize: segmentSize,
		// Merging would fold the one-record segments together; the
		// benchmark wants the segment count to grow as in the reference.
		Merge: segstore.MergeOptions{Disable: true},
	})
	if err != nil {
		return nil, err
	}
	n := &newSealer{counted: c, st: st, dir: dir}
	// Learn the lead of a fresh store once its background spare is made:
	// wait for the count to settle rather than assume the store's internals.
	deadline := time.Now().Add(2 * time.Second)
	for {
		m := st.Metrics()
		lead := m.SparesMade - m.Seals
		if lead >= 2 || time.Now().After(deadline) {
			n.spareLead = max(lead, 1)
			break
		}
		if err := sleepCtx(ctx, 200*time.Microsecond); err != nil {
			st.Close()
			return nil, err
		}
	}
	return n, nil
}

func (n *newSealer) sealOne(_ context.Context, i int) (time.Duration, opCounts, error) {
	k, v := sealRecord(i)
	if err := n.st.Put(k, v); err != nil {
		return 0, opCounts{}, err
	}
	before := n.cls.Foreground()
	t0 := time.Now()
	err := n.st.Seal()
	d := time.Since(t0)
	return d, n.cls.Foreground().sub(before), err
}

// quiesce waits until the background goroutine has made the next spare live
// file, up to a second; a seal that still finds none counts a spare miss,
// which the rows report.
func (n *newSealer) quiesce(ctx context.Context) error {
	deadline := time.Now().Add(time.Second)
	for {
		m := n.st.Metrics()
		if m.SparesMade-m.Seals >= n.spareLead {
			// The store counts a spare as made a moment before it installs
			// it for the next seal to take: give it that moment, or about
			// one seal in a thousand finds no spare.
			return sleepCtx(ctx, 200*time.Microsecond)
		}
		if time.Now().After(deadline) {
			return nil
		}
		if err := sleepCtx(ctx, 100*time.Microsecond); err != nil {
			return err
		}
	}
}

func (n *newSealer) spareMisses() int64 { return n.st.Metrics().SpareMisses }

func (n *newSealer) manifestOnDisk() (int64, int64, error) { return n.counted.manifestOnDisk(n.dir) }

func (n *newSealer) close() error {
	if n.closed {
		return nil
	}
	n.closed = true
	return n.st.Close()
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
