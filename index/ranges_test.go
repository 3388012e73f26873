package index

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/rangedel"
)

func testRanges() *rangedel.Set {
	return rangedel.Union(
		rangedel.Span{Start: []byte("c"), End: []byte("d")},
		rangedel.Span{Start: nil, End: []byte("\x00")},
		rangedel.Span{Start: []byte("x"), End: []byte("y\xff")},
	)
}

// TestRangesRoundTrip: an index with range tombstones is version 2 and
// decodes to the same spans; one without is version 1, byte for byte what
// Encode wrote before range tombstones existed.
func TestRangesRoundTrip(t *testing.T) {
	data, sum, err := EncodeWithRanges(smallEntries(), testRanges(), testID)
	require.NoError(t, err)
	require.Equal(t, uint32(2), binary.LittleEndian.Uint32(data[offVersion:]))
	ix, err := Decode("r.idx", data, sum, testID)
	require.NoError(t, err)
	require.NoError(t, ix.Verify("r.idx"))
	require.Equal(t, testRanges().Spans(), ix.Ranges().Spans())
	require.True(t, ix.Ranges().Covers([]byte("c\x01")))
	require.False(t, ix.Ranges().Covers([]byte("d")))

	plain, _ := mustEncode(t, smallEntries(), testID)
	none, _, err := EncodeWithRanges(smallEntries(), nil, testID)
	require.NoError(t, err)
	require.Equal(t, plain, none)
	require.Equal(t, uint32(1), binary.LittleEndian.Uint32(plain[offVersion:]))
}

// TestRangesDamage: every truncation or bad length in the range section is
// a corruption error, never a panic or a misread.
func TestRangesDamage(t *testing.T) {
	data, _, err := EncodeWithRanges(smallEntries(), testRanges(), testID)
	require.NoError(t, err)
	lenField := len(data) - trailerSize - rangeTrailerSize
	q := int(binary.LittleEndian.Uint64(data[lenField:]))
	for _, mutate := range []func(b []byte){
		func(b []byte) { binary.LittleEndian.PutUint64(b[lenField:], uint64(q+1)) },
		func(b []byte) { binary.LittleEndian.PutUint64(b[lenField:], 1<<62) },
		func(b []byte) { binary.LittleEndian.PutUint32(b[lenField-q:], 99) },      // span count
		func(b []byte) { binary.LittleEndian.PutUint32(b[lenField-q+4:], 1<<30) }, // first start length
		func(b []byte) { copy(b[lenField-2:], "\x00\x00") },                       // last end key changes
	} {
		bad := bytes.Clone(data)
		mutate(bad)
		sum := reseal(bad)
		_, err := Decode("r.idx", bad, sum, testID)
		requireCorrupt(t, err)
	}
	// Spans out of order are refused even with a valid checksum.
	swapped := rangedel.Span{Start: []byte("b"), End: []byte("a")}
	_, err = rangedel.FromCanonical([]rangedel.Span{swapped})
	require.ErrorIs(t, err, rangedel.ErrNotCanonical)
}
