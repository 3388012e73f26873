package segstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/vfs"
)

// garbageOpts makes size-tiered runs impossible (MinRun far above the
// number of segments the tests make) and leaves background merges off, so
// that every merge step a test takes (mergeSteps) is a rewrite alone, for
// garbage or key order.
func garbageOpts(fsys vfs.FS) *Options {
	return &Options{FS: fsys, SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true, MinRun: 1000}}
}

// mergeSteps takes background-policy merge steps until there is nothing
// left to do, and returns how many it took.
func mergeSteps(t *testing.T, s *Store) int {
	t.Helper()
	n := 0
	for ; ; n++ {
		did, err := s.mergeStep(context.Background(), false)
		require.NoError(t, err)
		if !did {
			return n
		}
		require.Less(t, n, 1000, "merge steps do not converge")
	}
}

// liveBytes is the record bytes of m as the store writes them (the
// segment record's framing aside): what a store holding nothing but m
// would need.
func liveBytes(m model) int64 {
	var n int64
	for k, v := range m {
		n += int64(len(k) + len(v))
	}
	return n
}

// writeGenerations writes keys key-0000.. n times over, each generation in a
// random order and sealed, then deletes every fourth key, sealed, and
// returns the model.
func writeGenerations(t *testing.T, s *Store, rng *rand.Rand, keys, generations int) model {
	t.Helper()
	m := model{}
	for g := 0; g < generations; g++ {
		for _, i := range rng.Perm(keys) {
			k, v := fmt.Sprintf("key-%04d", i), fmt.Sprintf("gen%d-%04d-%0100d", g, i, i)
			require.NoError(t, s.Put([]byte(k), []byte(v)))
			m[k] = v
		}
		require.NoError(t, s.Seal())
	}
	for i := 0; i < keys; i += 4 {
		k := fmt.Sprintf("key-%04d", i)
		require.NoError(t, s.Delete([]byte(k)))
		delete(m, k)
	}
	require.NoError(t, s.Seal())
	return m
}

// TestGarbageIsReclaimed: a store written twice over with a quarter of its
// keys then deleted holds three generations of records; with size-tiered
// runs ruled out, the garbage rewrites alone must bring it down to about
// the live data, answer exactly as before, report no garbage and no
// backlog, and keep that across a reopen.
func TestGarbageIsReclaimed(t *testing.T) {
	fsys := vfs.NewMem()
	o := garbageOpts(fsys)
	s := mustOpen(t, "/db", o)
	rng := rand.New(rand.NewPCG(1, 2))
	m := writeGenerations(t, s, rng, 2000, 2)
	before := s.Metrics()
	require.Greater(t, before.GarbageBytes, before.SegmentBytes/2, "two generations and deletes: most of it is garbage")

	steps := mergeSteps(t, s)
	require.Positive(t, steps)
	after := s.Metrics()
	require.LessOrEqual(t, float64(after.GarbageBytes), 0.2*float64(after.SegmentBytes))
	require.Less(t, float64(after.SegmentBytes), 1.3*float64(liveBytes(m)),
		"segments %d bytes for %d live bytes (before: %d)", after.SegmentBytes, liveBytes(m), before.SegmentBytes)
	require.Positive(t, after.Rewrites)
	require.NoError(t, fullDiff(s, m, keyNames(10)))
	checkAndClose(t, s)

	o.Merge.Disable = false
	s = mustOpen(t, "/db", o)
	require.NoError(t, fullDiff(s, m, nil))
	mt := s.Metrics()
	require.LessOrEqual(t, float64(mt.GarbageBytes), 0.2*float64(mt.SegmentBytes))
	require.Zero(t, mt.MergeBacklog)
	checkAndClose(t, s)
}

// TestGarbageDeletedEverything: keys written then all deleted leave
// nothing: the shadowed segment is all garbage and goes without a rewrite,
// then the tombstones have nothing older to delete and go too.
func TestGarbageDeletedEverything(t *testing.T) {
	fsys := vfs.NewMem()
	o := garbageOpts(fsys)
	s := mustOpen(t, "/db", o)
	for i := 0; i < 500; i++ {
		require.NoError(t, s.Put([]byte(fmt.Sprintf("k%04d", i)), []byte("value")))
	}
	require.NoError(t, s.Seal())
	for i := 0; i < 500; i++ {
		require.NoError(t, s.Delete([]byte(fmt.Sprintf("k%04d", i))))
	}
	require.NoError(t, s.Seal())
	require.Equal(t, 2, s.Metrics().Segments)
	mergeSteps(t, s)
	mt := s.Metrics()
	require.Zero(t, mt.Segments)
	require.Zero(t, mt.SegmentBytes)
	require.NoError(t, fullDiff(s, model{}, []string{"k0000", "k0499"}))
	checkAndClose(t, s)
	s = mustOpen(t, "/db", o)
	require.NoError(t, fullDiff(s, model{}, []string{"k0000", "k0499"}))
	checkAndClose(t, s)
}

// TestGarbageKeepsNeededTombstone: a segment rewritten for its garbage
// keeps a tombstone whose key an older segment still holds, and a record
// no newer segment shadows; the older segment (hardly garbage) stays.
func TestGarbageKeepsNeededTombstone(t *testing.T) {
	fsys := vfs.NewMem()
	o := garbageOpts(fsys)
	s := mustOpen(t, "/db", o)
	want := model{}
	for i := 0; i < 100; i++ {
		k := fmt.Sprintf("old-%03d", i)
		require.NoError(t, s.Put([]byte(k), []byte("v")))
		want[k] = "v"
	}
	require.NoError(t, s.Seal()) // O
	require.NoError(t, s.Delete([]byte("old-000")))
	delete(want, "old-000")
	require.NoError(t, s.Put([]byte("mid-keep"), []byte("kept")))
	want["mid-keep"] = "kept"
	for i := 0; i < 100; i++ {
		require.NoError(t, s.Put([]byte(fmt.Sprintf("x-%03d", i)), []byte("first")))
	}
	require.NoError(t, s.Seal()) // S: a needed tombstone, a live record, 100 shadowed
	for i := 0; i < 100; i++ {
		k := fmt.Sprintf("x-%03d", i)
		require.NoError(t, s.Put([]byte(k), []byte("second")))
		want[k] = "second"
	}
	require.NoError(t, s.Seal()) // N
	segsBefore := s.Metrics().Segments
	require.Equal(t, 3, segsBefore)
	require.Equal(t, 1, mergeSteps(t, s), "only S is worth a rewrite")
	mt := s.Metrics()
	require.Equal(t, 3, mt.Segments)
	require.Less(t, mt.GarbageBytes, mt.SegmentBytes/50, "only O's record under the tombstone is garbage")
	require.NoError(t, fullDiff(s, want, []string{"old-000"}))
	checkAndClose(t, s)
	s = mustOpen(t, "/db", o)
	require.NoError(t, fullDiff(s, want, []string{"old-000"}))
	checkAndClose(t, s)
}

// TestGarbageUnderRangeTombstone: records a newer range tombstone covers
// are garbage; the rewrite drops them, the rest stay readable.
func TestGarbageUnderRangeTombstone(t *testing.T) {
	fsys := vfs.NewMem()
	o := garbageOpts(fsys)
	s := mustOpen(t, "/db", o)
	want := model{}
	for i := 0; i < 1000; i++ {
		k := fmt.Sprintf("k%04d", i)
		require.NoError(t, s.Put([]byte(k), []byte("value")))
		want[k] = "value"
	}
	require.NoError(t, s.Seal())
	require.NoError(t, s.DeleteRange([]byte("k0100"), []byte("k0700")))
	want.deleteRange("k0100", "k0700")
	require.NoError(t, s.Seal())
	before := s.Metrics()
	require.Greater(t, before.GarbageBytes, before.SegmentBytes/3)
	require.Positive(t, mergeSteps(t, s))
	after := s.Metrics()
	require.Less(t, after.SegmentBytes, before.SegmentBytes/2)
	require.NoError(t, fullDiff(s, want, []string{"k0100", "k0699", "k0700"}))
	checkAndClose(t, s)
}

// TestGarbageRewriteKeepsSnapshot: a snapshot taken before a rewrite keeps
// reading the superseded values it saw, through the rewrite and after it.
func TestGarbageRewriteKeepsSnapshot(t *testing.T) {
	fsys := vfs.NewMem()
	s := mustOpen(t, "/db", garbageOpts(fsys))
	rng := rand.New(rand.NewPCG(5, 6))
	old := model{}
	for _, i := range rng.Perm(300) {
		k, v := fmt.Sprintf("key-%04d", i), fmt.Sprintf("old-%d", i)
		require.NoError(t, s.Put([]byte(k), []byte(v)))
		old[k] = v
	}
	require.NoError(t, s.Seal())
	sn, err := s.NewSnapshot()
	require.NoError(t, err)
	cur := old.clone()
	for i := 0; i < 300; i += 2 {
		k, v := fmt.Sprintf("key-%04d", i), fmt.Sprintf("new-%d", i)
		require.NoError(t, s.Put([]byte(k), []byte(v)))
		cur[k] = v
	}
	require.NoError(t, s.Seal())
	require.Positive(t, mergeSteps(t, s))
	require.NoError(t, fullDiff(s, cur, nil))
	it, err := sn.NewIterator(nil)
	require.NoError(t, err)
	require.Equal(t, old, scan(t, it))
	require.NoError(t, it.Close())
	require.NoError(t, sn.Close())
	checkAndClose(t, s)
}

// TestGarbageRatioOption: the ratio is validated, and 1 rewrites only a
// segment that is garbage through and through.
func TestGarbageRatioOption(t *testing.T) {
	for _, bad := range []float64{-0.1, 1.5} {
		_, err := Open(t.TempDir(), &Options{Merge: MergeOptions{GarbageRatio: bad}})
		require.ErrorIs(t, err, ErrInvalidOption, "ratio %v", bad)
	}
	fsys := vfs.NewMem()
	o := garbageOpts(fsys)
	o.Merge.GarbageRatio = 1
	o.Merge.KeepWriteOrder = true
	s := mustOpen(t, "/db", o)
	for i := 0; i < 200; i++ {
		require.NoError(t, s.Put([]byte(fmt.Sprintf("k%04d", i)), []byte("a")))
	}
	require.NoError(t, s.Seal())
	for i := 0; i < 100; i++ {
		require.NoError(t, s.Put([]byte(fmt.Sprintf("k%04d", i)), []byte("b")))
	}
	require.NoError(t, s.Seal())
	require.Zero(t, mergeSteps(t, s), "half garbage is below a ratio of 1")
	for i := 100; i < 200; i++ {
		require.NoError(t, s.Put([]byte(fmt.Sprintf("k%04d", i)), []byte("b")))
	}
	require.NoError(t, s.Seal())
	require.Equal(t, 1, mergeSteps(t, s), "the first segment is all garbage now")
	require.Equal(t, 2, s.Metrics().Segments)
	checkAndClose(t, s)
}

// TestGarbageModel drives random writes, deletes, range deletes, seals,
// snapshots and merge steps that are mostly rewrites alone (small key
// space, a low GarbageRatio) against a map model, reopening now and then.
func TestGarbageModel(t *testing.T) {
	for seed := uint64(0); seed < 4; seed++ {
		rng := rand.New(rand.NewPCG(seed, 17))
		fsys := vfs.NewMem()
		o := &Options{FS: fsys, SegmentSize: 4 << 10, Merge: MergeOptions{Disable: true, MinRun: 6, GarbageRatio: 0.05}}
		s := mustOpen(t, "/db", o)
		m := model{}
		const keySpace = 150
		type snap struct {
			sn   *Snapshot
			want model
		}
		var snaps []snap
		for i := 0; i < 2500; i++ {
			switch r := rng.IntN(100); {
			case r < 60:
				ops := randomOps(rng, 1+rng.IntN(4), keySpace)
				require.NoError(t, applyOps(s, ops))
				m.apply(ops)
			case r < 63:
				a, b := rng.IntN(keySpace), rng.IntN(keySpace)
				lo, hi := fmt.Sprintf("key-%03d", min(a, b)), fmt.Sprintf("key-%03d", max(a, b))
				require.NoError(t, s.DeleteRange([]byte(lo), []byte(hi)))
				m.deleteRange(lo, hi)
			case r < 75:
				require.NoError(t, s.Seal())
			case r < 88:
				_, err := s.mergeStep(context.Background(), rng.IntN(4) == 0)
				require.NoError(t, err)
			case r < 91:
				sn, err := s.NewSnapshot()
				require.NoError(t, err)
				snaps = append(snaps, snap{sn, m.clone()})
			case r < 94 && len(snaps) > 0:
				j := rng.IntN(len(snaps))
				it, err := snaps[j].sn.NewIterator(nil)
				require.NoError(t, err)
				require.Equal(t, snaps[j].want, scan(t, it), "seed %d op %d: snapshot", seed, i)
				require.NoError(t, it.Close())
				require.NoError(t, snaps[j].sn.Close())
				snaps = append(snaps[:j], snaps[j+1:]...)
			case r < 96:
				require.NoError(t, fullDiff(s, m, nil), "seed %d op %d", seed, i)
			case r < 97:
				for _, sp := range snaps {
					require.NoError(t, sp.sn.Close())
				}
				snaps = nil
				checkAndClose(t, s)
				s = mustOpen(t, "/db", o)
			}
		}
		for _, sp := range snaps {
			require.NoError(t, sp.sn.Close())
		}
		mergeSteps(t, s)
		require.NoError(t, fullDiff(s, m, keyNames(keySpace)), "seed %d end", seed)
		mt := s.Metrics()
		require.LessOrEqual(t, float64(mt.GarbageBytes), 0.05*float64(mt.SegmentBytes), "seed %d: settled with garbage left", seed)
		checkAndClose(t, s)
	}
}

// TestCrashDuringGarbageRewrites crashes at every sync point of a
// workload whose merge steps are rewrites alone (size-tiered runs ruled
// out, a low GarbageRatio, steps taken by the writer so that they are
// certain to happen), and checks each image against the model of
// acknowledged batches like TestCrashAtEverySyncPoint.
func TestCrashDuringGarbageRewrites(t *testing.T) {
	mo := &MergeOptions{Disable: true, MinRun: 1000, GarbageRatio: 0.1}
	for seed := uint64(0); seed < 2; seed++ {
		var rewrites int64
		var last *Store
		n := runCrashWorkloadWith(t, seed, 200, nil, crashWorkload{merge: mo, step: func(s *Store, rng *rand.Rand) bool {
			last = s
			if rng.IntN(8) != 0 {
				return false
			}
			_, err := s.mergeStep(context.Background(), false)
			require.NoError(t, err)
			return true
		}})
		rewrites = last.stats.rewrites.Load()
		t.Logf("seed %d: %d crash points, %d rewrites", seed, n, rewrites)
		require.Positive(t, rewrites)
	}
}

// TestGarbageInsideOneSegment: a live file keeps every version it was
// given, so a sealed one that overwrote its own keys holds garbage that no
// other segment shadows; the manifest's record and key counts show it, and
// the rewrite leaves one record per key. A segment of range tombstones
// and keys only is not rewritten again and again.
func TestGarbageInsideOneSegment(t *testing.T) {
	o := garbageOpts(vfs.NewMem())
	o.SegmentSize = 1 << 20
	s := mustOpen(t, "/db", o)
	want := model{}
	for round := 0; round < 4; round++ {
		for i := 0; i < 300; i++ {
			k, v := fmt.Sprintf("k%04d", i), fmt.Sprintf("round-%d-%050d", round, i)
			require.NoError(t, s.Put([]byte(k), []byte(v)))
			want[k] = v
		}
	}
	for i := 0; i < 10; i++ {
		lo, hi := fmt.Sprintf("r%02d", 2*i), fmt.Sprintf("r%02d", 2*i+1)
		require.NoError(t, s.DeleteRange([]byte(lo), []byte(hi)))
	}
	require.NoError(t, s.Seal())
	before := s.Metrics()
	require.Equal(t, 1, before.Segments)
	require.Greater(t, before.GarbageBytes, before.SegmentBytes/2, "three of four versions are garbage")
	require.Equal(t, 1, mergeSteps(t, s), "one rewrite, then nothing")
	after := s.Metrics()
	require.Less(t, after.SegmentBytes, before.SegmentBytes/3)
	require.Zero(t, after.GarbageBytes)
	require.NoError(t, fullDiff(s, want, nil))
	checkAndClose(t, s)
}

// TestRunMergeReclaims: a size-tiered merge of several segments leaves out,
// like a rewrite alone, the records a segment newer than the whole run
// shadows and the point tombstones nothing older than the run needs, and
// keeps the tombstones an older segment still needs.
func TestRunMergeReclaims(t *testing.T) {
	fsys := vfs.NewMem()
	o := &Options{FS: fsys, SegmentSize: 64 << 20, Merge: MergeOptions{Disable: true, MinRun: 2, KeepWriteOrder: true}}
	s := mustOpen(t, "/db", o)
	m := model{}
	put := func(k, v string) {
		t.Helper()
		require.NoError(t, s.Put([]byte(k), []byte(v)))
		m[k] = v
	}
	del := func(k string) {
		t.Helper()
		require.NoError(t, s.Delete([]byte(k)))
		delete(m, k)
	}
	// Oldest, far larger than the run: outside it.
	for i := 0; i < 2000; i++ {
		put(fmt.Sprintf("a%04d", i), fmt.Sprintf("%0500d", i))
	}
	require.NoError(t, s.Seal())
	// The run: two segments of similar size.
	for i := 0; i < 100; i++ {
		put(fmt.Sprintf("x%03d", i), fmt.Sprintf("x-old-%0100d", i))
	}
	for i := 0; i < 50; i++ {
		del(fmt.Sprintf("a%04d", i))     // an older segment holds it: kept
		del(fmt.Sprintf("ghost%03d", i)) // nothing holds it: dropped
	}
	require.NoError(t, s.Seal())
	for i := 0; i < 100; i++ {
		put(fmt.Sprintf("y%03d", i), fmt.Sprintf("y-%0120d", i))
	}
	require.NoError(t, s.Seal())
	// Newest, far larger than the run: outside it, shadowing half of x.
	for i := 0; i < 50; i++ {
		put(fmt.Sprintf("x%03d", i), fmt.Sprintf("x-new-%03000d", i))
	}
	require.NoError(t, s.Seal())
	before := s.Segments()
	require.Len(t, before, 4)

	did, err := s.mergeStep(context.Background(), false)
	require.NoError(t, err)
	require.True(t, did)
	after := s.Segments()
	require.Len(t, after, 3, "the two middle segments merged into one")
	require.Equal(t, before[0].ID, after[0].ID)
	require.Equal(t, before[3].ID, after[2].ID)
	out := after[1]
	// x050..x099, y000..y099, and the 50 tombstones of a-keys.
	require.Equal(t, uint64(50+100+50), out.Keys, "shadowed records and unneeded tombstones are left out")
	require.Equal(t, out.Keys, out.Records)
	require.NoError(t, fullDiff(s, m, []string{"ghost000", "ghost049", "a0000", "a0049", "x000", "x049", "x050"}))
	checkAndClose(t, s)

	s = mustOpen(t, "/db", o)
	require.NoError(t, fullDiff(s, m, nil))
	checkAndClose(t, s)
}
