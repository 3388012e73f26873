package segstore

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/vfs"
)

// modelScan returns the model's keys in [lo, hi) (nil: open) in order.
func modelScan(m model, lo, hi []byte) []string {
	var out []string
	for k := range m {
		if lo != nil && k < string(lo) {
			continue
		}
		if hi != nil && k >= string(hi) {
			continue
		}
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestBreakIteratorLargeKeySpace: the model comparison of
// rangedel_model_test with a key space big enough for branch nodes in the
// live B-tree and several fences in each index (thousands of keys), keys
// with 0xff bytes and the empty key, random range deletions across the
// live file, a frozen copy, sealed segments and merges; iterators with
// random bounds, Seek, SeekLT and direction changes, and snapshots kept
// across later writes.
func TestBreakIteratorLargeKeySpace(t *testing.T) {
	for seed := range uint64(6) {
		rng := rand.New(rand.NewPCG(seed, 17))
		var fsys vfs.FS = vfs.NewMem()
		dir := "/db"
		o := &Options{FS: fsys, SegmentSize: 1 << 20, Merge: MergeOptions{Disable: true}}
		if seed%2 == 1 {
			// The OS file system (the live file read through its shared
			// mapping) with background seals and merges.
			dir = t.TempDir()
			o = &Options{FS: vfs.NewOS(), SegmentSize: 64 << 10, Merge: MergeOptions{MinRun: 2, SizeRatio: 8}}
		}
		s := mustOpen(t, dir, o)
		m := model{}
		const nk = 3000
		key := func() string {
			i := rng.IntN(nk)
			switch i % 97 {
			case 0:
				return ""
			case 1:
				return fmt.Sprintf("k%04d\xff", i)
			case 2:
				return fmt.Sprintf("k%04d\xff\xff\x00", i)
			}
			return fmt.Sprintf("k%04d", i)
		}
		type snap struct {
			sn *Snapshot
			m  model
		}
		var snaps []snap
		check := func(what string, get func([]byte) ([]byte, error), newIt func(*IterOptions) (*Iterator, error), m model) {
			for range 20 {
				k := key()
				v, err := get([]byte(k))
				if want, ok := m[k]; ok {
					require.NoError(t, err, "%s: get %q", what, k)
					require.Equal(t, want, string(v), "%s: get %q", what, k)
				} else {
					require.ErrorIs(t, err, ErrNotFound, "%s: get %q", what, k)
				}
			}
			var lo, hi []byte
			if rng.IntN(2) == 0 {
				lo = []byte(key())
			}
			if rng.IntN(2) == 0 {
				hi = []byte(key())
			}
			it, err := newIt(&IterOptions{LowerBound: lo, UpperBound: hi})
			require.NoError(t, err)
			defer it.Close()
			want := modelScan(m, lo, hi)
			var got []string
			for ok := it.First(); ok; ok = it.Next() {
				got = append(got, string(it.Key()))
			}
			require.Equal(t, want, got, "%s: forward [%q, %q)", what, lo, hi)
			got = got[:0]
			for ok := it.Last(); ok; ok = it.Prev() {
				got = append(got, string(it.Key()))
			}
			slices.Reverse(got)
			require.Equal(t, want, got, "%s: backward [%q, %q)", what, lo, hi)
			// Seek, then a zig-zag.
			for range 5 {
				sk := []byte(key())
				i, _ := slices.BinarySearch(want, string(sk))
				ok := it.Seek(sk)
				if i == len(want) {
					require.False(t, ok, "%s: seek %q", what, sk)
					continue
				}
				require.True(t, ok, "%s: seek %q", what, sk)
				require.Equal(t, want[i], string(it.Key()), "%s: seek %q", what, sk)
				v, err := it.Value()
				require.NoError(t, err)
				require.Equal(t, m[want[i]], string(v))
				if it.Prev() {
					require.Equal(t, want[i-1], string(it.Key()), "%s: prev after seek %q", what, sk)
					require.True(t, it.Next())
					require.Equal(t, want[i], string(it.Key()), "%s: next after prev", what)
				} else {
					require.Zero(t, i)
				}
				j, _ := slices.BinarySearch(want, string(sk))
				if it.SeekLT(sk) {
					require.Equal(t, want[j-1], string(it.Key()), "%s: seekLT %q", what, sk)
				} else {
					require.Zero(t, j, "%s: seekLT %q", what, sk)
				}
			}
		}
		n := 0
		for step := range 500 {
			switch r := rng.IntN(100); {
			case r < 50:
				b := s.NewBatch()
				next := m.clone()
				for range 1 + rng.IntN(60) {
					k := key()
					n++
					v := fmt.Sprintf("v%d", n)
					require.NoError(t, b.Put([]byte(k), []byte(v)))
					next[k] = v
				}
				require.NoError(t, s.Apply(b))
				m = next
			case r < 60:
				k := key()
				require.NoError(t, s.Delete([]byte(k)))
				delete(m, k)
			case r < 75:
				a, z := key(), key()
				if a > z {
					a, z = z, a
				}
				require.NoError(t, s.DeleteRange([]byte(a), []byte(z)))
				m.deleteRange(a, z)
			case r < 83:
				require.NoError(t, s.Seal())
			case r < 85:
				require.NoError(t, s.Compact(t.Context()))
			case r < 86:
				for _, sp := range snaps {
					sp.sn.Close()
				}
				snaps = nil
				require.NoError(t, s.Close())
				s = mustOpen(t, dir, o)
			case r < 92:
				sn, err := s.NewSnapshot()
				require.NoError(t, err)
				snaps = append(snaps, snap{sn, m.clone()})
			default:
				check(fmt.Sprintf("seed %d step %d store", seed, step), s.Get, s.NewIterator, m)
				for i, sp := range snaps {
					check(fmt.Sprintf("seed %d step %d snapshot %d", seed, step, i), sp.sn.Get, sp.sn.NewIterator, sp.m)
				}
			}
		}
		for _, sp := range snaps {
			sp.sn.Close()
		}
		require.NoError(t, s.Check())
		require.NoError(t, s.Close())
		_ = bytes.Compare
	}
}
