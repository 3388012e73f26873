package index

import (
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/internal/testutil"
)

// TestReader: a Reader answers as At does at every position, walked
// forward, backward and at random.
func TestReader(t *testing.T) {
	for _, n := range []int{1, BlockEntries - 1, BlockEntries, 3*BlockEntries + 5} {
		entries := genSequential(n)
		data, sum := mustEncode(t, entries, testID)
		ix := loadWith(t, data, sum, testID, nil)
		r := ix.NewReader()
		require.Same(t, ix, r.Index())
		check := func(i int) {
			t.Helper()
			e, err := r.At(i)
			require.NoError(t, err, "At(%d)", i)
			require.Equal(t, entries[i], e, "At(%d)", i)
		}
		for i := range n {
			check(i)
		}
		for i := n - 1; i >= 0; i-- {
			check(i)
		}
		rng := rand.New(rand.NewPCG(1, uint64(n)))
		for range 2 * n {
			check(rng.IntN(n))
		}
		require.Panics(t, func() { _, _ = r.At(n) })
		require.Panics(t, func() { _, _ = r.At(-1) })
	}
}

// TestReaderHeals: a Reader walking into a damaged block heals the index
// and carries on at the same positions, and the entries it returned from a
// block it kept stay right; when the heal fails, the damaged block is an
// error for the Reader as for At, and the others still read.
func TestReaderHeals(t *testing.T) {
	entries := genSequential(1000)
	data, sum := mustEncode(t, entries, testID)
	intact := mustDecode(t, "i.idx", data, sum, testID)
	for _, k := range []int{0, 4, 7} {
		off, n := blockSpan(intact, k)
		var calls atomic.Int64
		ix := loadWith(t, damage(data, off, n), sum, testID, counted(t, &calls, data, sum, testID))
		r := ix.NewReader()
		start := max(0, k*BlockEntries-50)
		var seen []Entry
		for i := start; i < ix.Len(); i++ {
			e, err := r.At(i)
			require.NoError(t, err)
			require.Equal(t, entries[i], e, "position %d", i)
			seen = append(seen, e)
		}
		require.True(t, ix.Healed())
		require.Equal(t, int64(1), calls.Load())
		for j, e := range seen {
			require.Equal(t, entries[start+j], e)
		}
		for i := ix.Len() - 1; i >= 0; i-- {
			e, err := r.At(i)
			require.NoError(t, err)
			require.Equal(t, entries[i], e)
		}
	}

	off, n := blockSpan(intact, 2)
	errRepair := errors.New("data file unreadable")
	ix := loadWith(t, damage(data, off, n), sum, testID, func(error) (*Index, error) { return nil, errRepair })
	r := ix.NewReader()
	for i := range ix.Len() {
		e, err := r.At(i)
		if i/BlockEntries == 2 {
			testutil.RequireCorrupt(t, err)
			require.ErrorIs(t, err, errRepair)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, entries[i], e)
	}
	require.False(t, ix.Healed())
}
