package index

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/segkv/segkv/segment"
)

// TestIndexBuilderMatchesReplay feeds random puts, deletes and range
// tombstones and requires Finish to keep exactly the keys whose newest
// record no later range tombstone covers: the rule a brute-force replay in
// file order applies.
func TestIndexBuilderMatchesReplay(t *testing.T) {
	keys := []string{"", "a", "a\x00", "ab", "b", "ba", "c", "d"}
	rapid.Check(t, func(rt *rapid.T) {
		key := rapid.SampledFrom(keys)
		b := NewBuilder()
		type rec struct {
			kind segment.RecordKind
			off  int64
		}
		model := map[string]rec{}
		var off int64 = 16
		for i, n := 0, rapid.IntRange(0, 40).Draw(rt, "n"); i < n; i++ {
			switch rapid.IntRange(0, 3).Draw(rt, "op") {
			case 0:
				start, end := key.Draw(rt, "start"), key.Draw(rt, "end")
				if start >= end {
					continue
				}
				b.Add(segment.Record{Kind: segment.KindRangeDelete, Key: []byte(start), Value: []byte(end)}, off, 10)
				for k := range model {
					if start <= k && k < end {
						delete(model, k)
					}
				}
			case 1:
				k := key.Draw(rt, "key")
				b.Add(segment.Record{Kind: segment.KindDelete, Key: []byte(k)}, off, 10)
				model[k] = rec{segment.KindDelete, off}
			default:
				k := key.Draw(rt, "key")
				b.Add(segment.Record{Kind: segment.KindPut, Key: []byte(k), Value: []byte("v")}, off, 10)
				model[k] = rec{segment.KindPut, off}
			}
			off += 10
		}
		entries, _ := b.Finish()
		require.Len(rt, entries, len(model))
		for i, e := range entries {
			m, ok := model[string(e.Key)]
			require.True(rt, ok, "key %q survives", e.Key)
			require.Equal(rt, m.off, e.Offset)
			require.Equal(rt, m.kind, e.Kind)
			if i > 0 {
				require.Negative(rt, bytes.Compare(entries[i-1].Key, e.Key))
			}
		}
	})
}

// BenchmarkIndexBuilderTrimmedLog: Finish on a log of 400k keys whose head
// was trimmed 4000 times, each range tombstone overlapping all earlier ones.
//
//	go test -run x -bench IndexBuilderTrimmedLog ./index/
func BenchmarkIndexBuilderTrimmedLog(b *testing.B) {
	const keys, every = 400_000, 100
	for range b.N {
		b.StopTimer()
		ib := NewBuilder()
		off := int64(segment.HeaderSize)
		for i := range keys {
			ib.Add(segment.Record{Kind: segment.KindPut, Key: fmt.Appendf(nil, "log-%08d", i), Value: []byte("v")}, off, 20)
			off += 20
			if i%every == every-1 {
				ib.Add(segment.Record{Kind: segment.KindRangeDelete, Key: []byte{}, Value: fmt.Appendf(nil, "log-%08d", i-every/2)}, off, 20)
				off += 20
			}
		}
		b.StartTimer()
		entries, _ := ib.Finish()
		if len(entries) != every/2+1 {
			b.Fatalf("%d entries survive", len(entries))
		}
	}
}
