package index

import (
	"bytes"
	"fmt"
	"slices"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// Search finds the block from the first keys (held in the top block) by
// their search word and, on a tie, the whole key, then searches one block.
// These tests put ties, prefixes and short keys on block boundaries.

func entriesFor(keys [][]byte) []Entry {
	slices.SortFunc(keys, bytes.Compare)
	keys = slices.CompactFunc(keys, bytes.Equal)
	entries := make([]Entry, len(keys))
	for i, k := range keys {
		entries[i] = Entry{Key: k, Kind: KindPut, Offset: int64(i), Length: 1}
	}
	return entries
}

// lowerBound is the reference: sort.Search over the entries.
func lowerBound(entries []Entry, key []byte) int {
	return sort.Search(len(entries), func(i int) bool { return bytes.Compare(entries[i].Key, key) >= 0 })
}

// checkSearch compares Search and Get for p with the reference.
func checkSearch(t tb, ix *Index, entries []Entry, p []byte) {
	t.Helper()
	want := lowerBound(entries, p)
	got, err := ix.Search(p)
	require.NoError(t, err, "Search(%q)", p)
	require.Equal(t, want, got, "Search(%q)", p)
	found := want < len(entries) && bytes.Equal(entries[want].Key, p)
	e, ok, err := ix.Get(probeOf(p))
	require.NoError(t, err, "Get(%q)", p)
	require.Equal(t, found, ok, "Get(%q)", p)
	if ok {
		require.Equal(t, entries[want], e)
	}
}

// probesAround returns probes at and next to every key: the key, a proper
// prefix, the key extended by 0x00 and 0xff, the last byte bumped up and
// down.
func probesAround(keys []Entry) [][]byte {
	var out [][]byte
	for _, e := range keys {
		k := e.Key
		out = append(out, k, append(bytes.Clone(k), 0), append(bytes.Clone(k), 0xff))
		if len(k) > 0 {
			out = append(out, k[:len(k)-1])
			if k[len(k)-1] < 0xff {
				up := bytes.Clone(k)
				up[len(up)-1]++
				out = append(out, up)
			}
			if k[len(k)-1] > 0 {
				down := bytes.Clone(k)
				down[len(down)-1]--
				out = append(out, down, append(down, 0xff, 0xff))
			}
		}
	}
	return out
}

// TestSearchAcrossBlocks: runs of keys whose search words tie, longer than
// a block and crossing block boundaries, ties made by zero padding, and
// keys that are prefixes of others.
func TestSearchAcrossBlocks(t *testing.T) {
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
	entries := entriesFor(keys)
	data, sum := mustEncode(t, entries, testID)
	ix := mustDecode(t, "s.idx", data, sum, testID)
	require.Greater(t, ix.blocks, 10)
	require.Empty(t, ix.prefix)
	checkIndex(t, ix, entries)
	require.NoError(t, ix.Verify())
	// Some block starts inside a tie run: its first word equals the
	// previous block's first word.
	ties := 0
	for b := 1; b < ix.blocks; b++ {
		if ix.firstWords[b] == ix.firstWords[b-1] {
			ties++
		}
	}
	require.Positive(t, ties)

	for _, p := range probesAround(entries) {
		checkSearch(t, ix, entries, p)
	}
	for _, p := range []string{"", "\x00", "a\x00\x00\x00", "bXXXXXXX", "bXXXXXXXX", "bXXXXXXXX9", "y", "{", "\xff"} {
		checkSearch(t, ix, entries, []byte(p))
	}
}

// TestSearchTiesAfterPrefix: every key shares a prefix, and more than three
// blocks' worth of keys share the 8 bytes after it, so that the block is
// chosen by whole key among first keys with equal words. Probes are
// shorter than the prefix, diverge inside it, equal it, or are prefixes of
// keys.
func TestSearchTiesAfterPrefix(t *testing.T) {
	const pfx = "tenant/42/"
	var keys [][]byte
	keys = append(keys, []byte(pfx+"SAMEWORD"), []byte(pfx+"SAMEWOR"), []byte(pfx+"SAMEWOR\x00"),
		[]byte(pfx+"SAMEWORD\x00"), []byte(pfx+"SAMEWORE"), []byte(pfx+"A"), []byte(pfx+"zzzzzzzzzz"))
	for i := range 500 {
		keys = append(keys, fmt.Appendf(nil, pfx+"SAMEWORD%d", i*37%1000)) // variable length after the tie
	}
	for i := range 100 {
		keys = append(keys, fmt.Appendf(nil, pfx+"SAMEWORD%03d/x", i))
	}
	entries := entriesFor(keys)
	data, sum := mustEncode(t, entries, testID)
	ix := mustDecode(t, "p.idx", data, sum, testID)
	require.Equal(t, pfx, string(ix.prefix))
	require.GreaterOrEqual(t, ix.blocks, 4)
	sameWord := searchWord([]byte("SAMEWORD"))
	tied := 0
	for b := range ix.blocks {
		if ix.firstWords[b] == sameWord {
			tied++
		}
	}
	require.GreaterOrEqual(t, tied, 3, "blocks whose first keys tie on their word")
	checkIndex(t, ix, entries)
	require.NoError(t, ix.Verify())

	for _, p := range probesAround(entries) {
		checkSearch(t, ix, entries, p)
	}
	for _, p := range []string{
		"", "t", "tenant/4", "tenant/41", "tenant/43", "tenant/42", pfx[:len(pfx)-1] + "\xff", pfx, pfx + "\x00",
		pfx + "SAMEWORD", pfx + "SAMEWORD0", pfx + "SAMEWORD5", pfx + "SAMEWORD500", pfx + "SAMEWORD99", pfx + "SAMEWORD999\x00",
		pfx + "SAMEWORC\xff\xff", pfx + "SAMEWORE", pfx + "SAMEWORF", "u", "\xff",
	} {
		checkSearch(t, ix, entries, []byte(p))
	}
}

// TestSearchWithEmptyKey: an index whose first key is the empty key (no
// common prefix), over several blocks.
func TestSearchWithEmptyKey(t *testing.T) {
	keys := [][]byte{{}, {0}, {0, 0}, {1}}
	for i := range 400 {
		keys = append(keys, fmt.Appendf(nil, "%08d", i), fmt.Appendf(nil, "%08d", i)[:7])
	}
	entries := entriesFor(keys)
	data, sum := mustEncode(t, entries, testID)
	ix := mustDecode(t, "e.idx", data, sum, testID)
	require.Empty(t, ix.prefix)
	require.Greater(t, ix.blocks, 2)
	checkIndex(t, ix, entries)
	for _, p := range probesAround(entries) {
		checkSearch(t, ix, entries, p)
	}
	checkSearch(t, ix, entries, nil)
}

// TestSearchProperty compares Search and Get with sort.Search on random key
// sets of up to 1000 keys (several blocks), drawn so that they share a
// prefix, tie on the 8 bytes after it, are prefixes of one another, are
// empty or shorter than the prefix.
func TestSearchProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		prefix := rapid.SampledFrom([]string{"", "p", "pfx/", "pfx/SAMEWORD"}).Draw(rt, "prefix")
		tail := rapid.OneOf(
			rapid.SliceOfN(rapid.ByteRange(0, 2), 0, 10),                      // dense, zero bytes, prefixes of each other
			rapid.Map(rapid.SliceOfN(rapid.ByteRange(0, 255), 0, 4), tieWord), // same 8 bytes, then anything
			rapid.SliceOfN(rapid.Byte(), 0, 20),
		)
		keyGen := rapid.Map(tail, func(b []byte) []byte { return append([]byte(prefix), b...) })
		// rapid favours short slices: draw the size first, so that most
		// sets span several blocks.
		n := rapid.OneOf(rapid.IntRange(0, 1000), rapid.SampledFrom([]int{127, 128, 129, 256, 257})).Draw(rt, "n")
		keys := rapid.SliceOfNDistinct(keyGen, n, n, func(k []byte) string { return string(k) }).Draw(rt, "keys")
		if rapid.Bool().Draw(rt, "with empty key") {
			keys = append(keys, []byte{})
		}
		if rapid.Bool().Draw(rt, "with a key shorter than the prefix") && len(prefix) > 1 {
			keys = append(keys, []byte(prefix[:len(prefix)-1]))
		}
		entries := entriesFor(keys)
		data, sum, err := Encode(entries, testID)
		require.NoError(rt, err)
		ix, err := Decode("q.idx", data, sum, testID)
		require.NoError(rt, err)
		require.Equal(rt, (len(entries)+BlockEntries-1)/BlockEntries, ix.blocks)

		probeGen := rapid.OneOf(keyGen, rapid.SliceOfN(rapid.Byte(), 0, 14),
			rapid.Map(rapid.IntRange(0, len(prefix)), func(n int) []byte { return []byte(prefix[:n]) }))
		for _, p := range rapid.SliceOfN(probeGen, 0, 50).Draw(rt, "probes") {
			checkSearch(rt, ix, entries, p)
		}
		// Every key and its neighbours, on small sets; a sample on large.
		around := probesAround(entries)
		step := max(1, len(around)/300)
		for i := 0; i < len(around); i += step {
			checkSearch(rt, ix, entries, around[i])
		}
		// Keys on block boundaries and their neighbours, always.
		for b := 0; b < len(entries); b += BlockEntries {
			for _, p := range probesAround(entries[max(0, b-1):min(len(entries), b+1)]) {
				checkSearch(rt, ix, entries, p)
			}
		}
	})
}

// tieWord prepends the same 8 bytes to b.
func tieWord(b []byte) []byte { return append([]byte("TIETIETI"), b...) }
