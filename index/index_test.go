package index

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/segkv/segkv/corruption"
	"github.com/segkv/segkv/internal/testutil"
	"github.com/segkv/segkv/segment"
)

// testID is the identity used where the test does not care which one.
var testID = Identity{DataLength: 1 << 30, DataDigest: 0xfeedface}

// smallEntries is a fixed small index: an empty key, a tombstone, shared
// prefixes and a binary key.
func smallEntries() []Entry {
	return []Entry{
		{Key: []byte{}, Kind: KindPut, Offset: 16, Length: 20},
		{Key: []byte("a"), Kind: KindPut, Offset: 36, Length: 21},
		{Key: []byte("ab"), Kind: KindDelete, Offset: 57, Length: 12},
		{Key: []byte("abc"), Kind: KindPut, Offset: 69, Length: 100},
		{Key: []byte("b\x00\xff"), Kind: KindPut, Offset: 169, Length: 7},
		{Key: []byte("zzzz"), Kind: KindDelete, Offset: 176, Length: 9},
	}
}

// genSequential returns n sorted 32-byte keys with plausible locations.
func genSequential(n int) []Entry {
	entries := make([]Entry, n)
	for i := range entries {
		entries[i] = Entry{
			Key:    fmt.Appendf(nil, "user:%027d", i),
			Kind:   KindPut,
			Offset: 16 + int64(i)*150,
			Length: 150,
		}
		if i%10 == 9 {
			entries[i].Kind = KindDelete
		}
	}
	return entries
}

func mustEncode(t testing.TB, entries []Entry, id Identity) ([]byte, uint64) {
	t.Helper()
	data, sum, err := Encode(entries, id)
	require.NoError(t, err)
	return data, sum
}

func mustDecode(t testing.TB, path string, data []byte, sum uint64, id Identity) *Index {
	t.Helper()
	ix, err := Decode(path, data, sum, id)
	require.NoError(t, err)
	return ix
}

// tb is what both *testing.T and *rapid.T provide.
type tb = testutil.TB

func probeOf(key []byte) *Probe {
	p := NewProbe(key)
	return &p
}

func search(entries []Entry, key []byte) (int, bool) {
	return slices.BinarySearchFunc(entries, key, func(e Entry, k []byte) int { return bytes.Compare(e.Key, k) })
}

// checkIndex asserts that ix serves exactly entries, with no error.
func checkIndex(t tb, ix *Index, entries []Entry) {
	t.Helper()
	require.Equal(t, len(entries), ix.Len())
	for i, want := range entries {
		got, err := ix.At(i)
		require.NoError(t, err, "At(%d)", i)
		require.Equal(t, want.Kind, got.Kind, "entry %d", i)
		require.Equal(t, want.Offset, got.Offset, "entry %d", i)
		require.Equal(t, want.Length, got.Length, "entry %d", i)
		require.True(t, bytes.Equal(want.Key, got.Key), "entry %d: key %q, want %q", i, got.Key, want.Key)
		k, err := ix.Key(i)
		require.NoError(t, err)
		require.True(t, bytes.Equal(want.Key, k), "Key(%d)", i)
		ok, err := ix.MayContain(probeOf(want.Key))
		require.NoError(t, err)
		require.True(t, ok, "MayContain(%q)", want.Key)
		e, ok, err := ix.Get(probeOf(want.Key))
		require.NoError(t, err)
		require.True(t, ok, "Get(%q)", want.Key)
		require.Equal(t, got, e)
		s, err := ix.Search(want.Key)
		require.NoError(t, err)
		require.Equal(t, i, s, "Search(%q)", want.Key)
	}
}

// isCorrupt reports whether err is a *corruption.Error matching
// corruption.ErrCorrupt: the cheap form of requireCorrupt for hot loops.
func isCorrupt(err error) bool {
	var ce *corruption.Error
	return errors.As(err, &ce) && errors.Is(err, corruption.ErrCorrupt)
}

// fatalf fails the test now.
func fatalf(t tb, format string, args ...any) {
	t.Helper()
	t.Errorf(format, args...)
	t.FailNow()
}

// exercise calls every accessor of ix at every position and with probes
// derived from every key. It must not panic; every error must be a
// *corruption.Error; an answer given without error must be consistent
// with the index's own entries (Search of entry i's key is i, of its
// successor i+1), and when Verify passes nothing may fail and the bloom
// filter must hold every key. It checks without testify, for speed: the
// damage tests call it tens of thousands of times.
func exercise(t tb, ix *Index) {
	t.Helper()
	n := ix.Len()
	if n < 0 {
		fatalf(t, "Len %d", n)
	}
	_ = ix.Ranges().Spans()
	_, _, _, _ = ix.InKeyOrder(), ix.Checksum(), ix.Anchor(), ix.Identity()
	_ = ix.Healed()
	if ix.HeapBytes() < 0 {
		fatalf(t, "HeapBytes %d", ix.HeapBytes())
	}
	verr := ix.Verify()
	if verr != nil && !isCorrupt(verr) {
		fatalf(t, "Verify: %T %v", verr, verr)
	}
	verified := verr == nil
	// ok reports whether err is nil; a non-nil one must be corruption, and
	// impossible once Verify passed.
	ok := func(err error, what string, i int) bool {
		t.Helper()
		if err == nil {
			return true
		}
		if !isCorrupt(err) {
			fatalf(t, "%s %d: error is not a *corruption.Error: %T %v", what, i, err, err)
		}
		if verified {
			fatalf(t, "%s %d failed on a verified index: %v", what, i, err)
		}
		return false
	}
	dataLen := ix.Identity().DataLength
	var prev []byte
	for i := range n {
		e, err := ix.At(i)
		if !ok(err, "At", i) {
			prev = nil
			continue
		}
		if e.Kind != KindPut && e.Kind != KindDelete || e.Offset < 0 || e.Offset > dataLen-int64(e.Length) {
			fatalf(t, "entry %d: kind %d, record [%d, +%d) in a data file of %d", i, e.Kind, e.Offset, e.Length, dataLen)
		}
		if len(e.Key) != cap(e.Key) {
			fatalf(t, "entry %d: key has spare capacity", i)
		}
		if prev != nil && bytes.Compare(prev, e.Key) >= 0 {
			fatalf(t, "key %d is not after key %d", i, i-1)
		}
		prev = e.Key
		if k, err := ix.Key(i); ok(err, "Key", i) && !bytes.Equal(k, e.Key) {
			fatalf(t, "Key(%d) = %q, At gives %q", i, k, e.Key)
		}
		if s, err := ix.Search(e.Key); ok(err, "Search(key)", i) && s != i {
			fatalf(t, "Search(key %d) = %d", i, s)
		}
		if s, err := ix.Search(append(e.Key[:len(e.Key):len(e.Key)], 0)); ok(err, "Search(key+0)", i) && s != i+1 {
			fatalf(t, "Search(key %d + 0) = %d", i, s)
		}
		p := NewProbe(e.Key)
		if may, err := ix.MayContain(&p); ok(err, "MayContain", i) && verified && !may {
			fatalf(t, "MayContain(key %d) false on a verified index", i)
		}
		got, found, err := ix.Get(&p)
		if ok(err, "Get", i) {
			if found && !entryEqual(got, e) {
				fatalf(t, "Get(key %d) = %+v, At gives %+v", i, got, e)
			}
			if !found && verified {
				fatalf(t, "Get(key %d) missed on a verified index", i)
			}
		}
	}
	for j, k := range [][]byte{nil, {0}, []byte("zz"), bytes.Repeat([]byte{0xff}, 40)} {
		if s, err := ix.Search(k); ok(err, "Search(probe)", j) && (s < 0 || s > n) {
			fatalf(t, "Search(%q) = %d of %d", k, s, n)
		}
		e, found, err := ix.Get(probeOf(k))
		if ok(err, "Get(probe)", j) && found && !bytes.Equal(e.Key, k) && !ix.BlockFile() {
			fatalf(t, "Get(%q) found %q", k, e.Key)
		}
		if err == nil && found && ix.BlockFile() && bytes.Compare(e.Key, k) < 0 {
			fatalf(t, "Get(%q) in a block file's index names the block ending at %q", k, e.Key)
		}
	}
}

func TestRoundTripSmall(t *testing.T) {
	entries := smallEntries()
	data, sum := mustEncode(t, entries, testID)
	ix := mustDecode(t, "s.idx", data, sum, testID)
	checkIndex(t, ix, entries)
	require.Equal(t, sum, ix.Checksum())
	require.Equal(t, sum, ix.Anchor())
	require.Equal(t, testID, ix.Identity())
	require.True(t, ix.InKeyOrder())
	require.Zero(t, ix.Ranges().Len())
	require.False(t, ix.Healed())
	require.NoError(t, ix.Verify())
	require.NoError(t, ix.Close())

	for _, k := range []string{"\x00", "aa", "abd", "b", "zzzzz", "\xff"} {
		_, ok, err := ix.Get(probeOf([]byte(k)))
		require.NoError(t, err)
		require.False(t, ok, "Get(%q)", k)
	}
	for k, want := range map[string]int{"": 0, "\x00": 1, "abd": 4, "b": 4, "zzzz": 5, "\xff": 6} {
		got, err := ix.Search([]byte(k))
		require.NoError(t, err)
		require.Equal(t, want, got, "Search(%q)", k)
	}

	// A returned key has no spare capacity: appending to it must not
	// overwrite the next record.
	e, err := ix.At(1)
	require.NoError(t, err)
	_ = append(e.Key, 'X')
	checkIndex(t, ix, entries)

	// Out-of-range positions are a caller bug, like a slice index.
	require.Panics(t, func() { _, _ = ix.At(-1) })
	require.Panics(t, func() { _, _ = ix.At(len(entries)) })

	// A probe serves several indexes, whatever their hash counts.
	p := NewProbe([]byte("ab"))
	require.Equal(t, []byte("ab"), p.Key())
	for range 2 {
		e, ok, err := ix.Get(&p)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, entries[2].Offset, e.Offset)
	}
}

func TestEmptyIndex(t *testing.T) {
	id := Identity{}
	data, sum := mustEncode(t, nil, id)
	ix := mustDecode(t, "e.idx", data, sum, id)
	require.Equal(t, 0, ix.Len())
	may, err := ix.MayContain(probeOf(nil))
	require.NoError(t, err)
	require.False(t, may)
	for _, k := range [][]byte{nil, {}, []byte("x")} {
		_, ok, err := ix.Get(probeOf(k))
		require.NoError(t, err)
		require.False(t, ok)
		s, err := ix.Search(k)
		require.NoError(t, err)
		require.Equal(t, 0, s)
	}
	require.NoError(t, ix.Verify())
	require.Panics(t, func() { _, _ = ix.At(0) })

	data2, sum2 := mustEncode(t, []Entry{}, id)
	require.Equal(t, data, data2, "nil and empty entries encode alike")
	require.Equal(t, sum, sum2)
}

func TestLargeKeys(t *testing.T) {
	big := bytes.Repeat([]byte{0xab}, 64<<10)
	bigger := bytes.Repeat([]byte{0xcd}, 1<<20)
	entries := []Entry{
		{Key: []byte("small"), Kind: KindPut, Offset: 0, Length: 10},
		{Key: big, Kind: KindPut, Offset: 10, Length: 64<<10 + 20},
		{Key: bigger, Kind: KindDelete, Offset: 100 << 10, Length: 1<<20 + 20},
	}
	id := Identity{DataLength: 4 << 20, DataDigest: 1}
	data, sum := mustEncode(t, entries, id)
	ix := mustDecode(t, "l.idx", data, sum, id)
	checkIndex(t, ix, entries)
	require.NoError(t, ix.Verify())
}

func TestEncodeRejects(t *testing.T) {
	e := func(k string, kind segment.RecordKind, off int64, n uint32) Entry {
		return Entry{Key: []byte(k), Kind: kind, Offset: off, Length: n}
	}
	cases := map[string]struct {
		entries []Entry
		id      Identity
	}{
		"unsorted":       {[]Entry{e("b", KindPut, 0, 1), e("a", KindPut, 1, 1)}, testID},
		"duplicate":      {[]Entry{e("a", KindPut, 0, 1), e("a", KindDelete, 1, 1)}, testID},
		"empty dup":      {[]Entry{e("", KindPut, 0, 1), e("", KindPut, 1, 1)}, testID},
		"kind 0":         {[]Entry{e("a", 0, 0, 1)}, testID},
		"kind 3":         {[]Entry{e("a", 3, 0, 1)}, testID},
		"negative off":   {[]Entry{e("a", KindPut, -1, 1)}, testID},
		"past end":       {[]Entry{e("a", KindPut, 10, 11)}, Identity{DataLength: 20}},
		"negative data":  {nil, Identity{DataLength: -1}},
		"huge at limits": {[]Entry{e("a", KindPut, 1<<62, 1<<31)}, Identity{DataLength: 1 << 62}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, _, err := Encode(c.entries, c.id)
			require.ErrorIs(t, err, ErrInvalidEntries)
			_, _, err = EncodeWithRanges(c.entries, testRanges(), c.id)
			require.ErrorIs(t, err, ErrInvalidEntries)
			_, _, err = EncodeUpgrade(c.entries, nil, c.id, 1)
			require.ErrorIs(t, err, ErrInvalidEntries)
			_, err = LegacyChecksum(c.entries, nil, c.id)
			require.ErrorIs(t, err, ErrInvalidEntries)
		})
	}
	// The boundary itself is fine: a record ending exactly at the data length.
	_, _, err := Encode([]Entry{e("a", KindPut, 10, 10)}, Identity{DataLength: 20})
	require.NoError(t, err)
}

func TestDeterministic(t *testing.T) {
	entries := genSequential(300)
	d1, s1 := mustEncode(t, entries, testID)
	clone := make([]Entry, len(entries))
	for i, e := range entries {
		clone[i] = e
		clone[i].Key = bytes.Clone(e.Key)
	}
	d2, s2 := mustEncode(t, clone, testID)
	require.Equal(t, d1, d2)
	require.Equal(t, s1, s2)
	topOff, topLen, ok := topBounds(d1)
	require.True(t, ok)
	require.Equal(t, xxhash.Sum64(d1[topOff:topOff+topLen-8]), s1,
		"the checksum is xxhash64 of the top block before its checksum field")

	// Any change to the content or the identity changes the checksum.
	other := slices.Clone(clone)
	other[2].Offset++
	_, s3 := mustEncode(t, other, testID)
	require.NotEqual(t, s1, s3)
	other = slices.Clone(clone)
	other[299].Kind = KindPut
	_, s3 = mustEncode(t, other, testID)
	require.NotEqual(t, s1, s3)
	_, s4 := mustEncode(t, entries, Identity{DataLength: testID.DataLength, DataDigest: testID.DataDigest + 1})
	require.NotEqual(t, s1, s4)
	_, s5, err := EncodeWithRanges(entries, testRanges(), testID)
	require.NoError(t, err)
	require.NotEqual(t, s1, s5)
}

// TestInKeyOrder: the flag says whether the records lie in the data file in
// key order.
func TestInKeyOrder(t *testing.T) {
	entries := smallEntries()
	data, sum := mustEncode(t, entries, testID)
	require.True(t, mustDecode(t, "o.idx", data, sum, testID).InKeyOrder())
	entries[3].Offset, entries[4].Offset = entries[4].Offset, entries[3].Offset
	data, sum = mustEncode(t, entries, testID)
	require.False(t, mustDecode(t, "o.idx", data, sum, testID).InKeyOrder())
	data, sum = mustEncode(t, nil, testID)
	require.True(t, mustDecode(t, "o.idx", data, sum, testID).InKeyOrder())
}

// TestGoldenLayout pins the version 3 layout (docs/parts/index.md) with
// literal numbers, so that a change of any format constant fails here.
func TestGoldenLayout(t *testing.T) {
	le := binary.LittleEndian
	entries := []Entry{{Key: []byte("k"), Kind: KindDelete, Offset: 3, Length: 4}}
	id := Identity{DataLength: 100, DataDigest: 0x0102030405060708}
	data, sum := mustEncode(t, entries, id)

	// File header: magic, version 3, flags 0.
	require.Equal(t, "segkvidx", string(data[0:8]))
	require.Equal(t, uint32(3), le.Uint32(data[8:]))
	require.Equal(t, uint32(0), le.Uint32(data[12:]))

	// Key block 0 at 16: one big-endian search word (the key after its
	// 1-byte common prefix is empty), record offsets 0 and 14, one record.
	require.Equal(t, make([]byte, 8), data[16:24])
	require.Equal(t, uint32(0), le.Uint32(data[24:]))
	require.Equal(t, uint32(14), le.Uint32(data[28:]))
	require.Equal(t, []byte{2, 3, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 'k'}, data[32:46])
	// Bloom filter at 46: NewWithEstimates(1, 0.01) has m = 10, one word.
	bloomOff := 46
	// No range section: the top block follows the bloom words.
	topOff := bloomOff + 8

	// Footer: the last 32 bytes.
	require.Len(t, data, 243)
	foot := data[len(data)-32:]
	require.Equal(t, uint64(topOff), le.Uint64(foot[0:]))
	topLen := 112 + 28 + 8 + 1 + 8 // fixed part, one table entry, one chunk sum, first keys, checksum
	require.Equal(t, uint64(topLen), le.Uint64(foot[8:]))
	require.Equal(t, "segkvidx", string(foot[16:24]))
	require.Equal(t, uint32(3), le.Uint32(foot[24:]))
	require.Equal(t, uint32(0), le.Uint32(foot[28:]))
	require.Equal(t, len(data)-32, topOff+topLen)

	top := data[topOff : topOff+topLen]
	fields := []struct {
		off, size int
		want      uint64
		what      string
	}{
		{0, 4, 3, "version"},
		{4, 4, 1, "flags: records in key order"},
		{8, 8, 1, "entry count"},
		{16, 8, 100, "data length"},
		{24, 8, 0x0102030405060708, "data digest"},
		{32, 8, 0, "legacy checksum"},
		{40, 4, 128, "entries per block"},
		{44, 4, 1, "blocks"},
		{48, 4, 1, "common prefix length"},
		{52, 4, 7, "bloom k"},
		{56, 8, 10, "bloom m"},
		{64, 8, uint64(bloomOff), "bloom offset"},
		{72, 4, 512, "words per bloom chunk"},
		{76, 4, 1, "bloom chunks"},
		{80, 8, uint64(topOff), "range section offset"},
		{88, 8, 0, "range section length"},
		{96, 8, 0, "range section checksum"},
		{104, 8, 1, "first-key area length"},
		// Block table entry 0.
		{112, 8, 16, "block 0 offset"},
		{120, 4, 30, "block 0 length"},
		{124, 8, xxhash.Sum64(data[16:46]), "block 0 checksum"},
		{132, 4, 0, "block 0 first key offset"},
		{136, 4, 1, "block 0 first key length"},
		// Bloom chunk checksums.
		{140, 8, xxhash.Sum64(data[bloomOff : bloomOff+8]), "bloom chunk 0 checksum"},
	}
	for _, f := range fields {
		var got uint64
		if f.size == 4 {
			got = uint64(le.Uint32(top[f.off:]))
		} else {
			got = le.Uint64(top[f.off:])
		}
		require.Equal(t, f.want, got, "top block field %s at %d", f.what, f.off)
	}
	require.Equal(t, "k", string(top[148:149]), "first-key area")
	require.Equal(t, xxhash.Sum64(top[:149]), le.Uint64(top[149:]), "top block checksum")
	require.Equal(t, sum, le.Uint64(top[149:]), "the checksum Encode returns is the top block's")

	// The package's named offsets agree with the literal ones above.
	require.Equal(t, []int{0, 4, 8, 16, 24, 32, 40, 44, 48, 52, 56, 64, 72, 76, 80, 88, 96, 104, 112, 28},
		[]int{topVersion, topFlags, topCount, topDataLen, topDigest, topLegacy, topBlockEntries, topBlocks,
			topPrefix, topBloomK, topBloomM, topBloomOff, topChunkWords, topChunks, topRangeOff, topRangeLen,
			topRangeSum, topKeysLen, topFixed, tabEntry})
	require.Equal(t, 128, BlockEntries)
	require.Equal(t, uint32(3), Version)
	require.Equal(t, "segkvidx", Magic)
}

// TestGoldenLayoutBlocks pins how entries are split into blocks: 128 per
// block, the last one shorter, each block's first key in the top block.
func TestGoldenLayoutBlocks(t *testing.T) {
	le := binary.LittleEndian
	entries := genSequential(300)
	data, _ := mustEncode(t, entries, testID)
	topOff, _, ok := topBounds(data)
	require.True(t, ok)
	top := data[topOff:]
	require.Equal(t, uint32(3), le.Uint32(top[44:]), "300 entries make 3 blocks")
	require.Equal(t, uint32(len("user:000000000000000000000000")), le.Uint32(top[48:]), "common prefix")
	next := uint64(16)
	var keys []byte
	for b, cnt := range []int{128, 128, 44} {
		e := top[112+28*b:]
		off, length := le.Uint64(e), uint64(le.Uint32(e[8:]))
		require.Equal(t, next, off, "blocks are back to back from the header")
		require.Equal(t, uint64(cnt*(8+4+13+32)+4), length, "block %d: %d words, %d+1 offsets, %d records", b, cnt, cnt, cnt)
		require.Equal(t, xxhash.Sum64(data[off:off+length]), le.Uint64(e[12:]))
		require.Equal(t, uint32(len(keys)), le.Uint32(e[20:]))
		require.Equal(t, uint32(32), le.Uint32(e[24:]))
		keys = append(keys, entries[128*b].Key...)
		next += length
	}
	require.Equal(t, next, le.Uint64(top[64:]), "the bloom filter follows the last block")
	require.Equal(t, uint64(len(keys)), le.Uint64(top[104:]))
	kstart := 112 + 28*3 + 8*int(le.Uint32(top[76:]))
	require.Equal(t, keys, top[kstart:kstart+len(keys)])
}

// topBounds returns the top block's place as the footer gives it, when it
// lies inside data.
func topBounds(data []byte) (off, length int, ok bool) {
	if len(data) < 16+32 {
		return 0, 0, false
	}
	foot := data[len(data)-32:]
	o, l := binary.LittleEndian.Uint64(foot), binary.LittleEndian.Uint64(foot[8:])
	end := uint64(len(data) - 32)
	if o > end || l > end-o || l < 8 {
		return 0, 0, false
	}
	return int(o), int(l), true
}

// resealTop rewrites the top block's checksum to match its content, as if
// the damage had happened before the manifest recorded the checksum, and
// returns it.
func resealTop(data []byte) (uint64, bool) {
	off, length, ok := topBounds(data)
	if !ok {
		return 0, false
	}
	sum := xxhash.Sum64(data[off : off+length-8])
	binary.LittleEndian.PutUint64(data[off+length-8:], sum)
	return sum, true
}

// resealAll rewrites the checksum of every key block, bloom chunk and the
// range section in the top block (where the top block places them inside
// data), then the top block's own, so that only the structural checks can
// refuse the file. It returns the top block's checksum.
func resealAll(data []byte) (uint64, bool) {
	le := binary.LittleEndian
	off, length, ok := topBounds(data)
	if !ok || length < topFixed+8 {
		return resealTop(data)
	}
	top := data[off : off+length-8]
	size := uint64(len(data))
	in := func(o, l uint64) bool { return o <= size && l <= size-o }
	blocks := uint64(le.Uint32(top[topBlocks:]))
	chunks := uint64(le.Uint32(top[topChunks:]))
	tabEnd := topFixed + tabEntry*blocks
	if tabEnd <= uint64(len(top)) {
		for b := range blocks {
			e := top[topFixed+tabEntry*b:]
			bo, bl := le.Uint64(e), uint64(le.Uint32(e[8:]))
			if in(bo, bl) {
				le.PutUint64(e[12:], xxhash.Sum64(data[bo:bo+bl]))
			}
		}
		m, bloomOff, cw := le.Uint64(top[topBloomM:]), le.Uint64(top[topBloomOff:]), uint64(le.Uint32(top[topChunkWords:]))
		w := wordsFor(m)
		if tabEnd+8*chunks <= uint64(len(top)) && cw > 0 && w < size && in(bloomOff, 8*w) {
			for c := range min(chunks, (w+cw-1)/cw) {
				lo := 8 * c * cw // c*cw < w: no overflow
				hi := min(lo+8*cw, 8*w)
				le.PutUint64(top[tabEnd+8*c:], xxhash.Sum64(data[bloomOff+lo:bloomOff+hi]))
			}
		}
	}
	if ro, rl := le.Uint64(top[topRangeOff:]), le.Uint64(top[topRangeLen:]); rl > 0 && in(ro, rl) {
		le.PutUint64(top[topRangeSum:], xxhash.Sum64(data[ro:ro+rl]))
	}
	return resealTop(data)
}

// topIdentity reads the identity from the top block.
func topIdentity(data []byte) Identity {
	off, length, ok := topBounds(data)
	if !ok || length < topFixed+8 {
		return Identity{}
	}
	le := binary.LittleEndian
	return Identity{DataLength: int64(le.Uint64(data[off+topDataLen:])), DataDigest: le.Uint64(data[off+topDigest:])}
}

// flipCorpus returns the encoded files the damage tests flip, truncate and
// reseal: empty, small, multi-block with a shared prefix, with ranges.
func flipCorpus(t testing.TB) map[string][]byte {
	t.Helper()
	small, _ := mustEncode(t, smallEntries(), testID)
	empty, _ := mustEncode(t, nil, testID)
	multi, _ := mustEncode(t, shortEntries(140), testID) // two blocks
	ranged, _, err := EncodeWithRanges(smallEntries(), testRanges(), testID)
	require.NoError(t, err)
	return map[string][]byte{"small": small, "empty": empty, "multi": multi, "ranged": ranged}
}

// TestEveryByteFlip: flipping any byte of an index either makes Decode
// refuse it, or makes the first read of the damaged part (and Verify)
// fail with a *corruption.Error; no read ever gives a wrong answer.
func TestEveryByteFlip(t *testing.T) {
	for name, data := range flipCorpus(t) {
		t.Run(name, func(t *testing.T) {
			entries := entriesOf(t, data)
			sum := checksumOf(data)
			var refused, lazy int
			for i := range data {
				mask := flipMask(i)
				bad := bytes.Clone(data)
				bad[i] ^= mask
				ix, err := Decode("f.idx", bad, sum, testID)
				if err != nil {
					if !isCorrupt(err) {
						fatalf(t, "byte %d ^ %#x: %T %v", i, mask, err, err)
					}
					refused++
					continue
				}
				lazy++
				if err := ix.Verify(); !isCorrupt(err) {
					fatalf(t, "byte %d ^ %#x: Verify gives %v", i, mask, err)
				}
				// A fresh index, so that the reads find the damage first.
				ix, err = Decode("f.idx", bad, sum, testID)
				require.NoError(t, err)
				if readsNeverLie(t, ix, entries) == 0 && len(entries) > 0 {
					fatalf(t, "byte %d ^ %#x: damage found by Verify but by no read", i, mask)
				}
			}
			require.Positive(t, refused)
			if name != "empty" {
				require.Positive(t, lazy, "some damage is found only when read")
			}
		})
	}
}

// readsNeverLie reads every entry of ix and probes it for every key of
// entries and a successor of each: each read returns the answer entries
// give or a *corruption.Error. It returns the number of failed reads.
func readsNeverLie(t tb, ix *Index, entries []Entry) int {
	t.Helper()
	if ix.Len() != len(entries) {
		fatalf(t, "Len %d, want %d", ix.Len(), len(entries))
	}
	failed := 0
	fail := func(err error, what string, i int) bool {
		t.Helper()
		if err == nil {
			return false
		}
		if !isCorrupt(err) {
			fatalf(t, "%s %d: error is not a *corruption.Error: %T %v", what, i, err, err)
		}
		failed++
		return true
	}
	for i, want := range entries {
		if e, err := ix.At(i); !fail(err, "At", i) && !entryEqual(e, want) {
			fatalf(t, "At(%d) = %+v, want %+v", i, e, want)
		}
		if k, err := ix.Key(i); !fail(err, "Key", i) && !bytes.Equal(k, want.Key) {
			fatalf(t, "Key(%d) = %q, want %q", i, k, want.Key)
		}
		p := NewProbe(want.Key)
		if may, err := ix.MayContain(&p); !fail(err, "MayContain", i) && !may {
			fatalf(t, "MayContain(key %d) false", i)
		}
		if e, found, err := ix.Get(&p); !fail(err, "Get", i) && (!found || !entryEqual(e, want)) {
			fatalf(t, "Get(key %d) = %+v %v, want %+v", i, e, found, want)
		}
		if s, err := ix.Search(want.Key); !fail(err, "Search", i) && s != i {
			fatalf(t, "Search(key %d) = %d", i, s)
		}
		absent := append(want.Key[:len(want.Key):len(want.Key)], 0)
		wantPos, present := search(entries, absent)
		if s, err := ix.Search(absent); !fail(err, "Search(key+0)", i) && s != wantPos {
			fatalf(t, "Search(key %d + 0) = %d, want %d", i, s, wantPos)
		}
		if _, found, err := ix.Get(probeOf(absent)); !fail(err, "Get(key+0)", i) && found != present {
			fatalf(t, "Get(key %d + 0) found %v", i, found)
		}
	}
	return failed
}

// entriesOf decodes an intact file's entries (copied).
func entriesOf(t testing.TB, data []byte) []Entry {
	t.Helper()
	ix := mustDecode(t, "x.idx", data, checksumOf(data), topIdentity(data))
	require.NoError(t, ix.Verify())
	entries := make([]Entry, ix.Len())
	for i := range entries {
		e, err := ix.At(i)
		require.NoError(t, err)
		e.Key = bytes.Clone(e.Key)
		entries[i] = e
	}
	return entries
}

// checksumOf returns the top block checksum stored in an intact file.
func checksumOf(data []byte) uint64 {
	off, length, _ := topBounds(data)
	return binary.LittleEndian.Uint64(data[off+length-8:])
}

// TestDecodeStructuralChecks flips every byte and then reseals the file
// (the top block alone, or every part's checksum and the top block's), as
// if the damage predated the checksums: Decode must refuse it or serve
// reads that stay in bounds and consistent, every error a
// *corruption.Error. This exercises the checks behind the checksums, in
// Decode and in each part's verification. The header, the range section,
// the top block and the footer get three masks each; key blocks and the
// bloom filter, one (a different bit per byte).
func TestDecodeStructuralChecks(t *testing.T) {
	for name, data := range flipCorpus(t) {
		t.Run(name, func(t *testing.T) {
			top := checkTop(t, data)
			rangeOff := int(binary.LittleEndian.Uint64(data[top+topRangeOff:]))
			var refused, accepted int
			for i := range data {
				masks := []byte{0x01, 0x80, 0xff}
				if i >= 16 && i < rangeOff {
					masks = []byte{flipMask(i)}
				}
				for _, mask := range masks {
					for _, reseal := range []func([]byte) (uint64, bool){resealTop, resealAll} {
						bad := bytes.Clone(data)
						bad[i] ^= mask
						sum, _ := reseal(bad)
						ix, err := Decode("f.idx", bad, sum, topIdentity(bad))
						if err != nil {
							if !isCorrupt(err) {
								fatalf(t, "byte %d ^ %#x: %T %v", i, mask, err, err)
							}
							refused++
							continue
						}
						accepted++
						exercise(t, ix)
					}
				}
			}
			require.Positive(t, refused)
			require.Positive(t, accepted)
		})
	}
}

// flipMask is the mask the damage tests flip byte i with: a different bit
// per byte, and all of them every 8th byte.
func flipMask(i int) byte {
	if i%8 == 7 {
		return 0xff
	}
	return 1 << (i % 8)
}

// shortEntries returns n sorted keys of 4 digits (no common prefix beyond
// the first digits), in key order in the data file.
func shortEntries(n int) []Entry {
	entries := make([]Entry, n)
	for i := range entries {
		entries[i] = Entry{Key: fmt.Appendf(nil, "%04d", 3*i), Kind: KindPut + segment.RecordKind(i%3/2), Offset: 16 + 20*int64(i), Length: 20}
	}
	return entries
}

func TestDecodeRejectsEveryTruncation(t *testing.T) {
	for name, data := range flipCorpus(t) {
		t.Run(name, func(t *testing.T) {
			sum := checksumOf(data)
			for n := range len(data) {
				_, err := Decode("t.idx", data[:n], sum, testID)
				testutil.RequireCorrupt(t, err, "truncated to %d", n)
				// Nor does it help to cut the head off instead.
				_, err = Decode("t.idx", data[len(data)-n:], sum, testID)
				testutil.RequireCorrupt(t, err, "head cut to %d", n)
			}
			// Trailing bytes are refused too.
			_, err := Decode("t.idx", append(bytes.Clone(data), 0), sum, testID)
			testutil.RequireCorrupt(t, err)
			// A torn write that kept the footer: the middle of the file is
			// gone, the end is there.
			for n := 1; n < len(data)-32; n += 7 {
				torn := append(bytes.Clone(data[:len(data)-32-n]), data[len(data)-32:]...)
				_, err := Decode("t.idx", torn, sum, testID)
				testutil.RequireCorrupt(t, err, "torn by %d bytes before the footer", n)
			}
		})
	}
}

func TestDecodeRejectsWrongIdentityAndChecksum(t *testing.T) {
	data, sum := mustEncode(t, smallEntries(), testID)
	topOff, _, _ := topBounds(data)

	_, err := Decode("i.idx", data, sum, Identity{DataLength: testID.DataLength + 1, DataDigest: testID.DataDigest})
	ce := testutil.RequireCorrupt(t, err)
	require.Equal(t, "i.idx", ce.Path)
	require.Equal(t, int64(topOff+16), ce.Offset, "the top block's data length field")
	require.Contains(t, ce.Reason, "stale")

	_, err = Decode("i.idx", data, sum, Identity{DataLength: testID.DataLength, DataDigest: testID.DataDigest ^ 1})
	testutil.RequireCorrupt(t, err)
	_, err = Decode("i.idx", data, sum, Identity{})
	testutil.RequireCorrupt(t, err)

	for _, wrong := range []uint64{sum ^ 1, 0, ^sum} {
		_, err = Decode("i.idx", data, wrong, testID)
		ce = testutil.RequireCorrupt(t, err)
		require.Contains(t, ce.Reason, "recorded")
	}

	// Another segment's index, intact and with its own checksum: refused by
	// identity. A stale index of this segment (older entries, same identity)
	// is refused by the manifest's checksum.
	otherID := Identity{DataLength: 999, DataDigest: 7}
	other, otherSum := mustEncode(t, smallEntries()[:2], otherID)
	_, err = Decode("i.idx", other, sum, testID)
	testutil.RequireCorrupt(t, err)
	_, err = Decode("i.idx", other, otherSum, testID)
	testutil.RequireCorrupt(t, err)
	stale, _ := mustEncode(t, smallEntries()[:3], testID)
	_, err = Decode("i.idx", stale, sum, testID)
	testutil.RequireCorrupt(t, err)

	// A negative data length in the identity is refused even when both
	// agree (Encode refuses to write it).
	neg := bytes.Clone(data)
	binary.LittleEndian.PutUint64(neg[topOff+topDataLen:], ^uint64(0))
	s, _ := resealTop(neg)
	_, err = Decode("i.idx", neg, s, Identity{DataLength: -1, DataDigest: testID.DataDigest})
	testutil.RequireCorrupt(t, err)
}

func TestDecodeRejectsUnknownVersionAndFlags(t *testing.T) {
	data, _ := mustEncode(t, smallEntries(), testID)
	topOff, _, _ := topBounds(data)
	foot := len(data) - 32
	for _, field := range []struct {
		off     int
		value   uint32
		wantOff int
		want    string
	}{
		{8, 0x7f, 8, "version"},
		{8, 4, 8, "version"},
		{12, 1, 12, "flags"},
		{topOff + topVersion, 2, topOff + topVersion, "version"},
		{topOff + topFlags, 4, topOff + topFlags, "flags"},
		{foot + 24, 2, foot, "footer"},
		{foot + 28, 1, foot, "footer"},
	} {
		bad := bytes.Clone(data)
		binary.LittleEndian.PutUint32(bad[field.off:], field.value)
		sum, _ := resealTop(bad)
		_, err := Decode("v.idx", bad, sum, testID)
		ce := testutil.RequireCorrupt(t, err, "field at %d", field.off)
		require.Equal(t, int64(field.wantOff), ce.Offset, "field at %d", field.off)
		require.Contains(t, ce.Reason, field.want)
	}
}

// TestDecodeRefusesLegacyVersions: version 1 and 2 files are no longer
// read, whatever checksum the caller holds; they are refused as damage so
// that the caller rebuilds them.
func TestDecodeRefusesLegacyVersions(t *testing.T) {
	for _, c := range []struct {
		ranges  bool
		version uint32
	}{{false, 1}, {true, 2}} {
		var ranges = testRanges()
		if !c.ranges {
			ranges = nil
		}
		for _, entries := range [][]Entry{nil, smallEntries(), genSequential(500)} {
			data, sum, err := encodeLegacy(entries, ranges, testID)
			require.NoError(t, err)
			require.Equal(t, c.version, binary.LittleEndian.Uint32(data[8:]))
			legacy, err := LegacyChecksum(entries, ranges, testID)
			require.NoError(t, err)
			require.Equal(t, sum, legacy)
			for _, want := range []uint64{sum, 0, ^sum} {
				_, err := Decode("v1.idx", data, want, testID)
				ce := testutil.RequireCorrupt(t, err, "version %d", c.version)
				require.Equal(t, int64(8), ce.Offset)
				require.Contains(t, ce.Reason, "version")
			}
		}
	}
}

func TestDecodeRejectsBadPrefixLength(t *testing.T) {
	data, _ := mustEncode(t, smallEntries(), testID) // key 0 is empty
	topOff, _, _ := topBounds(data)
	binary.LittleEndian.PutUint32(data[topOff+topPrefix:], 1)
	sum, _ := resealTop(data)
	_, err := Decode("p.idx", data, sum, testID)
	ce := testutil.RequireCorrupt(t, err)
	require.Equal(t, int64(topOff+topPrefix), ce.Offset)

	empty, _ := mustEncode(t, nil, testID)
	topOff, _, _ = topBounds(empty)
	binary.LittleEndian.PutUint32(empty[topOff+topPrefix:], 3)
	sum, _ = resealTop(empty)
	_, err = Decode("p.idx", empty, sum, testID)
	testutil.RequireCorrupt(t, err)

	// A shorter prefix than the keys share is consistent (every check
	// holds) but not what Encode writes: Verify finds it.
	multi, _ := mustEncode(t, genSequential(300), testID)
	topOff, _, _ = topBounds(multi)
	binary.LittleEndian.PutUint32(multi[topOff+topPrefix:], 0)
	sum, _ = resealAll(multi)
	ix := mustDecode(t, "p.idx", multi, sum, testID)
	testutil.RequireCorrupt(t, ix.Verify())
	exercise(t, ix)
}

// TestFooterTopBlockPastFooter: a footer whose top block offset lies
// inside the footer, with a length that wraps around to reach back to it,
// must be refused, not panic.
func TestFooterTopBlockPastFooter(t *testing.T) {
	data, sum := mustEncode(t, smallEntries(), testID)
	size := uint64(len(data))
	for _, topOff := range []uint64{size - 31, size - 24, size - 1, size} {
		bad := bytes.Clone(data)
		foot := bad[size-32:]
		binary.LittleEndian.PutUint64(foot, topOff)
		binary.LittleEndian.PutUint64(foot[8:], size-32-topOff) // wraps around
		require.NotPanics(t, func() {
			_, err := Decode("f.idx", bad, sum, testID)
			testutil.RequireCorrupt(t, err, "top block at %d", topOff)
		}, "top block at %d of %d", topOff, size)
	}
}

// TestSearchPrefixEdges covers probes shorter than, diverging inside, or
// equal to the common prefix, and keys that tie on their search word.
func TestSearchPrefixEdges(t *testing.T) {
	keys := []string{
		"pre:", "pre:\x00", "pre:\x00\x00", "pre:abcdefgh", "pre:abcdefgh\x00", "pre:abcdefghA",
		"pre:abcdefghB", "pre:abcdefgi", "pre:zz",
	}
	entries := make([]Entry, len(keys))
	for i, k := range keys {
		entries[i] = Entry{Key: []byte(k), Kind: KindPut, Offset: int64(i), Length: 1}
	}
	data, sum := mustEncode(t, entries, testID)
	ix := mustDecode(t, "e.idx", data, sum, testID)
	require.Equal(t, "pre:", string(ix.prefix))
	checkIndex(t, ix, entries)
	require.NoError(t, ix.Verify())
	for _, p := range []string{"", "p", "pre", "pra", "prf", "pre;", "pre:\x00\x00\x00", "pre:abcdefg",
		"pre:abcdefgh\x00\x00", "pre:abcdefghAB", "pre:abcdefgi\x00", "pre:zzz", "\xff"} {
		want, found := search(entries, []byte(p))
		got, err := ix.Search([]byte(p))
		require.NoError(t, err)
		require.Equal(t, want, got, "Search(%q)", p)
		_, ok, err := ix.Get(probeOf([]byte(p)))
		require.NoError(t, err)
		require.Equal(t, found, ok, "Get(%q)", p)
	}
}

// TestVerifyCatchesWhatOnlyTheChecksumGuards: damage made before the
// checksums were taken (so every checksum agrees) is found by Verify, and
// the reads of a block that fails its structure checks fail.
func TestVerifyCatchesWhatOnlyTheChecksumGuards(t *testing.T) {
	entries := []Entry{
		{Key: []byte("a"), Kind: KindPut, Offset: 0, Length: 1},
		{Key: []byte("b"), Kind: KindPut, Offset: 1, Length: 1},
	}
	// Swap the two keys' records: structurally fine, semantically unsorted.
	data, _ := mustEncode(t, entries, testID)
	i := bytes.Index(data, []byte("\x01\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00a"))
	j := bytes.Index(data, []byte("\x01\x01\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00b"))
	require.Positive(t, i)
	require.Positive(t, j)
	data[i+13], data[j+13] = 'b', 'a'
	sum, _ := resealAll(data)
	ix := mustDecode(t, "u.idx", data, sum, testID)
	testutil.RequireCorrupt(t, ix.Verify())
	exercise(t, ix)
	_, err := ix.At(0)
	testutil.RequireCorrupt(t, err)

	// A bloom filter missing a key: every read of the block is fine, the
	// filter is what Verify refuses.
	data, _ = mustEncode(t, entries, testID)
	bloomOff := binary.LittleEndian.Uint64(data[checkTop(t, data)+topBloomOff:])
	clear(data[bloomOff : bloomOff+8])
	sum, _ = resealAll(data)
	ix = mustDecode(t, "b.idx", data, sum, testID)
	testutil.RequireCorrupt(t, ix.Verify())
	exercise(t, ix)

	// A wrong search word.
	data, _ = mustEncode(t, entries, testID)
	w := bytes.Index(data, []byte("b\x00\x00\x00\x00\x00\x00\x00"))
	require.Positive(t, w)
	data[w] = 'c'
	sum, _ = resealAll(data)
	ix = mustDecode(t, "w.idx", data, sum, testID)
	testutil.RequireCorrupt(t, ix.Verify())
	exercise(t, ix)

	// A record pointing outside the data file.
	data, _ = mustEncode(t, entries, Identity{DataLength: 10})
	binary.LittleEndian.PutUint64(data[i+1:], 10)
	sum, _ = resealAll(data)
	ix = mustDecode(t, "o.idx", data, sum, Identity{DataLength: 10})
	testutil.RequireCorrupt(t, ix.Verify())
	_, err = ix.At(1)
	testutil.RequireCorrupt(t, err)
	exercise(t, ix)
}

// TestVerifyIsByteExact: Verify documents that "a file that passes is byte
// for byte what Encode produces for its entries and identity". A file whose
// top block (checksummed and accepted by the manifest) lies about what the
// entries are cannot say so, but one that records the records in key order
// when they are not, or that uses a block size or bloom chunk size Encode
// never writes, must not pass Verify. FuzzDecode found it (12336 entries
// per block, 3158064 words per chunk, six records at one offset yet
// flagged in key order; seed nonstandard-layout is its like).
func TestVerifyIsByteExact(t *testing.T) {
	le := binary.LittleEndian
	entries := smallEntries()
	data, _ := mustEncode(t, entries, testID)
	top := checkTop(t, data)
	for name, mutate := range map[string]func(b []byte){
		"in-key-order flag cleared": func(b []byte) { le.PutUint32(b[top+topFlags:], 0) },
		"entries per block 1000":    func(b []byte) { le.PutUint32(b[top+topBlockEntries:], 1000) },
		"bloom chunk of 1000 words": func(b []byte) { le.PutUint32(b[top+topChunkWords:], 1000) },
	} {
		t.Run(name, func(t *testing.T) {
			bad := bytes.Clone(data)
			mutate(bad)
			sum, _ := resealTop(bad)
			ix := mustDecode(t, "v.idx", bad, sum, testID)
			checkIndex(t, ix, entries) // the entries are right...
			again, _ := mustEncode(t, entries, testID)
			require.NotEqual(t, again, bad) // ...the bytes are not Encode's
			testutil.RequireCorrupt(t, ix.Verify(), "Verify passes a file Encode does not write")
		})
	}
	// Records not in key order in the data file, flagged as if they were.
	entries[1].Offset, entries[2].Offset = entries[2].Offset, entries[1].Offset
	data, _ = mustEncode(t, entries, testID)
	le.PutUint32(data[top+topFlags:], 1)
	sum, _ := resealTop(data)
	ix := mustDecode(t, "v.idx", data, sum, testID)
	require.True(t, ix.InKeyOrder())
	testutil.RequireCorrupt(t, ix.Verify(), "Verify passes an index that says its records are in key order when they are not")
}

// checkTop returns the offset of data's top block.
func checkTop(t testing.TB, data []byte) int {
	t.Helper()
	off, _, ok := topBounds(data)
	require.True(t, ok)
	return off
}

// TestGetAllocations: a probe computes its bloom locations once (one
// allocation), and every later lookup with it allocates nothing.
func TestGetAllocations(t *testing.T) {
	entries := genSequential(1000)
	data, sum := mustEncode(t, entries, testID)
	ix := mustDecode(t, "a.idx", data, sum, testID)
	require.NoError(t, ix.Verify())
	hit := NewProbe(entries[500].Key)
	miss := NewProbe([]byte("absent-key"))
	allocs := testing.AllocsPerRun(100, func() {
		if _, ok, err := ix.Get(&hit); !ok || err != nil {
			t.Fatal("hit missed", err)
		}
		if _, ok, err := ix.Get(&miss); ok || err != nil {
			t.Fatal("miss hit", err)
		}
		if _, err := ix.Search(miss.Key()); err != nil {
			t.Fatal(err)
		}
		if _, err := ix.At(999); err != nil {
			t.Fatal(err)
		}
	})
	require.Zero(t, allocs)
	key := entries[10].Key
	allocs = testing.AllocsPerRun(100, func() {
		p := NewProbe(key)
		if _, ok, err := ix.Get(&p); !ok || err != nil {
			t.Fatal("hit missed", err)
		}
	})
	require.LessOrEqual(t, allocs, 1.0)
}

func TestBloomFalsePositiveRate(t *testing.T) {
	entries := genSequential(20000)
	data, sum := mustEncode(t, entries, testID)
	ix := mustDecode(t, "fp.idx", data, sum, testID)
	fp := 0
	const probes = 100000
	for i := range probes {
		may, err := ix.MayContain(probeOf(fmt.Appendf(nil, "miss:%027d", i)))
		require.NoError(t, err)
		if may {
			fp++
		}
	}
	// The filter is sized for 1%; deterministic hashing makes this stable.
	require.Less(t, float64(fp)/probes, 0.02, "false positives: %d of %d", fp, probes)
}

// TestRoundTripProperty: for random entry sets, every key is found with its
// entry, absent keys are not, Search is a lower bound and At iterates in
// order, and encoding is deterministic.
func TestRoundTripProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		keyGen := rapid.OneOf(
			rapid.SliceOfN(rapid.Byte(), 0, 40),
			rapid.SliceOfN(rapid.ByteRange('a', 'c'), 0, 6), // shared prefixes, near misses
		)
		keys := rapid.SliceOfDistinct(keyGen, func(k []byte) string { return string(k) }).Draw(rt, "keys")
		slices.SortFunc(keys, bytes.Compare)
		id := Identity{
			DataLength: rapid.Int64Range(0, 1<<40).Draw(rt, "dataLength"),
			DataDigest: rapid.Uint64().Draw(rt, "digest"),
		}
		entries := make([]Entry, len(keys))
		for i, k := range keys {
			length := rapid.Uint32Range(0, uint32(min(id.DataLength, 1<<32-1))).Draw(rt, "length")
			entries[i] = Entry{
				Key:    k,
				Kind:   rapid.SampledFrom([]segment.RecordKind{KindPut, KindDelete}).Draw(rt, "kind"),
				Offset: rapid.Int64Range(0, id.DataLength-int64(length)).Draw(rt, "offset"),
				Length: length,
			}
		}
		data, sum, err := Encode(entries, id)
		require.NoError(rt, err)
		again, sum2, err := Encode(entries, id)
		require.NoError(rt, err)
		require.Equal(rt, data, again)
		require.Equal(rt, sum, sum2)

		ix, err := Decode("p.idx", data, sum, id)
		require.NoError(rt, err)
		checkIndex(rt, ix, entries)
		require.NoError(rt, ix.Verify())

		present := make(map[string]bool, len(keys))
		for _, k := range keys {
			present[string(k)] = true
		}
		probes := rapid.SliceOfN(keyGen, 0, 30).Draw(rt, "probes")
		for _, p := range probes {
			want, _ := search(entries, p)
			got, err := ix.Search(p)
			require.NoError(rt, err)
			require.Equal(rt, want, got)
			e, ok, err := ix.Get(probeOf(p))
			require.NoError(rt, err)
			require.Equal(rt, present[string(p)], ok, "Get(%q)", p)
			if ok {
				require.True(rt, bytes.Equal(e.Key, p))
			}
		}
		// In-order iteration from an arbitrary start.
		var prev []byte
		from, err := ix.Search(rapid.SliceOfN(rapid.Byte(), 0, 3).Draw(rt, "from"))
		require.NoError(rt, err)
		for i := from; i < ix.Len(); i++ {
			k, err := ix.Key(i)
			require.NoError(rt, err)
			if prev != nil {
				require.Negative(rt, bytes.Compare(prev, k))
			}
			prev = k
		}
	})
}

func TestCorruptionErrorNamesFileAndOffset(t *testing.T) {
	data, sum := mustEncode(t, smallEntries(), testID)
	bad := bytes.Clone(data)
	bad[0] = 'X'
	_, err := Decode("/d/1.idx", bad, sum, testID)
	ce := testutil.RequireCorrupt(t, err)
	require.Equal(t, "/d/1.idx", ce.Path)
	require.Equal(t, int64(0), ce.Offset)
	require.True(t, errors.Is(err, corruption.ErrCorrupt))
	require.Contains(t, err.Error(), "/d/1.idx")

	// A damaged key block found on read names the file and the block.
	bad = bytes.Clone(data)
	bad[20] ^= 1 // inside block 0's search words
	ix := mustDecode(t, "/d/2.idx", bad, sum, testID)
	_, err = ix.At(0)
	ce = testutil.RequireCorrupt(t, err)
	require.Equal(t, "/d/2.idx", ce.Path)
	require.Equal(t, int64(16), ce.Offset, "block 0 starts after the header")
	require.Contains(t, ce.Reason, "block 0")
	// Verify names the same file.
	ce = testutil.RequireCorrupt(t, ix.Verify())
	require.Equal(t, "/d/2.idx", ce.Path)
}

// TestConcurrentReads: an Index is safe for concurrent use, including the
// first reads that verify its parts (run under -race).
func TestConcurrentReads(t *testing.T) {
	entries := genSequential(2000)
	data, sum := mustEncode(t, entries, testID)
	ix := mustDecode(t, "c.idx", data, sum, testID)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := g; i < len(entries); i += 4 {
				p := NewProbe(entries[i].Key)
				e, ok, err := ix.Get(&p)
				s, serr := ix.Search(entries[i].Key)
				a, aerr := ix.At(len(entries) - 1 - i)
				if err != nil || serr != nil || aerr != nil || !ok || e.Offset != entries[i].Offset || s != i ||
					a.Length != entries[len(entries)-1-i].Length {
					t.Errorf("entry %d wrong under concurrency: %v %v %v", i, err, serr, aerr)
					return
				}
			}
		})
	}
	wg.Go(func() {
		if err := ix.Verify(); err != nil {
			t.Error(err)
		}
	})
	wg.Wait()
}
