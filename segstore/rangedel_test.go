package segstore

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/vfs"
)

func rkey(i int) []byte { return fmt.Appendf(nil, "k%06d", i) }

// requireKeys requires that exactly the keys [lo, hi) of rkey that want
// says are present read back, through Get and a full iteration.
func requireKeys(t *testing.T, s *Store, n int, want func(i int) bool) {
	t.Helper()
	var wantKeys []string
	for i := range n {
		v, err := s.Get(rkey(i))
		if want(i) {
			require.NoError(t, err, "key %d", i)
			require.Equal(t, rkey(i), v)
			wantKeys = append(wantKeys, string(rkey(i)))
		} else {
			require.ErrorIs(t, err, ErrNotFound, "key %d", i)
		}
	}
	it, err := s.NewIterator(nil)
	require.NoError(t, err)
	defer it.Close()
	var got []string
	for ok := it.First(); ok; ok = it.Next() {
		got = append(got, string(it.Key()))
	}
	require.NoError(t, it.Err())
	require.Equal(t, wantKeys, got)
}

// TestDeleteRangeAcrossSealsMergesAndReopen deletes a range whose keys lie
// in sealed segments, the live file and a later put, and requires the same
// answers after each of seal, compaction and reopen.
func TestDeleteRangeAcrossSealsMergesAndReopen(t *testing.T) {
	fs := vfs.NewMem()
	o := &Options{FS: fs, Merge: MergeOptions{Disable: true}}
	s := mustOpen(t, "/db", o)
	const n = 300
	for i := range n {
		require.NoError(t, s.Put(rkey(i), rkey(i)))
		if i%100 == 99 {
			require.NoError(t, s.Seal())
		}
	}
	require.NoError(t, s.DeleteRange(rkey(50), rkey(250)))
	require.NoError(t, s.Put(rkey(120), rkey(120))) // after the range: visible
	want := func(i int) bool { return i < 50 || i >= 250 || i == 120 }
	requireKeys(t, s, n, want)
	require.NoError(t, s.Check())
	require.NoError(t, s.Seal())
	requireKeys(t, s, n, want)
	require.NoError(t, s.Compact(context.Background()))
	requireKeys(t, s, n, want)
	require.NoError(t, s.Check())
	require.NoError(t, s.Close())
	s = mustOpen(t, "/db", o)
	requireKeys(t, s, n, want)
	checkAndClose(t, s)
}

// TestDeleteRangeInOneBatch: a range deletion deletes the batch's earlier
// puts and not its later ones.
func TestDeleteRangeInOneBatch(t *testing.T) {
	s := mustOpen(t, "/db", &Options{FS: vfs.NewMem()})
	defer checkAndClose(t, s)
	b := s.NewBatch()
	require.NoError(t, b.Put(rkey(1), rkey(1)))
	require.NoError(t, b.Put(rkey(2), rkey(2)))
	require.NoError(t, b.DeleteRange(rkey(0), rkey(3)))
	require.NoError(t, b.Put(rkey(2), rkey(2)))
	require.NoError(t, s.Apply(b))
	requireKeys(t, s, 4, func(i int) bool { return i == 2 })
	require.NoError(t, s.Seal())
	requireKeys(t, s, 4, func(i int) bool { return i == 2 })
}

// TestDeleteRangeDropsCoveredSegments is head truncation: the seal that
// makes a range tombstone durable drops, in its own commit, the older
// segments whose keys all lie under it, and only those.
func TestDeleteRangeDropsCoveredSegments(t *testing.T) {
	s := mustOpen(t, "/db", &Options{FS: vfs.NewMem(), Merge: MergeOptions{Disable: true}})
	const n = 1000
	for i := range n {
		require.NoError(t, s.Put(rkey(i), rkey(i)))
		if i%100 == 99 {
			require.NoError(t, s.Seal())
		}
	}
	require.Equal(t, 10, s.Metrics().Segments)
	// Covers segments 0-5 whole and half of segment 6.
	// Under SyncAlways the tombstone is durable when DeleteRange returns,
	// and a seal then commits the segment holding it and drops the covered
	// segments, together (rangedrop.go); a later seal has nothing to seal.
	require.NoError(t, s.DeleteRange(nil, rkey(650)))
	require.Equal(t, 10-6+1, s.Metrics().Segments, "dropped when the tombstone was durable")
	require.NoError(t, s.Seal())
	m := s.Metrics()
	require.Equal(t, int64(6), m.RangeDropped)
	require.Equal(t, 10-6+1, m.Segments)
	requireKeys(t, s, n, func(i int) bool { return i >= 650 })
	checkAndClose(t, s)
}

// TestDeleteRangeSnapshotIsolation: a snapshot taken before a range
// deletion keeps seeing the keys, through Get and iterators, across a seal
// that drops their segments.
func TestDeleteRangeSnapshotIsolation(t *testing.T) {
	s := mustOpen(t, "/db", &Options{FS: vfs.NewMem(), Merge: MergeOptions{Disable: true}})
	defer checkAndClose(t, s)
	for i := range 200 {
		require.NoError(t, s.Put(rkey(i), rkey(i)))
		if i == 99 {
			require.NoError(t, s.Seal())
		}
	}
	sn, err := s.NewSnapshot()
	require.NoError(t, err)
	defer sn.Close()
	require.NoError(t, s.DeleteRange(rkey(0), rkey(150)))
	require.NoError(t, s.Seal())
	require.Equal(t, int64(1), s.Metrics().RangeDropped)
	for i := range 200 {
		v, err := sn.Get(rkey(i))
		require.NoError(t, err)
		require.Equal(t, rkey(i), v)
	}
	it, err := sn.NewIterator(nil)
	require.NoError(t, err)
	defer it.Close()
	count := 0
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.Value()
		require.NoError(t, err)
		require.Equal(t, it.Key(), v)
		count++
	}
	require.Equal(t, 200, count)
	requireKeys(t, s, 200, func(i int) bool { return i >= 150 })
}

func TestDeleteRangeBadInput(t *testing.T) {
	s := mustOpen(t, "/db", &Options{FS: vfs.NewMem(), MaxKeySize: 16})
	defer checkAndClose(t, s)
	require.NoError(t, s.Put(rkey(1), rkey(1)))
	err := s.DeleteRange(rkey(2), rkey(1))
	require.ErrorIs(t, err, ErrInvalidRange)
	require.ErrorIs(t, s.DeleteRange(make([]byte, 17), nil), ErrKeyTooLarge)
	require.ErrorIs(t, s.DeleteRange(nil, make([]byte, 17)), ErrKeyTooLarge)
	require.NoError(t, s.DeleteRange(rkey(1), rkey(1)), "an empty range is a no-op")
	b := s.NewBatch()
	require.NoError(t, b.Put(rkey(3), rkey(3)))
	require.ErrorIs(t, b.DeleteRange(rkey(2), rkey(1)), ErrInvalidRange)
	require.True(t, errors.Is(s.Apply(b), ErrInvalidRange), "the batch reports its error and writes nothing")
	requireKeys(t, s, 4, func(i int) bool { return i == 1 })
}
