package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"github.com/segkv/segkv/bench/internal/hostinfo"

	"github.com/hashicorp/raft"

	"github.com/segkv/segkv/internal/cliout"
)

// Phases of the disk usage samples, in order.
const (
	diskBefore      = "before DeleteRange"
	diskAfterDelete = "right after DeleteRange"
	diskAfterIdle   = "after idle"
	diskFirstDrop   = "first drop during the appends"
	diskAfterAppend = "after the appends"
	diskAfterClose  = "after Close"
)

// diskPhases are the samples in report order. diskFirstDrop is the first
// sample, polled every dropPoll while appends to the truncated store run,
// that finds more of the files of diskBefore removed than the diskAfterIdle
// sample did: where a store frees the truncated entries later than
// DeleteRange (segkv at its next seal), it says how many appends later.
var diskPhases = []string{diskBefore, diskAfterDelete, diskAfterIdle, diskFirstDrop, diskAfterAppend, diskAfterClose}

// States of the stores the appends and GetLogs run on.
const (
	stateFresh     = "fresh"     // an empty store, opened for the appends
	statePreloaded = "preloaded" // the -n entries of the preload
	stateTruncated = "truncated" // the preloaded store after the head truncation
)

// row is one measurement of one engine. Which fields are set depends on
// Measure:
//
//	preload      Entries, Calls, Seconds, EntriesPerS
//	getlog       State (preloaded|truncated), Calls, Seconds, MeanUs, P50us, P99us, MaxUs
//	deleterange  Entries (deleted), Seconds
//	storelogs    State (fresh|truncated), Batch, Calls, Entries, Seconds, EntriesPerS, P50us, P99us, MaxUs;
//	             truncated: RoundRatios, RoundRatioMedian
//	barrier      Engine "disk", State (the pattern), Calls, P50us, P99us, MaxUs
//	disk         State (the phase), Bytes, ApparentBytes, Files, Removed, RemovedBytes; Entries: entries
//	             appended since the truncation (the phase diskFirstDrop is missing where no sample found one)
type row struct {
	Engine        string  `json:"engine"`
	Measure       string  `json:"measure"`
	State         string  `json:"state,omitempty"`
	Batch         int     `json:"batch,omitempty"`
	Calls         int64   `json:"calls,omitempty"`
	Entries       int64   `json:"entries,omitempty"`
	Seconds       float64 `json:"seconds,omitempty"`
	EntriesPerS   float64 `json:"entries_per_s,omitempty"`
	MeanUs        float64 `json:"mean_us,omitempty"`
	P50us         float64 `json:"p50_us,omitempty"`
	P99us         float64 `json:"p99_us,omitempty"`
	MaxUs         float64 `json:"max_us,omitempty"`
	Bytes         int64   `json:"bytes,omitempty"`
	ApparentBytes int64   `json:"apparent_bytes,omitempty"`
	Files         int64   `json:"files,omitempty"`
	// RoundRatios are, for the truncated store's storelogs rows, the ratio
	// of its entries/s to the fresh store's in each round, ascending, and
	// RoundRatioMedian their median.
	RoundRatios      []float64 `json:"round_ratios,omitempty"`
	RoundRatioMedian float64   `json:"round_ratio_median,omitempty"`
	// Removed counts the files of the diskBefore sample that are gone, and
	// RemovedBytes their disk usage in that sample.
	Removed      int64 `json:"removed_files,omitempty"`
	RemovedBytes int64 `json:"removed_bytes,omitempty"`
}

// results is what a run produces.
type results struct {
	Config   *config
	Root     string
	Machine  hostinfo.Machine
	Start    time.Time
	End      time.Time
	Versions [][2]string // module, version
	Rows     []row
	// Quantiles are the StoreLogs latency curves of the plot.
	Quantiles map[curveKey][]float64
}

// bench is one run.
type bench struct {
	c    *config
	root string
	prog *cliout.Progress
	res  *results
	// per engine: the store preloaded and truncated, the fresh one, and the
	// next index of each
	trunc, fresh         map[string]logStore
	nextTrunc, nextFresh map[string]uint64
	appended             map[string]int64 // entries appended to the truncated store
	// before is the disk usage of each file of the preloaded store's
	// directory in the diskBefore sample.
	before map[string]map[string]int64
}

func newBench(c *config, prog *cliout.Progress) (*bench, error) {
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return nil, err
	}
	root, err := os.MkdirTemp(c.dir, "raftbench-")
	if err != nil {
		return nil, err
	}
	return &bench{
		c: c, root: root, prog: prog,
		trunc: map[string]logStore{}, fresh: map[string]logStore{},
		nextTrunc: map[string]uint64{}, nextFresh: map[string]uint64{},
		appended: map[string]int64{}, before: map[string]map[string]int64{},
	}, nil
}

// cleanup closes any store still open (after a failure) and removes the
// run's directory unless -keep.
func (b *bench) cleanup(log io.Writer) error {
	var errs []error
	for _, m := range []map[string]logStore{b.trunc, b.fresh} {
		for name, s := range m {
			errs = append(errs, s.Close())
			delete(m, name)
		}
	}
	b.prog.Done()
	if b.c.keep {
		fmt.Fprintf(log, "raftbench: kept %s\n", b.root)
	} else {
		errs = append(errs, os.RemoveAll(b.root))
	}
	return errors.Join(errs...)
}

func (b *bench) dir(name, which string) string { return filepath.Join(b.root, name, which) }

func (b *bench) add(r row) { b.res.Rows = append(b.res.Rows, r) }

func (b *bench) runAll() (*results, error) {
	b.res = &results{Config: b.c, Root: b.root, Machine: hostinfo.Probe(b.root), Start: time.Now(), Quantiles: map[curveKey][]float64{}}
	for _, m := range versionModules {
		b.res.Versions = append(b.res.Versions, [2]string{m, moduleVersion(m)})
	}
	// Preload, reads and truncation run engine-major: one engine works at
	// a time, the others' stores idle.
	for _, name := range b.c.engines {
		if err := b.preloadAndTruncate(name); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	for _, name := range b.c.engines {
		e, _ := lookupEngine(name)
		dir := b.dir(name, "fresh")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		s, err := e.open(dir)
		if err != nil {
			return nil, fmt.Errorf("%s: open fresh store: %w", name, err)
		}
		b.fresh[name], b.nextFresh[name] = s, 1
	}
	if err := b.appends(); err != nil {
		return nil, err
	}
	for _, name := range b.c.engines {
		if err := b.sampleDisk(name, diskAfterAppend); err != nil {
			return nil, err
		}
		s := b.trunc[name]
		delete(b.trunc, name)
		if err := s.Close(); err != nil {
			return nil, fmt.Errorf("%s: close the truncated store: %w", name, err)
		}
		if err := b.sampleDisk(name, diskAfterClose); err != nil {
			return nil, err
		}
		s = b.fresh[name]
		delete(b.fresh, name)
		if err := s.Close(); err != nil {
			return nil, fmt.Errorf("%s: close the fresh store: %w", name, err)
		}
	}
	b.res.End = time.Now()
	b.res.Machine.LoadEnd = hostinfo.LoadAvg()
	return b.res, nil
}

// entries returns a batch of n log entries sharing one data buffer; every
// store here copies or encodes an entry before StoreLogs returns.
func (b *bench) entries(n int) []*raft.Log {
	data := make([]byte, b.c.data)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	logs := make([]*raft.Log, n)
	for i := range logs {
		logs[i] = &raft.Log{Term: 1, Type: raft.LogCommand, Data: data}
	}
	return logs
}

// number sets the indexes of logs to next, next+1, ... and their
// AppendedAt to now, as a leader does for a batch it dispatches.
func number(logs []*raft.Log, next uint64) {
	now := time.Now()
	for i, l := range logs {
		l.Index = next + uint64(i)
		l.AppendedAt = now
	}
}

func (b *bench) preloadAndTruncate(name string) error {
	e, _ := lookupEngine(name)
	dir := b.dir(name, "log")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	s, err := e.open(dir)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	b.trunc[name] = s
	n, t := uint64(b.c.n), uint64(b.c.truncate)

	// 1. Preload.
	logs := b.entries(b.c.preloadBatch)
	start := time.Now()
	var calls int64
	for next := uint64(1); next <= n; {
		m := min(uint64(len(logs)), n-next+1)
		number(logs[:m], next)
		if err := s.StoreLogs(logs[:m]); err != nil {
			return fmt.Errorf("preload at %d: %w", next, err)
		}
		calls++
		next += m
		if calls%64 == 0 {
			b.prog.Update("%s: preload %d/%d entries", name, next-1, n)
		}
	}
	d := time.Since(start)
	b.add(row{Engine: name, Measure: "preload", Entries: int64(n), Calls: calls, Seconds: d.Seconds(), EntriesPerS: float64(n) / d.Seconds()})
	if err := checkBounds(s, 1, n); err != nil {
		return fmt.Errorf("after the preload: %w", err)
	}

	// 2. GetLog over the preloaded log.
	b.prog.Update("%s: GetLog over %d entries", name, n)
	r, err := b.getLogs(s, 1, n)
	if err != nil {
		return fmt.Errorf("GetLog: %w", err)
	}
	r.Engine, r.State = name, statePreloaded
	b.add(r)

	// 3. The head truncation.
	if err := b.sampleDisk(name, diskBefore); err != nil {
		return err
	}
	b.prog.Update("%s: DeleteRange(1, %d)", name, t)
	start = time.Now()
	if err := s.DeleteRange(1, t); err != nil {
		return fmt.Errorf("DeleteRange(1, %d): %w", t, err)
	}
	d = time.Since(start)
	if err := b.sampleDisk(name, diskAfterDelete); err != nil {
		return err
	}
	b.add(row{Engine: name, Measure: "deleterange", Entries: int64(t), Seconds: d.Seconds()})
	if err := checkBounds(s, t+1, n); err != nil {
		return fmt.Errorf("after DeleteRange: %w", err)
	}
	// No check that GetLog(t) now fails: raft never reads below FirstIndex,
	// and raft-wal v0.4.2 still returns an entry truncated from its tail
	// segment.
	time.Sleep(b.c.idle)
	if err := b.sampleDisk(name, diskAfterIdle); err != nil {
		return err
	}
	b.prog.Update("%s: GetLog over the %d entries left", name, n-t)
	r, err = b.getLogs(s, t+1, n)
	if err != nil {
		return fmt.Errorf("GetLog after DeleteRange: %w", err)
	}
	r.Engine, r.State = name, stateTruncated
	b.add(r)
	b.nextTrunc[name] = n + 1
	return nil
}

func checkBounds(s logStore, first, last uint64) error {
	f, err := s.FirstIndex()
	if err != nil {
		return err
	}
	l, err := s.LastIndex()
	if err != nil {
		return err
	}
	if f != first || l != last {
		return fmt.Errorf("FirstIndex, LastIndex = %d, %d; want %d, %d", f, l, first, last)
	}
	return nil
}

// getLogs times -gets GetLog calls at uniformly random indexes in [lo, hi]
// and checks each entry. An untimed warm-up first reads every entry in
// order, so that every page of the store has been read through its own read
// path (a mapping's page tables filled, not only the page cache).
func (b *bench) getLogs(s logStore, lo, hi uint64) (row, error) {
	var l raft.Log
	get := func(i uint64) (time.Duration, error) {
		t0 := time.Now()
		err := s.GetLog(i, &l)
		d := time.Since(t0)
		if err == nil && (l.Index != i || len(l.Data) != b.c.data) {
			err = fmt.Errorf("GetLog(%d) returned index %d with %d bytes of data, want %d", i, l.Index, len(l.Data), b.c.data)
		}
		return d, err
	}
	for i := lo; i <= hi; i++ {
		if _, err := get(i); err != nil {
			return row{}, fmt.Errorf("warm-up: %w", err)
		}
	}
	rng := rand.New(rand.NewPCG(lo, hi))
	lats := make([]time.Duration, b.c.gets)
	runtime.GC() // not in the middle of the timed calls, if it can help it
	start := time.Now()
	for j := range lats {
		d, err := get(lo + rng.Uint64N(hi-lo+1))
		if err != nil {
			return row{}, err
		}
		lats[j] = d
	}
	total := time.Since(start)
	slices.Sort(lats)
	return row{
		Measure: "getlog", Calls: int64(len(lats)), Seconds: total.Seconds(),
		MeanUs: us(total) / float64(len(lats)),
		P50us:  us(percentile(lats, 0.50)), P99us: us(percentile(lats, 0.99)), MaxUs: us(lats[len(lats)-1]),
	}, nil
}

// appends measures sequential StoreLogs on the fresh and the truncated
// store of every engine, for every batch size, in rounds.
func (b *bench) appends() error {
	type key struct {
		engine, state string
		batch         int
	}
	type acc struct {
		calls, entries int64
		dur            time.Duration
		lats           []time.Duration
		rate           []float64 // entries/s of each round's slice
	}
	accs := map[key]*acc{}
	per := b.c.duration / time.Duration(b.c.rounds)
	batches := map[int][]*raft.Log{}
	for _, bs := range b.c.batches {
		batches[bs] = b.entries(bs)
	}
	barriers, err := b.openBarriers()
	if err != nil {
		return err
	}
	defer func() {
		for _, bf := range barriers {
			bf.close()
		}
	}()
	barrierLats := map[string][]time.Duration{}
	// A record of about an entry's size as the stores write it.
	barrierBuf := make([]byte, b.c.data+32)
	for round := range b.c.rounds {
		order := slices.Clone(b.c.engines)
		states := []string{stateFresh, stateTruncated}
		patterns := slices.Clone(barrierPatterns)
		if round%2 == 1 {
			slices.Reverse(order)
			slices.Reverse(states)
			slices.Reverse(patterns)
		}
		for _, p := range patterns {
			bf := barriers[p]
			if bf == nil {
				continue
			}
			b.prog.Update("appends round %d/%d: the disk's barrier, %s", round+1, b.c.rounds, p)
			for range b.c.barriers / b.c.rounds {
				d, err := bf.write(barrierBuf)
				if err != nil {
					return fmt.Errorf("barrier %s: %w", p, err)
				}
				barrierLats[p] = append(barrierLats[p], d)
			}
		}
		for _, name := range order {
			for _, st := range states {
				for _, bs := range b.c.batches {
					b.prog.Update("appends round %d/%d: %s, %s store, batches of %d", round+1, b.c.rounds, name, st, bs)
					s, next := b.fresh[name], b.nextFresh
					if st == stateTruncated {
						s, next = b.trunc[name], b.nextTrunc
					}
					k := key{name, st, bs}
					a := accs[k]
					if a == nil {
						a = &acc{}
						accs[k] = a
					}
					var progress atomic.Int64
					var watch *dropWatch
					if st == stateTruncated {
						watch = b.watchDrop(name, &progress)
					}
					calls, entries, d, lats, err := appendFor(s, batches[bs], next[name], per, &progress)
					if werr := watch.stop(); werr != nil {
						err = errors.Join(err, werr)
					}
					if err != nil {
						return fmt.Errorf("%s: appends to the %s store in batches of %d: %w", name, st, bs, err)
					}
					next[name] += uint64(entries)
					if st == stateTruncated {
						b.appended[name] += entries
					}
					a.calls += calls
					a.entries += entries
					a.dur += d
					a.lats = append(a.lats, lats...)
					a.rate = append(a.rate, float64(entries)/d.Seconds())
				}
			}
		}
	}
	for _, p := range barrierPatterns {
		lats := barrierLats[p]
		if len(lats) == 0 {
			continue
		}
		slices.Sort(lats)
		b.add(row{
			Engine: "disk", Measure: "barrier", State: p, Calls: int64(len(lats)),
			P50us: us(percentile(lats, 0.50)), P99us: us(percentile(lats, 0.99)), MaxUs: us(lats[len(lats)-1]),
		})
	}
	for _, name := range b.c.engines {
		for _, st := range []string{stateFresh, stateTruncated} {
			for _, bs := range b.c.batches {
				a := accs[key{name, st, bs}]
				slices.Sort(a.lats)
				b.res.Quantiles[curveKey{name, st, bs}] = quantiles(a.lats)
				r := row{
					Engine: name, Measure: "storelogs", State: st, Batch: bs,
					Calls: a.calls, Entries: a.entries, Seconds: a.dur.Seconds(),
					EntriesPerS: float64(a.entries) / a.dur.Seconds(),
					P50us:       us(percentile(a.lats, 0.50)), P99us: us(percentile(a.lats, 0.99)),
					MaxUs: us(a.lats[len(a.lats)-1]),
				}
				if st == stateTruncated {
					// The two stores' slices of a round ran back to back:
					// their ratio is free of the disk's slow drift, and
					// the median of the rounds' ratios of a burst of load
					// in one slice.
					f := accs[key{name, stateFresh, bs}]
					var ratios []float64
					for i := range a.rate {
						ratios = append(ratios, a.rate[i]/f.rate[i])
					}
					slices.Sort(ratios)
					r.RoundRatios = ratios
					r.RoundRatioMedian = median(ratios)
				}
				b.add(r)
			}
		}
	}
	return nil
}

// openBarriers makes the files of the barrier probe (none with -barriers
// 0, or where the probe is not supported).
func (b *bench) openBarriers() (map[string]*barrierFile, error) {
	out := map[string]*barrierFile{}
	if b.c.barriers/b.c.rounds < 1 {
		return out, nil
	}
	dir := filepath.Join(b.root, "barrier")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	for _, p := range barrierPatterns {
		bf, err := openBarrier(dir, p)
		if errors.Is(err, errors.ErrUnsupported) {
			return out, nil
		}
		if err != nil {
			for _, o := range out {
				o.close()
			}
			return nil, fmt.Errorf("barrier probe: %w", err)
		}
		out[p] = bf
	}
	return out, nil
}

// appendFor calls StoreLogs with logs, numbered from next on, one call after
// another until d has passed (at least once), and returns the calls, the
// entries stored, the wall time and every call's latency.
//
// progress counts the entries stored so far, for the removal watch.
func appendFor(s logStore, logs []*raft.Log, next uint64, d time.Duration, progress *atomic.Int64) (calls, entries int64, elapsed time.Duration, lats []time.Duration, err error) {
	lats = make([]time.Duration, 0, 4096)
	start := time.Now()
	stop := start.Add(d)
	for {
		number(logs, next)
		t0 := time.Now()
		if err := s.StoreLogs(logs); err != nil {
			return 0, 0, 0, nil, fmt.Errorf("StoreLogs at %d: %w", next, err)
		}
		t1 := time.Now()
		lats = append(lats, t1.Sub(t0))
		next += uint64(len(logs))
		progress.Add(int64(len(logs)))
		if !t1.Before(stop) {
			break
		}
	}
	n := int64(len(lats))
	return n, n * int64(len(logs)), time.Since(start), lats, nil
}

// sampleDisk records the disk usage and file count of an engine's
// preloaded store's directory.
func (b *bench) sampleDisk(name, phase string) error {
	r, err := b.diskRow(name, phase)
	if err != nil {
		return err
	}
	b.add(r)
	return nil
}

func (b *bench) diskRow(name, phase string) (row, error) {
	r, files, err := diskSample(b.dir(name, "log"), b.before[name])
	if err != nil {
		return row{}, fmt.Errorf("%s: disk usage %s: %w", name, phase, err)
	}
	r.Engine, r.State, r.Entries = name, phase, b.appended[name]
	if phase == diskBefore {
		b.before[name] = files
	}
	return r, nil
}

// diskSample measures dir: its files' disk usage, apparent size and count,
// and which files of before (disk usage by path) are gone. It also returns
// the disk usage of each file by path.
func diskSample(dir string, before map[string]int64) (row, map[string]int64, error) {
	files, apparent, err := dirUsage(dir)
	if err != nil {
		return row{}, nil, err
	}
	r := row{Measure: "disk", ApparentBytes: apparent, Files: int64(len(files))}
	for _, du := range files {
		r.Bytes += du
	}
	for path, du := range before {
		if _, ok := files[path]; !ok {
			r.Removed++
			r.RemovedBytes += du
		}
	}
	return r, files, nil
}

// dropPoll is how often a dropWatch looks at the directory: a few dozen
// system calls each time, next to appends that each wait for a sync.
const dropPoll = 20 * time.Millisecond

// dropWatch polls an engine's preloaded store's directory while a slice of
// appends to it runs, for the diskFirstDrop sample: the first that finds
// more files of diskBefore removed than the diskAfterIdle sample did.
type dropWatch struct {
	b      *bench
	done   chan struct{}
	result chan dropResult
}

type dropResult struct {
	row *row // nil: nothing more was removed
	err error
}

// watchDrop starts a watch, or returns nil (a watch whose stop does
// nothing) when the engine's diskFirstDrop sample was already taken.
// progress counts the entries the slice has appended: the sample's Entries
// is read after it, so it is an upper bound of the entries appended when the
// files went.
func (b *bench) watchDrop(name string, progress *atomic.Int64) *dropWatch {
	if _, seen := find(b.res.Rows, name, "disk", diskFirstDrop, 0); seen {
		return nil
	}
	idle, ok := find(b.res.Rows, name, "disk", diskAfterIdle, 0)
	if !ok {
		return nil
	}
	w := &dropWatch{b: b, done: make(chan struct{}), result: make(chan dropResult, 1)}
	dir, before, base := b.dir(name, "log"), b.before[name], b.appended[name]
	go func() {
		t := time.NewTicker(dropPoll)
		defer t.Stop()
		for {
			stopping := false
			select {
			case <-w.done:
				stopping = true // one last look, then stop
			case <-t.C:
			}
			r, _, err := diskSample(dir, before)
			if err != nil {
				w.result <- dropResult{err: fmt.Errorf("%s: disk usage while appending: %w", name, err)}
				return
			}
			if r.Removed > idle.Removed {
				r.Engine, r.State, r.Entries = name, diskFirstDrop, base+progress.Load()
				w.result <- dropResult{row: &r}
				return
			}
			if stopping {
				w.result <- dropResult{}
				return
			}
		}
	}()
	return w
}

// stop ends the watch and records what it found.
func (w *dropWatch) stop() error {
	if w == nil {
		return nil
	}
	close(w.done)
	res := <-w.result
	if res.row != nil {
		w.b.add(*res.row)
	}
	return res.err
}

// dirUsage returns the space each regular file under dir occupies on disk
// (du: preallocated blocks count, holes do not), by path, and the sum of
// their apparent sizes. A file removed while the walk runs is skipped.
func dirUsage(dir string) (files map[string]int64, apparent int64, err error) {
	files = map[string]int64{}
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		files[path] = hostinfo.DiskUsage(info)
		apparent += info.Size()
		return nil
	})
	return files, apparent, err
}

// median of sorted values: the mean of the middle two for an even count.
func median(sorted []float64) float64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
