package index

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/segkv/segkv/internal/testutil"
	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/vfs"
	"github.com/segkv/segkv/wal"
)

// blockFileEntries returns n sorted keys laid out in blocks of per keys,
// each key's entry naming its block's frame, as a block file's dense
// entries do.
func blockFileEntries(n, per int) []Entry {
	entries := make([]Entry, n)
	for i := range entries {
		b := int64(i / per)
		entries[i] = Entry{
			Key:    fmt.Appendf(nil, "user:%08d", i),
			Kind:   KindPut,
			Offset: 16 + b*1000,
			Length: 900,
		}
		if i%5 == 4 {
			entries[i].Kind = KindDelete
		}
	}
	return entries
}

// blocksOf is what a block file's index must hold for entries: one entry
// per block, its last key and its frame.
func blocksOf(entries []Entry) []Entry {
	var out []Entry
	for i, e := range entries {
		if i+1 < len(entries) && entries[i+1].Offset == e.Offset {
			continue
		}
		out = append(out, Entry{Key: e.Key, Kind: KindPut, Offset: e.Offset, Length: e.Length})
	}
	return out
}

// A block file's index holds an entry per block, and its bloom filter and
// lookups cover every key: Lookup of any key names the block holding it,
// Lookup of an absent key inside the key range names the block that would,
// and keys after the last one are not found.
func TestBlockFileIndex(t *testing.T) {
	for _, c := range []struct{ n, per int }{{0, 1}, {1, 1}, {7, 7}, {300, 7}, {1000, 1}, {5000, 40}} {
		t.Run(fmt.Sprintf("n=%d,per=%d", c.n, c.per), func(t *testing.T) {
			entries := blockFileEntries(c.n, c.per)
			data, sum, err := EncodeBlockFile(entries, testRanges(), testID)
			require.NoError(t, err)
			ix := mustDecode(t, "b.idx", data, sum, testID)
			require.True(t, ix.BlockFile())
			require.True(t, ix.InKeyOrder())
			blocks := blocksOf(entries)
			checkIndex(t, ix, blocks)
			require.NoError(t, ix.Verify())
			exercise(t, ix)
			for _, e := range entries {
				got, found, filtered, err := ix.Lookup(probeOf(e.Key))
				require.NoError(t, err)
				require.True(t, found && !filtered, "key %q", e.Key)
				require.Equal(t, e.Offset, got.Offset, "key %q", e.Key)
				require.Equal(t, e.Length, got.Length, "key %q", e.Key)
				// An absent key just after it, inside the range: the
				// block that would hold it, when the bloom lets it by.
				absent := append(bytes.Clone(e.Key), 0)
				got, found, _, err = ix.Lookup(probeOf(absent))
				require.NoError(t, err)
				if found {
					require.GreaterOrEqual(t, bytes.Compare(got.Key, absent), 0)
					pos, err := ix.Search(absent)
					require.NoError(t, err)
					want, err := ix.At(pos)
					require.NoError(t, err)
					require.Equal(t, want, got)
				}
			}
			if c.n > 0 {
				_, found, _, err := ix.Lookup(probeOf([]byte("user:99999999")))
				require.NoError(t, err)
				require.False(t, found)
			}
			// The streaming writer (a merge output's index) writes the same
			// bytes.
			var buf bytes.Buffer
			p := WriterParams{Count: len(entries), ID: testID, Ranges: testRanges(), BlockFile: true}
			if c.n > 0 {
				p.FirstKey, p.LastKey = entries[0].Key, entries[len(entries)-1].Key
			}
			w, err := NewWriter(&buf, p)
			require.NoError(t, err)
			for _, e := range entries {
				require.NoError(t, w.Add(e))
			}
			wsum, _, err := w.Finish()
			require.NoError(t, err)
			require.Equal(t, sum, wsum)
			require.Equal(t, data, buf.Bytes())
		})
	}
}

// The bloom filter of a block file's index holds every key, not only the
// blocks' last keys: a missing key is almost always ruled out without a
// block, and a present one never is.
func TestBlockFileIndexBloom(t *testing.T) {
	entries := blockFileEntries(20000, 50)
	data, sum, err := EncodeBlockFile(entries, nil, testID)
	require.NoError(t, err)
	ix := mustDecode(t, "b.idx", data, sum, testID)
	require.Equal(t, 400, ix.Len())
	for _, e := range entries {
		may, err := ix.MayContain(probeOf(e.Key))
		require.NoError(t, err)
		require.True(t, may, "key %q", e.Key)
	}
	passed := 0
	for i := range 20000 {
		may, err := ix.MayContain(probeOf(fmt.Appendf(nil, "user:%08d-absent", i)))
		require.NoError(t, err)
		if may {
			passed++
		}
	}
	require.Less(t, passed, 20000/25, "false positives %d of 20000 (the target is 1%%)", passed)
	// An index of 400 blocks is far smaller than one of 20000 keys.
	dense, _, err := EncodeWithRanges(entries, nil, testID)
	require.NoError(t, err)
	require.Less(t, len(data), len(dense)/3)
}

// What a block file's index refuses: keys of one block that name different
// frame lengths, a block before the previous one, an empty block.
func TestBlockFileIndexRefuses(t *testing.T) {
	base := blockFileEntries(20, 5)
	for name, mutate := range map[string]func([]Entry){
		"length differs within a block": func(es []Entry) { es[6].Length++ },
		"block before the previous":     func(es []Entry) { es[10].Offset = es[4].Offset - 1 },
		"empty block":                   func(es []Entry) { es[19].Length = 0 },
		"overlapping blocks": func(es []Entry) {
			for i := 5; i < 10; i++ {
				es[i].Offset = es[0].Offset + 1
			}
		},
	} {
		es := make([]Entry, len(base))
		copy(es, base)
		mutate(es)
		_, _, err := EncodeBlockFile(es, nil, testID)
		require.ErrorIs(t, err, ErrInvalidEntries, name)
	}
	// A dense index accepts keys of one block sharing a frame; a block
	// file's index of the same file is a different file.
	dense, _, err := EncodeWithRanges(base, nil, testID)
	require.NoError(t, err)
	sparse, sparseSum, err := EncodeBlockFile(base, nil, testID)
	require.NoError(t, err)
	require.NotEqual(t, dense, sparse)
	// A block file's index that claims a legacy checksum is refused.
	_, _, err = encode(base, nil, testID, 42, true)
	require.ErrorIs(t, err, ErrInvalidEntries)
	bad := bytes.Clone(sparse)
	topOff, _, _ := topBounds(bad)
	bad[topOff+topLegacy] = 1
	sum, _ := resealTop(bad)
	_, err = Decode("b.idx", bad, sum, testID)
	testutil.RequireCorrupt(t, err)
	ix := mustDecode(t, "b.idx", sparse, sparseSum, testID)
	require.True(t, ix.BlockFile())
}

// Property: for any keys in any blocks, every key's lookup names its
// block, and the index rebuilt through WriteOrdered's writer is the same.
func TestBlockFileIndexProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		keys := rapid.SliceOfNDistinct(rapid.SliceOfN(rapid.ByteRange(0, 255), 0, 12), 1, 200, func(k []byte) string { return string(k) }).Draw(rt, "keys")
		slices.SortFunc(keys, bytes.Compare)
		var entries []Entry
		off := int64(16)
		for i := 0; i < len(keys); {
			per := rapid.IntRange(1, 9).Draw(rt, "per")
			length := uint32(rapid.IntRange(1, 500).Draw(rt, "len"))
			for j := i; j < min(len(keys), i+per); j++ {
				entries = append(entries, Entry{Key: keys[j], Kind: KindPut, Offset: off, Length: length})
			}
			off += int64(length) + int64(rapid.IntRange(0, 3).Draw(rt, "gap"))
			i += per
		}
		id := Identity{DataLength: off, DataDigest: 7}
		data, sum, err := EncodeBlockFile(entries, nil, id)
		if err != nil {
			rt.Fatalf("encode: %v", err)
		}
		ix, err := Decode("p.idx", data, sum, id)
		if err != nil {
			rt.Fatalf("decode: %v", err)
		}
		if err := ix.Verify(); err != nil {
			rt.Fatalf("verify: %v", err)
		}
		for _, e := range entries {
			got, found, _, err := ix.Lookup(probeOf(e.Key))
			if err != nil || !found || got.Offset != e.Offset || got.Length != e.Length {
				rt.Fatalf("lookup %q: %+v %v %v, want block at %d", e.Key, got, found, err, e.Offset)
			}
		}
	})
}

// WriteOrdered and Build take a block file's layout from its header: a
// real block data file indexes to the same bytes either way, one entry per
// block, and its dense entries encode to them through EncodeBlockFile.
func TestWriteOrderedBlockFile(t *testing.T) {
	fs := vfs.NewMem()
	file := segment.HeaderVersioned(segment.BlockVersion)
	var keys int
	var first, last []byte
	for b := range 12 {
		var recs []byte
		for j := range 9 {
			k := fmt.Appendf(nil, "k%04d", b*9+j)
			if j == 3 {
				recs = segment.AppendRecord(recs, segment.KindDelete, k, nil)
			} else {
				recs = segment.AppendRecord(recs, segment.KindPut, k, bytes.Repeat([]byte{'v'}, 50))
			}
			if first == nil {
				first = k
			}
			last, keys = k, keys+1
		}
		file = wal.AppendFrame(file, segment.AppendBlock(nil, recs, segment.CodecS2), 0)
	}
	f, err := fs.Create("d.seg")
	require.NoError(t, err)
	_, err = f.WriteAt(file, 0)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	f, err = fs.Open("d.seg")
	require.NoError(t, err)
	digest, err := segment.Digest(f, int64(len(file)))
	require.NoError(t, err)
	require.NoError(t, f.Close())
	id := Identity{DataLength: int64(len(file)), DataDigest: digest}

	sum, err := WriteOrdered(context.Background(), fs, "d.seg", "d.idx", WriterParams{Count: keys, FirstKey: first, LastKey: last, ID: id})
	require.NoError(t, err)
	ix, err := Load(fs, "d.idx", sum, id, LoadOptions{})
	require.NoError(t, err)
	defer ix.Close()
	require.True(t, ix.BlockFile())
	require.Equal(t, 12, ix.Len())
	built, err := Build(fs, "d.seg", int64(len(file)))
	require.NoError(t, err)
	require.Equal(t, sum, built.Checksum)
	require.Equal(t, uint64(keys), built.Keys)
	for i := range keys {
		k := fmt.Appendf(nil, "k%04d", i)
		e, found, _, err := ix.Lookup(probeOf(k))
		require.NoError(t, err)
		require.True(t, found, "%s", k)
		want, err := ix.At(i / 9)
		require.NoError(t, err)
		require.Equal(t, want, e, "%s", k)
	}
}
