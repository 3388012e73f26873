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

// FuzzDecode feeds arbitrary bytes, checksums and identities to Decode. It
// must never panic; an error must be a *corruption.Error; a success must
// serve lookups that stay in bounds and agree with At whenever Verify passes,
// and a verified index must re-encode to the very same bytes.
//
// With trust set, the harness repairs the trailer and takes the checksum and
// identity from the input itself (as if the damage predated the manifest's
// record), so that the fuzzer reaches the structural checks behind the
// checksum instead of stopping at it.
func FuzzDecode(f *testing.F) {
	for _, entries := range [][]Entry{nil, smallEntries(), genSequential(3)} {
		data, sum, err := Encode(entries, testID)
		require.NoError(f, err)
		f.Add(data, sum, testID.DataLength, testID.DataDigest, false)
		f.Add(data, sum, testID.DataLength, testID.DataDigest, true)
	}
	f.Add([]byte{}, uint64(0), int64(0), uint64(0), false)
	ranged, rsum, err := EncodeWithRanges(smallEntries(), testRanges(), testID)
	require.NoError(f, err)
	f.Add(ranged, rsum, testID.DataLength, testID.DataDigest, false)
	f.Add(ranged, rsum, testID.DataLength, testID.DataDigest, true)

	f.Fuzz(func(t *testing.T, data []byte, checksum uint64, dataLength int64, digest uint64, trust bool) {
		id := Identity{DataLength: dataLength, DataDigest: digest}
		if trust && len(data) >= headerSize+trailerSize {
			data = bytes.Clone(data)
			checksum = reseal(data)
			id = Identity{
				DataLength: int64(binary.LittleEndian.Uint64(data[offDataLen:])),
				DataDigest: binary.LittleEndian.Uint64(data[offDigest:]),
			}
		}
		ix, err := Decode("fuzz.idx", data, checksum, id)
		if err != nil {
			var ce *corruption.Error
			if !errors.As(err, &ce) {
				t.Fatalf("Decode error is not a *corruption.Error: %T %v", err, err)
			}
			return
		}
		require.Equal(t, checksum, ix.Checksum())
		require.Equal(t, id, ix.Identity())
		exercise(t, ix)
		if ix.Verify("fuzz.idx") != nil {
			return
		}
		entries := make([]Entry, ix.Len())
		for i := range entries {
			entries[i] = ix.At(i)
		}
		again, sum, err := EncodeWithRanges(entries, ix.Ranges(), id)
		require.NoError(t, err)
		require.Equal(t, data, again, "a verified index re-encodes to the same bytes")
		require.Equal(t, checksum, sum)
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
	write := func(name string, data []byte, sum uint64, id Identity, trust bool) {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\nuint64(%d)\nint64(%d)\nuint64(%d)\nbool(%t)\n",
			data, sum, id.DataLength, id.DataDigest, trust)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644))
	}
	small, smallSum := mustEncode(t, smallEntries(), testID)
	empty, emptySum := mustEncode(t, nil, Identity{})
	write("valid-small", small, smallSum, testID, false)
	write("valid-small-trusted", small, smallSum, testID, true)
	write("valid-empty", empty, emptySum, Identity{}, false)
	write("valid-empty-trusted", empty, emptySum, Identity{}, true)
	ranged, rangedSum, err := EncodeWithRanges(smallEntries(), testRanges(), testID)
	require.NoError(t, err)
	write("valid-ranges", ranged, rangedSum, testID, false)
	write("valid-ranges-trusted", ranged, rangedSum, testID, true)
	write("torn-half", small[:len(small)/2], smallSum, testID, false)
	write("stale-identity", small, smallSum, Identity{DataLength: 1, DataDigest: 2}, false)
	flipped := bytes.Clone(small)
	flipped[len(flipped)-20] ^= 0x40 // inside the last key
	write("flipped-key-trusted", flipped, 0, Identity{}, true)
	badOffset := bytes.Clone(small)
	binary.LittleEndian.PutUint32(badOffset[headerSize+8+8*6+4:], 0xffff) // off[1]: 1 bloom word, 6 search words
	write("bad-offset-trusted", badOffset, 0, Identity{}, true)
	write("garbage", []byte("segkvidx\x01\x00\x00\x00 not an index at all, just text......................"), 0, Identity{}, true)
}
