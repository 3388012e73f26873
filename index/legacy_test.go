package index

import (
	"bytes"
	"encoding/binary"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/internal/testutil"
	"github.com/segkv/segkv/rangedel"
)

// TestLegacyChecksumPinned: LegacyChecksum gives the very checksums the
// version 1 and 2 encoder of commit b3459c7 returned (and manifests written
// before version 3 recorded) for the same entries, ranges and identity.
func TestLegacyChecksumPinned(t *testing.T) {
	for _, c := range []struct {
		name    string
		entries []Entry
		ranges  *rangedel.Set
		id      Identity
		want    uint64
	}{
		{"v1 small", smallEntries(), nil, testID, 0x6ee40213b7cd0075},
		{"v2 small", smallEntries(), testRanges(), testID, 0xe0a57562c439c825},
		{"v1 1000", genSequential(1000), nil, testID, 0x00beff959ec57726},
		{"v1 empty", nil, nil, Identity{}, 0xf4cf4f3bf25e42a6},
	} {
		got, err := LegacyChecksum(c.entries, c.ranges, c.id)
		require.NoError(t, err, c.name)
		require.Equal(t, c.want, got, "%s: %#016x", c.name, got)
	}
}

// TestEncodeUpgrade: an upgraded index is the version 3 index of the same
// entries carrying the legacy checksum, which Decode accepts in place of
// its own; Anchor returns it, so that the manifest need not change.
func TestEncodeUpgrade(t *testing.T) {
	for _, ranges := range []*rangedel.Set{nil, testRanges()} {
		for _, entries := range [][]Entry{nil, smallEntries(), genSequential(1000)} {
			legacy, err := LegacyChecksum(entries, ranges, testID)
			require.NoError(t, err)
			require.NotZero(t, legacy)
			data, sum, err := EncodeUpgrade(entries, ranges, testID, legacy)
			require.NoError(t, err)
			require.Equal(t, legacy, sum, "EncodeUpgrade returns the value the manifest holds")
			plain, plainSum, err := EncodeWithRanges(entries, ranges, testID)
			require.NoError(t, err)
			require.Len(t, data, len(plain), "an upgraded index differs only in its top block's fields")
			top := checkTop(t, data)
			require.Equal(t, legacy, binary.LittleEndian.Uint64(data[top+topLegacy:]))
			require.Zero(t, binary.LittleEndian.Uint64(plain[top+topLegacy:]))
			diff := 0
			for i := range data {
				if data[i] != plain[i] {
					diff++
					require.True(t, i >= top+topLegacy && i < top+topLegacy+8 || i >= len(data)-32-8 && i < len(data)-32,
						"byte %d differs outside the legacy field and the top checksum", i)
				}
			}
			require.Positive(t, diff)
			own := checksumOf(data)
			require.NotEqual(t, plainSum, own)

			for _, want := range []uint64{legacy, own} {
				ix := mustDecode(t, "u.idx", data, want, testID)
				require.Equal(t, legacy, ix.Anchor(), "Anchor is the legacy checksum")
				require.Equal(t, own, ix.Checksum(), "Checksum is the top block's")
				checkIndex(t, ix, entries)
				require.NoError(t, ix.Verify())
				require.Equal(t, ranges.Spans(), ix.Ranges().Spans())
			}
			for _, wrong := range []uint64{0, legacy ^ 1, own ^ 1, plainSum, ^legacy} {
				_, err := Decode("u.idx", data, wrong, testID)
				ce := testutil.RequireCorrupt(t, err, "checksum %#x", wrong)
				require.Contains(t, ce.Reason, "recorded")
			}
			// The plain index is not accepted against the legacy checksum,
			// and a zero legacy field does not match a zero checksum.
			_, err = Decode("u.idx", plain, legacy, testID)
			testutil.RequireCorrupt(t, err)
			_, err = Decode("u.idx", plain, 0, testID)
			testutil.RequireCorrupt(t, err)
			ix := mustDecode(t, "u.idx", plain, plainSum, testID)
			require.Equal(t, plainSum, ix.Anchor())
			// Nor against another identity.
			_, err = Decode("u.idx", data, legacy, Identity{DataLength: testID.DataLength, DataDigest: 1})
			testutil.RequireCorrupt(t, err)
		}
	}
}

func TestEncodeUpgradeRefusesZero(t *testing.T) {
	data, sum, err := EncodeUpgrade(smallEntries(), nil, testID, 0)
	require.ErrorIs(t, err, ErrInvalidEntries)
	require.Nil(t, data)
	require.Zero(t, sum)
}

// TestUpgradedIndexHeals: the index rebuilt for an upgraded one is checked
// by its top block checksum, so a Repair that decodes the upgraded bytes
// against the legacy checksum heals it.
func TestUpgradedIndexHeals(t *testing.T) {
	entries := genSequential(1000)
	legacy, err := LegacyChecksum(entries, nil, testID)
	require.NoError(t, err)
	data, _, err := EncodeUpgrade(entries, nil, testID, legacy)
	require.NoError(t, err)
	intact := mustDecode(t, "u.idx", data, legacy, testID)
	off, n := blockSpan(intact, 3)
	var calls atomic.Int64
	ix := loadWith(t, damage(data, off, n), legacy, testID, counted(t, &calls, data, legacy, testID))
	checkIndex(t, ix, entries)
	require.True(t, ix.Healed())
	require.Equal(t, int64(1), calls.Load())
	require.Equal(t, legacy, ix.Anchor())

	// A Repair that returns the plain (not upgraded) index of the same
	// entries does not match the verified top block: refused.
	plain, plainSum := mustEncode(t, entries, testID)
	calls.Store(0)
	ix = loadWith(t, damage(data, off, n), legacy, testID, counted(t, &calls, plain, plainSum, testID))
	_, err = ix.At(3*BlockEntries + 1)
	testutil.RequireCorrupt(t, err)
	require.False(t, ix.Healed())
	require.Equal(t, int64(1), calls.Load())
}

// TestLegacyEncoderIsV1V2: encodeLegacy writes version 1 without ranges and
// version 2 with them, checksummed whole, as before.
func TestLegacyEncoderIsV1V2(t *testing.T) {
	le := binary.LittleEndian
	data, sum, err := encodeLegacy(smallEntries(), nil, testID)
	require.NoError(t, err)
	require.Equal(t, "segkvidx", string(data[:8]))
	require.Equal(t, uint32(1), le.Uint32(data[8:]))
	require.Equal(t, sum, le.Uint64(data[len(data)-8:]))
	ranged, _, err := encodeLegacy(smallEntries(), testRanges(), testID)
	require.NoError(t, err)
	require.Equal(t, uint32(2), le.Uint32(ranged[8:]))
	require.True(t, bytes.Equal(data[16:40], ranged[16:40]), "same count and identity")
}
