package main

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segkv/segkv/segstore"
	"github.com/segkv/segkv/vfs"
)

// mergeput measures durable put latency while the background merge works
// hard, against the same store idle (issue 29: merges run off the write
// path and must not stall Put).
//
// For each writer count it prepares a store with merges disabled (N keys
// loaded twice over in random order, so that about half the data is
// garbage, without per-write syncs), then measures three windows on it, in
// this order:
//
//   - idle-before: reopened with merges still disabled; a baseline taken
//     before the merge, so that drift of the disk between the windows
//     shows (the idle row after the merge should agree with it).
//   - merging: reopened with merges enabled (the defaults); the writers
//     start as soon as Open returns, while the merge works through the
//     backlog, and stop after -duration or as soon as MergeBacklog is 0.
//   - idle: the same store, once MergeBacklog has reached 0, for
//     -duration.
//
// Merge activity is recorded from the store's MergeBegin and MergeEnd
// events, in every window (the writers' own seals can start merges).

// Phases, in the order they run.
const (
	phaseBefore  = "idle-before"
	phaseMerging = "merging"
	phaseIdle    = "idle"
)

// How the prepared store is shaped.
const (
	mergePutKeyLen   = 16
	mergePutValueLen = 200
	mergePutBatch    = 1000 // records per Apply while loading
	mergePutSeed     = 29   // the load's permutations are the same in every run
	mergePutSample   = 100 * time.Millisecond
)

// mergePutRow is one window.
type mergePutRow struct {
	Phase     string  `json:"phase"` // idle-before, merging, idle
	Round     int     `json:"round"` // 1 to -rounds: each round prepares a fresh store
	Writers   int     `json:"writers"`
	N         int     `json:"n"` // keys loaded (each twice)
	Seconds   float64 `json:"seconds"`
	Puts      int     `json:"puts"`
	OpsPerSec float64 `json:"ops_per_sec"`
	P50US     float64 `json:"p50_us"`
	P99US     float64 `json:"p99_us"`
	P999US    float64 `json:"p999_us"`
	MaxUS     float64 `json:"max_us"`
	// MergeActive is the fraction of the window during which a merge step
	// was in progress (from its MergeBegin to its MergeEnd event).
	MergeActive float64 `json:"merge_active"`
	// MergeSteps counts the merge steps that overlapped the window.
	MergeSteps int `json:"merge_steps"`
	// MergeMBIn and MergeMBOut are the data bytes read and written by the
	// committed merge steps, each prorated by the part of its duration
	// inside the window (MiB).
	MergeMBIn  float64 `json:"merge_mb_in"`
	MergeMBOut float64 `json:"merge_mb_out"`
	// BacklogBusy is the fraction of the 100 ms samples of
	// Metrics().MergeBacklog taken in the window that were above 0.
	BacklogBusy float64 `json:"backlog_busy"`
	// SyncMeanUS and SyncP99US summarize the data-file fdatasyncs of the
	// window (Metrics.DataSyncs): the writers' group commits, plus one per
	// merge output and per new live file. The p99 is the upper bound of
	// the histogram bucket it falls in (bounds double from 8 us).
	SyncMeanUS float64 `json:"sync_mean_us"`
	SyncP99US  float64 `json:"sync_p99_us"`
	// SyncsPerPut is those fdatasyncs over the puts: with group commit,
	// how many puts share one is its inverse.
	SyncsPerPut float64 `json:"syncs_per_put"`
	Seals       int64   `json:"seals"`        // live files sealed during the window
	WriteStalls int64   `json:"write_stalls"` // writes that waited for a seal's switch
	// Ended says why the window ended: "time" (after -duration), or "merge
	// done" (merging only: MergeBacklog reached 0 first).
	Ended string `json:"ended"`
	// MergeDoneS (merging only) is when MergeBacklog reached 0, in seconds
	// from the window's start: beyond Seconds if the merge outlasted it.
	MergeDoneS float64 `json:"merge_done_s,omitempty"`
}

func (mergePutRow) Header() []string {
	return []string{"phase", "round", "writers", "seconds", "puts", "ops/s", "p50 us", "p99 us", "p99.9 us", "max us",
		"sync p99 us<=", "syncs/put", "merge active", "steps", "merge MiB in/out", "seals", "ended"}
}

func (r mergePutRow) Cells() []string {
	return []string{r.Phase, itoa(r.Round), itoa(r.Writers), ftoa(r.Seconds, 2), itoa(r.Puts), ftoa(r.OpsPerSec, 0), ftoa(r.P50US, 0),
		ftoa(r.P99US, 0), ftoa(r.P999US, 0), ftoa(r.MaxUS, 0), ftoa(r.SyncP99US, 0),
		ftoa(r.SyncsPerPut, 3), ftoa(100*r.MergeActive, 0) + "%", itoa(r.MergeSteps),
		ftoa(r.MergeMBIn, 0) + "/" + ftoa(r.MergeMBOut, 0), itoa(r.Seals), r.Ended}
}

// mergePutRatioRow is merging divided by idle (the window after the merge)
// for one writer count.
type mergePutRatioRow struct {
	Phase     string  `json:"phase"` // "merging/idle"
	Round     int     `json:"round"`
	Writers   int     `json:"writers"`
	OpsPerSec float64 `json:"ops_per_sec"`
	P50       float64 `json:"p50"`
	P99       float64 `json:"p99"`
	P999      float64 `json:"p999"`
	Max       float64 `json:"max"`
	// IdleDrift is idle p99 over idle-before p99: how far the two idle
	// windows, on either side of the merging one, disagree.
	IdleDrift float64 `json:"idle_p99_drift"`
}

func (mergePutRatioRow) Header() []string {
	return []string{"merging/idle", "round", "writers", "ops/s", "p50", "p99", "p99.9", "max", "idle p99 after/before"}
}

func (r mergePutRatioRow) Cells() []string {
	return []string{r.Phase, itoa(r.Round), itoa(r.Writers), ftoa(r.OpsPerSec, 2), ftoa(r.P50, 2), ftoa(r.P99, 2), ftoa(r.P999, 2),
		ftoa(r.Max, 2), ftoa(r.IdleDrift, 2)}
}

// mergePutStore describes a prepared store, for the table's header.
type mergePutStore struct {
	loadSeconds  float64
	segments     int
	segmentBytes int64
	garbageBytes int64
	backlog      int
}

var mergePutLegend = []string{
	"order, per writer count: idle-before (merges disabled), merging (reopened with merges on; the writers start when Open returns), idle (once MergeBacklog is 0)",
	"sync p99 us<=: p99 of the window's data-file fdatasyncs (Metrics.DataSyncs: the writers' group commits, and one per merge output), as its histogram bucket's upper bound (-json adds the mean); syncs/put: those fdatasyncs per put",
	"merge active: the part of the window with a merge step in progress (MergeBegin to MergeEnd events); steps: merge steps overlapping the window",
	"merge MiB in/out: data read and written by committed merge steps, each prorated by the part of its duration inside the window",
	"ended: time (after -duration) or merge done (MergeBacklog reached 0 first, so the window is shorter); seals: the writers' own live files sealed",
	"percentiles are nearest-rank over every put of the window; max and p99.9 depend on the number of puts, so compare them only between windows of similar length",
}

func runMergePut(ctx context.Context, e *env, args []string) error {
	var c common
	fs := newFlagSet("mergeput", e)
	c.register(fs, true)
	n := fs.Int("n", 1_000_000, "keys to load, each twice over in random order (16-byte keys, 200-byte values)")
	writersFlag := fs.String("writers", "1", "durable writer goroutines: a count or a comma-separated list (1,32); each gets a freshly prepared store")
	duration := fs.Duration("duration", 10*time.Second, "length of each window (the merging window ends sooner if the merge finishes)")
	idleTimeout := fs.Duration("idle-timeout", 10*time.Minute, "how long to wait for MergeBacklog to reach 0 before the idle window")
	segSize := fs.Int64("segment-size", 0, "Options.SegmentSize (0: the store's default)")
	rounds := fs.Int("rounds", 1, "repeat the whole sequence this many times, each round on a freshly prepared store")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := c.validate(); err != nil {
		return err
	}
	if *rounds < 1 {
		return usagef("-rounds must be at least 1, not %d", *rounds)
	}
	writers, err := parseWriters(*writersFlag)
	if err != nil {
		return err
	}
	if *n < 1 {
		return usagef("-n must be at least 1, not %d", *n)
	}
	if *duration <= 0 {
		return usagef("-duration must be positive, not %v", *duration)
	}
	if *idleTimeout <= 0 {
		return usagef("-idle-timeout must be positive, not %v", *idleTimeout)
	}
	if *segSize != 0 && *segSize < 4<<10 {
		return usagef("-segment-size must be 0 or at least 4096, not %d", *segSize)
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
	cfg := mergePutConfig{n: *n, duration: *duration, idleTimeout: *idleTimeout, segSize: *segSize}
	var (
		rows    []row
		ratios  []row
		results []mergePutResult
		notes   []string
	)
	prog := e.progress()
	for r := 1; r <= *rounds; r++ {
		for _, w := range writers {
			dir := filepath.Join(ws.root, fmt.Sprintf("r%d-w%d", r, w))
			res, err := mergePutBench(ctx, ws.newFS(), dir, r, w, cfg, prog)
			if err != nil {
				stop()
				return err
			}
			for _, x := range res.rows {
				rows = append(rows, x)
			}
			ratios = append(ratios, res.ratio)
			results = append(results, res)
			notes = append(notes, res.notes...)
			// Free the disk: a 1M-key store is ~0.5 GB. (In memory the
			// path is not the OS's: leave it to the Mem.)
			if !c.keep && c.fs != "mem" {
				if err := os.RemoveAll(dir); err != nil {
					stop()
					return fmt.Errorf("remove %s: %w", dir, err)
				}
			}
		}
	}
	prog.Done()
	if err := stop(); err != nil {
		return err
	}
	p := newPrinter(e.stdout, c.json)
	if err := p.Note("segbench mergeput: %d keys (%d-byte keys, %d-byte values) loaded twice in random order with merges off, then durable puts (SyncAlways) of fresh keys, %v windows, in %s",
		*n, mergePutKeyLen, mergePutValueLen, *duration, ws.desc); err != nil {
		return err
	}
	for _, res := range results {
		s := res.store
		if err := p.Note("round %d, writers %d: prepared in %.1f s: %d segments, %.1f MiB, estimated garbage %.1f MiB, MergeBacklog at Open %d segments",
			res.ratio.Round, res.ratio.Writers, s.loadSeconds, s.segments, mib(s.segmentBytes), mib(s.garbageBytes), s.backlog); err != nil {
			return err
		}
	}
	for _, r := range rows {
		if err := p.Print(r); err != nil {
			return err
		}
	}
	for _, r := range ratios {
		if err := p.Print(r); err != nil {
			return err
		}
	}
	if err := p.Flush(); err != nil {
		return err
	}
	for _, l := range append(notes, mergePutLegend...) {
		if err := p.Note("%s", l); err != nil {
			return err
		}
	}
	return ws.cleanup()
}

// parseWriters reads "1" or "1,32".
func parseWriters(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		w, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || w < 1 {
			return nil, usagef("-writers wants counts of at least 1, separated by commas, not %q", s)
		}
		out = append(out, w)
	}
	return out, nil
}

type mergePutConfig struct {
	n           int
	duration    time.Duration
	idleTimeout time.Duration
	segSize     int64
}

type mergePutResult struct {
	rows  [3]mergePutRow // idle-before, merging, idle
	ratio mergePutRatioRow
	store mergePutStore
	notes []string
}

// mergePutBench prepares a store in dir and measures its three windows
// with w writers.
func mergePutBench(ctx context.Context, fsys vfs.FS, dir string, rnd, w int, cfg mergePutConfig, prog *progress) (mergePutResult, error) {
	var res mergePutResult
	t0 := time.Now()
	if err := prepareMergeStore(ctx, fsys, dir, cfg, prog); err != nil {
		return res, fmt.Errorf("prepare: %w", err)
	}
	res.store.loadSeconds = time.Since(t0).Seconds()

	// idle-before: merges still disabled.
	ml := &mergeLog{}
	st, err := segstore.Open(dir, ml.options(fsys, cfg.segSize, true))
	if err != nil {
		return res, fmt.Errorf("open for %s: %w", phaseBefore, err)
	}
	m := st.Metrics()
	res.store.segments, res.store.segmentBytes, res.store.garbageBytes = m.Segments, m.SegmentBytes, m.GarbageBytes
	waitSpare(ctx, st)
	before, err := mergePutWindow(ctx, st, ml, phaseBefore, w, cfg, prog)
	res.rows[0] = before.row
	if cerr := st.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close: %w", cerr)
	}
	if err != nil {
		return res, err
	}

	// merging: from Open on, with the default merge options.
	ml = &mergeLog{}
	st, err = segstore.Open(dir, ml.options(fsys, cfg.segSize, false))
	if err != nil {
		return res, fmt.Errorf("open for %s: %w", phaseMerging, err)
	}
	defer func() {
		if st != nil {
			st.Close()
		}
	}()
	merging, err := mergePutWindow(ctx, st, ml, phaseMerging, w, cfg, prog)
	if err != nil {
		return res, err
	}
	res.store.backlog = merging.backlogAtStart
	// Wait for the backlog to drain: that is when the merge is done, and
	// the idle window starts.
	done := merging.mergeDone
	if merging.row.Ended != "merge done" {
		done, err = waitMergeDone(ctx, st, merging.start, cfg.idleTimeout, prog)
		if err != nil {
			return res, err
		}
	}
	merging.row.MergeDoneS = round(done.Seconds(), 3)
	merging.row.MergeActive, merging.row.MergeSteps, merging.row.MergeMBIn, merging.row.MergeMBOut =
		ml.overlap(merging.start, merging.end)
	res.rows[1] = merging.row
	if merging.row.Ended != "merge done" {
		res.notes = append(res.notes, fmt.Sprintf("round %d, writers %d: the merge outlasted the merging window: MergeBacklog reached 0 %.1f s after it began (the window covered %.1f s)",
			rnd, w, merging.row.MergeDoneS, merging.row.Seconds))
	} else {
		res.notes = append(res.notes, fmt.Sprintf("round %d, writers %d: the merge finished inside the merging window, %.1f s after it began: the window was cut short there",
			rnd, w, merging.row.MergeDoneS))
	}

	idle, err := mergePutWindow(ctx, st, ml, phaseIdle, w, cfg, prog)
	if err != nil {
		return res, err
	}
	cerr := st.Close()
	st = nil
	if cerr != nil {
		return res, fmt.Errorf("close: %w", cerr)
	}
	// After Close no step runs: every step that overlapped the window has
	// ended (a step Close stopped reports no output).
	idle.row.MergeActive, idle.row.MergeSteps, idle.row.MergeMBIn, idle.row.MergeMBOut = ml.overlap(idle.start, idle.end)
	res.rows[2] = idle.row
	if idle.row.MergeSteps > 0 {
		res.notes = append(res.notes, fmt.Sprintf("round %d, writers %d: the idle window was not free of merges: %d steps (started by the writers' own seals) were active %.0f%% of it",
			rnd, w, idle.row.MergeSteps, 100*idle.row.MergeActive))
	}
	for i := range res.rows {
		res.rows[i].Round = rnd
	}
	res.ratio = mergePutRatioRow{
		Phase:     "merging/idle",
		Round:     rnd,
		Writers:   w,
		OpsPerSec: ratio(merging.row.OpsPerSec, idle.row.OpsPerSec),
		P50:       ratio(merging.row.P50US, idle.row.P50US),
		P99:       ratio(merging.row.P99US, idle.row.P99US),
		P999:      ratio(merging.row.P999US, idle.row.P999US),
		Max:       ratio(merging.row.MaxUS, idle.row.MaxUS),
		IdleDrift: ratio(idle.row.P99US, before.row.P99US),
	}
	return res, nil
}

// options are the store's options for a window: durable puts, the merge
// disabled or at its defaults, and the events recorded in l.
func (l *mergeLog) options(fsys vfs.FS, segSize int64, disableMerge bool) *segstore.Options {
	return &segstore.Options{
		FS:          fsys,
		Sync:        segstore.SyncAlways,
		SegmentSize: segSize,
		Merge:       segstore.MergeOptions{Disable: disableMerge},
		Events: segstore.EventListener{
			MergeBegin: l.begin,
			MergeEnd:   l.end,
		},
	}
}

// loadKey is the k-th loaded key: 16 hex digits.
func loadKey(dst []byte, k int) {
	var raw [8]byte
	binary.BigEndian.PutUint64(raw[:], uint64(k))
	hex.Encode(dst, raw[:])
}

// freshKey is put i of writer w in a window: "z", the phase's letter, then
// 14 hex digits. No loaded key starts with "z", and every window writes
// keys of its own.
func freshKey(dst []byte, phase byte, w, i int) {
	var raw [8]byte
	binary.BigEndian.PutUint64(raw[:], uint64(w)<<40|uint64(i))
	hex.Encode(dst, raw[:])
	dst[0], dst[1] = 'z', phase
}

// fillValue makes a value that differs by key and pass.
func fillValue(dst []byte, seed uint64) {
	x := seed*0x9E3779B97F4A7C15 | 1
	for i := 0; i < len(dst); i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], x)
		copy(dst[i:], b[:])
	}
}

// prepareMergeStore loads n keys twice over, each pass in its own random
// order, with merges disabled and no per-write sync, then syncs, seals and
// closes.
func prepareMergeStore(ctx context.Context, fsys vfs.FS, dir string, cfg mergePutConfig, prog *progress) error {
	st, err := segstore.Open(dir, &segstore.Options{FS: fsys, Sync: segstore.SyncManual, SegmentSize: cfg.segSize,
		Merge: segstore.MergeOptions{Disable: true}})
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	defer st.Close()
	key := make([]byte, mergePutKeyLen)
	value := make([]byte, mergePutValueLen)
	// Batches of up to a quarter of a segment, so that small test segments
	// are not each one oversized batch.
	segSize := cfg.segSize
	if segSize == 0 {
		segSize = segstore.DefaultSegmentSize
	}
	const recBytes = mergePutKeyLen + mergePutValueLen + 16 // about, with the record's framing
	batch := int(max(1, min(mergePutBatch, segSize/4/recBytes)))
	// The loader outruns the background seal, which would let the live
	// file grow well past SegmentSize: seal it here when it is full.
	var live int64
	for pass := range 2 {
		perm := rand.New(rand.NewPCG(mergePutSeed, uint64(pass))).Perm(cfg.n)
		b := st.NewBatch()
		for j, k := range perm {
			loadKey(key, k)
			fillValue(value, uint64(pass)<<32|uint64(k))
			if err := b.Put(key, value); err != nil {
				return err
			}
			if b.Len() < batch && j < len(perm)-1 {
				continue
			}
			if err := st.Apply(b); err != nil {
				return fmt.Errorf("load: %w", err)
			}
			b = st.NewBatch()
			if live += int64(batch) * recBytes; live >= segSize {
				if err := st.Seal(); err != nil {
					return fmt.Errorf("seal: %w", err)
				}
				live = 0
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			prog.Update("mergeput: loading pass %d/2, %d/%d keys", pass+1, j+1, cfg.n)
		}
	}
	if err := st.Sync(); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	// Sealed, so that the merge sees all of it: Close leaves a small live
	// file live.
	if err := st.Seal(); err != nil {
		return fmt.Errorf("seal: %w", err)
	}
	if err := st.Close(); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	return nil
}

// window is one measured window before its merge figures are filled in.
type window struct {
	row            mergePutRow
	start, end     time.Time
	backlogAtStart int
	// mergeDone is when a merging window saw MergeBacklog at 0 (and
	// ended), from its start.
	mergeDone time.Duration
}

// mergePutWindow runs w durable writers of fresh keys on st for
// cfg.duration; a merging window also ends when MergeBacklog reaches 0.
// Merge activity is filled in here for windows that can be accounted at
// once (idle-before: the merge is disabled); the caller does it for the
// others once the steps overlapping them have ended.
func mergePutWindow(ctx context.Context, st *segstore.Store, ml *mergeLog, phase string, w int, cfg mergePutConfig, prog *progress) (window, error) {
	m0 := st.Metrics()
	out := window{backlogAtStart: m0.MergeBacklog}
	var (
		stop  atomic.Bool
		wg    sync.WaitGroup
		lat   = make([][]time.Duration, w)
		errs  = make([]error, w)
		ended = make(chan struct{})
	)
	start := time.Now()
	for i := range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := make([]byte, mergePutKeyLen)
			value := make([]byte, mergePutValueLen)
			for j := 0; !stop.Load(); j++ {
				freshKey(key, phase[0], i, j)
				fillValue(value, uint64(i)<<40|uint64(j))
				t := time.Now()
				if err := st.Put(key, value); err != nil {
					errs[i] = fmt.Errorf("%s: writer %d put %d: %w", phase, i, j, err)
					stop.Store(true)
					return
				}
				lat[i] = append(lat[i], time.Since(t))
			}
		}()
	}
	go func() { wg.Wait(); close(ended) }()

	deadline := time.NewTimer(cfg.duration)
	defer deadline.Stop()
	tick := time.NewTicker(mergePutSample)
	defer tick.Stop()
	why := "time"
	samples, busy := 0, 0
	var ctxErr error
loop:
	for {
		select {
		case <-ctx.Done():
			ctxErr = ctx.Err()
			break loop
		case <-ended: // a writer failed
			break loop
		case <-deadline.C:
			break loop
		case <-tick.C:
			m := st.Metrics()
			samples++
			if m.MergeBacklog > 0 {
				busy++
			}
			prog.Update("mergeput: writers %d, %s window, %.1f s, merge backlog %d", w, phase, time.Since(start).Seconds(), m.MergeBacklog)
			if phase == phaseMerging && m.MergeBacklog == 0 {
				why = "merge done"
				out.mergeDone = time.Since(start)
				break loop
			}
		}
	}
	stop.Store(true)
	<-ended
	end := time.Now()
	for _, err := range errs {
		if err != nil {
			return out, err
		}
	}
	if ctxErr != nil {
		return out, ctxErr
	}
	m1 := st.Metrics()
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	d := summarize(all)
	elapsed := end.Sub(start)
	out.start, out.end = start, end
	out.row = mergePutRow{
		Phase: phase, Writers: w, N: cfg.n,
		Seconds:     round(elapsed.Seconds(), 3),
		Puts:        len(all),
		OpsPerSec:   round(float64(len(all))/elapsed.Seconds(), 0),
		P50US:       us(d.p50),
		P99US:       us(d.p99),
		P999US:      us(d.p999),
		MaxUS:       us(d.max),
		Seals:       m1.Seals - m0.Seals,
		WriteStalls: m1.WriteStalls - m0.WriteStalls,
		Ended:       why,
	}
	out.row.SyncMeanUS, out.row.SyncP99US = syncFigures(m0.DataSyncs, m1.DataSyncs)
	if len(all) > 0 {
		out.row.SyncsPerPut = round(float64(m1.DataSyncs.Count-m0.DataSyncs.Count)/float64(len(all)), 3)
	}
	if samples > 0 {
		out.row.BacklogBusy = round(float64(busy)/float64(samples), 3)
	}
	if phase == phaseBefore {
		out.row.MergeActive, out.row.MergeSteps, out.row.MergeMBIn, out.row.MergeMBOut = ml.overlap(start, end)
	}
	return out, nil
}

// waitMergeDone polls MergeBacklog until it is 0 and returns when that
// was seen, as time since start.
func waitMergeDone(ctx context.Context, st *segstore.Store, start time.Time, timeout time.Duration, prog *progress) (time.Duration, error) {
	deadline := time.Now().Add(timeout)
	for {
		m := st.Metrics()
		if m.MergeBacklog == 0 {
			return time.Since(start), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("merge backlog still %d segments after waiting %v for it to drain (-idle-timeout)", m.MergeBacklog, timeout)
		}
		prog.Update("mergeput: waiting for the merge to finish, %.1f s since the merging window began, backlog %d", time.Since(start).Seconds(), m.MergeBacklog)
		if err := sleepCtx(ctx, mergePutSample); err != nil {
			return 0, err
		}
	}
}

// mergeLog records merge steps from the store's events. Steps run one at
// a time, so an end belongs to the last step begun.
type mergeLog struct {
	mu    sync.Mutex
	steps []mergeStep
}

type mergeStep struct {
	begin, end time.Time // end is zero while the step runs
	in, out    int64
	committed  bool
}

func (l *mergeLog) begin(info segstore.MergeInfo) {
	l.mu.Lock()
	l.steps = append(l.steps, mergeStep{begin: time.Now(), in: info.BytesIn})
	l.mu.Unlock()
}

func (l *mergeLog) end(info segstore.MergeInfo) {
	l.mu.Lock()
	if n := len(l.steps); n > 0 && l.steps[n-1].end.IsZero() {
		s := &l.steps[n-1]
		s.end, s.out, s.committed = time.Now(), info.BytesOut, info.Err == nil
	}
	l.mu.Unlock()
}

// overlap returns the fraction of [from, to] with a step in progress, the
// steps that overlapped it, and the data bytes (MiB) read and written by
// the committed ones, each prorated by the part of its duration inside the
// window. A step still running counts as running until to, with no bytes.
func (l *mergeLog) overlap(from, to time.Time) (active float64, steps int, mibIn, mibOut float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var busy time.Duration
	var in, out float64
	for _, s := range l.steps {
		end := s.end
		if end.IsZero() {
			end = to
		}
		lo, hi := s.begin, end
		if lo.Before(from) {
			lo = from
		}
		if hi.After(to) {
			hi = to
		}
		if !hi.After(lo) {
			continue
		}
		steps++
		busy += hi.Sub(lo)
		if s.committed && end.After(s.begin) {
			f := float64(hi.Sub(lo)) / float64(end.Sub(s.begin))
			in += f * float64(s.in)
			out += f * float64(s.out)
		}
	}
	if win := to.Sub(from); win > 0 {
		active = round(float64(busy)/float64(win), 3)
	}
	return active, steps, round(in/(1<<20), 1), round(out/(1<<20), 1)
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// syncFigures returns the mean and the p99 bucket bound (us) of the
// fdatasyncs between two readings of Metrics.DataSyncs.
func syncFigures(before, after segstore.Histogram) (meanUS, p99US float64) {
	n := after.Count - before.Count
	if n <= 0 {
		return 0, 0
	}
	meanUS = us((after.Sum - before.Sum) / time.Duration(n))
	rank := int64(float64(n)*0.99 + 0.999999999)
	var seen int64
	for i := range segstore.HistogramBuckets {
		seen += after.Buckets[i] - before.Buckets[i]
		if seen >= rank {
			// The last bucket has no bound: report the one below it
			// (about 2.1 s), a floor.
			return meanUS, us(after.UpperBound(min(i, segstore.HistogramBuckets-2)))
		}
	}
	return meanUS, 0
}
