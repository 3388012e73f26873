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

func mustEncode(t testing.TB, entries []Entry, id Identity) ([]byte, uint64) {
	t.Helper()
	data, sum, err := Encode(entries, id)
	require.NoError(t, err)
	return data, sum
}

func requireCorrupt(t testing.TB, err error, msgAndArgs ...any) *corruption.Error {
	t.Helper()
	require.Error(t, err, msgAndArgs...)
	var ce *corruption.Error
	require.ErrorAs(t, err, &ce, msgAndArgs...)
	require.ErrorIs(t, err, corruption.ErrCorrupt, msgAndArgs...)
	return ce
}

// tb is what both *testing.T and *rapid.T provide.
type tb interface {
	require.TestingT
	Helper()
}

// checkIndex asserts that ix serves exactly entries.
func checkIndex(t tb, ix *Index, entries []Entry) {
	t.Helper()
	require.Equal(t, len(entries), ix.Len())
	for i, want := range entries {
		got := ix.At(i)
		require.Equal(t, want.Kind, got.Kind, "entry %d", i)
		require.Equal(t, want.Offset, got.Offset, "entry %d", i)
		require.Equal(t, want.Length, got.Length, "entry %d", i)
		require.True(t, bytes.Equal(want.Key, got.Key), "entry %d: key %q, want %q", i, got.Key, want.Key)
		require.True(t, ix.MayContain(want.Key))
		e, ok := ix.Get(want.Key)
		require.True(t, ok, "Get(%q)", want.Key)
		require.Equal(t, got, e)
		require.Equal(t, i, ix.Search(want.Key))
	}
}

func TestRoundTripSmall(t *testing.T) {
	entries := smallEntries()
	data, sum := mustEncode(t, entries, testID)
	ix, err := Decode("s.idx", data, sum, testID)
	require.NoError(t, err)
	checkIndex(t, ix, entries)
	require.Equal(t, sum, ix.Checksum())
	require.Equal(t, testID, ix.Identity())
	require.NoError(t, ix.Verify("s.idx"))
	require.GreaterOrEqual(t, ix.SizeBytes(), len(data))

	for _, k := range []string{"\x00", "aa", "abd", "b", "zzzzz", "\xff"} {
		_, ok := ix.Get([]byte(k))
		require.False(t, ok, "Get(%q)", k)
	}
	require.Equal(t, 1, ix.Search([]byte("\x00")))
	require.Equal(t, 4, ix.Search([]byte("abd")))
	require.Equal(t, 6, ix.Search([]byte("\xff")))

	// A returned key has no spare capacity: appending to it must not
	// overwrite the next record.
	k := ix.At(1).Key
	_ = append(k, 'X')
	checkIndex(t, ix, entries)
}

func TestEmptyIndex(t *testing.T) {
	id := Identity{}
	data, sum := mustEncode(t, nil, id)
	ix, err := Decode("e.idx", data, sum, id)
	require.NoError(t, err)
	require.Equal(t, 0, ix.Len())
	require.False(t, ix.MayContain(nil))
	_, ok := ix.Get([]byte{})
	require.False(t, ok)
	_, ok = ix.Get([]byte("x"))
	require.False(t, ok)
	require.Equal(t, 0, ix.Search(nil))
	require.Equal(t, 0, ix.Search([]byte("x")))
	require.NoError(t, ix.Verify("e.idx"))

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
	ix, err := Decode("l.idx", data, sum, id)
	require.NoError(t, err)
	checkIndex(t, ix, entries)
}

func TestEncodeRejects(t *testing.T) {
	e := func(k string, kind uint8, off int64, n uint32) Entry {
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
		})
	}
	// The boundary itself is fine: a record ending exactly at the data length.
	_, _, err := Encode([]Entry{e("a", KindPut, 10, 10)}, Identity{DataLength: 20})
	require.NoError(t, err)
}

func TestDeterministic(t *testing.T) {
	entries := smallEntries()
	d1, s1 := mustEncode(t, entries, testID)
	clone := make([]Entry, len(entries))
	for i, e := range entries {
		clone[i] = e
		clone[i].Key = bytes.Clone(e.Key)
	}
	d2, s2 := mustEncode(t, clone, testID)
	require.Equal(t, d1, d2)
	require.Equal(t, s1, s2)
	require.Equal(t, xxhash.Sum64(d1[:len(d1)-8]), s1, "checksum is xxhash64 of everything before the trailer")

	// Any change to the content or the identity changes the checksum.
	other := slices.Clone(clone)
	other[2].Offset++
	_, s3 := mustEncode(t, other, testID)
	require.NotEqual(t, s1, s3)
	_, s4 := mustEncode(t, entries, Identity{DataLength: testID.DataLength, DataDigest: testID.DataDigest + 1})
	require.NotEqual(t, s1, s4)
}

// TestGoldenHeader pins the header layout documented in the package comment.
func TestGoldenHeader(t *testing.T) {
	entries := []Entry{{Key: []byte("k"), Kind: KindDelete, Offset: 3, Length: 4}}
	id := Identity{DataLength: 100, DataDigest: 0x0102030405060708}
	data, _ := mustEncode(t, entries, id)
	le := binary.LittleEndian
	require.Equal(t, "segkvidx", string(data[0:8]))
	require.Equal(t, uint32(1), le.Uint32(data[8:]))
	require.Equal(t, uint32(0), le.Uint32(data[12:]))
	require.Equal(t, uint64(1), le.Uint64(data[16:]))
	require.Equal(t, uint64(100), le.Uint64(data[24:]))
	require.Equal(t, uint64(0x0102030405060708), le.Uint64(data[32:]))
	require.Equal(t, uint64(14), le.Uint64(data[40:]), "one record: 13 bytes of metadata and a 1-byte key")
	m := le.Uint64(data[48:])
	require.Equal(t, uint64(10), m, "NewWithEstimates(1, 0.01)")
	require.Equal(t, uint32(7), le.Uint32(data[56:]))
	require.Equal(t, uint32(1), le.Uint32(data[60:]), "a single key is its own common prefix")
	w := int((m + 63) / 64)
	words := 64 + 8*w
	require.Equal(t, make([]byte, 8), data[words:words+8], "the key after its prefix is empty")
	offs := words + 8
	require.Equal(t, uint32(0), le.Uint32(data[offs:]))
	require.Equal(t, uint32(14), le.Uint32(data[offs+4:]))
	rec := data[offs+8:]
	require.Equal(t, []byte{2, 3, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 'k'}, rec[:14])
	require.Len(t, data, offs+8+14+8)
}

func TestDecodeRejectsEveryByteFlip(t *testing.T) {
	entries := smallEntries()
	data, sum := mustEncode(t, entries, testID)
	for i := range data {
		for _, mask := range []byte{0x01, 0x80, 0xff} {
			bad := bytes.Clone(data)
			bad[i] ^= mask
			_, err := Decode("f.idx", bad, sum, testID)
			requireCorrupt(t, err, "byte %d ^ %#x", i, mask)
		}
	}
}

// TestDecodeStructuralChecks flips every byte and then repairs the trailer,
// so that the file is self-consistent and the manifest "agrees" (as if the
// damage had happened before the checksum was taken). Decode must still
// refuse or, where the flip leaves a well-formed index, serve lookups that
// stay in bounds. This exercises the checks that run after the checksum.
func TestDecodeStructuralChecks(t *testing.T) {
	entries := smallEntries()
	data, _ := mustEncode(t, entries, testID)
	for i := range len(data) - 8 {
		for _, mask := range []byte{0x01, 0x80, 0xff} {
			bad := bytes.Clone(data)
			bad[i] ^= mask
			sum := reseal(bad)
			id := Identity{DataLength: int64(binary.LittleEndian.Uint64(bad[24:])), DataDigest: binary.LittleEndian.Uint64(bad[32:])}
			ix, err := Decode("f.idx", bad, sum, id)
			if err != nil {
				requireCorrupt(t, err, "byte %d ^ %#x", i, mask)
				continue
			}
			exercise(t, ix)
		}
	}
}

// reseal rewrites the trailer of data to match its body and returns it.
func reseal(data []byte) uint64 {
	sum := xxhash.Sum64(data[:len(data)-8])
	binary.LittleEndian.PutUint64(data[len(data)-8:], sum)
	return sum
}

// exercise calls every accessor of ix; it must not panic, and when Verify
// passes, lookups must agree with At.
func exercise(t testing.TB, ix *Index) {
	t.Helper()
	n := ix.Len()
	require.GreaterOrEqual(t, n, 0)
	require.LessOrEqual(t, n, len(ix.Bytes()))
	verified := ix.Verify("x.idx") == nil
	for i := range n {
		e := ix.At(i)
		require.Contains(t, []uint8{KindPut, KindDelete}, e.Kind)
		require.GreaterOrEqual(t, e.Offset, int64(0))
		require.LessOrEqual(t, e.Offset+int64(e.Length), ix.Identity().DataLength)
		s := ix.Search(e.Key)
		require.True(t, s >= 0 && s <= n)
		got, ok := ix.Get(e.Key)
		if verified {
			require.True(t, ok, "key %d", i)
			require.Equal(t, e, got)
			require.Equal(t, i, s)
		} else if ok {
			require.True(t, bytes.Equal(got.Key, e.Key))
		}
	}
	for _, k := range [][]byte{nil, {0}, []byte("zz"), bytes.Repeat([]byte{0xff}, 40)} {
		s := ix.Search(k)
		require.True(t, s >= 0 && s <= n)
		if e, ok := ix.Get(k); ok {
			require.True(t, bytes.Equal(e.Key, k))
		}
	}
}

func TestDecodeRejectsEveryTruncation(t *testing.T) {
	data, sum := mustEncode(t, smallEntries(), testID)
	for n := range len(data) {
		_, err := Decode("t.idx", data[:n], sum, testID)
		requireCorrupt(t, err, "truncated to %d", n)
	}
	// Trailing bytes are refused too.
	_, err := Decode("t.idx", append(bytes.Clone(data), 0), sum, testID)
	requireCorrupt(t, err)

	// Truncation with a trailer that was repaired (so only the structure can
	// tell) is refused as well.
	for n := 72; n < len(data); n++ {
		bad := bytes.Clone(data[:n])
		s := reseal(bad)
		_, err := Decode("t.idx", bad, s, testID)
		requireCorrupt(t, err, "resealed truncation to %d", n)
	}
}

func TestDecodeRejectsWrongIdentityAndChecksum(t *testing.T) {
	data, sum := mustEncode(t, smallEntries(), testID)

	_, err := Decode("i.idx", data, sum, Identity{DataLength: testID.DataLength + 1, DataDigest: testID.DataDigest})
	ce := requireCorrupt(t, err)
	require.Equal(t, "i.idx", ce.Path)
	require.Equal(t, int64(24), ce.Offset)
	require.Contains(t, ce.Reason, "stale")

	_, err = Decode("i.idx", data, sum, Identity{DataLength: testID.DataLength, DataDigest: testID.DataDigest ^ 1})
	requireCorrupt(t, err)

	_, err = Decode("i.idx", data, sum^1, testID)
	ce = requireCorrupt(t, err)
	require.Contains(t, ce.Reason, "recorded")

	// Another segment's index, intact and with its own checksum: refused by
	// identity. A stale index of this segment (older entries, same identity)
	// is refused by the manifest's checksum.
	otherID := Identity{DataLength: 999, DataDigest: 7}
	other, otherSum := mustEncode(t, smallEntries()[:2], otherID)
	_, err = Decode("i.idx", other, sum, testID)
	requireCorrupt(t, err)
	_, err = Decode("i.idx", other, otherSum, testID)
	requireCorrupt(t, err)
	stale, _ := mustEncode(t, smallEntries()[:3], testID)
	_, err = Decode("i.idx", stale, sum, testID)
	requireCorrupt(t, err)
}

func TestDecodeRejectsUnknownVersionAndFlags(t *testing.T) {
	data, _ := mustEncode(t, smallEntries(), testID)
	for _, field := range []struct {
		off  int
		want string
	}{{8, "version"}, {12, "flags"}} {
		bad := bytes.Clone(data)
		binary.LittleEndian.PutUint32(bad[field.off:], 0x7f)
		sum := reseal(bad)
		_, err := Decode("v.idx", bad, sum, testID)
		ce := requireCorrupt(t, err)
		require.Equal(t, int64(field.off), ce.Offset)
		require.Contains(t, ce.Reason, field.want)
	}
}

func TestDecodeRejectsBadPrefixLength(t *testing.T) {
	data, _ := mustEncode(t, smallEntries(), testID) // key 0 is empty
	binary.LittleEndian.PutUint32(data[60:], 1)
	sum := reseal(data)
	_, err := Decode("p.idx", data, sum, testID)
	ce := requireCorrupt(t, err)
	require.Equal(t, int64(60), ce.Offset)

	empty, _ := mustEncode(t, nil, testID)
	binary.LittleEndian.PutUint32(empty[60:], 3)
	sum = reseal(empty)
	_, err = Decode("p.idx", empty, sum, testID)
	requireCorrupt(t, err)
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
	ix, err := Decode("e.idx", data, sum, testID)
	require.NoError(t, err)
	require.Equal(t, 4, len(ix.prefix))
	checkIndex(t, ix, entries)
	require.NoError(t, ix.Verify("e.idx"))
	for _, p := range []string{"", "p", "pre", "pra", "prf", "pre;", "pre:\x00\x00\x00", "pre:abcdefg",
		"pre:abcdefgh\x00\x00", "pre:abcdefghAB", "pre:abcdefgi\x00", "pre:zzz", "\xff"} {
		want, found := slices.BinarySearchFunc(entries, []byte(p), func(e Entry, k []byte) int { return bytes.Compare(e.Key, k) })
		require.Equal(t, want, ix.Search([]byte(p)), "Search(%q)", p)
		_, ok := ix.Get([]byte(p))
		require.Equal(t, found, ok, "Get(%q)", p)
	}
}

func TestVerifyCatchesWhatOnlyTheChecksumGuards(t *testing.T) {
	entries := []Entry{
		{Key: []byte("a"), Kind: KindPut, Offset: 0, Length: 1},
		{Key: []byte("b"), Kind: KindPut, Offset: 1, Length: 1},
	}
	data, _ := mustEncode(t, entries, testID)
	// Swap the two keys: structurally fine, semantically unsorted.
	i := bytes.Index(data, []byte("a"))
	j := bytes.LastIndex(data, []byte("b"))
	data[i], data[j] = 'b', 'a'
	sum := reseal(data)
	ix, err := Decode("u.idx", data, sum, testID)
	require.NoError(t, err)
	requireCorrupt(t, ix.Verify("u.idx"))
	exercise(t, ix)

	// A bloom filter missing a key.
	data, _ = mustEncode(t, entries, testID)
	clear(data[64 : 64+8])
	sum = reseal(data)
	ix, err = Decode("b.idx", data, sum, testID)
	require.NoError(t, err)
	requireCorrupt(t, ix.Verify("b.idx"))

	// A wrong search word.
	data, _ = mustEncode(t, entries, testID)
	w := bytes.Index(data, []byte("b\x00\x00\x00\x00\x00\x00\x00"))
	data[w] = 'c'
	sum = reseal(data)
	ix, err = Decode("w.idx", data, sum, testID)
	require.NoError(t, err)
	requireCorrupt(t, ix.Verify("w.idx"))
	exercise(t, ix)
}

func TestGetDoesNotAllocate(t *testing.T) {
	entries := genSequential(1000)
	data, sum := mustEncode(t, entries, testID)
	ix, err := Decode("a.idx", data, sum, testID)
	require.NoError(t, err)
	hit := entries[500].Key
	miss := []byte("absent-key")
	allocs := testing.AllocsPerRun(100, func() {
		if _, ok := ix.Get(hit); !ok {
			t.Fatal("hit missed")
		}
		if _, ok := ix.Get(miss); ok {
			t.Fatal("miss hit")
		}
		_ = ix.Search(miss)
	})
	require.Zero(t, allocs)
}

func TestBloomFalsePositiveRate(t *testing.T) {
	entries := genSequential(20000)
	data, sum := mustEncode(t, entries, testID)
	ix, err := Decode("fp.idx", data, sum, testID)
	require.NoError(t, err)
	fp := 0
	const probes = 100000
	for i := range probes {
		if ix.MayContain(fmt.Appendf(nil, "miss:%027d", i)) {
			fp++
		}
	}
	// The filter is sized for 1%; deterministic hashing makes this stable.
	require.Less(t, float64(fp)/probes, 0.02, "false positives: %d of %d", fp, probes)
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
				Kind:   rapid.SampledFrom([]uint8{KindPut, KindDelete}).Draw(rt, "kind"),
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
		require.NoError(rt, ix.Verify("p.idx"))

		present := make(map[string]bool, len(keys))
		for _, k := range keys {
			present[string(k)] = true
		}
		probes := rapid.SliceOfN(keyGen, 0, 30).Draw(rt, "probes")
		for _, p := range probes {
			want, _ := slices.BinarySearchFunc(entries, p, func(e Entry, k []byte) int { return bytes.Compare(e.Key, k) })
			require.Equal(rt, want, ix.Search(p))
			e, ok := ix.Get(p)
			require.Equal(rt, present[string(p)], ok, "Get(%q)", p)
			if ok {
				require.True(rt, bytes.Equal(e.Key, p))
			}
		}
		// In-order iteration from an arbitrary start.
		var prev []byte
		for i := ix.Search(rapid.SliceOfN(rapid.Byte(), 0, 3).Draw(rt, "from")); i < ix.Len(); i++ {
			k := ix.At(i).Key
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
	ce := requireCorrupt(t, err)
	require.Equal(t, "/d/1.idx", ce.Path)
	require.Equal(t, int64(0), ce.Offset)
	require.True(t, errors.Is(err, corruption.ErrCorrupt))
	require.Contains(t, err.Error(), "/d/1.idx")
}

// TestConcurrentReads: an Index is immutable and safe for concurrent use
// (run under -race).
func TestConcurrentReads(t *testing.T) {
	entries := genSequential(2000)
	data, sum := mustEncode(t, entries, testID)
	ix, err := Decode("c.idx", data, sum, testID)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := g; i < len(entries); i += 4 {
				e, ok := ix.Get(entries[i].Key)
				if !ok || e.Offset != entries[i].Offset || ix.Search(entries[i].Key) != i || ix.At(i).Length != entries[i].Length {
					t.Errorf("entry %d wrong under concurrency", i)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestSearchAcrossFences checks Search against a reference lower bound on
// indexes large enough to span many fences, with long runs of keys whose
// search words tie (runs longer than a fence stride, runs crossing fence
// boundaries, and ties created by zero padding).
func TestSearchAcrossFences(t *testing.T) {
	var keys [][]byte
	for a := range byte(4) {
		for b := range 300 {
			keys = append(keys, fmt.Appendf(nil, "%cXXXXXXXX%04d", 'a'+a, b)) // 300 ties per a
		}
		keys = append(keys, []byte{'a' + a}, []byte{'a' + a, 0}, []byte{'a' + a, 0, 0}, []byte{'a' + a, 0, 1})
	}
	for i := range 700 {
		keys = append(keys, fmt.Appendf(nil, "z%d", i*7919%100000))
	}
	slices.SortFunc(keys, bytes.Compare)
	keys = slices.CompactFunc(keys, bytes.Equal)
	entries := make([]Entry, len(keys))
	for i, k := range keys {
		entries[i] = Entry{Key: k, Kind: KindPut, Offset: int64(i), Length: 1}
	}
	data, sum := mustEncode(t, entries, testID)
	ix, err := Decode("f.idx", data, sum, testID)
	require.NoError(t, err)
	require.Greater(t, len(ix.fences), 20)
	checkIndex(t, ix, entries)

	check := func(p []byte) {
		want, found := slices.BinarySearchFunc(entries, p, func(e Entry, k []byte) int { return bytes.Compare(e.Key, k) })
		require.Equal(t, want, ix.Search(p), "Search(%q)", p)
		_, ok := ix.Get(p)
		require.Equal(t, found, ok, "Get(%q)", p)
	}
	for _, k := range keys {
		check(append(bytes.Clone(k), 0))
		check(append(bytes.Clone(k), 0xff))
		if len(k) > 0 {
			check(k[:len(k)-1])
			bumped := bytes.Clone(k)
			bumped[len(bumped)-1]++
			check(bumped)
		}
	}
	for _, p := range []string{"", "\x00", "a\x00\x00\x00", "bXXXXXXX", "bXXXXXXXX", "bXXXXXXXX9", "y", "{"} {
		check([]byte(p))
	}
}

// TestRoundTripPropertyLarge is the round-trip property on larger, denser
// key sets, so that fences and tie runs are exercised at random.
func TestRoundTripPropertyLarge(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		keyGen := rapid.SliceOfN(rapid.ByteRange(0, 2), 0, 12)
		keys := rapid.SliceOfNDistinct(keyGen, 100, 1500, func(k []byte) string { return string(k) }).Draw(rt, "keys")
		slices.SortFunc(keys, bytes.Compare)
		entries := make([]Entry, len(keys))
		for i, k := range keys {
			entries[i] = Entry{Key: k, Kind: KindDelete, Offset: int64(i), Length: 3}
		}
		data, sum, err := Encode(entries, testID)
		require.NoError(rt, err)
		ix, err := Decode("p.idx", data, sum, testID)
		require.NoError(rt, err)
		checkIndex(rt, ix, entries)
		for _, p := range rapid.SliceOfN(keyGen, 1, 100).Draw(rt, "probes") {
			want, found := slices.BinarySearchFunc(entries, p, func(e Entry, k []byte) int { return bytes.Compare(e.Key, k) })
			require.Equal(rt, want, ix.Search(p), "Search(%q)", p)
			_, ok := ix.Get(p)
			require.Equal(rt, found, ok, "Get(%q)", p)
		}
	})
}
