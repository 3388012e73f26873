package segstore

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/segkv/segkv/vfs"
)

// TestIteratorMatchesModel builds a store whose keys are spread over sealed
// segments, the live file and deletions that shadow older versions, then
// moves an iterator at random (First, Last, Seek, SeekLT, Next, Prev, with
// random bounds or a prefix) and compares every position with a sorted
// model of the visible keys.
func TestIteratorMatchesModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		s := mustOpen(t, "/db", &Options{FS: vfs.NewMem(), Merge: MergeOptions{Disable: true}})
		defer checkAndClose(t, s)

		keyGen := rapid.SampledFrom([]string{"", "a", "a\x00", "ab", "abc", "b", "ba", "bb", "c", "c\xff", "d", "da", "e"})
		state := map[string]string{}
		for i, n := 0, rapid.IntRange(0, 40).Draw(rt, "ops"); i < n; i++ {
			k := keyGen.Draw(rt, "key")
			if k == "" {
				continue // empty keys are not valid
			}
			switch rapid.IntRange(0, 9).Draw(rt, "op") {
			case 0:
				require.NoError(rt, s.Seal())
			case 1, 2:
				require.NoError(rt, s.Delete([]byte(k)))
				delete(state, k)
			default:
				v := k + "-" + rapid.StringMatching(`[a-z]{0,3}`).Draw(rt, "value")
				require.NoError(rt, s.Put([]byte(k), []byte(v)))
				state[k] = v
			}
		}

		var opts IterOptions
		switch rapid.IntRange(0, 2).Draw(rt, "bounds") {
		case 1:
			if rapid.Bool().Draw(rt, "has lower") {
				opts.LowerBound = []byte(keyGen.Draw(rt, "lower"))
			}
			if rapid.Bool().Draw(rt, "has upper") {
				opts.UpperBound = []byte(keyGen.Draw(rt, "upper"))
			}
		case 2:
			opts.Prefix = []byte(rapid.SampledFrom([]string{"a", "b", "c\xff", "z"}).Draw(rt, "prefix"))
		}
		var want []string // the visible keys, ascending
		for k := range state {
			if opts.LowerBound != nil && k < string(opts.LowerBound) ||
				opts.UpperBound != nil && k >= string(opts.UpperBound) ||
				!strings.HasPrefix(k, string(opts.Prefix)) {
				continue
			}
			want = append(want, k)
		}
		slices.Sort(want)

		it, err := s.NewIterator(&opts)
		require.NoError(rt, err)
		defer it.Close()
		pos := -1 // index into want, or -1 when the iterator is not valid
		for i, n := 0, rapid.IntRange(1, 30).Draw(rt, "moves"); i < n; i++ {
			var ok bool
			switch move := rapid.IntRange(0, 5).Draw(rt, "move"); move {
			case 0:
				ok = it.First()
				pos = 0
			case 1:
				ok = it.Last()
				pos = len(want) - 1
			case 2:
				target := keyGen.Draw(rt, "seek")
				ok = it.Seek([]byte(target))
				pos, _ = slices.BinarySearch(want, target)
			case 3:
				target := keyGen.Draw(rt, "seeklt")
				ok = it.SeekLT([]byte(target))
				pos, _ = slices.BinarySearch(want, target)
				pos--
			case 4:
				wasValid := pos >= 0 && pos < len(want)
				ok = it.Next()
				if wasValid {
					pos++
				}
			case 5:
				wasValid := pos >= 0 && pos < len(want)
				ok = it.Prev()
				if wasValid {
					pos--
				}
			}
			if pos < 0 || pos >= len(want) {
				pos = -1
			}
			require.Equal(rt, pos >= 0, ok, "move %d: valid", i)
			require.Equal(rt, ok, it.Valid())
			if !ok {
				continue
			}
			require.Equal(rt, want[pos], string(it.Key()), "move %d", i)
			v, err := it.Value()
			require.NoError(rt, err)
			require.Equal(rt, state[want[pos]], string(v))
		}
		require.NoError(rt, it.Err())
	})
}

// TestIteratorReverseScan walks a store backward from Last and requires
// the exact reverse of the forward scan.
func TestIteratorReverseScan(t *testing.T) {
	s := mustOpen(t, "/db", &Options{FS: vfs.NewMem(), SegmentSize: 16 << 10})
	defer checkAndClose(t, s)
	for i := range 3000 {
		k := []byte{byte('a' + i%7), byte(i / 256), byte(i)}
		require.NoError(t, s.Put(k, bytes.Repeat(k, 10)))
		if i%5 == 0 {
			require.NoError(t, s.Delete([]byte{byte('a' + (i+3)%7), byte(i / 300), byte(i)}))
		}
	}
	it, err := s.NewIterator(nil)
	require.NoError(t, err)
	defer it.Close()
	var fwd, back []string
	for ok := it.First(); ok; ok = it.Next() {
		fwd = append(fwd, string(it.Key()))
	}
	for ok := it.Last(); ok; ok = it.Prev() {
		back = append(back, string(it.Key()))
	}
	require.NoError(t, it.Err())
	require.Greater(t, len(fwd), 2000)
	slices.Reverse(back)
	require.Equal(t, fwd, back)
}

// TestIteratorSources: an iterator over many segments (more than the
// heap's room in the iterator), an empty live file, and a live file that
// holds only a range tombstone, forward and backward, from the store and
// from a snapshot taken before the tombstone; a source with no keys and no
// range tombstones is left out, one with range tombstones is not.
func TestIteratorSources(t *testing.T) {
	s := mustOpen(t, "/db", &Options{FS: vfs.NewMem(), Merge: MergeOptions{Disable: true}})
	defer checkAndClose(t, s)
	m := model{}
	for seg := range 12 {
		for i := range 20 {
			k := fmt.Sprintf("k%03d", (i*37+seg*11)%200)
			v := fmt.Sprintf("v%d", seg)
			require.NoError(t, s.Put([]byte(k), []byte(v)))
			m[k] = v
		}
		require.NoError(t, s.Seal())
	}
	check := func(name string, it *Iterator, m model) {
		t.Helper()
		want := slices.Sorted(maps.Keys(m))
		var fwd, back []string
		for ok := it.First(); ok; ok = it.Next() {
			v, err := it.Value()
			require.NoError(t, err)
			require.Equal(t, m[string(it.Key())], string(v), "%s: %q", name, it.Key())
			fwd = append(fwd, string(it.Key()))
		}
		for ok := it.Last(); ok; ok = it.Prev() {
			back = append(back, string(it.Key()))
		}
		require.NoError(t, it.Err())
		slices.Reverse(back)
		require.Equal(t, want, fwd, name)
		require.Equal(t, want, back, name)
		require.NoError(t, it.Close())
	}
	it, err := s.NewIterator(nil)
	require.NoError(t, err)
	require.Len(t, it.m.srcs, 12, "the empty live file is left out")
	check("sealed", it, m)

	sn, err := s.NewSnapshot()
	require.NoError(t, err)
	defer sn.Close()
	before := m.clone()
	require.NoError(t, s.DeleteRange([]byte("k050"), []byte("k150")))
	m.deleteRange("k050", "k150")
	it, err = s.NewIterator(nil)
	require.NoError(t, err)
	require.Len(t, it.m.srcs, 13, "a live file with only a range tombstone is a source")
	check("range tombstone alone in the live file", it, m)
	it, err = sn.NewIterator(nil)
	require.NoError(t, err)
	check("snapshot before it", it, before)
}

// TestIteratorAfterClose: every method of a closed iterator answers as
// closed (its state went back to a pool and may serve another iterator),
// and the key it returned last stays what it was while other iterators
// reuse that state.
func TestIteratorAfterClose(t *testing.T) {
	s := mustOpen(t, "/db", &Options{FS: vfs.NewMem(), Merge: MergeOptions{Disable: true}})
	defer checkAndClose(t, s)
	for i := range 50 {
		require.NoError(t, s.Put(fmt.Appendf(nil, "k%02d", i), []byte("v")))
		if i == 20 {
			require.NoError(t, s.Seal())
		}
	}
	sn, err := s.NewSnapshot()
	require.NoError(t, err)
	defer sn.Close()
	for _, fromSnapshot := range []bool{false, true} {
		var it *Iterator
		if fromSnapshot {
			it, err = sn.NewIterator(nil)
		} else {
			it, err = s.NewIterator(nil)
		}
		require.NoError(t, err)
		require.True(t, it.Seek([]byte("k30")))
		key := it.Key()
		require.Equal(t, "k30", string(key))
		require.NoError(t, it.Close())

		for range 20 { // the closed iterator's state serves these
			other, err := s.NewIterator(nil)
			require.NoError(t, err)
			for ok := other.Last(); ok; ok = other.Prev() {
				_, err := other.AppendValue(nil)
				require.NoError(t, err)
			}
			require.NoError(t, other.Close())
		}
		require.Equal(t, "k30", string(key), "a key held across Close")
		require.Equal(t, "k30", string(it.Key()))

		require.False(t, it.Valid())
		require.False(t, it.First())
		require.False(t, it.Last())
		require.False(t, it.Seek([]byte("k10")))
		require.False(t, it.SeekLT([]byte("k10")))
		require.False(t, it.Next())
		require.False(t, it.Prev())
		_, err = it.Value()
		require.ErrorIs(t, err, ErrClosed)
		v, err := it.AppendValue([]byte("x"))
		require.ErrorIs(t, err, ErrClosed)
		require.Equal(t, "x", string(v))
		require.ErrorIs(t, it.Err(), ErrClosed)
		require.ErrorIs(t, it.Close(), ErrClosed)
	}
	require.Equal(t, int64(1), s.Metrics().OpenSnapshots, "only the snapshot")
}
