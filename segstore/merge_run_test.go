package segstore

// Tests of the size-tiered merge of several segments that leaves out what
// segments newer than its run shadow and the point tombstones nothing older
// than the run needs (mergeStep's reclaimer for every run), and of the
// shared k-way merging iterator (merging.go) that both reads and merges
// walk.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/internal/testutil"
	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/vfs"
)

// rmKeys are the keys the run-merge tests draw from: the empty key, keys
// that are prefixes of one another, and a plain numbered range.
func rmKeys() []string {
	keys := []string{"", "a", "a\x00", "ab", "abc", "b", "ba", "bb"}
	for i := 0; i < 40; i++ {
		keys = append(keys, fmt.Sprintf("k%02d", i))
	}
	return keys
}

// rmBounds are range ends and iterator bounds: the keys and strings
// between and around them.
func rmBounds() []string {
	return append(rmKeys(), "a\x00\x00", "aa", "b\x00", "k", "k0", "k05\x00", "k1", "k25", "k3", "k39\x00", "z", "\xff")
}

// iterAgrees compares an iterator (over a snapshot that m describes, with
// the bounds lo, hi) with m: a forward scan, a backward scan, and random
// seeks with turns of direction.
func iterAgrees(open func() (*Iterator, error), m model, lo, hi []byte, rng *rand.Rand) error {
	var want []string
	for _, k := range sortedKeys(m) {
		if lo != nil && k < string(lo) || hi != nil && k >= string(hi) {
			continue
		}
		want = append(want, k)
	}
	it, err := open()
	if err != nil {
		return err
	}
	defer it.Close()
	at := func(label string, ok bool, i int) error {
		if i < 0 || i >= len(want) {
			if ok {
				return fmt.Errorf("%s: at %q, want the end", label, it.Key())
			}
			return it.Err()
		}
		if !ok {
			return fmt.Errorf("%s: at the end (err %v), want %q", label, it.Err(), want[i])
		}
		if string(it.Key()) != want[i] {
			return fmt.Errorf("%s: at %q, want %q", label, it.Key(), want[i])
		}
		v, err := it.Value()
		if err != nil {
			return fmt.Errorf("%s: value of %q: %w", label, it.Key(), err)
		}
		if string(v) != m[want[i]] {
			return fmt.Errorf("%s: %q = %.24q, want %.24q", label, it.Key(), v, m[want[i]])
		}
		return nil
	}
	i := 0
	for ok := it.First(); ; ok = it.Next() {
		if err := at("forward", ok, i); err != nil {
			return err
		}
		if !ok {
			break
		}
		i++
	}
	i = len(want) - 1
	for ok := it.Last(); ; ok = it.Prev() {
		if err := at("backward", ok, i); err != nil {
			return err
		}
		if !ok {
			break
		}
		i--
	}
	bounds := rmBounds()
	for n := 0; n < 12; n++ {
		b := bounds[rng.IntN(len(bounds))]
		var ok bool
		var label string
		if rng.IntN(2) == 0 {
			ok, label = it.Seek([]byte(b)), fmt.Sprintf("Seek(%q)", b)
			i = sort.SearchStrings(want, b)
			if lo != nil && b < string(lo) {
				i = 0
			}
		} else {
			ok, label = it.SeekLT([]byte(b)), fmt.Sprintf("SeekLT(%q)", b)
			i = sort.SearchStrings(want, b) - 1
		}
		if err := at(label, ok, i); err != nil {
			return err
		}
		for j := 0; ok && j < 4; j++ {
			if rng.IntN(2) == 0 {
				ok, label, i = it.Next(), label+".Next", i+1
			} else {
				ok, label, i = it.Prev(), label+".Prev", i-1
			}
			if err := at(label, ok, i); err != nil {
				return err
			}
		}
	}
	return nil
}

// rmSnap is a snapshot kept open across merges and the model it must read.
type rmSnap struct {
	sn *Snapshot
	m  model
}

// runMergeModel drives a store through random puts, deletes, range
// deletes, seals, background-policy merge steps (several segments at a
// time: MinRun 2, and a small MaxStepBytes so that runs start above the
// oldest segment), Compact and reopens, with snapshots held across them,
// and compares the store and every snapshot with the model after each
// merge.
func runMergeModel(t *testing.T, seed uint64, steps int) (merges, runMerges int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0x5e9))
	keys, bounds := rmKeys(), rmBounds()
	mem := vfs.NewMem()
	mo := MergeOptions{
		Disable:        true,
		MinRun:         2 + rng.IntN(2),
		SizeRatio:      1.5 + 6*rng.Float64(),
		MaxStepBytes:   []int64{0, 3 << 10, 8 << 10}[rng.IntN(3)],
		KeepWriteOrder: rng.IntN(2) == 0,
		GarbageRatio:   []float64{0, 0.05, 1}[rng.IntN(3)],
	}
	o := &Options{FS: mem, SegmentSize: 1 << 20, Merge: mo}
	s := mustOpen(t, "/db", o)
	m := model{}
	var snaps []rmSnap
	closeSnaps := func() {
		for _, sp := range snaps {
			require.NoError(t, sp.sn.Close())
		}
		snaps = nil
	}
	check := func(label string) {
		t.Helper()
		require.NoError(t, fullDiff(s, m, keys), "seed %d %s", seed, label)
		lo, hi := []byte(nil), []byte(nil)
		if rng.IntN(2) == 0 {
			a, b := bounds[rng.IntN(len(bounds))], bounds[rng.IntN(len(bounds))]
			if a > b {
				a, b = b, a
			}
			lo, hi = []byte(a), []byte(b)
		}
		require.NoError(t, iterAgrees(func() (*Iterator, error) {
			return s.NewIterator(&IterOptions{LowerBound: lo, UpperBound: hi})
		}, m, lo, hi, rng), "seed %d %s: store [%q, %q)", seed, label, lo, hi)
		for i, sp := range snaps {
			require.NoError(t, iterAgrees(func() (*Iterator, error) { return sp.sn.NewIterator(nil) }, sp.m, nil, nil, rng),
				"seed %d %s: snapshot %d", seed, label, i)
			for _, k := range keys {
				v, err := sp.sn.Get([]byte(k))
				want, ok := sp.m[k]
				if ok {
					require.NoError(t, err, "seed %d %s: snapshot %d get %q", seed, label, i, k)
					require.Equal(t, want, string(v), "seed %d %s: snapshot %d get %q", seed, label, i, k)
				} else {
					require.ErrorIs(t, err, ErrNotFound, "seed %d %s: snapshot %d get %q", seed, label, i, k)
				}
			}
		}
	}
	n := 0
	for step := 0; step < steps; step++ {
		switch r := rng.IntN(100); {
		case r < 45:
			k := keys[rng.IntN(len(keys))]
			n++
			v := fmt.Sprintf("%d-%s", n, strings.Repeat("v", rng.IntN(3)*rng.IntN(200)))
			require.NoError(t, s.Put([]byte(k), []byte(v)))
			m[k] = v
		case r < 60:
			k := keys[rng.IntN(len(keys))]
			require.NoError(t, s.Delete([]byte(k)))
			delete(m, k)
		case r < 65:
			a, b := bounds[rng.IntN(len(bounds))], bounds[rng.IntN(len(bounds))]
			if a > b {
				a, b = b, a
			}
			require.NoError(t, s.DeleteRange([]byte(a), []byte(b)))
			m.deleteRange(a, b)
		case r < 78:
			require.NoError(t, s.Seal())
		case r < 90:
			before := len(s.Segments())
			did, err := s.mergeStep(context.Background(), false)
			require.NoError(t, err, "seed %d step %d", seed, step)
			if did {
				merges++
				if len(s.Segments()) < before-1 {
					runMerges++
				}
				check(fmt.Sprintf("step %d merge", step))
			}
		case r < 92:
			require.NoError(t, s.Compact(context.Background()))
			check(fmt.Sprintf("step %d compact", step))
		case r < 95:
			if len(snaps) < 3 {
				sn, err := s.NewSnapshot()
				require.NoError(t, err)
				snaps = append(snaps, rmSnap{sn: sn, m: m.clone()})
			} else {
				i := rng.IntN(len(snaps))
				require.NoError(t, snaps[i].sn.Close())
				snaps = append(snaps[:i], snaps[i+1:]...)
			}
		case r < 97:
			closeSnaps()
			checkAndClose(t, s)
			s = mustOpen(t, "/db", o)
			check(fmt.Sprintf("step %d reopen", step))
		default:
			check(fmt.Sprintf("step %d", step))
		}
	}
	check("end")
	require.NoError(t, s.Compact(context.Background()))
	check("final compact")
	closeSnaps()
	checkAndClose(t, s)
	s = mustOpen(t, "/db", o)
	require.NoError(t, fullDiff(s, m, keys), "seed %d after the last reopen", seed)
	checkAndClose(t, s)
	return merges, runMerges
}

// TestRunMergeModel: random workloads with several-segment merges (run
// reclaims), range deletes, snapshots and reopens answer like a map, through
// Get, forward and backward scans, bounds, and seeks with turns.
func TestRunMergeModel(t *testing.T) {
	first, seeds := uint64(1), 5
	if testing.Short() {
		seeds = 2
	}
	if v, err := strconv.Atoi(os.Getenv("RM_SEEDS")); err == nil {
		seeds = v // a longer exploration: RM_SEEDS=500 RM_FIRST=1000
	}
	if v, err := strconv.Atoi(os.Getenv("RM_FIRST")); err == nil {
		first = uint64(v)
	}
	var merges, runs int
	for seed := first; seed < first+uint64(seeds); seed++ {
		a, b := runMergeModel(t, seed, 600)
		merges += a
		runs += b
	}
	t.Logf("merge steps %d, of which merged several segments %d", merges, runs)
	require.Positive(t, runs, "the workload merges runs of several segments")
}

// rmRunOpts: merges only when a test takes a step, runs of two similar
// segments, no sorting rewrites.
func rmRunOpts(fsys vfs.FS) *Options {
	return &Options{FS: fsys, SegmentSize: 8 << 20, Merge: MergeOptions{Disable: true, MinRun: 2, SizeRatio: 4, KeepWriteOrder: true}}
}

// rmRunFixture writes, on o's file system, four segments, oldest first:
//
//	O  (large): p000..p039, q000..q009, o-padding. Outside the run, older.
//	R1 (small): a000..a099, tombstones of q000..q004 (O holds them) and of
//	   z000..z009 (nothing holds them), a range tombstone over p010..p019.
//	R2 (small): a050..a149, tombstones of a000..a009 (only R1 holds them)
//	   and of q005, a range tombstone over a020..a029, the empty key.
//	N  (large): a100..a119 new, a range tombstone over a060..a069,
//	   n-padding. Outside the run, newer.
//
// The background policy's step merges R1 and R2 (a run of two segments of
// similar size; O and N are far larger). It returns the model and the
// four segments.
func rmRunFixture(t *testing.T, o *Options) (model, []SegmentInfo) {
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
	delRange := func(a, b string) {
		require.NoError(t, s.DeleteRange([]byte(a), []byte(b)))
		m.deleteRange(a, b)
	}
	for i := 0; i < 150; i++ {
		put(fmt.Sprintf("o%04d", i), fmt.Sprintf("o-%0400d", i))
	}
	for i := 0; i < 40; i++ {
		put(fmt.Sprintf("p%03d", i), "o")
	}
	for i := 0; i < 10; i++ {
		put(fmt.Sprintf("q%03d", i), "o")
	}
	require.NoError(t, s.Seal())
	for i := 0; i < 100; i++ {
		put(fmt.Sprintf("a%03d", i), fmt.Sprintf("r1-%03d-%030d", i, i))
	}
	for i := 0; i < 5; i++ {
		del(fmt.Sprintf("q%03d", i))
	}
	for i := 0; i < 10; i++ {
		del(fmt.Sprintf("z%03d", i))
	}
	delRange("p010", "p020")
	require.NoError(t, s.Seal())
	put("", "empty-r2")
	for i := 50; i < 150; i++ {
		put(fmt.Sprintf("a%03d", i), fmt.Sprintf("r2-%03d-%030d", i, i))
	}
	for i := 0; i < 10; i++ {
		del(fmt.Sprintf("a%03d", i))
	}
	del("q005")
	delRange("a020", "a030")
	require.NoError(t, s.Seal())
	for i := 100; i < 120; i++ {
		put(fmt.Sprintf("a%03d", i), fmt.Sprintf("n-%03d", i))
	}
	delRange("a060", "a070")
	for i := 0; i < 100; i++ {
		put(fmt.Sprintf("n%04d", i), fmt.Sprintf("n-%0400d", i))
	}
	require.NoError(t, s.Seal())
	segs := s.Segments()
	require.Len(t, segs, 4)
	checkAndClose(t, s)
	return m, segs
}

// rmRunKeys are the fixture's keys at every edge of what the merge keeps
// and leaves out.
func rmRunKeys() []string {
	return []string{"", "a000", "a009", "a010", "a019", "a020", "a029", "a030", "a049", "a050", "a059", "a060", "a069",
		"a070", "a099", "a100", "a119", "a120", "a149", "a150", "p009", "p010", "p019", "p020", "q000", "q004", "q005",
		"q006", "z000", "z009", "o0000", "n0000"}
}

// TestRunMergeFixtureExact: the step merges exactly R1 and R2, and its
// output holds exactly what a read needs: the run's range tombstones, the
// tombstones over O's keys, and the records neither N nor a newer input
// shadows; everything reads as before, also after a reopen, and later
// steps (Compact) converge to the same answers.
func TestRunMergeFixtureExact(t *testing.T) {
	mem := vfs.NewMem()
	o := rmRunOpts(mem)
	m, segs := rmRunFixture(t, o)
	s := mustOpen(t, "/db", o)
	require.NoError(t, fullDiff(s, m, rmRunKeys()))
	did, err := s.mergeStep(context.Background(), false)
	require.NoError(t, err)
	require.True(t, did)
	after := s.Segments()
	require.Len(t, after, 3)
	require.Equal(t, segs[0].ID, after[0].ID)
	require.Equal(t, segs[3].ID, after[2].ID)
	out := after[1]
	require.Equal(t, segs[2].Order, out.Order, "the output takes the run's newest order")
	// a010..a019, a030..a049, a050..a059, a070..a099, a120..a149, the
	// tombstones of q000..q005, and the empty key.
	require.EqualValues(t, 10+20+10+30+30+6+1, out.Keys)
	require.EqualValues(t, out.Keys+2, out.Records, "and the two range tombstones")
	require.NoError(t, fullDiff(s, m, rmRunKeys()))
	rng := rand.New(rand.NewPCG(3, 4))
	require.NoError(t, iterAgrees(func() (*Iterator, error) { return s.NewIterator(nil) }, m, nil, nil, rng))
	require.NoError(t, iterAgrees(func() (*Iterator, error) {
		return s.NewIterator(&IterOptions{Prefix: []byte("a0")})
	}, m, []byte("a0"), []byte("a1"), rng))
	checkAndClose(t, s)
	s = mustOpen(t, "/db", o)
	require.NoError(t, fullDiff(s, m, rmRunKeys()))
	require.NoError(t, s.Compact(context.Background()))
	require.NoError(t, fullDiff(s, m, rmRunKeys()))
	checkAndClose(t, s)
	s = mustOpen(t, "/db", o)
	require.NoError(t, fullDiff(s, m, rmRunKeys()))
	checkAndClose(t, s)
}

// TestRunMergeFaultEveryOp: one injected I/O error (and, a second pass,
// every operation of that kind from there on) at a spread of the
// operations of every kind a merge of two segments with a newer and an
// older neighbour performs (the reads also without mappings): the step
// fails whole or commits a correct output, never a partial one.
func TestRunMergeFaultEveryOp(t *testing.T) {
	fixture := func(t *testing.T, o *Options) model {
		m, _ := rmRunFixture(t, o)
		return m
	}
	faultEveryMergeOp(t, rmRunOpts, fixture, rmRunKeys(), 3, true)
}

// TestRunMergeDamagedIndex: a byte of the index of O (older: it decides
// which of the run's tombstones are needed), of R1 or R2 (the inputs) or
// of N (newer: it decides which of the run's records are shadowed) is
// damaged on disk, at offsets spread over the file. The merge must read
// damage as damage (heal it, or fail), never as a missing key.
func TestRunMergeDamagedIndex(t *testing.T) {
	healed, refused := 0, 0
	for which := 0; which < 4; which++ {
		for frac := 0; frac < 6; frac++ {
			mem := vfs.NewMem()
			o := rmRunOpts(mem)
			m, segs := rmRunFixture(t, o)
			p := filepath.Join("/db", segment.IndexName(segs[which].ID))
			size, err := mem.Stat(p)
			require.NoError(t, err)
			off := 16 + int64(frac)*(size-16-32)/6
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
			for i := 0; ; i++ {
				did, err := s.mergeStep(context.Background(), false)
				require.NoError(t, err, label)
				if !did {
					break
				}
				require.Less(t, i, 20, label)
			}
			require.NoError(t, fullDiff(s, m, rmRunKeys()), label)
			require.NoError(t, s.Check(), label)
			if rebuilt.Load() > 0 {
				healed++
			}
			checkAndClose(t, s)
			s = mustOpen(t, "/db", o)
			require.NoError(t, fullDiff(s, m, rmRunKeys()), label)
			checkAndClose(t, s)
		}
	}
	t.Logf("healed %d, refused at Open %d", healed, refused)
	require.Positive(t, healed)
}

// TestRunMergeNeighbourIndexUnreadable: N's index is damaged and N's data file
// cannot be read, so the damage cannot be healed while the run merges; O's
// likewise in a second case. The merge must not drop a record or a
// tombstone on the strength of an index it cannot read: it fails (the
// store stays healthy and exact) or keeps what it cannot prove dead.
func TestRunMergeNeighbourIndexUnreadable(t *testing.T) {
	for _, which := range []int{0, 3} {
		t.Run(fmt.Sprint("segment", which), func(t *testing.T) {
			mem := vfs.NewMem()
			fy := vfs.NewFaulty(mem)
			o := rmRunOpts(fy)
			m, segs := rmRunFixture(t, o)
			st := mustOpen(t, "/db", o)
			data := filepath.Join("/db", segment.DataName(segs[which].ID, st.mlog.State().Segments[segs[which].ID].FileKind))
			checkAndClose(t, st)
			testutil.FlipByte(t, mem, filepath.Join("/db", segment.IndexName(segs[which].ID)), 20, 0x01)
			s := mustOpen(t, "/db", o)
			require.NoError(t, fy.Inject(vfs.Fault{Op: vfs.OpRead, Nth: 1, Persistent: true, Match: func(p string) bool { return p == data }}))
			did, err := s.mergeStep(context.Background(), false)
			t.Logf("step with segment %d unreadable: did %v, err %v, segments %d", which, did, err, len(s.Segments()))
			require.Nil(t, s.failed())
			fy.Clear()
			require.NoError(t, fullDiff(s, m, rmRunKeys()))
			checkAndClose(t, s)
			s = mustOpen(t, "/db", o)
			require.NoError(t, fullDiff(s, m, rmRunKeys()))
			require.NoError(t, s.Compact(context.Background()))
			require.NoError(t, fullDiff(s, m, rmRunKeys()))
			checkAndClose(t, s)
		})
	}
}

// runRunMergeCrash is runMergeCrash with merge steps of several segments at
// a time (MinRun 2, small steps, so runs start above the oldest segment).
// It returns the crash points and the merges of several segments committed.
func runRunMergeCrash(t *testing.T, mode SyncMode, seed uint64, steps int) (int, int64) {
	t.Helper()
	c := runMergeCrash(t, mode, seed, 41, steps, rmKeys(),
		MergeOptions{Disable: true, MinRun: 2, SizeRatio: 8, MaxStepBytes: 12 << 10, GarbageRatio: 0.05})
	return c.points, c.runMerges
}

// TestRunMergeCrashSyncModes: power cuts at every sync point of merges of
// several segments (which leave out what newer segments shadow and
// tombstones nothing older needs) taken beside live writes, under each
// sync mode.
func TestRunMergeCrashSyncModes(t *testing.T) {
	for _, mode := range []SyncMode{SyncAlways, SyncManual, SyncInterval} {
		t.Run(fmt.Sprint(mode), func(t *testing.T) {
			seeds := uint64(1)
			if v, err := strconv.Atoi(os.Getenv("RM_SEEDS")); err == nil {
				seeds = uint64(v)
			}
			var points int
			var runs int64
			for seed := uint64(0); seed < seeds; seed++ {
				p, r := runRunMergeCrash(t, mode, seed, 200)
				points += p
				runs += r
			}
			t.Logf("%v: %d crash points, %d merges of several segments", mode, points, runs)
			require.Positive(t, runs)
		})
	}
}

// TestRunMergeManySources: a run of eighteen overlapping segments (more
// sources than the merging iterator's inline heap holds) between a large
// older and a large newer segment, with point and range tombstones in
// each, merges into one segment that reads exactly like the model, and so
// do iterators with more than eight sources before the merge, in both
// directions.
func TestRunMergeManySources(t *testing.T) {
	mem := vfs.NewMem()
	o := &Options{FS: mem, SegmentSize: 8 << 20, Merge: MergeOptions{Disable: true, MinRun: 2, SizeRatio: 3, KeepWriteOrder: true}}
	s := mustOpen(t, "/db", o)
	rng := rand.New(rand.NewPCG(5, 6))
	keys := rmKeys()
	m := model{}
	for i := 0; i < 200; i++ {
		k := fmt.Sprintf("k%02d-old%03d", i%40, i)
		require.NoError(t, s.Put([]byte(k), []byte(strings.Repeat("O", 600))))
		m[k] = strings.Repeat("O", 600)
	}
	for _, k := range keys {
		require.NoError(t, s.Put([]byte(k), []byte("old-"+k)))
		m[k] = "old-" + k
	}
	require.NoError(t, s.Seal())
	n := 0
	for seg := 0; seg < 18; seg++ {
		// Every segment about the same size: 30 writes of about 60 bytes.
		for j := 0; j < 30; j++ {
			k := keys[rng.IntN(len(keys))]
			switch rng.IntN(10) {
			case 0, 1:
				require.NoError(t, s.Delete([]byte(k)))
				delete(m, k)
			case 2:
				k2 := keys[rng.IntN(len(keys))]
				if k > k2 {
					k, k2 = k2, k
				}
				require.NoError(t, s.DeleteRange([]byte(k), []byte(k2)))
				m.deleteRange(k, k2)
			default:
				n++
				v := fmt.Sprintf("s%02d-%04d-%040d", seg, n, n)
				require.NoError(t, s.Put([]byte(k), []byte(v)))
				m[k] = v
			}
		}
		require.NoError(t, s.Seal())
	}
	for i := 0; i < 20; i++ {
		k := keys[rng.IntN(len(keys))]
		v := fmt.Sprintf("newest-%s-%0900d", k, i)
		require.NoError(t, s.Put([]byte(k), []byte(v)))
		m[k] = v
	}
	require.NoError(t, s.DeleteRange([]byte("k30"), []byte("k35")))
	m.deleteRange("k30", "k35")
	require.NoError(t, s.Seal())
	before := s.Segments()
	require.Greater(t, len(before), 10, "range drops left most segments")
	require.NoError(t, fullDiff(s, m, keys))
	require.NoError(t, iterAgrees(func() (*Iterator, error) { return s.NewIterator(nil) }, m, nil, nil, rng))
	sn, err := s.NewSnapshot()
	require.NoError(t, err)
	snModel := m.clone()

	did, err := s.mergeStep(context.Background(), false)
	require.NoError(t, err)
	require.True(t, did)
	after := s.Segments()
	require.Less(t, len(after), len(before)-8, "one step merged a long run")
	require.Equal(t, before[0].ID, after[0].ID, "the large oldest segment is outside the run")
	require.Equal(t, before[len(before)-1].ID, after[len(after)-1].ID, "the large newest segment is outside the run")
	require.NoError(t, fullDiff(s, m, keys))
	for i := 0; i < 3; i++ {
		require.NoError(t, iterAgrees(func() (*Iterator, error) { return s.NewIterator(nil) }, m, nil, nil, rng))
		require.NoError(t, iterAgrees(func() (*Iterator, error) { return sn.NewIterator(nil) }, snModel, nil, nil, rng))
		require.NoError(t, iterAgrees(func() (*Iterator, error) {
			return s.NewIterator(&IterOptions{Prefix: []byte("k1")})
		}, m, []byte("k1"), []byte("k2"), rng))
	}
	require.NoError(t, sn.Close())
	require.NoError(t, s.Compact(context.Background()))
	require.NoError(t, fullDiff(s, m, keys))
	checkAndClose(t, s)
	s = mustOpen(t, "/db", o)
	require.NoError(t, fullDiff(s, m, keys))
	checkAndClose(t, s)
}

// TestRunMergeOutputEmptyOrRangesOnly: a run whose every record a newer
// segment shadows and whose tombstones nothing older needs commits with
// no output at all; a run that keeps only a range tombstone (over an older
// segment's keys) writes an output of range tombstones alone, whose
// deletions still hold, across a reopen and later merges.
func TestRunMergeOutputEmptyOrRangesOnly(t *testing.T) {
	for _, withRange := range []bool{false, true} {
		t.Run(fmt.Sprint("range=", withRange), func(t *testing.T) {
			mem := vfs.NewMem()
			o := rmRunOpts(mem)
			s := mustOpen(t, "/db", o)
			m := model{}
			for i := 0; i < 300; i++ {
				k, v := fmt.Sprintf("o%04d", i), fmt.Sprintf("o-%0800d", i)
				require.NoError(t, s.Put([]byte(k), []byte(v)))
				m[k] = v
			}
			require.NoError(t, s.Seal())
			for r := 0; r < 2; r++ {
				for i := 0; i < 50; i++ {
					require.NoError(t, s.Put([]byte(fmt.Sprintf("a%03d", i)), []byte(fmt.Sprintf("r%d-%030d", r, i))))
				}
				for i := 0; i < 10; i++ {
					require.NoError(t, s.Delete([]byte(fmt.Sprintf("ghost%d-%03d", r, i))))
				}
				if withRange && r == 1 {
					require.NoError(t, s.DeleteRange([]byte("o0100"), []byte("o0200")))
					m.deleteRange("o0100", "o0200")
				}
				require.NoError(t, s.Seal())
			}
			for i := 0; i < 50; i++ {
				k, v := fmt.Sprintf("a%03d", i), fmt.Sprintf("n-%0800d", i)
				require.NoError(t, s.Put([]byte(k), []byte(v)))
				m[k] = v
			}
			require.NoError(t, s.Seal())
			segs := s.Segments()
			require.Len(t, segs, 4)
			did, err := s.mergeStep(context.Background(), false)
			require.NoError(t, err)
			require.True(t, did)
			after := s.Segments()
			extra := []string{"a000", "a049", "ghost0-000", "ghost1-009", "o0099", "o0100", "o0199", "o0200"}
			if withRange {
				require.Len(t, after, 3)
				require.Zero(t, after[1].Keys)
				require.EqualValues(t, 1, after[1].Records, "one range tombstone")
			} else {
				require.Len(t, after, 2, "nothing to keep: no output")
			}
			require.Equal(t, segs[0].ID, after[0].ID)
			require.Equal(t, segs[3].ID, after[len(after)-1].ID)
			require.NoError(t, fullDiff(s, m, extra))
			checkAndClose(t, s)
			s = mustOpen(t, "/db", o)
			require.NoError(t, fullDiff(s, m, extra))
			require.NoError(t, s.Compact(context.Background()))
			require.NoError(t, fullDiff(s, m, extra))
			checkAndClose(t, s)
			s = mustOpen(t, "/db", o)
			require.NoError(t, fullDiff(s, m, extra))
			checkAndClose(t, s)
		})
	}
}

// rmGatedFixture writes the fixture, then opens it with bgGate's hook, so
// that a test can hold the merge of R1 and R2 after it wrote every record
// of its output and before its commit.
func rmGatedFixture(t *testing.T, mem *vfs.Mem, g *bgGate) (*Store, model, []SegmentInfo) {
	t.Helper()
	m, segs := rmRunFixture(t, rmRunOpts(mem))
	s, err := open("/db", rmRunOpts(mem), testHooks{beforeBuild: g.hook})
	require.NoError(t, err)
	return s, m, segs
}

// TestRunMergeNewerDroppedByRangeDuringMerge: while the merge of R1 and R2
// (which left out what N shadows: a100..a119, a060..a069) waits to commit,
// a DeleteRange over N's whole span seals at once and drops N; writes
// that shadow and delete the run's keys seal too. After the commit,
// nothing N shadowed comes back and nothing else is lost, also after a
// reopen.
func TestRunMergeNewerDroppedByRangeDuringMerge(t *testing.T) {
	mem := vfs.NewMem()
	g := newGate()
	s, m, segs := rmGatedFixture(t, mem, g)
	done := bgStartRewrite(t, s, g)
	require.NoError(t, s.DeleteRange([]byte("a050"), []byte("n9999")))
	m.deleteRange("a050", "n9999")
	for _, sg := range s.Segments() {
		require.NotEqual(t, segs[3].ID, sg.ID, "the range drop removed N")
	}
	require.NoError(t, s.Put([]byte("a010"), []byte("during")))
	m["a010"] = "during"
	require.NoError(t, s.Delete([]byte("a030")))
	delete(m, "a030")
	require.NoError(t, s.Delete([]byte("q006")))
	delete(m, "q006")
	require.NoError(t, s.Seal())
	require.NoError(t, fullDiff(s, m, rmRunKeys()))
	close(g.release)
	require.NoError(t, <-done)
	require.NoError(t, fullDiff(s, m, rmRunKeys()))
	mergeSteps(t, s)
	require.NoError(t, fullDiff(s, m, rmRunKeys()))
	bgReopenCheck(t, s, mem, m, rmRunKeys())
}

// TestRunMergeIteratorsAcrossCommit: iterators (of the store and of a
// snapshot) opened before the merge of R1 and R2, and positioned in the
// middle of the run's keys, go on across its commit, forward, backward
// and turning, reading the state they were opened on; a sealed snapshot's
// listed segments still export after the commit retired two of them.
func TestRunMergeIteratorsAcrossCommit(t *testing.T) {
	mem := vfs.NewMem()
	g := newGate()
	s, m, _ := rmGatedFixture(t, mem, g)
	want := m.clone()
	it, err := s.NewIterator(nil)
	require.NoError(t, err)
	defer it.Close()
	require.True(t, it.Seek([]byte("a055")))
	require.Equal(t, "a055", string(it.Key()))
	sn, err := s.NewSnapshot()
	require.NoError(t, err)
	sealed, err := s.NewSealedSnapshot()
	require.NoError(t, err)
	listed := sealed.Segments()
	require.Len(t, listed, 4)

	done := bgStartRewrite(t, s, g)
	// Writes that would change what the open views read, were they not
	// views of the state before.
	require.NoError(t, s.Put([]byte("a056"), []byte("later")))
	require.NoError(t, s.DeleteRange([]byte("a010"), []byte("a020")))
	require.NoError(t, s.Seal())
	m["a056"] = "later"
	m.deleteRange("a010", "a020")
	close(g.release)
	require.NoError(t, <-done)
	require.Len(t, s.Segments(), 4, "O, the output, N and the new seal")

	keys := sortedKeys(want)
	i := sort.SearchStrings(keys, "a055")
	rng := rand.New(rand.NewPCG(8, 9))
	for n := 0; n < 200; n++ {
		var ok bool
		if rng.IntN(3) == 0 {
			ok, i = it.Prev(), i-1
		} else {
			ok, i = it.Next(), i+1
		}
		if i < 0 || i >= len(keys) {
			require.False(t, ok)
			require.NoError(t, it.Err())
			require.True(t, it.Seek([]byte("a055")))
			i = sort.SearchStrings(keys, "a055")
			continue
		}
		require.True(t, ok, "step %d: want %q (err %v)", n, keys[i], it.Err())
		require.Equal(t, keys[i], string(it.Key()), "step %d", n)
		v, err := it.Value()
		require.NoError(t, err)
		require.Equal(t, want[keys[i]], string(v))
	}
	require.NoError(t, iterAgrees(func() (*Iterator, error) { return sn.NewIterator(nil) }, want, nil, nil, rng))
	require.NoError(t, sn.Close())
	for _, in := range listed {
		var buf strings.Builder
		_, err := sealed.Export(context.Background(), in.ID, &buf)
		require.NoError(t, err, "segment %d of the sealed snapshot", in.ID)
		require.EqualValues(t, in.Size, buf.Len())
	}
	require.NoError(t, sealed.Close())
	require.NoError(t, it.Close())
	require.NoError(t, fullDiff(s, m, rmRunKeys()))
	bgReopenCheck(t, s, mem, m, rmRunKeys())
}

// TestRunMergeCloseWhileHeld: Close while the background's merge of R1
// and R2 waits to commit: Close returns once the step ends, and the store
// reopens to the same answers with no orphan file, whether or not the
// step committed.
func TestRunMergeCloseWhileHeld(t *testing.T) {
	mem := vfs.NewMem()
	m, segs := rmRunFixture(t, rmRunOpts(mem))
	g := newGate()
	g.armed.Store(true)
	o := rmRunOpts(mem)
	o.Merge.Disable = false
	var ends atomic.Int64
	o.Events.MergeEnd = func(mi MergeInfo) {
		if len(mi.Inputs) == 2 && mi.Inputs[0] == segs[1].ID && mi.Inputs[1] == segs[2].ID {
			ends.Add(1)
		}
	}
	s, err := open("/db", o, testHooks{beforeBuild: g.hook})
	require.NoError(t, err)
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the background merge of R1 and R2 never reached the gate")
	}
	cdone := make(chan error, 1)
	go func() { cdone <- s.Close() }()
	time.Sleep(10 * time.Millisecond)
	close(g.release)
	select {
	case err := <-cdone:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Close hangs after a merge held at its commit")
	}
	require.EqualValues(t, 1, ends.Load(), "the held step ended before Close returned")
	reopenCheck(t, mem, rmRunOpts(mem), m, rmRunKeys())
}

// TestRunMergeCancelStopsWhileDropping: a merge step whose context is
// cancelled as it begins must stop within about a frame's worth of input,
// as it does while it writes (it checks at each output frame), also when
// it leaves out every record it walks: here the run (R1, R2: 1.5 MB each, more than a frame)
// is shadowed whole by N but for R1's last key, the only record of R1 the
// step would read. That read must not happen: the step must end with the
// cancellation, not after walking and probing the whole run (a Close or a
// cancelled Compact waits for all of it). Reads of R1's data are made to
// fail, so that reaching that key shows. (Before every run reclaimed, the
// step wrote R2's records and met the cancellation at its first frame.)
func TestRunMergeCancelStopsWhileDropping(t *testing.T) {
	mem := vfs.NewMem()
	fy := vfs.NewFaulty(mem)
	o := &Options{FS: fy, SegmentSize: 64 << 20, DisableMmap: true,
		Merge: MergeOptions{Disable: true, MinRun: 2, SizeRatio: 4, MaxStepBytes: 4 << 20, KeepWriteOrder: true}}
	s := mustOpen(t, "/db", o)
	const n = 1500
	val := strings.Repeat("v", 1000)
	for r := 0; r < 3; r++ {
		for i := 0; i < n; i++ {
			require.NoError(t, s.Put([]byte(fmt.Sprintf("a%06d", i)), []byte(fmt.Sprintf("%d%s", r, val))))
		}
		if r == 0 {
			require.NoError(t, s.Put([]byte("zz-kept"), []byte("r1")))
		}
		require.NoError(t, s.Seal())
	}
	segs := s.Segments()
	require.Len(t, segs, 3)
	r1Data := filepath.Join("/db", segment.DataName(segs[0].ID, s.mlog.State().Segments[segs[0].ID].FileKind))
	checkAndClose(t, s)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var armed atomic.Bool
	armed.Store(true)
	o.Events.MergeBegin = func(mi MergeInfo) {
		if armed.CompareAndSwap(true, false) {
			require.Equal(t, []uint64{segs[0].ID, segs[1].ID}, mi.Inputs)
			cancel()
			require.NoError(t, fy.Inject(vfs.Fault{Op: vfs.OpRead, Nth: 1, Persistent: true, Match: func(p string) bool { return p == r1Data }}))
		}
	}
	s = mustOpen(t, "/db", o)
	did, err := s.mergeStep(ctx, false)
	fy.Clear()
	t.Logf("cancelled step: did %v, err %v", did, err)
	require.Error(t, err)
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, vfs.ErrInjected, "the cancelled step walked the whole run to its last record")
	require.Nil(t, s.failed())
	require.Len(t, s.Segments(), 3, "nothing committed")
	m := model{"zz-kept": "r1"}
	for i := 0; i < n; i++ {
		m[fmt.Sprintf("a%06d", i)] = "2" + val
	}
	require.NoError(t, fullDiff(s, m, nil))
	checkAndClose(t, s)
}

// TestRunMergeFollowAndOwnRuns: a leader whose merges are runs of several
// segments (reclaiming what newer segments shadow) is followed in steps
// that span several of its commits; the follower reads what the leader
// reads after each Follow. Then the follower takes writes of its own over
// the mirrored keys (tombstones over keys only mirrored segments hold,
// range deletes) in several sealed segments, and its own run merges
// (pickOwnRun: never spanning a mirrored segment) must keep every
// tombstone a mirrored segment still needs.
func TestRunMergeFollowAndOwnRuns(t *testing.T) {
	lmem, fmem := vfs.NewMem(), vfs.NewMem()
	lo := &Options{FS: lmem, SegmentSize: 1 << 20, Merge: MergeOptions{Disable: true, MinRun: 2, SizeRatio: 8}}
	fo := &Options{FS: fmem, SegmentSize: 1 << 20, Merge: MergeOptions{Disable: true, MinRun: 2, SizeRatio: 8}}
	leader := mustOpen(t, "/l", lo)
	follower := mustOpen(t, "/f", fo)
	rng := rand.New(rand.NewPCG(17, 18))
	keys := rmKeys()
	m := model{}
	var leaderRuns int
	for round := 0; round < 40; round++ {
		for j := 0; j < 1+rng.IntN(12); j++ {
			k := keys[rng.IntN(len(keys))]
			switch r := rng.IntN(10); {
			case r < 6:
				v := fmt.Sprintf("r%d-%d-%0*d", round, j, rng.IntN(200), 0)
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
		for n := rng.IntN(3); n > 0 && round < 32; n-- { // the last rounds' segments stay
			before := len(leader.Segments())
			_, err := leader.mergeStep(context.Background(), false)
			require.NoError(t, err)
			if len(leader.Segments()) < before-1 {
				leaderRuns++
			}
		}
		if rng.IntN(3) == 0 {
			continue
		}
		syncFollower(t, leader, follower)
		require.NoError(t, fullDiff(follower, m, keys), "round %d", round)
	}
	require.Positive(t, leaderRuns)
	syncFollower(t, leader, follower)
	require.NoError(t, fullDiff(follower, m, keys))
	mirrored := len(follower.Segments())
	require.Greater(t, mirrored, 1)

	// The follower's own writes: three sealed segments over mirrored keys.
	for seg := 0; seg < 3; seg++ {
		for j := 0; j < 8; j++ {
			k := keys[rng.IntN(len(keys))]
			switch rng.IntN(4) {
			case 0, 1:
				require.NoError(t, follower.Delete([]byte(k)))
				delete(m, k)
			case 2:
				k2 := keys[rng.IntN(len(keys))]
				if k > k2 {
					k, k2 = k2, k
				}
				require.NoError(t, follower.DeleteRange([]byte(k), []byte(k2)))
				m.deleteRange(k, k2)
			default:
				v := fmt.Sprintf("own%d-%d", seg, j)
				require.NoError(t, follower.Put([]byte(k), []byte(v)))
				m[k] = v
			}
		}
		require.NoError(t, follower.Seal())
	}
	require.NoError(t, fullDiff(follower, m, keys))
	steps := mergeSteps(t, follower)
	require.Positive(t, steps)
	require.NoError(t, fullDiff(follower, m, keys))
	require.NoError(t, follower.Compact(context.Background()))
	require.NoError(t, fullDiff(follower, m, keys))
	var own int
	for _, sg := range follower.Segments() {
		if sg.Origin == 0 {
			own++
		}
	}
	require.LessOrEqual(t, own, 1, "the follower's own segments merged")
	checkAndClose(t, follower)
	follower = mustOpen(t, "/f", fo)
	require.NoError(t, fullDiff(follower, m, keys))
	checkAndClose(t, follower)
	checkAndClose(t, leader)
}

// TestRunMergeConcurrentEverything: writers, range deletes, seals, a
// background that merges runs of two segments (MinRun 2) with every run
// reclaiming, imports, readers and Metrics callers, all at once under
// -race; then the whole store against the model, again after a reopen
// (bgConcurrentEverything's workload).
func TestRunMergeConcurrentEverything(t *testing.T) {
	bgConcurrentEverything(t, 2, 22)
}
