package segstore

// Tests of the garbage rewrites (garbage.go, merge.go's rewrite alone)
// under what users do to a store: power cuts in every sync mode, faults,
// damaged indexes, concurrent commits of every kind, listeners that call
// back, Close. Each asserts what the store promises: no record a read can
// reach is dropped, nothing is left in limbo, and the work converges.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/internal/testutil"
	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/vfs"
)

// bgShadowed writes n keys (S), seals, overwrites them all (N), seals:
// S is all garbage. It returns the model and the segments oldest first.
func bgShadowed(t *testing.T, s *Store, prefix string, n int) (model, []SegmentInfo) {
	t.Helper()
	m := model{}
	for i := 0; i < n; i++ {
		require.NoError(t, s.Put([]byte(fmt.Sprintf("%s%04d", prefix, i)), []byte(fmt.Sprintf("old-%04d-%0100d", i, i))))
	}
	require.NoError(t, s.Seal())
	for i := 0; i < n; i++ {
		k, v := fmt.Sprintf("%s%04d", prefix, i), fmt.Sprintf("new-%04d", i)
		require.NoError(t, s.Put([]byte(k), []byte(v)))
		m[k] = v
	}
	require.NoError(t, s.Seal())
	return m, s.Segments()
}

// withTimeout runs f and reports whether it returned within d.
func withTimeout(d time.Duration, f func()) bool {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// TestGarbageIndexRebuiltListenerCallsMetrics: the EventListener doc
// allows a listener to call Metrics. An index damaged in a key block is
// healed by the first read that needs the block; when that read is the
// garbage estimate's (refreshGarbage, under the tracker's mutex), the
// IndexRebuilt listener runs with that mutex held, and a Metrics call from
// it waits for the mutex forever.
func TestGarbageIndexRebuiltListenerCallsMetrics(t *testing.T) {
	mem := vfs.NewMem()
	o := garbageOpts(mem)
	s := mustOpen(t, "/db", o)
	m, segs := bgShadowed(t, s, "k", 300)
	require.Len(t, segs, 2)
	checkAndClose(t, s)

	// Damage a key block of the older segment's index (not its top
	// block, which Open verifies).
	testutil.FlipByte(t, mem, filepath.Join("/db", segment.IndexName(segs[0].ID)), 40, 0x10)

	var sp atomic.Pointer[Store]
	var rebuilt, inner atomic.Int64
	o.Events.IndexRebuilt = func(IndexRebuildInfo) {
		rebuilt.Add(1)
		if st := sp.Load(); st != nil {
			_ = st.Metrics() // allowed: "Get, Metrics and the other reads"
			inner.Add(1)
		}
	}
	s = mustOpen(t, "/db", o)
	sp.Store(s)
	var mt Metrics
	ok := withTimeout(3*time.Second, func() { mt = s.Metrics() })
	if !ok {
		// The store cannot be closed: Close waits for the stuck Metrics.
		t.Fatalf("Metrics deadlocked: the IndexRebuilt listener (rebuilds %d) called Metrics while the garbage estimate held the tracker's lock", rebuilt.Load())
	}
	require.Positive(t, rebuilt.Load(), "the damaged block was read")
	require.Equal(t, rebuilt.Load(), inner.Load())
	require.Positive(t, mt.GarbageBytes)
	require.NoError(t, fullDiff(s, m, nil))
	checkAndClose(t, s)
}

// TestGarbageIndexRebuiltListenerBackgroundMerge: the same damage
// found by the background merge's own refresh: the listener's Metrics call
// blocks the merge goroutine for good, and Close, which waits for it,
// never returns.
func TestGarbageIndexRebuiltListenerBackgroundMerge(t *testing.T) {
	mem := vfs.NewMem()
	o := garbageOpts(mem)
	s := mustOpen(t, "/db", o)
	_, segs := bgShadowed(t, s, "k", 300)
	require.Len(t, segs, 2)
	checkAndClose(t, s)
	testutil.FlipByte(t, mem, filepath.Join("/db", segment.IndexName(segs[0].ID)), 40, 0x10)

	var sp atomic.Pointer[Store]
	var rebuilt atomic.Int64
	o.Events.IndexRebuilt = func(IndexRebuildInfo) {
		rebuilt.Add(1)
		if st := sp.Load(); st != nil {
			_ = st.Metrics()
		}
	}
	o.Merge.Disable = false
	s = mustOpen(t, "/db", o)
	sp.Store(s)
	s.bg.requestMerge()
	require.Eventually(t, func() bool { return rebuilt.Load() > 0 }, 5*time.Second, time.Millisecond)
	if !withTimeout(3*time.Second, func() { _ = s.Close() }) {
		t.Fatalf("Close hangs: the background merge is stuck in the IndexRebuilt listener's Metrics call (the garbage refresh holds the tracker's lock)")
	}
}

// TestGarbageEstimateTransientErrorIsForever: one read error while the
// estimate reads a segment's index (here: the rebuild of a damaged key
// block fails once reading the data file, which the index itself retries
// on the next read) marks the segment's estimate failed for as long as the
// segment exists: once the fault is gone and the index healed, the
// segment, all garbage, is still never rewritten, and GarbageBytes and
// MergeBacklog report 0.
func TestGarbageEstimateTransientErrorIsForever(t *testing.T) {
	mem := vfs.NewMem()
	fy := vfs.NewFaulty(mem)
	o := garbageOpts(fy)
	s := mustOpen(t, "/db", o)
	m, segs := bgShadowed(t, s, "k", 300)
	require.Len(t, segs, 2)
	checkAndClose(t, s)
	old := segs[0]
	testutil.FlipByte(t, mem, filepath.Join("/db", segment.IndexName(old.ID)), 40, 0x10)

	s = mustOpen(t, "/db", o)
	dataPath := filepath.Join("/db", segment.DataName(old.ID, s.mlog.State().Segments[old.ID].FileKind))
	require.NoError(t, fy.Inject(vfs.Fault{Op: vfs.OpRead, Nth: 1, Persistent: true, Match: func(p string) bool { return p == dataPath }}))
	mt := s.Metrics() // the estimate meets the damage; its repair fails once
	require.Positive(t, fy.Stats().Injected[vfs.OpRead], "the fault fired")
	fy.Clear()

	// The fault is gone: a read heals the index.
	require.NoError(t, fullDiff(s, m, nil))
	require.NoError(t, s.Check())

	mt = s.Metrics()
	t.Logf("after the fault: GarbageBytes %d, MergeBacklog %d, SegmentBytes %d", mt.GarbageBytes, mt.MergeBacklog, mt.SegmentBytes)
	steps := mergeSteps(t, s)
	mt2 := s.Metrics()
	require.Equal(t, 1, mt2.Segments,
		"the all-garbage segment is never reclaimed after one transient read error (steps %d, GarbageBytes before %d, backlog %d)", steps, mt.GarbageBytes, mt.MergeBacklog)
	require.NoError(t, fullDiff(s, m, nil))
	checkAndClose(t, s)
}

// bgCrashKeys are the keys the garbage crash workload draws from: the
// empty key and keys at both ends of every segment's range.
func bgCrashKeys() []string {
	keys := []string{""}
	for i := 0; i < 30; i++ {
		keys = append(keys, fmt.Sprintf("key-%03d", i))
	}
	return keys
}

// mergeCrashCounts is what runMergeCrash saw committed.
type mergeCrashCounts struct {
	points    int   // crash images checked
	rewrites  int64 // merge steps that rewrote one segment alone
	runMerges int64 // merge steps of several segments
}

// runMergeCrash runs a workload of batches, range deletes, seals (by size
// too) and merge steps under merge options mo, with writes in the live file
// (unsynced under the lazy modes) shadowing the merged segments' records,
// takes a crash image at every sync point, and checks every image against
// the history: a state between the last durable point before the image and
// the last write begun. stream picks the random streams.
func runMergeCrash(t *testing.T, mode SyncMode, seed, stream uint64, steps int, keys []string, mo MergeOptions) mergeCrashCounts {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, stream))
	mem := vfs.NewMem()
	rec := testutil.NewCrashRecorder(mem, rand.New(rand.NewPCG(seed, stream+1)))
	mk := func(fsys vfs.FS) *Options {
		return &Options{FS: fsys, Sync: mode, SyncInterval: 2 * time.Millisecond, SegmentSize: 4 << 10, Merge: mo}
	}
	var runMerges atomic.Int64
	o := mk(mem)
	o.Events.MergeEnd = func(mi MergeInfo) {
		if mi.Err == nil && len(mi.Inputs) > 1 {
			runMerges.Add(1)
		}
	}
	s := mustOpen(t, "/db", o)
	mem.SetSyncHook(rec.Hook)
	history := []model{{}}
	durable := func() {
		if mode == SyncAlways {
			return
		}
		rec.Acked.Store(rec.Started.Load())
	}
	n := 0
	for i := 0; i < steps; i++ {
		cur := history[len(history)-1]
		switch r := rng.IntN(100); {
		case r < 10:
			require.NoError(t, s.Seal())
			durable()
		case r < 30:
			// A rewrite with whatever the live file holds unsynced.
			_, err := s.mergeStep(context.Background(), rng.IntN(3) == 0)
			require.NoError(t, err)
		case r < 35 && mode != SyncAlways:
			require.NoError(t, s.Sync())
			durable()
		case r < 40:
			a, b := keys[rng.IntN(len(keys))], keys[rng.IntN(len(keys))]
			if a > b {
				a, b = b, a
			}
			next := cur.clone()
			next.deleteRange(a, b)
			history = append(history, next)
			rec.Started.Add(1)
			require.NoError(t, s.DeleteRange([]byte(a), []byte(b)))
			if mode == SyncAlways {
				rec.Acked.Add(1)
			}
		default:
			next := cur.clone()
			b := s.NewBatch()
			for j := 0; j < 1+rng.IntN(3); j++ {
				k := keys[rng.IntN(len(keys))]
				if rng.IntN(4) == 0 {
					require.NoError(t, b.Delete([]byte(k)))
					delete(next, k)
				} else {
					n++
					v := fmt.Sprintf("v%d-%0*d", n, rng.IntN(150), 0)
					require.NoError(t, b.Put([]byte(k), []byte(v)))
					next[k] = v
				}
			}
			history = append(history, next)
			rec.Started.Add(1)
			require.NoError(t, s.Apply(b))
			if mode == SyncAlways {
				rec.Acked.Add(1)
			}
		}
	}
	mem.SetSyncHook(nil)
	rewrites := s.stats.rewrites.Load()
	require.NoError(t, fullDiff(s, history[len(history)-1], keys))
	require.NoError(t, s.Close())
	points := rec.Points()
	wrong := 0
	for _, p := range points {
		if err := checkCrashPointOpts(p, history, keys, mk); err != nil {
			wrong++
			if wrong <= 3 {
				t.Errorf("%v seed %d crash point %s (durable %d, begun %d): %v", mode, seed, p.Label, p.Lo, p.Hi, err)
			}
		}
	}
	require.Zero(t, wrong, "%v seed %d: %d of %d crash points wrong", mode, seed, wrong, len(points))
	return mergeCrashCounts{points: len(points), rewrites: rewrites, runMerges: runMerges.Load()}
}

// runGarbageCrash is runMergeCrash with rewrites alone only (no size-tiered
// run is ever worth merging): rewrites for garbage taken while the live
// file holds writes that shadow their records. It returns the crash points
// and the rewrites committed.
func runGarbageCrash(t *testing.T, mode SyncMode, seed uint64, steps int) (int, int64) {
	t.Helper()
	c := runMergeCrash(t, mode, seed, 31, steps, bgCrashKeys(), MergeOptions{Disable: true, MinRun: 1000, GarbageRatio: 0.05})
	return c.points, c.rewrites
}

// TestGarbageCrashSyncModes: power cuts at every sync point of
// rewrites taken beside unsynced live writes, under each sync mode.
func TestGarbageCrashSyncModes(t *testing.T) {
	for _, mode := range []SyncMode{SyncAlways, SyncManual, SyncInterval} {
		t.Run(fmt.Sprint(mode), func(t *testing.T) {
			var points int
			var rewrites int64
			for seed := uint64(0); seed < 1; seed++ {
				p, r := runGarbageCrash(t, mode, seed, 260)
				points += p
				rewrites += r
			}
			t.Logf("%v: %d crash points, %d rewrites", mode, points, rewrites)
			require.Positive(t, rewrites)
		})
	}
}

// bgScan reads an iterator into a model, or returns its error.
func bgScan(it *Iterator) (model, error) {
	defer it.Close()
	got := model{}
	var prev []byte
	for ok := it.First(); ok; ok = it.Next() {
		if prev != nil && string(prev) >= string(it.Key()) {
			return nil, fmt.Errorf("keys out of order: %q after %q", it.Key(), prev)
		}
		prev = append(prev[:0], it.Key()...)
		v, err := it.Value()
		if err != nil {
			return nil, err
		}
		got[string(it.Key())] = string(v)
	}
	return got, it.Err()
}

// bgModelDiff describes the first difference of got from want.
func bgModelDiff(got, want model) error {
	for k, v := range want {
		if g, ok := got[k]; !ok {
			return fmt.Errorf("%s missing, want %.20q", k, v)
		} else if g != v {
			return fmt.Errorf("%s = %.20q, want %.20q", k, g, v)
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			return fmt.Errorf("%s = %.20q, want absent", k, v)
		}
	}
	return nil
}

// TestGarbageConcurrentEverything: writers that each own a key
// prefix (puts, deletes, range deletes within it, seals, snapshots they
// check later, read-your-writes after every write), an importer of a
// peer's segments, Compact in a loop, background merges whose steps are
// mostly rewrites alone (low GarbageRatio), readers and Metrics callers,
// all at once under -race; then the whole store against the model, again
// after a reopen.
func TestGarbageConcurrentEverything(t *testing.T) {
	for _, minRun := range []int{1000, 3} {
		t.Run(fmt.Sprint("minrun", minRun), func(t *testing.T) {
			bgConcurrentEverything(t, minRun, uint64(minRun))
		})
	}
}

func bgConcurrentEverything(t *testing.T, minRun int, seed uint64) {
	mem := vfs.NewMem()
	o := &Options{FS: mem, SegmentSize: 6 << 10, Merge: MergeOptions{MinRun: minRun, GarbageRatio: 0.05}}
	s := mustOpen(t, "/db", o)
	peer := mustOpen(t, "/peer", &Options{FS: mem, SegmentSize: 1 << 20, Merge: MergeOptions{Disable: true}})
	const writers = 4
	const dur = 1500 * time.Millisecond
	models := make([]model, writers+1)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 64)
	fail := func(err error) {
		select {
		case errs <- err:
		default:
		}
	}
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			prefix := fmt.Sprintf("w%d-", w)
			key := func() string { return fmt.Sprintf("%s%03d", prefix, rng.IntN(60)) }
			m := model{}
			type snap struct {
				sn   *Snapshot
				want model
			}
			var snaps []snap
			defer func() {
				for _, sp := range snaps {
					sp.sn.Close()
				}
				models[w] = m
			}()
			for n := 0; !stopped(); n++ {
				switch r := rng.IntN(100); {
				case r < 55:
					k, v := key(), fmt.Sprintf("v%d-%d-%0*d", w, n, rng.IntN(120), 0)
					if err := s.Put([]byte(k), []byte(v)); err != nil {
						fail(err)
						return
					}
					m[k] = v
					if got, err := s.Get([]byte(k)); err != nil || string(got) != v {
						fail(fmt.Errorf("writer %d: get %s after put: %.20q, %v; want %.20q", w, k, got, err, v))
						return
					}
				case r < 75:
					k := key()
					if err := s.Delete([]byte(k)); err != nil {
						fail(err)
						return
					}
					delete(m, k)
					if got, err := s.Get([]byte(k)); !errors.Is(err, ErrNotFound) {
						fail(fmt.Errorf("writer %d: get %s after delete: %.20q, %v", w, k, got, err))
						return
					}
				case r < 78:
					a, b := key(), key()
					if a > b {
						a, b = b, a
					}
					if err := s.DeleteRange([]byte(a), []byte(b)); err != nil {
						fail(err)
						return
					}
					m.deleteRange(a, b)
				case r < 84:
					if err := s.Seal(); err != nil {
						fail(err)
						return
					}
				case r < 88:
					sn, err := s.NewSnapshot()
					if err != nil {
						fail(err)
						return
					}
					snaps = append(snaps, snap{sn, m.clone()})
				case r < 92 && len(snaps) > 0:
					j := rng.IntN(len(snaps))
					it, err := snaps[j].sn.NewIterator(&IterOptions{Prefix: []byte(prefix)})
					if err != nil {
						fail(err)
						return
					}
					got, err := bgScan(it)
					if err == nil {
						err = bgModelDiff(got, snaps[j].want)
					}
					if err != nil {
						fail(fmt.Errorf("writer %d: snapshot: %w", w, err))
						return
					}
					snaps[j].sn.Close()
					snaps = append(snaps[:j], snaps[j+1:]...)
				default:
					it, err := s.NewIterator(&IterOptions{Prefix: []byte(prefix)})
					if err != nil {
						fail(err)
						return
					}
					got, err := bgScan(it)
					if err == nil {
						err = bgModelDiff(got, m)
					}
					if err != nil {
						fail(fmt.Errorf("writer %d: scan: %w", w, err))
						return
					}
				}
			}
		}(w)
	}
	// The importer owns the keys imp-*: it writes them to the peer and
	// imports each of the peer's seals.
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(seed, 99))
		m := model{}
		defer func() { models[writers] = m }()
		for n := 0; !stopped(); n++ {
			for j := 0; j < 1+rng.IntN(20); j++ {
				k := fmt.Sprintf("imp-%03d", rng.IntN(60))
				if rng.IntN(4) == 0 {
					if err := peer.Delete([]byte(k)); err != nil {
						fail(err)
						return
					}
					delete(m, k)
				} else {
					v := fmt.Sprintf("i%d-%0*d", n, rng.IntN(100), 0)
					if err := peer.Put([]byte(k), []byte(v)); err != nil {
						fail(err)
						return
					}
					m[k] = v
				}
			}
			if err := peer.Seal(); err != nil {
				fail(err)
				return
			}
			segs := peer.Segments()
			var buf bytes.Buffer
			if _, err := peer.Export(context.Background(), segs[len(segs)-1].ID, &buf); err != nil {
				fail(err)
				return
			}
			if _, err := s.Import(context.Background(), &buf); err != nil {
				fail(fmt.Errorf("import: %w", err))
				return
			}
			it, err := s.NewIterator(&IterOptions{Prefix: []byte("imp-")})
			if err != nil {
				fail(err)
				return
			}
			got, err := bgScan(it)
			if err == nil {
				err = bgModelDiff(got, m)
			}
			if err != nil {
				fail(fmt.Errorf("importer: %w", err))
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	// Compact in a loop.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stopped() {
			if err := s.Compact(context.Background()); err != nil {
				fail(fmt.Errorf("compact: %w", err))
				return
			}
			time.Sleep(150 * time.Millisecond)
		}
	}()
	// Metrics and readers.
	for g := 0; g < 3; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 200+uint64(g)))
			for !stopped() {
				mt := s.Metrics()
				// (GarbageBytes <= SegmentBytes is TestGarbageMetricsOneView's.)
				if mt.GarbageBytes < 0 || mt.MergeBacklog < 0 || mt.Rewrites > mt.Merges {
					fail(fmt.Errorf("metrics out of bounds: garbage %d of %d, backlog %d, rewrites %d of %d merges",
						mt.GarbageBytes, mt.SegmentBytes, mt.MergeBacklog, mt.Rewrites, mt.Merges))
					return
				}
				_, _ = s.Get([]byte(fmt.Sprintf("w%d-%03d", rng.IntN(writers), rng.IntN(60))))
				if it, err := s.NewIterator(nil); err == nil {
					if _, err := bgScan(it); err != nil {
						fail(fmt.Errorf("reader scan: %w", err))
						return
					}
				}
			}
		}(g)
	}
	time.Sleep(dur)
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	want := model{}
	for _, m := range models {
		for k, v := range m {
			want[k] = v
		}
	}
	require.NoError(t, s.Compact(context.Background()))
	mt := s.Metrics()
	t.Logf("merges %d, rewrites %d, segments %d, garbage %d of %d, backlog %d", mt.Merges, mt.Rewrites, mt.Segments, mt.GarbageBytes, mt.SegmentBytes, mt.MergeBacklog)
	require.Positive(t, mt.Rewrites)
	require.Zero(t, mt.GarbageBytes, "Compact leaves no estimated garbage")
	require.NoError(t, fullDiff(s, want, nil))
	require.NoError(t, peer.Close())
	checkAndClose(t, s)
	reopenCheck(t, mem, o, want, nil)
}

// TestGarbageMetricsOneView: one Metrics reading must describe one
// state: its GarbageBytes (bytes of sealed segments) cannot exceed its
// SegmentBytes, and a store with no segment has no merge backlog. Metrics
// reads Segments and SegmentBytes under the read lock, then pins the
// segment list again for the garbage estimate and the backlog: a commit in
// between makes the two halves describe different states, and a ratio
// GarbageBytes/SegmentBytes is then above 1 or infinite. Here the commit
// is an import of two streams (the older all garbage) into an empty store,
// made to land in that window by holding the spare file's lock, which
// Metrics takes between the two halves (seen without the lock too, from
// seals and rewrites racing Metrics: GarbageBytes 194 of SegmentBytes 98,
// MergeBacklog 1 with Segments 0).
func TestGarbageMetricsOneView(t *testing.T) {
	peer := mustOpen(t, "/peer", &Options{FS: vfs.NewMem(), Merge: MergeOptions{Disable: true}})
	for i := 0; i < 50; i++ {
		require.NoError(t, peer.Put([]byte(fmt.Sprintf("k%03d", i)), []byte("old")))
	}
	older := exportNewest(t, peer)
	for i := 0; i < 50; i++ {
		require.NoError(t, peer.Put([]byte(fmt.Sprintf("k%03d", i)), []byte("new")))
	}
	newer := exportNewest(t, peer)
	require.NoError(t, peer.Close())

	s := mustOpen(t, "/db", &Options{FS: vfs.NewMem(), Merge: MergeOptions{MinRun: 1000, GarbageRatio: 0.2}})
	// The background merge would drop the older segment: keep it busy.
	s.mergeMu.Lock()
	s.spare.Lock()
	got := make(chan Metrics, 1)
	go func() { got <- s.Metrics() }()
	time.Sleep(50 * time.Millisecond) // Metrics has read the (empty) segment list
	_, err := s.Import(context.Background(), bytes.NewReader(older), bytes.NewReader(newer))
	s.spare.Unlock()
	require.NoError(t, err)
	mt := <-got
	s.mergeMu.Unlock()
	t.Logf("one reading: Segments %d SegmentBytes %d GarbageBytes %d MergeBacklog %d", mt.Segments, mt.SegmentBytes, mt.GarbageBytes, mt.MergeBacklog)
	require.LessOrEqual(t, mt.GarbageBytes, mt.SegmentBytes, "GarbageBytes above SegmentBytes in one reading")
	if mt.Segments == 0 {
		require.Zero(t, mt.MergeBacklog, "a merge backlog with no segment")
	}
	checkAndClose(t, s)
}

// bgGate holds a rewrite between its checks of every record and its
// commit (beforeBuild runs once the output's records are written), or
// lets it through.
type bgGate struct {
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func newGate() *bgGate {
	return &bgGate{entered: make(chan struct{}, 1), release: make(chan struct{})}
}

func (g *bgGate) hook(path string) error {
	// Merge outputs only (seals build ".log" files); the tests import
	// nothing while the gate is armed.
	if strings.HasSuffix(path, "."+segment.NameSeg) && g.armed.CompareAndSwap(true, false) {
		g.entered <- struct{}{}
		<-g.release
	}
	return nil
}

// bgWindowFixture makes O (x keys, never shadowed), S (a000..a199 old)
// and N (a000..a099 new), sealed in that order: S is half garbage. It
// opens the store with the gate's hook and returns the model.
func bgWindowFixture(t *testing.T, mem *vfs.Mem, g *bgGate) (*Store, model) {
	t.Helper()
	return bgWindowFixtureOpts(t, garbageOpts(mem), g)
}

func bgWindowFixtureOpts(t *testing.T, o *Options, g *bgGate) (*Store, model) {
	t.Helper()
	s, err := open("/db", o, testHooks{beforeBuild: g.hook})
	require.NoError(t, err)
	m := model{}
	for i := 0; i < 50; i++ {
		k := fmt.Sprintf("x%03d", i)
		require.NoError(t, s.Put([]byte(k), []byte("x")))
		m[k] = "x"
	}
	require.NoError(t, s.Seal())
	for i := 0; i < 200; i++ {
		k, v := fmt.Sprintf("a%03d", i), fmt.Sprintf("old-%03d", i)
		require.NoError(t, s.Put([]byte(k), []byte(v)))
		m[k] = v
	}
	require.NoError(t, s.Seal())
	for i := 0; i < 100; i++ {
		k, v := fmt.Sprintf("a%03d", i), fmt.Sprintf("new-%03d", i)
		require.NoError(t, s.Put([]byte(k), []byte(v)))
		m[k] = v
	}
	require.NoError(t, s.Seal())
	require.Len(t, s.Segments(), 3)
	return s, m
}

// bgStartRewrite starts a merge step held at the gate and waits until it
// is there.
func bgStartRewrite(t *testing.T, s *Store, g *bgGate) chan error {
	t.Helper()
	g.armed.Store(true)
	done := make(chan error, 1)
	go func() {
		did, err := s.mergeStep(context.Background(), false)
		if err == nil && !did {
			err = errors.New("no merge step taken")
		}
		done <- err
	}()
	select {
	case <-g.entered:
	case err := <-done:
		t.Fatalf("the step ended before the gate: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("the rewrite never reached the gate")
	}
	return done
}

// bgReopenCheck closes s, reopens it with the background held, and checks
// the model, orphans and Check.
func bgReopenCheck(t *testing.T, s *Store, mem *vfs.Mem, m model, extra []string) {
	t.Helper()
	require.NoError(t, fullDiff(s, m, extra))
	checkAndClose(t, s)
	reopenCheck(t, mem, garbageOpts(mem), m, extra)
}

// reopenCheck opens the closed store on mem with o, the background held,
// and checks that it reads m (and extra's keys as m says), holds no orphan
// file and passes Check; msgAndArgs say which case failed.
func reopenCheck(t *testing.T, mem *vfs.Mem, o *Options, m model, extra []string, msgAndArgs ...any) {
	t.Helper()
	gs, err := openGated("/db", o)
	require.NoError(t, err, msgAndArgs...)
	require.NoError(t, fullDiff(gs.Store, m, extra), msgAndArgs...)
	orph, err := orphans(mem, gs.Store)
	require.NoError(t, err, msgAndArgs...)
	require.Empty(t, orph, msgAndArgs...)
	require.NoError(t, gs.Check(), msgAndArgs...)
	require.NoError(t, gs.closeAll(), msgAndArgs...)
}

// TestGarbageRangeDropDuringRewrite: while S's rewrite (which left
// out the keys N shadows) waits to commit, a DeleteRange over N's keys
// seals at once and drops N whole. The rewrite's commit then must not
// bring back or lose anything: the tombstone that dropped N covers what N
// shadowed.
func TestGarbageRangeDropDuringRewrite(t *testing.T) {
	mem := vfs.NewMem()
	g := newGate()
	s, m := bgWindowFixture(t, mem, g)
	segs := s.Segments()
	done := bgStartRewrite(t, s, g)
	require.NoError(t, s.DeleteRange([]byte("a000"), []byte("a100")))
	m.deleteRange("a000", "a100")
	require.NoError(t, fullDiff(s, m, []string{"a000", "a099"}))
	ids := map[uint64]bool{}
	for _, sg := range s.Segments() {
		ids[sg.ID] = true
	}
	require.False(t, ids[segs[2].ID], "the range drop removed N")
	close(g.release)
	require.NoError(t, <-done)
	require.EqualValues(t, 1, s.Metrics().Rewrites)
	bgReopenCheck(t, s, mem, m, []string{"a000", "a099", "a100"})
}

// TestGarbageImportDuringRewrite: an import commits while the rewrite
// waits: one stream whose range tombstone covers N whole (dropping it) and
// S's kept keys in part, and puts of keys S holds. After the rewrite's
// commit the imported data wins over S's output, which kept S's order.
func TestGarbageImportDuringRewrite(t *testing.T) {
	mem := vfs.NewMem()
	g := newGate()
	s, m := bgWindowFixture(t, mem, g)
	peer := mustOpen(t, "/peer", &Options{FS: vfs.NewMem(), Merge: MergeOptions{Disable: true}})
	require.NoError(t, peer.DeleteRange([]byte("a000"), []byte("a150")))
	for i := 140; i < 160; i += 2 {
		require.NoError(t, peer.Put([]byte(fmt.Sprintf("a%03d", i)), []byte("peer")))
	}
	stream := exportNewest(t, peer)
	require.NoError(t, peer.Close())

	done := bgStartRewrite(t, s, g)
	_, err := s.Import(context.Background(), bytes.NewReader(stream))
	require.NoError(t, err)
	m.deleteRange("a000", "a150")
	for i := 140; i < 160; i += 2 {
		m[fmt.Sprintf("a%03d", i)] = "peer"
	}
	require.NoError(t, fullDiff(s, m, nil))
	close(g.release)
	require.NoError(t, <-done)
	require.NoError(t, fullDiff(s, m, nil))
	// Every later rewrite converges on the same answers.
	mergeSteps(t, s)
	bgReopenCheck(t, s, mem, m, []string{"a000", "a149", "a150"})
}

// TestGarbageWritesDuringRewrite: while the rewrite waits, writes
// shadow and delete keys S holds (the live file, then sealed), and a
// snapshot and an iterator are opened; after the commit they still read
// their state, and the store the new one.
func TestGarbageWritesDuringRewrite(t *testing.T) {
	mem := vfs.NewMem()
	g := newGate()
	s, m := bgWindowFixture(t, mem, g)
	done := bgStartRewrite(t, s, g)
	sn, err := s.NewSnapshot()
	require.NoError(t, err)
	snapModel := m.clone()
	it, err := s.NewIterator(nil)
	require.NoError(t, err)
	require.True(t, it.First())
	for i := 100; i < 200; i += 3 {
		k := fmt.Sprintf("a%03d", i)
		require.NoError(t, s.Delete([]byte(k)))
		delete(m, k)
	}
	require.NoError(t, s.Seal())
	for i := 101; i < 200; i += 3 {
		k := fmt.Sprintf("a%03d", i)
		require.NoError(t, s.Put([]byte(k), []byte("during")))
		m[k] = "during"
	}
	close(g.release)
	require.NoError(t, <-done)
	got := model{}
	for ok := true; ok; ok = it.Next() {
		v, err := it.Value()
		require.NoError(t, err)
		got[string(it.Key())] = string(v)
	}
	require.NoError(t, it.Err())
	require.NoError(t, it.Close())
	require.NoError(t, bgModelDiff(got, snapModel), "iterator opened before the commit")
	sit, err := sn.NewIterator(nil)
	require.NoError(t, err)
	got, err = bgScan(sit)
	require.NoError(t, err)
	require.NoError(t, bgModelDiff(got, snapModel), "snapshot taken before the commit")
	require.NoError(t, sn.Close())
	require.NoError(t, fullDiff(s, m, nil))
	mergeSteps(t, s)
	bgReopenCheck(t, s, mem, m, nil)
}

// TestGarbageReplaceAllDuringRewrite: a ReplaceAll while the rewrite
// waits: the rewrite is stopped, leaves no file, and the replaced state is
// exactly the streams given.
func TestGarbageReplaceAllDuringRewrite(t *testing.T) {
	mem := vfs.NewMem()
	g := newGate()
	s, _ := bgWindowFixture(t, mem, g)
	peer := mustOpen(t, "/peer", &Options{FS: vfs.NewMem(), Merge: MergeOptions{Disable: true}})
	want := model{}
	for i := 0; i < 30; i++ {
		k := fmt.Sprintf("a%03d", i*7)
		require.NoError(t, peer.Put([]byte(k), []byte("replaced")))
		want[k] = "replaced"
	}
	stream := exportNewest(t, peer)
	require.NoError(t, peer.Close())
	done := bgStartRewrite(t, s, g)
	rdone := make(chan error, 1)
	go func() {
		_, err := s.ReplaceAll(context.Background(), []ReplaceSegment{{Digest: digestOf(stream), Size: int64(len(stream)), Data: bytes.NewReader(stream)}})
		rdone <- err
	}()
	time.Sleep(50 * time.Millisecond) // ReplaceAll has cancelled the step and waits for it
	close(g.release)
	require.NoError(t, <-done)
	require.NoError(t, <-rdone)
	require.NoError(t, fullDiff(s, want, []string{"a001", "a199", "x000"}))
	mergeSteps(t, s)
	bgReopenCheck(t, s, mem, want, []string{"a001", "a199", "x000"})
}

// TestGarbageCloseDuringRewrite: Close while the rewrite waits (and
// while a rate-limited rewrite of a large segment copies): Close returns
// promptly once the step can stop, the step leaves no file, and the store
// reopens to the same answers.
func TestGarbageCloseDuringRewrite(t *testing.T) {
	t.Run("gated", func(t *testing.T) {
		// The background's rewrite of S (half garbage once N is sealed)
		// is held at its commit.
		mem := vfs.NewMem()
		g := newGate()
		g.armed.Store(true)
		o := garbageOpts(mem)
		o.Merge.Disable = false
		s, m := bgWindowFixtureOpts(t, o, g)
		select {
		case <-g.entered:
		case <-time.After(5 * time.Second):
			t.Fatal("the background rewrite never reached the gate")
		}
		cdone := make(chan error, 1)
		go func() { cdone <- s.Close() }()
		time.Sleep(20 * time.Millisecond)
		close(g.release)
		select {
		case err := <-cdone:
			require.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Fatal("Close hangs after a rewrite held at its commit")
		}
		gs, err := openGated("/db", garbageOpts(mem))
		require.NoError(t, err)
		require.NoError(t, fullDiff(gs.Store, m, nil))
		orph, err := orphans(mem, gs.Store)
		require.NoError(t, err)
		require.Empty(t, orph)
		require.NoError(t, gs.closeAll())
	})
	t.Run("rate-limited", func(t *testing.T) {
		mem := vfs.NewMem()
		o := &Options{FS: mem, SegmentSize: 8 << 20, Merge: MergeOptions{MinRun: 1000, BytesPerSecond: 32 << 10}}
		s := mustOpen(t, "/db", o)
		m := model{}
		for i := 0; i < 6000; i++ {
			k := fmt.Sprintf("k%05d", i)
			require.NoError(t, s.Put([]byte(k), []byte(fmt.Sprintf("old-%0100d", i))))
		}
		require.NoError(t, s.Seal())
		for i := 0; i < 6000; i++ {
			k := fmt.Sprintf("k%05d", i)
			if i%3 == 0 {
				require.NoError(t, s.Put([]byte(k), []byte("new")))
				m[k] = "new"
			} else {
				m[k] = fmt.Sprintf("old-%0100d", i)
			}
		}
		require.NoError(t, s.Seal()) // the background rewrites the first segment, slowly
		require.Eventually(t, func() bool {
			s.commitMu.Lock()
			defer s.commitMu.Unlock()
			return s.mergeCancel != nil
		}, 5*time.Second, time.Millisecond, "a rewrite started")
		time.Sleep(100 * time.Millisecond)
		// The copy is paced to take about 20 s. Close cancels it: the
		// step ends without committing (no rewrite counted). The time
		// bound only catches a Close that waited for the whole copy, with
		// room for a loaded machine.
		start := time.Now()
		require.NoError(t, s.Close())
		require.Less(t, time.Since(start), 15*time.Second, "Close waited for the rate-limited copy")
		require.Zero(t, s.Metrics().Rewrites, "the rate-limited rewrite committed: Close waited for it")
		gs, err := openGated("/db", o)
		require.NoError(t, err)
		require.NoError(t, fullDiff(gs.Store, m, nil))
		orph, err := orphans(mem, gs.Store)
		require.NoError(t, err)
		require.Empty(t, orph)
		require.EqualValues(t, 2, gs.Metrics().Segments)
		require.NoError(t, gs.closeAll())
	})
}

// TestGarbageFollow: a leader whose merges are rewrites alone (and
// drops of all-garbage segments) is followed step by step; the follower,
// with merges on and a tiny GarbageRatio, must never rewrite a mirrored
// segment, report no garbage or backlog of them, and read exactly what the
// leader reads after each Follow, also after a reopen. Then the follower
// takes writes of its own: its own segment's tombstone over a key that
// only a mirrored segment holds must survive its rewrites.
func TestGarbageFollow(t *testing.T) {
	lmem, fmem := vfs.NewMem(), vfs.NewMem()
	lo := &Options{FS: lmem, SegmentSize: 1 << 20, Merge: MergeOptions{Disable: true, MinRun: 1000, GarbageRatio: 0.01}}
	fo := &Options{FS: fmem, SegmentSize: 1 << 20, Merge: MergeOptions{MinRun: 2, GarbageRatio: 1e-9}}
	leader := mustOpen(t, "/l", lo)
	follower := mustOpen(t, "/f", fo)
	rng := rand.New(rand.NewPCG(7, 7))
	keys := bgCrashKeys()
	m := model{}
	for round := 0; round < 40; round++ {
		for j := 0; j < 1+rng.IntN(12); j++ {
			k := keys[rng.IntN(len(keys))]
			switch r := rng.IntN(10); {
			case r < 6:
				v := fmt.Sprintf("r%d-%d", round, j)
				require.NoError(t, leader.Put([]byte(k), []byte(v)))
				m[k] = v
			case r < 9:
				require.NoError(t, leader.Delete([]byte(k)))
				delete(m, k)
			default:
				k2 := keys[rng.IntN(len(keys))]
				if k > k2 {
					k, k2 = k2, k
				}
				require.NoError(t, leader.DeleteRange([]byte(k), []byte(k2)))
				m.deleteRange(k, k2)
			}
		}
		require.NoError(t, leader.Seal())
		for n := rng.IntN(3); n > 0; n-- {
			_, err := leader.mergeStep(context.Background(), rng.IntN(4) == 0)
			require.NoError(t, err)
		}
		if rng.IntN(3) == 0 {
			continue // the next Follow spans several commits
		}
		syncFollower(t, leader, follower)
		require.NoError(t, fullDiff(follower, m, keys), "round %d", round)
		var ld, fd []uint64
		for _, sg := range leader.Segments() {
			ld = append(ld, sg.Digest)
		}
		for _, sg := range follower.Segments() {
			fd = append(fd, sg.Digest)
			require.NotZero(t, sg.Origin)
		}
		require.Equal(t, ld, fd, "round %d: the follower mirrors the leader's segments", round)
		mt := follower.Metrics()
		require.Zero(t, mt.MergeBacklog, "round %d", round)
		require.Zero(t, mt.GarbageBytes, "round %d: mirrored segments are not the follower's garbage", round)
		if round%10 == 9 {
			checkAndClose(t, follower)
			follower = mustOpen(t, "/f", fo)
		}
	}
	syncFollower(t, leader, follower)
	require.NoError(t, follower.Compact(context.Background()))
	mt := follower.Metrics()
	require.Zero(t, mt.Merges, "the follower merged mirrored segments")
	require.Zero(t, mt.Rewrites)
	require.NoError(t, fullDiff(follower, m, keys))
	require.Positive(t, leader.Metrics().Rewrites)

	// Writes of the follower's own: a key only mirrored segments hold is
	// deleted; the rewrites of its own segments keep the tombstone.
	// The first non-empty live key, in key order: picked by map iteration
	// it was the empty key (one of bgCrashKeys) now and then.
	var victim string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if k != "" {
			victim = k
			break
		}
	}
	require.NotEmpty(t, victim)
	require.NoError(t, follower.Put([]byte("own"), []byte("1")))
	require.NoError(t, follower.Seal())
	require.NoError(t, follower.Delete([]byte(victim)))
	require.NoError(t, follower.Put([]byte("own"), []byte("2")))
	require.NoError(t, follower.Seal())
	delete(m, victim)
	m["own"] = "2"
	mergeSteps(t, follower)
	require.NoError(t, follower.Compact(context.Background()))
	require.NoError(t, fullDiff(follower, m, append(keys, victim)))
	checkAndClose(t, follower)
	follower = mustOpen(t, "/f", fo)
	require.NoError(t, fullDiff(follower, m, append(keys, victim)))
	checkAndClose(t, follower)
	checkAndClose(t, leader)
}

// bgFaultFixture writes, on fsys: O (p*, q* keys), S (a000..a099 old, the
// empty key, tombstones of q000..q004, which O holds, and of z000..z009,
// which nothing older holds) and N (a000..a049 new, the empty key, a
// range tombstone over a080..a090): S is mostly garbage, and its rewrite
// consults O's and N's indexes for every record. It returns the model.
func bgFaultFixture(t *testing.T, o *Options) model {
	t.Helper()
	s := mustOpen(t, "/db", o)
	m := model{}
	put := func(k, v string) {
		require.NoError(t, s.Put([]byte(k), []byte(v)))
		m[k] = v
	}
	del := func(k string) {
		require.NoError(t, s.Delete([]byte(k)))
		delete(m, k)
	}
	for i := 0; i < 40; i++ {
		put(fmt.Sprintf("p%03d", i), "o")
	}
	for i := 0; i < 10; i++ {
		put(fmt.Sprintf("q%03d", i), "o")
	}
	require.NoError(t, s.Seal())
	put("", "e-old") // first: the segments are in key order
	for i := 0; i < 100; i++ {
		put(fmt.Sprintf("a%03d", i), fmt.Sprintf("old-%03d-%040d", i, i))
	}
	for i := 0; i < 5; i++ {
		del(fmt.Sprintf("q%03d", i))
	}
	for i := 0; i < 10; i++ {
		del(fmt.Sprintf("z%03d", i))
	}
	require.NoError(t, s.Seal())
	put("", "e-new")
	for i := 0; i < 50; i++ {
		put(fmt.Sprintf("a%03d", i), fmt.Sprintf("new-%03d", i))
	}
	require.NoError(t, s.DeleteRange([]byte("a080"), []byte("a090")))
	m.deleteRange("a080", "a090")
	require.NoError(t, s.Seal())
	require.Len(t, s.Segments(), 3)
	checkAndClose(t, s)
	return m
}

func bgFaultKeys() []string {
	return []string{"", "a000", "a049", "a050", "a080", "a089", "a090", "a099", "q000", "q004", "q005", "z000", "z009", "p000"}
}

// mergeFaultRun opens a store made by fixture (with options mk) on a Faulty,
// arms ft, takes one background-policy merge step, and checks the store:
// the step fails or not, the store keeps answering exactly (or has
// failed), later steps converge, and a reopen without faults reads the
// model with no orphan file.
func mergeFaultRun(t *testing.T, disableMmap bool, ft *vfs.Fault, mk func(vfs.FS) *Options,
	fixture func(*testing.T, *Options) model, keys []string) (stepErr error, failed bool) {
	t.Helper()
	mem := vfs.NewMem()
	fy := vfs.NewFaulty(mem)
	o := mk(fy)
	o.DisableMmap = disableMmap
	m := fixture(t, o)
	s := mustOpen(t, "/db", o)
	if ft != nil {
		require.NoError(t, fy.Inject(*ft))
	}
	var did bool
	if perr := epCatchPanic(func() { did, stepErr = s.mergeStep(context.Background(), false) }); perr != nil {
		t.Fatalf("fault %+v: %v", ft, perr)
	}
	if ft == nil {
		require.NoError(t, stepErr)
		require.True(t, did)
	}
	failed = s.failed() != nil
	fy.Clear()
	if !failed {
		require.NoError(t, fullDiff(s, m, keys), "fault %+v, step error %v", ft, stepErr)
		for i := 0; ; i++ {
			did, err := s.mergeStep(context.Background(), false)
			require.NoError(t, err, "fault %+v: a later step", ft)
			if !did {
				break
			}
			require.Less(t, i, 20)
		}
		require.NoError(t, fullDiff(s, m, keys), "fault %+v after the later steps", ft)
	} else {
		require.ErrorIs(t, stepErr, ErrFailed, "fault %+v: the store failed", ft)
	}
	_ = s.Close()
	reopenCheck(t, mem, mk(mem), m, keys, "fault %+v (step error %v): after reopen", ft, stepErr)
	return stepErr, failed
}

// TestGarbageFaultEveryOp: one injected I/O error (then, a second
// pass, every operation of that kind from there on) at each operation of
// every kind the rewrite of S performs, with and without mappings.
func TestGarbageFaultEveryOp(t *testing.T) {
	faultEveryMergeOp(t, garbageOpts, bgFaultFixture, bgFaultKeys(), 6, false)
}

// faultEveryMergeOp counts each kind of operation one clean merge step of
// the fixture performs (with and without mappings), then, for each kind,
// injects one error at spread evenly spaced operations of that kind (and,
// a second pass, at every operation of that kind from there on) and checks
// each step with mergeFaultRun. noMapReadsOnly skips the kinds other than
// reads without mappings, where only the reads differ.
func faultEveryMergeOp(t *testing.T, mk func(vfs.FS) *Options, fixture func(*testing.T, *Options) model,
	keys []string, spread int64, noMapReadsOnly bool) {
	t.Helper()
	ops := []vfs.Op{vfs.OpRead, vfs.OpWrite, vfs.OpFileSync, vfs.OpDirSync, vfs.OpCreate, vfs.OpRemove, vfs.OpRename, vfs.OpOpen, vfs.OpTruncate}
	for _, noMap := range []bool{false, true} {
		// Count each kind's operations in a clean step.
		mem := vfs.NewMem()
		fy := vfs.NewFaulty(mem)
		o := mk(fy)
		o.DisableMmap = noMap
		fixture(t, o)
		s := mustOpen(t, "/db", o)
		before := fy.Stats().Seen
		did, err := s.mergeStep(context.Background(), false)
		require.NoError(t, err)
		require.True(t, did)
		after := fy.Stats().Seen
		checkAndClose(t, s)
		tally := map[string]int{}
		for _, op := range ops {
			if noMap && noMapReadsOnly && op != vfs.OpRead {
				continue
			}
			n := after[op] - before[op]
			stride := max(1, n/spread)
			for nth := int64(1); nth <= n; nth += stride {
				for _, persistent := range []bool{false, true} {
					if persistent && nth > 1 && op != vfs.OpRead {
						continue // a persistent fault from the first op covers the later ones
					}
					ft := vfs.Fault{Op: op, Nth: nth, Persistent: persistent}
					stepErr, failed := mergeFaultRun(t, noMap, &ft, mk, fixture, keys)
					switch {
					case failed:
						tally["failed"]++
					case stepErr != nil:
						tally["step error"]++
					default:
						tally["no effect"]++
					}
				}
			}
		}
		t.Logf("nomap %v: ops %v; outcomes %v", noMap, func() map[string]int64 {
			out := map[string]int64{}
			for _, op := range ops {
				out[op.String()] = after[op] - before[op]
			}
			return out
		}(), tally)
	}
}

// TestGarbageDamagedNeighbourIndex: a byte of N's index (newer: it
// decides which of S's records are shadowed), of O's (older: it decides
// which of S's tombstones are still needed) or of S's own is damaged on
// disk, at offsets spread over the file. The rewrite of S must read the damage as damage
// (and heal it from the data file), never as a missing key: no tombstone
// over O's keys may go, no record of S that N does not shadow may go.
func TestGarbageDamagedNeighbourIndex(t *testing.T) {
	healed, refused := 0, 0
	defer func() {
		t.Logf("cases healed by a rebuild: %d, refused at Open: %d", healed, refused)
		require.Positive(t, healed)
	}()
	for _, which := range []int{0, 1, 2} { // O, S itself, N (oldest first)
		for frac := 0; frac < 8; frac++ {
			mem := vfs.NewMem()
			o := garbageOpts(mem)
			m := bgFaultFixture(t, o)
			st := mustOpen(t, "/db", o)
			segs := st.Segments()
			checkAndClose(t, st)
			p := filepath.Join("/db", segment.IndexName(segs[which].ID))
			size, err := mem.Stat(p)
			require.NoError(t, err)
			off := 16 + int64(frac)*(size-16-32)/8
			testutil.FlipByte(t, mem, p, off, 0x04)
			label := fmt.Sprintf("segment %d index byte %d of %d", which, off, size)

			var rebuilt atomic.Int64
			o.Events.IndexRebuilt = func(IndexRebuildInfo) { rebuilt.Add(1) }
			s, err := Open("/db", o)
			if err != nil {
				require.ErrorIs(t, err, ErrCorrupt, label)
				refused++
				continue
			}
			require.Positive(t, mergeSteps(t, s), label)
			require.NoError(t, fullDiff(s, m, bgFaultKeys()), label)
			require.NoError(t, s.Check(), label)
			if rebuilt.Load() > 0 {
				healed++
			}
			checkAndClose(t, s)
			s = mustOpen(t, "/db", o)
			require.NoError(t, fullDiff(s, m, bgFaultKeys()), label)
			checkAndClose(t, s)
		}
	}
}

// TestGarbageNeighbourIndexUnrepairable: N's index is damaged and
// its data file cannot be read for a while, so the damage cannot be healed
// yet. The rewrite of S must not drop anything on the strength of an
// index it cannot read (no step, or a failed one); once the data file is
// readable again the store must read exactly the model and, after the
// fault, S's garbage must be reclaimed (it fails today for the cause of
// TestGarbageEstimateTransientErrorIsForever: the estimate of S,
// which consults N, is marked failed for good).
func TestGarbageNeighbourIndexUnrepairable(t *testing.T) {
	mem := vfs.NewMem()
	fy := vfs.NewFaulty(mem)
	o := garbageOpts(fy)
	o.Merge.KeepWriteOrder = true // no sorting rewrite to reclaim S by the way
	m := bgFaultFixture(t, o)
	st := mustOpen(t, "/db", o)
	segs := st.Segments()
	nData := filepath.Join("/db", segment.DataName(segs[2].ID, st.mlog.State().Segments[segs[2].ID].FileKind))
	checkAndClose(t, st)
	ixPath := filepath.Join("/db", segment.IndexName(segs[2].ID))
	testutil.FlipByte(t, mem, ixPath, 20, 0x01)

	s := mustOpen(t, "/db", o)
	require.NoError(t, fy.Inject(vfs.Fault{Op: vfs.OpRead, Nth: 1, Persistent: true, Match: func(p string) bool { return p == nData }}))
	did, err := s.mergeStep(context.Background(), false)
	t.Logf("step with N unreadable: did %v, err %v", did, err)
	require.Nil(t, s.failed())
	fy.Clear()
	require.NoError(t, fullDiff(s, m, bgFaultKeys()))
	before := s.Metrics()
	steps := mergeSteps(t, s)
	require.NoError(t, fullDiff(s, m, bgFaultKeys()))
	after := s.Metrics()
	t.Logf("after the fault: GarbageBytes %d, steps %d, rewrites %d, segment bytes %d -> %d", before.GarbageBytes, steps, after.Rewrites, before.SegmentBytes, after.SegmentBytes)
	require.Positive(t, after.Rewrites, "S, mostly garbage, is never rewritten once an index it consults failed to read")
	checkAndClose(t, s)
	s = mustOpen(t, "/db", o)
	require.NoError(t, fullDiff(s, m, bgFaultKeys()))
	checkAndClose(t, s)
}

// bgEdgeStore opens a store whose every merge step is taken by the test
// (rewrites alone; no sorting rewrites, so that only garbage drives them).
func bgEdgeStore(t *testing.T, mem *vfs.Mem, ratio float64) (*Store, *Options) {
	t.Helper()
	o := garbageOpts(mem)
	o.Merge.KeepWriteOrder = true
	o.Merge.GarbageRatio = ratio
	return mustOpen(t, "/db", o), o
}

// bgSettle takes rewrite steps until none is left, then Compact, checking
// the model after each and after a reopen.
func bgSettle(t *testing.T, s *Store, o *Options, m model, keys []string, label string) (*Store, int64) {
	t.Helper()
	require.NoError(t, fullDiff(s, m, keys), "%s: before", label)
	mergeSteps(t, s)
	require.NoError(t, fullDiff(s, m, keys), "%s: after the rewrites", label)
	rewrites := s.Metrics().Rewrites
	require.NoError(t, s.Compact(context.Background()))
	require.NoError(t, fullDiff(s, m, keys), "%s: after Compact", label)
	checkAndClose(t, s)
	s = mustOpen(t, "/db", o)
	require.NoError(t, fullDiff(s, m, keys), "%s: after reopen", label)
	return s, rewrites
}

// TestGarbageTombstoneEdges: tombstones whose only older holder is at
// the holder's MinKey or MaxKey, the empty key, a key only an older range
// tombstone deletes, deletes and re-puts across segments, segments that
// hold only range tombstones, and a tombstone whose older holder was
// itself rewritten first. Each case is rewritten segment by segment in
// every order the policy takes, then compacted, then reopened.
func TestGarbageTombstoneEdges(t *testing.T) {
	type step struct {
		put, del   []string
		rng        [2]string
		seal       bool
		rewriteNow bool
	}
	cases := []struct {
		name  string
		steps []step
		keys  []string
	}{
		{"older holder's bounds", []step{
			{put: []string{"b", "c", "d"}, seal: true},
			{del: []string{"b", "d"}, put: []string{"x1", "x2", "x3", "x4", "x5"}, seal: true},
			{put: []string{"x1", "x2", "x3", "x4", "x5"}, seal: true},
		}, []string{"a", "b", "c", "d", "e"}},
		{"empty key", []step{
			{put: []string{"", "m"}, seal: true},
			{del: []string{""}, put: []string{"n1", "n2", "n3"}, seal: true},
			{put: []string{"n1", "n2", "n3", "m"}, seal: true},
		}, []string{"", "\x00", "m"}},
		{"empty key alone", []step{
			{put: []string{""}, seal: true},
			{put: []string{"z"}, seal: true},
			{del: []string{""}, seal: true},
			{put: []string{"z"}, seal: true},
		}, []string{"", "z"}},
		{"only an older range tombstone deletes it", []step{
			{put: []string{"k1", "k2", "k3"}, seal: true},
			{rng: [2]string{"k0", "k9"}, seal: true},
			{del: []string{"k2"}, put: []string{"y1", "y2"}, seal: true},
			{put: []string{"y1", "y2"}, seal: true},
		}, []string{"k1", "k2", "k3"}},
		{"delete, re-put, delete", []step{
			{put: []string{"k", "a1"}, seal: true},
			{del: []string{"k"}, seal: true},
			{put: []string{"k"}, seal: true},
			{del: []string{"k"}, put: []string{"a1"}, seal: true},
		}, []string{"k", "a1"}},
		{"segments of range tombstones only", []step{
			{put: []string{"r1", "r2", "r5", "s1"}, seal: true},
			{rng: [2]string{"r0", "r3"}, seal: true},
			{rng: [2]string{"r4", "r9"}, seal: true},
			{put: []string{"r2"}, seal: true},
			{rng: [2]string{"", "r25"}, seal: true},
		}, []string{"r1", "r2", "r5", "s1"}},
		{"holder rewritten first", []step{
			{put: []string{"h1", "h2", "h3", "h4"}, seal: true},
			{put: []string{"h1", "h2", "h3"}, seal: true, rewriteNow: true},
			{del: []string{"h4"}, put: []string{"w1", "w2", "w3"}, seal: true, rewriteNow: true},
			{put: []string{"w1", "w2", "w3"}, seal: true},
		}, []string{"h1", "h2", "h3", "h4"}},
		{"tombstone newer than a shadowing put", []step{
			{put: []string{"t1", "t2"}, seal: true},
			{put: []string{"t1"}, seal: true},
			{del: []string{"t1", "t2"}, seal: true, rewriteNow: true},
			{put: []string{"t2"}, seal: true},
		}, []string{"t1", "t2"}},
	}
	for _, ratio := range []float64{1e-9, 0.2, 1} {
		for _, c := range cases {
			label := fmt.Sprintf("%s, ratio %v", c.name, ratio)
			mem := vfs.NewMem()
			s, o := bgEdgeStore(t, mem, ratio)
			m := model{}
			for i, st := range c.steps {
				for _, k := range st.put {
					v := fmt.Sprintf("%s@%d", k, i)
					require.NoError(t, s.Put([]byte(k), []byte(v)))
					m[k] = v
				}
				for _, k := range st.del {
					require.NoError(t, s.Delete([]byte(k)))
					delete(m, k)
				}
				if st.rng[1] != "" {
					require.NoError(t, s.DeleteRange([]byte(st.rng[0]), []byte(st.rng[1])))
					m.deleteRange(st.rng[0], st.rng[1])
				}
				if st.seal {
					require.NoError(t, s.Seal())
				}
				if st.rewriteNow {
					mergeSteps(t, s)
					require.NoError(t, fullDiff(s, m, c.keys), "%s: step %d", label, i)
				}
			}
			var rewrites int64
			s, rewrites = bgSettle(t, s, o, m, c.keys, label)
			if ratio < 0.2 {
				require.Positive(t, rewrites, label)
			}
			mt := s.Metrics()
			require.Zero(t, mt.GarbageBytes, label)
			checkAndClose(t, s)
		}
	}
}

// TestGarbageRatioEdges: NaN, infinities and values outside (0, 1]
// are refused with ErrInvalidOption (also with merges disabled); the
// smallest ratios and 1 are accepted, and a store under them settles with
// no backlog: MergeBacklog reaches 0 and stays there.
func TestGarbageRatioEdges(t *testing.T) {
	for _, bad := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), -1e-300, 1 + 1e-15, 2} {
		for _, disable := range []bool{false, true} {
			_, err := Open("/db", &Options{FS: vfs.NewMem(), Merge: MergeOptions{Disable: disable, GarbageRatio: bad}})
			require.ErrorIs(t, err, ErrInvalidOption, "ratio %v, disable %v", bad, disable)
		}
	}
	for _, ratio := range []float64{math.SmallestNonzeroFloat64, 1e-9, math.Copysign(0, -1), 0.5, 1} {
		mem := vfs.NewMem()
		o := &Options{FS: mem, SegmentSize: 8 << 10, Merge: MergeOptions{MinRun: 3, GarbageRatio: ratio}}
		s := mustOpen(t, "/db", o)
		rng := rand.New(rand.NewPCG(3, uint64(ratio*1e6)))
		m := model{}
		for i := 0; i < 1500; i++ {
			ops := randomOps(rng, 1, 80)
			require.NoError(t, applyOps(s, ops))
			m.apply(ops)
			if i%97 == 0 {
				lo := fmt.Sprintf("key-%03d", rng.IntN(80))
				hi := fmt.Sprintf("key-%03d", min(80, rng.IntN(80)+10))
				if lo > hi {
					lo, hi = hi, lo
				}
				require.NoError(t, s.DeleteRange([]byte(lo), []byte(hi)))
				m.deleteRange(lo, hi)
			}
		}
		require.NoError(t, s.Seal())
		require.Eventually(t, func() bool { return s.Metrics().MergeBacklog == 0 }, 10*time.Second, 5*time.Millisecond,
			"ratio %v: the backlog never reaches 0 (%+v)", ratio, s.Metrics())
		require.NoError(t, fullDiff(s, m, keyNames(80)), "ratio %v", ratio)
		mt := s.Metrics()
		if ratio >= 1e-9 && ratio < 1 {
			require.LessOrEqual(t, float64(mt.GarbageBytes), math.Max(ratio, 0.2)*float64(mt.SegmentBytes)+1, "ratio %v", ratio)
		}
		checkAndClose(t, s)
	}
}

// TestGarbageMetricsDuringClose: many goroutines call Metrics (whose
// garbage refresh reads every index) while background rewrites run and
// Close begins; nothing panics, races or hangs, and Metrics after Close
// still answers.
func TestGarbageMetricsDuringClose(t *testing.T) {
	for round := 0; round < 2; round++ {
		dir := t.TempDir() // the OS file system: indexes are mapped
		o := &Options{SegmentSize: 16 << 10, Merge: MergeOptions{MinRun: 1000, GarbageRatio: 0.05}}
		s := mustOpen(t, dir, o)
		rng := rand.New(rand.NewPCG(uint64(round), 5))
		m := model{}
		for g := 0; g < 6; g++ {
			for i := 0; i < 150; i++ {
				ops := randomOps(rng, 1, 200)
				require.NoError(t, applyOps(s, ops))
				m.apply(ops)
			}
			require.NoError(t, s.Seal())
		}
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					if err := epCatchPanic(func() { _ = s.Metrics() }); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		time.Sleep(time.Duration(rng.IntN(30)) * time.Millisecond)
		if !withTimeout(10*time.Second, func() { require.NoError(t, s.Close()) }) {
			t.Fatal("Close hangs beside Metrics callers")
		}
		time.Sleep(5 * time.Millisecond)
		close(stop)
		wg.Wait()
		_ = s.Metrics()
		s = mustOpen(t, dir, o)
		require.NoError(t, fullDiff(s, m, keyNames(200)))
		checkAndClose(t, s)
	}
}

// TestGarbageRangeDropBeforeRewriteReads: the rewrite is held after
// it picked S and pinned the segment list but before it read any record
// (a MergeBegin listener blocks); meanwhile a DeleteRange drops N whole,
// so N's files are retired. On the OS file system (mapped indexes) the
// rewrite must still read N's index through its pin, and the result must
// be exact.
func TestGarbageRangeDropBeforeRewriteReads(t *testing.T) {
	dir := t.TempDir()
	began := make(chan struct{}, 1)
	release := make(chan struct{})
	var armed atomic.Bool
	o := &Options{SegmentSize: 1 << 20, Merge: MergeOptions{Disable: true, MinRun: 1000, KeepWriteOrder: true}}
	o.Events.MergeBegin = func(MergeInfo) {
		if armed.CompareAndSwap(true, false) {
			began <- struct{}{}
			<-release
		}
	}
	s := mustOpen(t, dir, o)
	m := model{}
	for i := 0; i < 400; i++ {
		k, v := fmt.Sprintf("a%03d", i), fmt.Sprintf("old-%03d-%060d", i, i)
		require.NoError(t, s.Put([]byte(k), []byte(v)))
		m[k] = v
	}
	require.NoError(t, s.Seal())
	for i := 0; i < 200; i++ {
		k, v := fmt.Sprintf("a%03d", i), fmt.Sprintf("new-%03d", i)
		require.NoError(t, s.Put([]byte(k), []byte(v)))
		m[k] = v
	}
	require.NoError(t, s.Seal())
	segs := s.Segments()
	require.Len(t, segs, 2)
	armed.Store(true)
	done := make(chan error, 1)
	go func() {
		_, err := s.mergeStep(context.Background(), false)
		done <- err
	}()
	<-began
	require.NoError(t, s.DeleteRange([]byte("a000"), []byte("a200")))
	m.deleteRange("a000", "a200")
	for _, sg := range s.Segments() {
		require.NotEqual(t, segs[1].ID, sg.ID, "N was dropped")
	}
	close(release)
	require.NoError(t, <-done)
	require.EqualValues(t, 1, s.Metrics().Rewrites)
	require.NoError(t, fullDiff(s, m, []string{"a000", "a199", "a200"}))
	checkAndClose(t, s)
	s = mustOpen(t, dir, o)
	require.NoError(t, fullDiff(s, m, []string{"a000", "a199", "a200"}))
	require.NoError(t, s.Check())
	checkAndClose(t, s)
}

// TestGarbageDropReported: a rewrite that keeps nothing commits with no
// output, and MergeEnd says so as MergeInfo documents: Err nil, Output 0,
// BytesOut 0 (a failed step has Err set).
func TestGarbageDropReported(t *testing.T) {
	mem := vfs.NewMem()
	o := garbageOpts(mem)
	var ends []MergeInfo
	o.Events.MergeEnd = func(mi MergeInfo) { ends = append(ends, mi) }
	s := mustOpen(t, "/db", o)
	bgShadowed(t, s, "k", 100)
	require.Equal(t, 1, mergeSteps(t, s))
	require.Len(t, ends, 1)
	require.NoError(t, ends[0].Err)
	require.Zero(t, ends[0].Output)
	require.Zero(t, ends[0].BytesOut)
	require.Positive(t, ends[0].BytesIn)
	require.Equal(t, 1, s.Metrics().Segments, "the all-garbage segment was dropped")
	checkAndClose(t, s)
}

// TestGarbageSealedSnapshotAcrossRewrites: a raft-style snapshot
// (NewSealedSnapshot, Export of each listed segment, ReplaceAll on the
// other side) taken while rewrites drop and replace the very segments it
// lists: the exports still stream them, and the restored store reads
// exactly the state at the snapshot. Also ChangesSince from the snapshot's
// seq, once rewrites committed, names every retired segment as removed.
func TestGarbageSealedSnapshotAcrossRewrites(t *testing.T) {
	mem := vfs.NewMem()
	o := garbageOpts(mem)
	o.Merge.GarbageRatio = 0.01
	s := mustOpen(t, "/db", o)
	rng := rand.New(rand.NewPCG(11, 12))
	m := model{}
	for g := 0; g < 6; g++ {
		for i := 0; i < 60; i++ {
			ops := randomOps(rng, 1, 50)
			require.NoError(t, applyOps(s, ops))
			m.apply(ops)
		}
		require.NoError(t, s.Seal())
	}
	for i := 0; i < 20; i++ {
		ops := randomOps(rng, 1, 50)
		require.NoError(t, applyOps(s, ops))
		m.apply(ops)
	}
	sn, err := s.NewSealedSnapshot()
	require.NoError(t, err)
	want := m.clone()
	listed := sn.Segments()
	// Rewrites retire what the snapshot lists.
	require.Positive(t, mergeSteps(t, s))
	present := map[uint64]bool{}
	for _, sg := range s.Segments() {
		present[sg.ID] = true
	}
	retired := 0
	for _, sg := range listed {
		if !present[sg.ID] {
			retired++
		}
	}
	require.Positive(t, retired, "the rewrites retired listed segments")
	ch := s.ChangesSince(sn.ManifestSeq())
	require.True(t, ch.Complete)
	for _, sg := range listed {
		if !present[sg.ID] {
			require.Contains(t, ch.Removed, sg.ID)
		}
	}
	var parts []ReplaceSegment
	for _, sg := range listed {
		var buf bytes.Buffer
		_, err := sn.Export(context.Background(), sg.ID, &buf)
		require.NoError(t, err)
		parts = append(parts, ReplaceSegment{Digest: sg.Digest, Size: sg.Size, Data: bytes.NewReader(buf.Bytes())})
	}
	require.NoError(t, sn.Close())
	rs := mustOpen(t, "/restore", garbageOpts(vfs.NewMem()))
	_, err = rs.ReplaceAll(context.Background(), parts)
	require.NoError(t, err)
	require.NoError(t, fullDiff(rs, want, keyNames(50)))
	mergeSteps(t, rs)
	require.NoError(t, fullDiff(rs, want, keyNames(50)))
	checkAndClose(t, rs)
	require.NoError(t, fullDiff(s, m, keyNames(50)))
	bgReopenCheck(t, s, mem, m, keyNames(50))
}

// bgExactDead counts, for each own segment, the index entries that a
// rewrite alone would leave out now (the exact check of the rewrite).
func bgExactDead(t *testing.T, s *Store) map[*sealed]int {
	t.Helper()
	view, _, release := s.pinSegments()
	defer release()
	out := map[*sealed]int{}
	for i, sg := range view {
		if sg.meta.Origin != 0 {
			continue
		}
		r := &reclaimer{newer: view[:i], older: view[i+1:]}
		ix := sg.index()
		for p := 0; p < ix.Len(); p++ {
			e, err := ix.At(p)
			require.NoError(t, err)
			drop, err := r.drop(e.Key, e.Kind)
			require.NoError(t, err)
			if drop {
				out[sg]++
			}
		}
	}
	return out
}

// TestGarbageEstimateMatchesExact: with every record of a segment in
// the sample (segments under 256 keys) and the smallest ratio, the
// incremental estimate must see every record the exact check would drop:
// once the policy finds no more steps, no own segment may hold one. The
// workload interleaves seals, deletes, range deletes (range drops), size-
// tiered merges, imports, Metrics calls at odd moments (refreshes from
// many different lists) and reopens.
func TestGarbageEstimateMatchesExact(t *testing.T) {
	for seed := uint64(0); seed < 2; seed++ {
		mem := vfs.NewMem()
		o := &Options{FS: mem, SegmentSize: 1 << 20, Merge: MergeOptions{Disable: true, MinRun: 3, SizeRatio: 2, GarbageRatio: math.SmallestNonzeroFloat64, KeepWriteOrder: true}}
		s := mustOpen(t, "/db", o)
		peer := mustOpen(t, "/peer", &Options{FS: vfs.NewMem(), Merge: MergeOptions{Disable: true}})
		rng := rand.New(rand.NewPCG(seed, 77))
		m := model{}
		keys := keyNames(120)
		for i := 0; i < 700; i++ {
			switch r := rng.IntN(100); {
			case r < 60:
				ops := randomOps(rng, 1+rng.IntN(3), 120)
				require.NoError(t, applyOps(s, ops))
				m.apply(ops)
			case r < 64:
				a, b := keys[rng.IntN(len(keys))], keys[rng.IntN(len(keys))]
				if a > b {
					a, b = b, a
				}
				require.NoError(t, s.DeleteRange([]byte(a), []byte(b)))
				m.deleteRange(a, b)
			case r < 76:
				require.NoError(t, s.Seal())
			case r < 79:
				pm := model{}
				for j := 0; j < 1+rng.IntN(15); j++ {
					k := keys[rng.IntN(len(keys))]
					if rng.IntN(3) == 0 {
						require.NoError(t, peer.Delete([]byte(k)))
						pm[k] = "\x00del"
					} else {
						v := fmt.Sprintf("peer-%d-%d", i, j)
						require.NoError(t, peer.Put([]byte(k), []byte(v)))
						pm[k] = v
					}
				}
				// Imported data goes beneath the live file's writes: seal
				// them first, so that the import is the newest data.
				require.NoError(t, s.Seal())
				_, err := s.Import(context.Background(), bytes.NewReader(exportNewest(t, peer)))
				require.NoError(t, err)
				for k, v := range pm {
					if v == "\x00del" {
						delete(m, k)
					} else {
						m[k] = v
					}
				}
			case r < 90:
				_ = s.Metrics()
			case r < 97:
				_, err := s.mergeStep(context.Background(), false)
				require.NoError(t, err)
			case r < 98:
				checkAndClose(t, s)
				s = mustOpen(t, "/db", o)
			default:
				mergeSteps(t, s)
				for sg, n := range bgExactDead(t, s) {
					if sg.meta.Keys <= garbageSamples {
						require.Zero(t, n, "seed %d op %d: segment %d (order %d, %d keys) keeps %d records a rewrite would drop, estimate %d bytes",
							seed, i, sg.meta.ID, sg.meta.Order, sg.meta.Keys, n, s.Metrics().GarbageBytes)
					}
				}
				require.NoError(t, fullDiff(s, m, keys), "seed %d op %d", seed, i)
			}
		}
		require.NoError(t, peer.Close())
		checkAndClose(t, s)
	}
}
