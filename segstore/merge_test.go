package segstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/vfs"
)

// scan returns every key/value an iterator yields.
func scan(t testing.TB, it *Iterator) model {
	t.Helper()
	got := model{}
	var prev []byte
	for ok := it.First(); ok; ok = it.Next() {
		if prev != nil {
			require.Less(t, string(prev), string(it.Key()), "keys must ascend")
		}
		prev = append(prev[:0], it.Key()...)
		v, err := it.Value()
		require.NoError(t, err)
		got[string(it.Key())] = string(v)
	}
	require.NoError(t, it.Err())
	return got
}

// TestModelWithMergesSnapshotsIterators drives puts, deletes, batches, seals,
// merges, snapshots, iterators and reopens against a map model; every open
// snapshot is checked against the model as it was when it was taken.
func TestModelWithMergesSnapshotsIterators(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	fsys := vfs.NewMem()
	o := &Options{FS: fsys, SegmentSize: 8 << 10, Merge: MergeOptions{MinRun: 2, SizeRatio: 8}}
	s := mustOpen(t, "/db", o)
	m := model{}
	const keySpace = 200
	type snap struct {
		sn   *Snapshot
		want model
	}
	var snaps []snap
	ctx := context.Background()
	for i := 0; i < 3000; i++ {
		switch r := rng.IntN(100); {
		case r < 60:
			ops := randomOps(rng, 1+rng.IntN(4), keySpace)
			require.NoError(t, applyOps(s, ops))
			m.apply(ops)
		case r < 70:
			require.NoError(t, s.Seal())
		case r < 74:
			require.NoError(t, s.Compact(ctx))
		case r < 80:
			sn, err := s.NewSnapshot()
			require.NoError(t, err)
			snaps = append(snaps, snap{sn, m.clone()})
		case r < 86 && len(snaps) > 0:
			j := rng.IntN(len(snaps))
			sp := snaps[j]
			k := fmt.Sprintf("key-%03d", rng.IntN(keySpace))
			v, err := sp.sn.Get([]byte(k))
			if want, ok := sp.want[k]; ok {
				require.NoError(t, err)
				require.Equal(t, want, string(v))
			} else {
				require.ErrorIs(t, err, ErrNotFound)
			}
			if rng.IntN(3) == 0 {
				it, err := sp.sn.NewIterator(nil)
				require.NoError(t, err)
				require.Equal(t, sp.want, scan(t, it))
				require.NoError(t, it.Close())
				require.NoError(t, sp.sn.Close())
				snaps = append(snaps[:j], snaps[j+1:]...)
			}
		case r < 92:
			lo := fmt.Sprintf("key-%03d", rng.IntN(keySpace))
			hi := fmt.Sprintf("key-%03d", rng.IntN(keySpace))
			it, err := s.NewIterator(&IterOptions{LowerBound: []byte(lo), UpperBound: []byte(hi)})
			require.NoError(t, err)
			want := model{}
			for k, v := range m {
				if k >= lo && k < hi {
					want[k] = v
				}
			}
			require.Equal(t, want, scan(t, it))
			require.NoError(t, it.Close())
		case r < 95:
			it, err := s.NewIterator(&IterOptions{Prefix: []byte("key-1")})
			require.NoError(t, err)
			want := model{}
			for k, v := range m {
				if len(k) >= 5 && k[:5] == "key-1" {
					want[k] = v
				}
			}
			require.Equal(t, want, scan(t, it))
			require.NoError(t, it.Close())
		case r < 97:
			for _, sp := range snaps {
				require.NoError(t, sp.sn.Close())
			}
			snaps = nil
			checkAndClose(t, s)
			s = mustOpen(t, "/db", o)
			require.NoError(t, diff(s, m, keySpace))
		default:
			require.NoError(t, diff(s, m, keySpace))
		}
	}
	for _, sp := range snaps {
		it, err := sp.sn.NewIterator(nil)
		require.NoError(t, err)
		require.Equal(t, sp.want, scan(t, it))
		require.NoError(t, it.Close())
		require.NoError(t, sp.sn.Close())
	}
	require.Greater(t, s.Metrics().Merges, int64(0))
	require.NoError(t, diff(s, m, keySpace))
	checkAndClose(t, s)
}

// TestRetiredFilesOutliveSnapshots checks that a merge does not delete a file
// a snapshot can still read, and that it goes once the snapshot closes.
func TestRetiredFilesOutliveSnapshots(t *testing.T) {
	fsys := vfs.NewMem()
	s := mustOpen(t, "/db", &Options{FS: fsys, SegmentSize: 64 << 10, Merge: MergeOptions{Disable: true}})
	for i := 0; i < 4; i++ {
		require.NoError(t, s.Put([]byte("k"), []byte(fmt.Sprint(i))))
		require.NoError(t, s.Seal())
	}
	sn, err := s.NewSnapshot()
	require.NoError(t, err)
	before := s.Segments()
	require.Len(t, before, 4)
	require.NoError(t, s.Compact(context.Background()))
	require.Len(t, s.Segments(), 1)
	// Every pre-merge file is still there for the snapshot.
	names, err := fsys.List("/db")
	require.NoError(t, err)
	for _, si := range before {
		require.Contains(t, names, fmt.Sprintf("%016x.log", si.ID))
	}
	v, err := sn.Get([]byte("k"))
	require.NoError(t, err)
	require.Equal(t, "3", string(v))
	require.NoError(t, sn.Close())
	names, err = fsys.List("/db")
	require.NoError(t, err)
	for _, si := range before {
		require.NotContains(t, names, fmt.Sprintf("%016x.log", si.ID))
	}
	checkAndClose(t, s)
}

// TestSpaceAfterCompact overwrites the same 10,000 keys 100 times with merges
// enabled; after Compact the bytes on disk are within 2x of the live data.
func TestSpaceAfterCompact(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, &Options{Sync: SyncManual, SegmentSize: 1 << 20})
	const keys, rounds = 10000, 100
	val := make([]byte, 16)
	for r := 0; r < rounds; r++ {
		b := s.NewBatch()
		for k := 0; k < keys; k++ {
			copy(val, fmt.Sprintf("r%03d-k%05d", r, k))
			require.NoError(t, b.Put([]byte(fmt.Sprintf("key-%05d", k)), val))
		}
		require.NoError(t, s.Apply(b))
	}
	require.NoError(t, s.Seal())
	require.NoError(t, s.Compact(context.Background()))
	m := s.Metrics()
	var live int64
	it, err := s.NewIterator(nil)
	require.NoError(t, err)
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.Value()
		require.NoError(t, err)
		live += int64(len(it.Key()) + len(v))
		n++
	}
	require.NoError(t, it.Close())
	require.Equal(t, keys, n)
	t.Logf("live data %d bytes, sealed segments %d bytes in %d segments, merges %d", live, m.SegmentBytes, m.Segments, m.Merges)
	require.LessOrEqual(t, m.SegmentBytes, 2*live, "bytes on disk within 2x of live data")
	checkAndClose(t, s)
}

// TestMergeBacklog: the gauge counts the segments the background merge
// would take next: none with merging disabled, some once enough unordered
// segments are sealed (held while the merge is gated), none again once the
// background merge has worked through them, whatever order it took.
func TestMergeBacklog(t *testing.T) {
	fill := func(s *Store, rng *rand.Rand) {
		for range 5 {
			for range 200 {
				require.NoError(t, s.Put(fmt.Appendf(nil, "k%06d", rng.IntN(1_000_000)), []byte("value")))
			}
			require.NoError(t, s.Seal())
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	s := mustOpen(t, "/db", &Options{FS: vfs.NewMem(), Merge: MergeOptions{Disable: true}})
	fill(s, rng)
	require.Zero(t, s.Metrics().MergeBacklog)
	checkAndClose(t, s)

	gate := make(chan struct{})
	s, err := open("/db", &Options{FS: vfs.NewMem()}, testHooks{beforeJob: func(job string) {
		if job == "merge" {
			<-gate
		}
	}})
	require.NoError(t, err)
	fill(s, rng)
	require.Equal(t, 5, s.Metrics().MergeBacklog, "five similar segments: one run of five")
	close(gate)
	require.Eventually(t, func() bool { return s.Metrics().MergeBacklog == 0 }, timeout, tick)
	require.Equal(t, 1, s.Metrics().Segments)
	checkAndClose(t, s)
}
