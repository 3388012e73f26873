package index

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/internal/testutil"
	"github.com/segkv/segkv/rangedel"
)

func testRanges() *rangedel.Set {
	return rangedel.Union(
		rangedel.Span{Start: []byte("c"), End: []byte("d")},
		rangedel.Span{Start: nil, End: []byte("\x00")},
		rangedel.Span{Start: []byte("x"), End: []byte("y\xff")},
	)
}

// rangeSection returns the offset and length of data's range section.
func rangeSection(t testing.TB, data []byte) (off, length int) {
	t.Helper()
	top := checkTop(t, data)
	le := binary.LittleEndian
	return int(le.Uint64(data[top+topRangeOff:])), int(le.Uint64(data[top+topRangeLen:]))
}

// TestRangesRoundTrip: an index with range tombstones decodes to the same
// spans; one without has an empty range section, and EncodeWithRanges with
// no span writes exactly what Encode writes.
func TestRangesRoundTrip(t *testing.T) {
	data, sum, err := EncodeWithRanges(smallEntries(), testRanges(), testID)
	require.NoError(t, err)
	require.Equal(t, uint32(3), binary.LittleEndian.Uint32(data[8:]))
	off, length := rangeSection(t, data)
	require.Positive(t, length)
	require.Equal(t, checkTop(t, data), off+length, "the range section ends where the top block starts")
	ix := mustDecode(t, "r.idx", data, sum, testID)
	require.NoError(t, ix.Verify())
	checkIndex(t, ix, smallEntries())
	require.Equal(t, testRanges().Spans(), ix.Ranges().Spans())
	require.True(t, ix.Ranges().Covers([]byte("c\x01")))
	require.False(t, ix.Ranges().Covers([]byte("d")))

	plain, plainSum := mustEncode(t, smallEntries(), testID)
	for _, empty := range []*rangedel.Set{nil, rangedel.Union()} {
		none, noneSum, err := EncodeWithRanges(smallEntries(), empty, testID)
		require.NoError(t, err)
		require.Equal(t, plain, none)
		require.Equal(t, plainSum, noneSum)
	}
	_, length = rangeSection(t, plain)
	require.Zero(t, length)
	ix = mustDecode(t, "r.idx", plain, plainSum, testID)
	require.Zero(t, ix.Ranges().Len())
	require.False(t, ix.Ranges().Covers([]byte("c")))
}

// TestRangesDamage: every truncation or bad length in the range section is
// a corruption error at Decode (the section is verified there, not lazily),
// never a panic or a misread, even when every checksum was resealed.
func TestRangesDamage(t *testing.T) {
	data, sum, err := EncodeWithRanges(smallEntries(), testRanges(), testID)
	require.NoError(t, err)
	off, q := rangeSection(t, data)
	top := checkTop(t, data)
	le := binary.LittleEndian

	// Any flip inside the section fails Decode (its checksum is in the top
	// block).
	for i := off; i < off+q; i++ {
		bad := bytes.Clone(data)
		bad[i] ^= 0x10
		_, err := Decode("r.idx", bad, sum, testID)
		ce := testutil.RequireCorrupt(t, err, "byte %d", i)
		require.Equal(t, int64(off), ce.Offset)
	}

	for name, mutate := range map[string]func(b []byte){
		"span count":         func(b []byte) { le.PutUint32(b[off:], 99) },
		"zero spans":         func(b []byte) { le.PutUint32(b[off:], 0) },
		"first start length": func(b []byte) { le.PutUint32(b[off+4:], 1<<30) },
		"last end key":       func(b []byte) { copy(b[off+q-2:], "\x00\x00") },
		"spans out of order": func(b []byte) { b[off+4+4+4+1+4] = 'z' }, // the second span's start "c" becomes "z"
		"length too long":    func(b []byte) { le.PutUint64(b[top+topRangeLen:], uint64(q+1)) },
		"length huge":        func(b []byte) { le.PutUint64(b[top+topRangeLen:], 1<<62) },
		"length zero":        func(b []byte) { le.PutUint64(b[top+topRangeLen:], 0) },
		"offset moved":       func(b []byte) { le.PutUint64(b[top+topRangeOff:], uint64(off-8)) },
	} {
		bad := bytes.Clone(data)
		mutate(bad)
		s, _ := resealAll(bad)
		_, err := Decode("r.idx", bad, s, testID)
		testutil.RequireCorrupt(t, err, name)
	}

	// A checksum for an empty section is refused.
	plain, _ := mustEncode(t, smallEntries(), testID)
	top = checkTop(t, plain)
	le.PutUint64(plain[top+topRangeSum:], 1)
	s, _ := resealTop(plain)
	_, err = Decode("r.idx", plain, s, testID)
	testutil.RequireCorrupt(t, err)

	// Spans out of order are refused even with a valid checksum.
	swapped := rangedel.Span{Start: []byte("b"), End: []byte("a")}
	_, err = rangedel.FromCanonical([]rangedel.Span{swapped})
	require.ErrorIs(t, err, rangedel.ErrNotCanonical)
}
