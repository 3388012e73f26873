package segstore

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/index"
	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/vfs"
)

// TestBreakDisjointRangeDeletesQuadratic: every DeleteRange published
// into the live file rebuilds the file's whole range set (rangedel.Set.With
// clones every span and Union re-clones every span's key bytes), under
// tail.mu held exclusively, so that Gets of the live file wait for it. With
// k disjoint ranges already in the live file, one more costs O(k)
// allocations: deleting per-tenant ranges (user/123/ .. user/124/) one
// after the other is quadratic. Measured: 2000 such calls 0.4 s, then 4000
// more 2.8 s, then 8000 more 16 s.
func TestBreakDisjointRangeDeletesQuadratic(t *testing.T) {
	s := mustOpen(t, "/db", &Options{FS: vfs.NewMem(), Sync: SyncManual, SegmentSize: 1 << 30, Merge: MergeOptions{Disable: true}})
	defer s.Close()
	const existing = 2000
	for i := range existing {
		k := fmt.Sprintf("tenant/%06d/", i)
		require.NoError(t, s.DeleteRange([]byte(k), []byte(k+"\xff")))
	}
	i := existing
	allocs := testing.AllocsPerRun(20, func() {
		k := fmt.Sprintf("tenant/%06d/", i)
		i++
		if err := s.DeleteRange([]byte(k), []byte(k+"\xff")); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("allocations per DeleteRange with %d disjoint ranges in the live file: %.0f", existing, allocs)
	require.Less(t, allocs, 200.0, "one DeleteRange should not cost O(ranges already in the live file)")
}

// TestBreakIndexBuilderRescansDeadKeys: a log truncated at its head now and
// then (DeleteRange("", cursor)) gives an index rebuild many overlapping
// range tombstones. Finish once walked every entry under every tombstone,
// O(tombstones x keys) (6.7 s for 400k keys and 4000 truncations); it now
// sweeps once. This checks the answer on such a file.
func TestBreakIndexBuilderRescansDeadKeys(t *testing.T) {
	const keys, every = 150_000, 100
	b := index.NewBuilder()
	off := int64(segment.HeaderSize)
	for i := range keys {
		k := []byte(fmt.Sprintf("log-%08d", i))
		b.Add(segment.Record{Kind: segment.KindPut, Key: k, Value: []byte("v")}, off, 20)
		off += 20
		if i%every == every-1 {
			end := []byte(fmt.Sprintf("log-%08d", i-every/2))
			b.Add(segment.Record{Kind: segment.KindRangeDelete, Key: []byte{}, Value: end}, off, 20)
			off += 20
		}
	}
	// The cost is a benchmark's business (BenchmarkIndexBuilderTrimmedLog
	// in recovery), never a timed assertion: this checks the answer.
	start := time.Now()
	entries, ranges := b.Finish()
	t.Logf("Finish: %d entries, %d spans, %v", len(entries), ranges.Len(), time.Since(start))
	require.Equal(t, 1, ranges.Len())
	// The last trim ends every/2 keys before the last one written before
	// it; the keys after that end survive.
	last := (keys/every)*every - 1
	wantLive := keys - (last - every/2)
	require.Len(t, entries, wantLive)
	require.Equal(t, fmt.Sprintf("log-%08d", last-every/2), string(entries[0].Key))
}
