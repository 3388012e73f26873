package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segkv/segkv/bench/internal/hostinfo"
	"github.com/segkv/segkv/bench/peers"
)

// bench holds one run: its configuration, its temporary directory and the
// results collected so far.
type bench struct {
	c      *config
	root   string
	log    io.Writer
	engine map[string]peers.Engine
	// loadedKeys and freshKeys are the key spaces the scans run over, built
	// on first use.
	loadedKeys, freshKeys *keySpace
}

// result is one measurement of one engine on one workload.
type result struct {
	Workload string  `json:"workload"`
	Engine   string  `json:"engine"`
	Value    float64 `json:"value"` // ops/s, or seconds for bulk and reopen
	Unit     string  `json:"unit"`
	Ops      int64   `json:"ops"`
	Seconds  float64 `json:"seconds"`
	// Latency percentiles of single operations (durable puts only).
	P50us float64 `json:"p50_us,omitempty"`
	P99us float64 `json:"p99_us,omitempty"`
	// DiskBytes is the size of the loaded store after Close (bulk only).
	DiskBytes int64 `json:"disk_bytes,omitempty"`
	// Keys is the keys (each with its value) the scans visited, and
	// KeysPerS that over Seconds (scan workloads only; Ops counts scans).
	Keys     int64   `json:"keys,omitempty"`
	KeysPerS float64 `json:"keys_per_s,omitempty"`
	// N is the store's key count (scale and space workloads only, whose
	// figures are measured at several).
	N int `json:"n,omitempty"`
	// TimedOut marks a settle that ended at its timeout with background
	// work still pending (space/settle only).
	TimedOut bool `json:"timed_out,omitempty"`
}

// results is what a run produces, in the order it was measured.
type results struct {
	Config  *config
	Root    string
	Machine hostinfo.Machine
	Configs map[string][2]string // engine -> {durable, bulk} configuration
	Rows    []result
	// Scale holds the scale workload's figures, one row per figure, engine
	// and key count; they have a table (and ratios) of their own.
	Scale []result
	// Space holds the space workload's figures, the same way.
	Space []result
}

func newBench(c *config, log io.Writer) (*bench, error) {
	if c.quiet {
		log = io.Discard
	}
	root, err := os.MkdirTemp(c.dir, "peerbench-")
	if err != nil {
		return nil, err
	}
	b := &bench{c: c, root: root, log: log, engine: map[string]peers.Engine{}}
	for _, name := range c.engines {
		e, err := peers.Lookup(name)
		if err != nil {
			return nil, errors.Join(err, b.cleanup())
		}
		b.engine[name] = e
	}
	return b, nil
}

func (b *bench) cleanup() error {
	if b.c.keep {
		fmt.Fprintf(b.log, "peerbench: kept %s\n", b.root)
		return nil
	}
	return os.RemoveAll(b.root)
}

func (b *bench) progress(format string, args ...any) {
	fmt.Fprintf(b.log, "peerbench: "+format+"\n", args...)
}

// labelled runs f with the pprof label phase=<engine>:<workload>, which every
// goroutine f starts inherits (the engines' background goroutines included),
// so one profile of the whole run can be cut per engine and workload.
func labelled(ctx context.Context, engine, workload string, f func(ctx context.Context) error) error {
	var err error
	pprof.Do(ctx, pprof.Labels("phase", engine+":"+workload), func(ctx context.Context) { err = f(ctx) })
	return err
}

func (b *bench) runAll(ctx context.Context) (*results, error) {
	res := &results{Config: b.c, Root: b.root, Machine: hostinfo.Probe(b.root), Configs: map[string][2]string{}}
	for _, name := range b.c.engines {
		e := b.engine[name]
		res.Configs[name] = [2]string{e.Config(peers.Durable), e.Config(peers.Bulk)}
	}
	want := func(w string) bool { return contains(b.c.workloads, w) }
	for _, w := range []string{"put1", "put32"} {
		if !want(w) {
			continue
		}
		writers := 1
		if w == "put32" {
			writers = b.c.writers
		}
		rows, err := b.durablePut(ctx, w, writers)
		if err != nil {
			return nil, err
		}
		res.Rows = append(res.Rows, rows...)
	}
	defer func() { res.Machine.LoadEnd = hostinfo.LoadAvg() }()
	needStore := slices.ContainsFunc([]string{"bulk", "reopen", "get1", "get2", "miss1", "miss2"}, want) ||
		slices.ContainsFunc(sealedScans, func(s scanSpec) bool { return want(s.workload) })
	if needStore {
		if err := b.loaded(ctx, res); err != nil {
			return nil, err
		}
	}
	if slices.ContainsFunc(freshScans, func(s scanSpec) bool { return want(s.workload) }) {
		// Engine-major too: one fresh store open at a time.
		for _, name := range b.c.engines {
			rows, err := b.fresh(ctx, name)
			if err != nil {
				return nil, fmt.Errorf("fresh scans %s: %w", name, err)
			}
			res.Rows = append(res.Rows, rows...)
		}
	}
	if want("scale") {
		rows, err := b.scale(ctx)
		if err != nil {
			return nil, err
		}
		res.Scale = rows
	}
	if want("space") {
		rows, err := b.space(ctx)
		if err != nil {
			return nil, err
		}
		res.Space = rows
	}
	return res, nil
}

// loaded bulk-loads a store per engine and runs the workloads that read it.
func (b *bench) loaded(ctx context.Context, res *results) error {
	want := func(w string) bool { return contains(b.c.workloads, w) }
	// Bulk loads run back to back, workload-major, so that disk drift over
	// the run affects the engines alike.
	for _, name := range b.c.engines {
		r, err := b.bulk(ctx, name)
		if err != nil {
			return fmt.Errorf("bulk %s: %w", name, err)
		}
		b.progress("%-6s %-9s %.2f s (%d MiB on disk)", "bulk", name, r.Value, r.DiskBytes>>20)
		if want("bulk") {
			res.Rows = append(res.Rows, r)
		}
	}
	// Reads run engine-major: only one loaded store is open at a time, so
	// one engine's post-open compactions or merges cannot steal the CPU
	// from another's measurement (they do count against their own).
	for _, name := range b.c.engines {
		rows, err := b.reads(ctx, name)
		if err != nil {
			return fmt.Errorf("reads %s: %w", name, err)
		}
		for _, r := range rows {
			if want(r.Workload) {
				res.Rows = append(res.Rows, r)
			}
		}
	}
	return nil
}

// durablePut measures durable puts with the given number of writers on a
// fresh store per engine. The measured time is split into rounds; odd rounds
// run the engines in reverse order. The store is reopened (untimed) for each
// round, so only one engine is open at any time.
func (b *bench) durablePut(ctx context.Context, workload string, writers int) ([]result, error) {
	type acc struct {
		ops  int64
		dur  time.Duration
		lats []time.Duration
		next atomic.Uint64 // next key number: keys stay unique across rounds
	}
	accs := map[string]*acc{}
	for _, name := range b.c.engines {
		accs[name] = &acc{}
	}
	per := b.c.duration / time.Duration(b.c.rounds)
	for round := 0; round < b.c.rounds; round++ {
		order := slices.Clone(b.c.engines)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, name := range order {
			a := accs[name]
			dir := filepath.Join(b.root, workload, name)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, err
			}
			err := labelled(ctx, name, workload, func(context.Context) error {
				db, err := b.engine[name].Open(dir, peers.Durable)
				if err != nil {
					return err
				}
				ops, dur, lats, err := putFor(db, writers, per, &a.next)
				if cerr := db.Close(); cerr != nil {
					err = errors.Join(err, fmt.Errorf("close: %w", cerr))
				}
				a.ops += ops
				a.dur += dur
				a.lats = append(a.lats, lats...)
				return err
			})
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", workload, name, err)
			}
		}
	}
	var rows []result
	for _, name := range b.c.engines {
		a := accs[name]
		slices.Sort(a.lats)
		r := result{
			Workload: workload, Engine: name, Unit: "ops/s", Ops: a.ops, Seconds: a.dur.Seconds(),
			Value: float64(a.ops) / a.dur.Seconds(),
			P50us: us(percentile(a.lats, 0.50)), P99us: us(percentile(a.lats, 0.99)),
		}
		b.progress("%-6s %-9s %8.0f ops/s  p50 %.0f us  p99 %.0f us", workload, name, r.Value, r.P50us, r.P99us)
		rows = append(rows, r)
	}
	if !b.c.keep {
		if err := os.RemoveAll(filepath.Join(b.root, workload)); err != nil {
			return nil, err
		}
	}
	return rows, nil
}

// putFor runs writers goroutines that each Put fresh keys until d has passed,
// and returns the puts done, the wall time and every put's latency.
func putFor(db peers.DB, writers int, d time.Duration, next *atomic.Uint64) (int64, time.Duration, []time.Duration, error) {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		all   []time.Duration
		errs  []error
		start = time.Now()
		stop  = start.Add(d)
	)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var kb [peers.KeySize]byte
			var vb [peers.ValueSize]byte
			lats := make([]time.Duration, 0, 4096)
			var err error
			for {
				t0 := time.Now()
				if !t0.Before(stop) {
					break
				}
				i := next.Add(1) - 1
				if err = db.Put(peers.Key(kb[:], i), peers.Value(vb[:], i)); err != nil {
					break
				}
				lats = append(lats, time.Since(t0))
			}
			mu.Lock()
			all = append(all, lats...)
			if err != nil {
				errs = append(errs, err)
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return int64(len(all)), time.Since(start), all, errors.Join(errs...)
}

// bulk loads n keys into a fresh store in batches, the last one synced, and
// closes it. The time covers the first batch to the end of Close.
func (b *bench) bulk(ctx context.Context, name string) (result, error) {
	dir := filepath.Join(b.root, "load", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return result{}, err
	}
	n, bs := uint64(b.c.n), b.c.batch
	var elapsed time.Duration
	err := labelled(ctx, name, "bulk", func(context.Context) error {
		db, err := b.engine[name].Open(dir, peers.Bulk)
		if err != nil {
			return err
		}
		w := newBatchWriter(bs)
		start := time.Now()
		if err := w.write(db, n, true); err != nil {
			return errors.Join(err, db.Close())
		}
		if err := db.Close(); err != nil {
			return fmt.Errorf("close: %w", err)
		}
		elapsed = time.Since(start)
		return nil
	})
	if err != nil {
		return result{}, err
	}
	size, err := dirSize(dir)
	if err != nil {
		return result{}, err
	}
	return result{Workload: "bulk", Engine: name, Unit: "s", Value: elapsed.Seconds(),
		Ops: int64(n), Seconds: elapsed.Seconds(), DiskBytes: size}, nil
}

// batchWriter writes keys in batches through one reused backing array per
// batch: every engine has copied or written the batch by the time Batch
// returns.
type batchWriter struct {
	kbuf, vbuf []byte
	keys, vals [][]byte
}

func newBatchWriter(bs int) *batchWriter {
	return &batchWriter{
		kbuf: make([]byte, bs*peers.KeySize), vbuf: make([]byte, bs*peers.ValueSize),
		keys: make([][]byte, bs), vals: make([][]byte, bs),
	}
}

// write writes key numbers [0, n) in batches, syncing the last one if
// syncLast.
func (w *batchWriter) write(db peers.DB, n uint64, syncLast bool) error {
	bs := uint64(len(w.keys))
	for lo := uint64(0); lo < n; lo += bs {
		hi := min(lo+bs, n)
		for i := lo; i < hi; i++ {
			j := i - lo
			w.keys[j] = peers.Key(w.kbuf[j*peers.KeySize:], i)
			w.vals[j] = peers.Value(w.vbuf[j*peers.ValueSize:], i)
		}
		m := hi - lo
		if err := db.Batch(w.keys[:m], w.vals[:m], syncLast && hi == n); err != nil {
			return fmt.Errorf("batch at key %d: %w", lo, err)
		}
	}
	return nil
}

// reads reopens the loaded store (timed, to the first successful Get), warms
// it with untimed random gets, then measures hits and misses with 1 and 2
// goroutines, and then the scans (after a warm-up of their own).
func (b *bench) reads(ctx context.Context, name string) (rows []result, err error) {
	dir := filepath.Join(b.root, "load", name)
	var db peers.DB
	err = labelled(ctx, name, "reopen", func(context.Context) error {
		start := time.Now()
		var err error
		if db, err = b.engine[name].Open(dir, peers.Durable); err != nil {
			return err
		}
		var kb [peers.KeySize]byte
		v, found, err := db.Get(peers.Key(kb[:], 0), nil)
		if err == nil && (!found || len(v) != peers.ValueSize) {
			err = fmt.Errorf("key 0 after reopen: found=%v len=%d", found, len(v))
		}
		if err != nil {
			return errors.Join(err, db.Close())
		}
		d := time.Since(start)
		rows = append(rows, result{Workload: "reopen", Engine: name, Unit: "s", Value: d.Seconds(), Ops: 1, Seconds: d.Seconds()})
		b.progress("%-6s %-9s %.4f s", "reopen", name, d.Seconds())
		return nil
	})
	if err != nil {
		return nil, err
	}
	defer func() {
		if db != nil {
			err = errors.Join(err, db.Close())
		}
	}()
	n := uint64(b.c.n)
	// Warm the engine's own caches (block caches, open file handles) the way
	// a running service would have them; the OS page cache is already warm
	// because the load just wrote the files.
	reading := false
	for _, w := range []string{"get1", "get2", "miss1", "miss2"} {
		reading = reading || contains(b.c.workloads, w)
	}
	if reading {
		if err := labelled(ctx, name, "warmup", func(context.Context) error {
			_, _, err := getN(db, b.c.gets/4+1, 2, 0, n, true, 1)
			return err
		}); err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
	}
	for _, spec := range []struct {
		workload string
		workers  int
		hit      bool
	}{{"get1", 1, true}, {"get2", 2, true}, {"miss1", 1, false}, {"miss2", 2, false}} {
		if !contains(b.c.workloads, spec.workload) {
			continue
		}
		lo := uint64(0)
		if !spec.hit {
			lo = n // keys n..2n-1 were never written
		}
		var ops int64
		var d time.Duration
		err := labelled(ctx, name, spec.workload, func(context.Context) error {
			var err error
			ops, d, err = getN(db, b.c.gets, spec.workers, lo, n, spec.hit, uint64(len(rows)+2))
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", spec.workload, err)
		}
		r := result{Workload: spec.workload, Engine: name, Unit: "ops/s", Ops: ops, Seconds: d.Seconds(), Value: float64(ops) / d.Seconds()}
		b.progress("%-6s %-9s %8.0f ops/s", spec.workload, name, r.Value)
		rows = append(rows, r)
	}
	scanRows, err := b.scans(ctx, name, db, b.loadedKeySpace, sealedScans)
	return append(rows, scanRows...), err
}

// getN does total Gets of uniformly random key numbers in [lo, lo+n) split
// over workers goroutines, checks every answer (hit must find a 100-byte
// value, miss must find nothing) and returns the Gets done and the wall time.
func getN(db peers.DB, total, workers int, lo, n uint64, hit bool, seed uint64) (int64, time.Duration, error) {
	var (
		wg   sync.WaitGroup
		errs = make([]error, workers)
		per  = total / workers
	)
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			var kb [peers.KeySize]byte
			dst := make([]byte, 0, peers.ValueSize)
			for j := 0; j < per; j++ {
				i := lo + rng.Uint64N(n)
				v, found, err := db.Get(peers.Key(kb[:], i), dst)
				if err == nil && found != hit {
					err = fmt.Errorf("key %d: found=%v, want %v", i, found, hit)
				}
				if err == nil && hit && len(v) != peers.ValueSize {
					err = fmt.Errorf("key %d: value of %d bytes, want %d", i, len(v), peers.ValueSize)
				}
				if err != nil {
					errs[w] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	return int64(per * workers), time.Since(start), errors.Join(errs...)
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// dirSize is the space the regular files under dir occupy on disk (du, not
// du --apparent-size: a preallocated but unwritten tail counts, sparse holes
// do not).
func dirSize(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		total += hostinfo.DiskUsage(info)
		return nil
	})
	return total, err
}
