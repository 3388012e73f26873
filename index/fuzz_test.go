package index

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/corruption"
)

// Fuzz modes: how much of the input the harness vouches for before Decode.
const (
	fuzzAsIs       = 0 // checksum and identity as given
	fuzzTrustTop   = 1 // reseal the top block, take checksum and identity from it
	fuzzTrustParts = 2 // also reseal every key block, bloom chunk and the range section
	fuzzModes      = 3
)

// fuzzSeed is one input of FuzzDecode.
type fuzzSeed struct {
	name string
	data []byte
	sum  uint64
	id   Identity
	mode uint8
}

// fuzzSeeds returns real encoded files (empty, small, multi-block, with
// ranges, upgraded, legacy versions) in every mode, and some damaged ones.
func fuzzSeeds(t testing.TB) []fuzzSeed {
	t.Helper()
	var seeds []fuzzSeed
	add := func(name string, data []byte, sum uint64, id Identity) {
		for mode := range uint8(fuzzModes) {
			seeds = append(seeds, fuzzSeed{fmt.Sprintf("%s-%d", name, mode), data, sum, id, mode})
		}
	}
	empty, emptySum := mustEncode(t, nil, Identity{})
	add("valid-empty", empty, emptySum, Identity{})
	small, smallSum := mustEncode(t, smallEntries(), testID)
	add("valid-small", small, smallSum, testID)
	multi, multiSum := mustEncode(t, shortEntries(140), testID)
	add("valid-multi", multi, multiSum, testID)
	ranged, rangedSum, err := EncodeWithRanges(smallEntries(), testRanges(), testID)
	require.NoError(t, err)
	add("valid-ranges", ranged, rangedSum, testID)
	blockFile, blockFileSum, err := EncodeBlockFile(blockFileEntries(300, 7), testRanges(), testID)
	require.NoError(t, err)
	add("valid-blockfile", blockFile, blockFileSum, testID)
	legacy, err := LegacyChecksum(smallEntries(), nil, testID)
	require.NoError(t, err)
	upgraded, _, err := EncodeUpgrade(smallEntries(), nil, testID, legacy)
	require.NoError(t, err)
	add("valid-upgraded", upgraded, legacy, testID)
	v1, v1Sum, err := encodeLegacy(smallEntries(), nil, testID)
	require.NoError(t, err)
	add("legacy-v1", v1, v1Sum, testID)
	v2, v2Sum, err := encodeLegacy(smallEntries(), testRanges(), testID)
	require.NoError(t, err)
	add("legacy-v2", v2, v2Sum, testID)

	seeds = append(seeds,
		fuzzSeed{"torn-half", small[:len(small)/2], smallSum, testID, fuzzAsIs},
		fuzzSeed{"stale-identity", small, smallSum, Identity{DataLength: 1, DataDigest: 2}, fuzzAsIs},
		fuzzSeed{"garbage", []byte("segkvidx\x03\x00\x00\x00 not an index at all, just text......................"), 0, Identity{}, fuzzTrustTop},
	)
	flipped := bytes.Clone(multi)
	flipped[100] ^= 0x40 // inside block 0
	seeds = append(seeds, fuzzSeed{"flipped-block", flipped, multiSum, testID, fuzzAsIs},
		fuzzSeed{"flipped-block-trusted", flipped, 0, Identity{}, fuzzTrustParts})
	badOffset := bytes.Clone(small)
	binary.LittleEndian.PutUint32(badOffset[16+8*6+4:], 0xffff) // off[1] of block 0: 6 search words before the offsets
	seeds = append(seeds, fuzzSeed{"bad-offset-trusted", badOffset, 0, Identity{}, fuzzTrustParts})
	// The footer places the top block inside itself, with a length that
	// wraps around (found by TestFooterTopBlockPastFooter).
	wrap := bytes.Clone(small)
	size := uint64(len(wrap))
	binary.LittleEndian.PutUint64(wrap[size-32:], size-31)
	binary.LittleEndian.PutUint64(wrap[size-24:], ^uint64(0))
	seeds = append(seeds, fuzzSeed{"footer-wraps", wrap, smallSum, testID, fuzzAsIs})
	// A layout Encode never writes, which every check but Verify's claim
	// accepts (see TestVerifyIsByteExact).
	odd := bytes.Clone(small)
	top := checkTop(t, odd)
	binary.LittleEndian.PutUint32(odd[top+topBlockEntries:], 1000)
	binary.LittleEndian.PutUint32(odd[top+topChunkWords:], 1000)
	binary.LittleEndian.PutUint32(odd[top+topFlags:], 0)
	seeds = append(seeds, fuzzSeed{"nonstandard-layout", odd, 0, Identity{}, fuzzTrustTop})
	return seeds
}

// FuzzDecode feeds arbitrary bytes, checksums and identities to Decode. It
// must never panic; every error, of Decode or of any later read, must be a
// *corruption.Error; a decoded index must serve reads that stay in bounds
// and are consistent with its own entries (exercise), and when Verify
// passes every read must succeed and a re-encoding of its entries must
// decode to the same entries with the same checksum.
//
// mode%3 selects how much the harness vouches for (see fuzzAsIs...): with
// trust, it reseals the checksums and takes the checksum and identity from
// the input itself (as if the damage predated the manifest's record), so
// that the fuzzer reaches the structural checks behind the checksums.
func FuzzDecode(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s.data, s.sum, s.id.DataLength, s.id.DataDigest, s.mode)
	}
	f.Add([]byte{}, uint64(0), int64(0), uint64(0), uint8(0))

	f.Fuzz(func(t *testing.T, data []byte, checksum uint64, dataLength int64, digest uint64, mode uint8) {
		id := Identity{DataLength: dataLength, DataDigest: digest}
		switch mode % fuzzModes {
		case fuzzTrustTop:
			data = bytes.Clone(data)
			checksum, _ = resealTop(data)
			id = topIdentity(data)
		case fuzzTrustParts:
			data = bytes.Clone(data)
			checksum, _ = resealAll(data)
			id = topIdentity(data)
		}
		ix, err := Decode("fuzz.idx", data, checksum, id)
		if err != nil {
			var ce *corruption.Error
			if !errors.As(err, &ce) {
				t.Fatalf("Decode error is not a *corruption.Error: %T %v", err, err)
			}
			return
		}
		require.True(t, checksum == ix.Checksum() || checksum == ix.Anchor(), "accepted against %#x", checksum)
		require.Equal(t, id, ix.Identity())
		exercise(t, ix)
		if ix.Verify() != nil {
			return
		}
		entries := make([]Entry, ix.Len())
		for i := range entries {
			e, err := ix.At(i)
			require.NoError(t, err)
			entries[i] = e
		}
		// Its entries re-encode to an index with the same entries. (Not
		// necessarily the same bytes: see TestVerifyIsByteExact.)
		var again []byte
		var sum uint64
		switch {
		case ix.BlockFile():
			// Each entry a block holding only its last key: the same
			// entries (the bloom filter differs, holding fewer keys).
			again, sum, err = EncodeBlockFile(entries, ix.Ranges(), id)
			require.NoError(t, err)
		case ix.Anchor() != ix.Checksum():
			again, sum, err = EncodeUpgrade(entries, ix.Ranges(), id, ix.Anchor())
			require.NoError(t, err)
			require.Equal(t, ix.Anchor(), sum)
		default:
			again, sum, err = EncodeWithRanges(entries, ix.Ranges(), id)
			require.NoError(t, err)
		}
		re := mustDecode(t, "again.idx", again, sum, id)
		checkIndex(t, re, entries)
		require.NoError(t, re.Verify())
		require.Equal(t, ix.Ranges().Spans(), re.Ranges().Spans())
		if ix.Anchor() != ix.Checksum() {
			require.Equal(t, ix.Anchor(), re.Anchor())
		}
	})
}

// TestWriteFuzzSeeds regenerates the committed seed corpus under
// testdata/fuzz/FuzzDecode after a format change:
//
//	SEGKV_WRITE_FUZZ_SEEDS=1 go test -run TestWriteFuzzSeeds ./index/
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("SEGKV_WRITE_FUZZ_SEEDS") == "" {
		t.Skip("set SEGKV_WRITE_FUZZ_SEEDS=1 to rewrite the seed corpus")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzDecode")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	for _, s := range fuzzSeeds(t) {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\nuint64(%d)\nint64(%d)\nuint64(%d)\nuint8(%d)\n",
			s.data, s.sum, s.id.DataLength, s.id.DataDigest, s.mode)
		require.NoError(t, os.WriteFile(filepath.Join(dir, s.name), []byte(body), 0o644))
	}
}
