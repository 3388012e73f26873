package index

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/bits-and-blooms/bloom/v3"
	"github.com/stretchr/testify/require"
)

// The bloom filter's bits are part of the index format: a file written
// today answers "maybe present" only if the code that reads it tomorrow
// hashes every key to the same bit positions. The filter comes from
// github.com/bits-and-blooms/bloom/v3, so a dependency update that changed
// its hashing, its sizing estimates or its word layout would make every
// existing index answer "not found" for keys it holds, silently. These
// files, written once by the code of 2026-12-06 (bloom v3.7.1), pin it:
//
//   - testdata/bloom-golden.idx: a version 3 index of goldenBloomEntries;
//   - testdata/bloom-golden.locations: for the first goldenLocationKeys
//     keys, the 64-bit locations bloom.Locations returns for
//     goldenLocationCount hashes (the reader takes them modulo m).
//
// They must never be rewritten to make a failing test pass: a failure means
// the new code reads existing files differently. The flag below exists
// only to write them the first time.
var writeBloomGolden = flag.Bool("write-bloom-golden", false, "write testdata/bloom-golden.* from today's code (never for files that shipped)")

const (
	bloomGoldenIndex     = "testdata/bloom-golden.idx"
	bloomGoldenLocations = "testdata/bloom-golden.locations"
	goldenLocationKeys   = 24
	goldenLocationCount  = 16 // more than any k the estimates give for 1%
)

var goldenBloomID = Identity{DataLength: 1 << 20, DataDigest: 0x5eed5eed5eed5eed}

// goldenBloomEntries is the fixed key set: an empty key, a NUL, text keys
// of several lengths and shared prefixes, binary keys, and one long key, in
// key order. Nothing here may change once the golden files exist.
func goldenBloomEntries() []Entry {
	keys := [][]byte{{}, {0}, {0, 0}, {0xff}, {0xff, 0xff, 0xff, 0xff}, bytes.Repeat([]byte("long"), 100)}
	for i := range 200 {
		keys = append(keys, fmt.Appendf(nil, "user:%06d", i))
	}
	for i := range 50 {
		keys = append(keys, fmt.Appendf(nil, "k%d", i*7919))
	}
	// Binary keys from a fixed linear congruential sequence (spelled out
	// here so no library's generator can change under the test).
	x := uint64(0x9e3779b97f4a7c15)
	for i := range 50 {
		x = x*6364136223846793005 + 1442695040888963407
		keys = append(keys, binary.BigEndian.AppendUint64(nil, x)[:1+i%8])
	}
	entries := make([]Entry, 0, len(keys))
	seen := map[string]bool{}
	for _, k := range keys {
		if !seen[string(k)] {
			seen[string(k)] = true
			entries = append(entries, Entry{Key: k, Kind: KindPut, Length: 10})
		}
	}
	sorted := SortedEntries(len(entries), func(yield func(string, Entry) bool) {
		for _, e := range entries {
			if !yield(string(e.Key), e) {
				return
			}
		}
	})
	for i := range sorted {
		sorted[i].Offset = 16 + 10*int64(i)
		if i%5 == 4 {
			sorted[i].Kind = KindDelete
		}
	}
	return sorted
}

// formatLocations is the text of bloom-golden.locations for entries.
func formatLocations(entries []Entry) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# key (hex); bloom.Locations(key, %d), decimal\n", goldenLocationCount)
	for _, e := range entries[:goldenLocationKeys] {
		fmt.Fprintf(&b, "%x", e.Key)
		if len(e.Key) == 0 {
			b.WriteString("-")
		}
		for _, l := range bloom.Locations(e.Key, goldenLocationCount) {
			b.WriteString(" " + strconv.FormatUint(l, 10))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// TestBloomGolden checks both directions: today's code builds exactly the
// golden filter (parameters, bits and hash locations) from the fixed keys,
// and the golden file, read by today's code, answers "maybe present" (and
// finds the entry) for every one of them.
func TestBloomGolden(t *testing.T) {
	entries := goldenBloomEntries()
	if *writeBloomGolden {
		data, _ := mustEncode(t, entries, goldenBloomID)
		require.NoError(t, os.WriteFile(bloomGoldenIndex, data, 0o644))
		require.NoError(t, os.WriteFile(bloomGoldenLocations, []byte(formatLocations(entries)), 0o644))
	}
	golden, err := os.ReadFile(bloomGoldenIndex)
	require.NoError(t, err)
	goldenLocs, err := os.ReadFile(bloomGoldenLocations)
	require.NoError(t, err)
	ix := mustDecode(t, bloomGoldenIndex, golden, checksumOf(golden), goldenBloomID)
	require.Equal(t, len(entries), ix.Len())

	t.Run("todays filter is the golden one", func(t *testing.T) {
		m, k, words, _, err := bloomAndPrefix(entries)
		require.NoError(t, err)
		require.Equal(t, ix.bloomM, m, "bloom size m in bits")
		require.Equal(t, ix.bloomK, int(k), "bloom hash count k")
		var bits []byte
		for _, w := range words {
			bits = binary.LittleEndian.AppendUint64(bits, w)
		}
		require.True(t, bytes.Equal(ix.bloom, bits), "bloom bits built today differ from the golden file's")
		require.Equal(t, string(goldenLocs), formatLocations(entries), "hash locations of the golden keys")
		// The streaming writer and Verify build the filter their own way.
		data, sum := mustEncode(t, entries, goldenBloomID)
		encoded := mustDecode(t, "encoded.idx", data, sum, goldenBloomID)
		require.Equal(t, ix.bloomM, encoded.bloomM)
		require.True(t, bytes.Equal(ix.bloom, encoded.bloom), "Encode writes other bloom bits than the golden file holds")
		require.NoError(t, ix.Verify(), "Verify rebuilds the filter from the keys and compares it with the golden bits")
	})

	t.Run("golden filter answers maybe present for every key", func(t *testing.T) {
		for _, e := range entries {
			p := NewProbe(e.Key)
			ok, err := ix.MayContain(&p)
			require.NoError(t, err)
			require.True(t, ok, "golden filter says key %x is absent", e.Key)
			got, found, err := ix.Get(&p)
			require.NoError(t, err)
			require.True(t, found, "key %x", e.Key)
			require.Equal(t, e.Offset, got.Offset)
		}
		checkIndex(t, ix, entries)
	})
}
