package index

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/bits-and-blooms/bloom/v3"
	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/corruption"
	"github.com/segkv/segkv/internal/testutil"
)

// A damaged part of a v3 index (a key block or a bloom filter chunk) is not
// seen by Decode, which verifies only the top block; the first read that
// touches the part verifies it, and then fails, or heals the index through
// LoadOptions.Repair.

// blockSpan returns the place of key block b in the file.
func blockSpan(ix *Index, b int) (off, length int) {
	e := ix.tab[tabEntry*b:]
	return int(binary.LittleEndian.Uint64(e)), int(binary.LittleEndian.Uint32(e[8:]))
}

// chunkSpan returns the place of bloom chunk c in the file data.
func chunkSpan(t testing.TB, data []byte, c int) (off, length int) {
	t.Helper()
	top := checkTop(t, data)
	le := binary.LittleEndian
	bloomOff := int(le.Uint64(data[top+topBloomOff:]))
	words := int(wordsFor(le.Uint64(data[top+topBloomM:])))
	cw := int(le.Uint32(data[top+topChunkWords:]))
	lo := c * cw
	require.Less(t, lo, words, "chunk %d", c)
	return bloomOff + 8*lo, 8 * (min(lo+cw, words) - lo)
}

// damage returns a copy of data with the byte in the middle of [off,
// off+length) flipped.
func damage(data []byte, off, length int) []byte {
	bad := bytes.Clone(data)
	bad[off+length/2] ^= 0x5a
	return bad
}

// touchesChunk reports whether a lookup of key reads bloom chunk c (the
// bloom test of a present key reads every one of its k locations).
func touchesChunk(ix *Index, key []byte, c int) bool {
	for _, loc := range bloom.Locations(key, uint(ix.bloomK)) {
		if int(loc%ix.bloomM/64)/ix.chunkWords == c {
			return true
		}
	}
	return false
}

// blockReadsOf returns the key blocks a read of entry i (At, Get, Search)
// touches: its own, and for the first key of a block the previous one,
// where Search looks first.
func blockReadsOf(i int) []int {
	b := i / BlockEntries
	if i%BlockEntries == 0 && b > 0 {
		return []int{b - 1, b}
	}
	return []int{b}
}

// requireRight asserts that every read of entry i answers right.
func requireRight(t tb, ix *Index, entries []Entry, i int) {
	t.Helper()
	want := entries[i]
	e, err := ix.At(i)
	require.NoError(t, err, "At(%d)", i)
	require.Equal(t, want, e)
	got, ok, err := ix.Get(probeOf(want.Key))
	require.NoError(t, err, "Get(%d)", i)
	require.True(t, ok)
	require.Equal(t, want, got)
	s, err := ix.Search(want.Key)
	require.NoError(t, err, "Search(%d)", i)
	require.Equal(t, i, s)
	k, err := ix.Key(i)
	require.NoError(t, err, "Key(%d)", i)
	require.Equal(t, want.Key, k)
}

// loadWith writes data to a fresh in-memory file system and loads it with
// repair.
func loadWith(t testing.TB, data []byte, sum uint64, id Identity, repair func(error) (*Index, error)) *Index {
	t.Helper()
	mem := newMem(t)
	require.NoError(t, Write(mem, ixPath, data))
	ix, err := Load(mem, ixPath, sum, id, LoadOptions{Repair: repair})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, ix.Close()) })
	return ix
}

// counted returns a Repair that counts its calls, checks its cause, and
// rebuilds the index by decoding the intact bytes.
func counted(t testing.TB, calls *atomic.Int64, intact []byte, sum uint64, id Identity) func(error) (*Index, error) {
	return func(cause error) (*Index, error) {
		calls.Add(1)
		ce := testutil.RequireCorrupt(t, cause)
		require.Equal(t, ixPath, ce.Path)
		return Decode(ixPath, intact, sum, id)
	}
}

func TestLazyBlockVerification(t *testing.T) {
	entries := genSequential(1000) // 8 blocks
	data, sum := mustEncode(t, entries, testID)
	intact := mustDecode(t, "i.idx", data, sum, testID)
	require.Equal(t, 8, intact.blocks)
	for _, k := range []int{0, 3, 7} {
		off, length := blockSpan(intact, k)
		bad := damage(data, off, length)
		for _, viaLoad := range []bool{false, true} {
			var ix *Index
			if viaLoad {
				ix = loadWith(t, bad, sum, testID, nil)
			} else {
				ix = mustDecode(t, ixPath, bad, sum, testID)
			}
			// Reads of other blocks are served.
			for i := range entries {
				if !slices.Contains(blockReadsOf(i), k) {
					requireRight(t, ix, entries, i)
				}
			}
			// The first read of block k fails, and so does every later one.
			_, err := ix.At(k*BlockEntries + 5)
			ce := testutil.RequireCorrupt(t, err)
			require.Equal(t, int64(off), ce.Offset)
			require.Equal(t, ixPath, ce.Path)
			require.Contains(t, ce.Reason, "block")
			for i := k * BlockEntries; i < min(len(entries), (k+1)*BlockEntries); i++ {
				_, err = ix.At(i)
				testutil.RequireCorrupt(t, err)
				_, err = ix.Key(i)
				testutil.RequireCorrupt(t, err)
				_, _, err = ix.Get(probeOf(entries[i].Key))
				testutil.RequireCorrupt(t, err)
				if i%BlockEntries != 0 {
					// The first key of block k is found from the first
					// keys (and block k-1) without reading block k.
					_, err = ix.Search(entries[i].Key)
					testutil.RequireCorrupt(t, err)
				}
			}
			require.False(t, ix.Healed())
			testutil.RequireCorrupt(t, ix.Verify())
			// The others still are.
			for i := range entries {
				if !slices.Contains(blockReadsOf(i), k) {
					requireRight(t, ix, entries, i)
				}
			}
			// Absent keys whose bloom test fails never read a block.
			for i := range 200 {
				p := probeOf(append(bytes.Clone(entries[min(len(entries)-1, k*BlockEntries+i%BlockEntries)].Key), byte(i)))
				if may, err := ix.MayContain(p); err == nil && !may {
					_, ok, err := ix.Get(p)
					require.NoError(t, err)
					require.False(t, ok)
				}
			}
		}
	}
}

func TestLazyBloomChunkVerification(t *testing.T) {
	entries := genSequential(10000)
	data, sum := mustEncode(t, entries, testID)
	intact := mustDecode(t, "i.idx", data, sum, testID)
	require.Equal(t, 3, intact.chunks)
	for _, c := range []int{0, 1, 2} {
		off, length := chunkSpan(t, data, c)
		bad := damage(data, off, length)
		ix := mustDecode(t, ixPath, bad, sum, testID)
		var served, failed int
		for i, e := range entries {
			// Positions and searches do not read the bloom filter.
			ae, err := ix.At(i)
			require.NoError(t, err)
			require.Equal(t, e, ae)
			s, err := ix.Search(e.Key)
			require.NoError(t, err)
			require.Equal(t, i, s)
			may, err := ix.MayContain(probeOf(e.Key))
			got, ok, gerr := ix.Get(probeOf(e.Key))
			if touchesChunk(ix, e.Key, c) {
				ce := testutil.RequireCorrupt(t, err)
				require.Contains(t, ce.Reason, "bloom")
				testutil.RequireCorrupt(t, gerr)
				failed++
			} else {
				require.NoError(t, err)
				require.True(t, may)
				require.NoError(t, gerr)
				require.True(t, ok)
				require.Equal(t, e, got)
				served++
			}
		}
		require.Positive(t, served)
		require.Positive(t, failed)
		testutil.RequireCorrupt(t, ix.Verify())
		require.False(t, ix.Healed())
	}
}

// TestHeal: a Repair makes the first read of a damaged part answer right
// from the rebuilt index; reads that do not touch it do not call Repair.
func TestHeal(t *testing.T) {
	entries := genSequential(10000)
	data, sum := mustEncode(t, entries, testID)
	intact := mustDecode(t, "i.idx", data, sum, testID)
	type part struct {
		name    string
		off, n  int
		touches func(ix *Index, i int) bool
	}
	var parts []part
	for _, k := range []int{0, 40, intact.blocks - 1} {
		off, n := blockSpan(intact, k)
		parts = append(parts, part{"block", off, n, func(_ *Index, i int) bool { return slices.Contains(blockReadsOf(i), k) }})
	}
	for c := range intact.chunks {
		off, n := chunkSpan(t, data, c)
		parts = append(parts, part{"chunk", off, n, func(ix *Index, i int) bool { return touchesChunk(ix, entries[i].Key, c) }})
	}
	for _, p := range parts {
		var calls atomic.Int64
		ix := loadWith(t, damage(data, p.off, p.n), sum, testID, counted(t, &calls, data, sum, testID))
		first := -1
		for i := range entries {
			if p.touches(ix, i) {
				if first < 0 {
					first = i
				}
				continue
			}
			if i%7 == 0 {
				requireRight(t, ix, entries, i)
			}
		}
		require.Zero(t, calls.Load(), "%s at %d: no read touched it", p.name, p.off)
		require.False(t, ix.Healed())
		before := ix.HeapBytes()
		require.GreaterOrEqual(t, first, 0)
		requireRight(t, ix, entries, first)
		require.Equal(t, int64(1), calls.Load())
		require.True(t, ix.Healed())
		// The rebuilt index lives in the heap, and HeapBytes says so.
		require.Greater(t, ix.HeapBytes(), before+len(data)/2)
		checkIndex(t, ix, entries)
		require.Equal(t, int64(1), calls.Load())
		require.Equal(t, sum, ix.Checksum())
		require.Equal(t, sum, ix.Anchor())
		require.Equal(t, testID, ix.Identity())
		require.Equal(t, len(entries), ix.Len())
	}
}

// TestHealConcurrent: concurrent readers that find the damage together
// heal the index once.
func TestHealConcurrent(t *testing.T) {
	entries := genSequential(2000)
	data, sum := mustEncode(t, entries, testID)
	intact := mustDecode(t, "i.idx", data, sum, testID)
	bad := bytes.Clone(data)
	for _, k := range []int{2, 5, 11} {
		off, n := blockSpan(intact, k)
		bad = damage(bad, off, n)
	}
	off, n := chunkSpan(t, data, 0)
	bad = damage(bad, off, n)
	for range 5 {
		var calls atomic.Int64
		ix := loadWith(t, bad, sum, testID, counted(t, &calls, data, sum, testID))
		var wg sync.WaitGroup
		const readers = 8
		for g := range readers {
			wg.Go(func() {
				for j := range entries {
					i := (j*7 + g*251) % len(entries)
					e, err := ix.At(i)
					p := NewProbe(entries[i].Key)
					ge, ok, gerr := ix.Get(&p)
					s, serr := ix.Search(entries[i].Key)
					if err != nil || gerr != nil || serr != nil || !ok || !entryEqual(e, entries[i]) ||
						!entryEqual(ge, entries[i]) || s != i {
						t.Errorf("reader %d, entry %d: %v %v %v", g, i, err, gerr, serr)
						return
					}
				}
			})
		}
		wg.Wait()
		require.Equal(t, int64(1), calls.Load())
		require.True(t, ix.Healed())
	}
}

func entryEqual(a, b Entry) bool {
	return a.Kind == b.Kind && a.Offset == b.Offset && a.Length == b.Length && bytes.Equal(a.Key, b.Key)
}

// TestHealFailureIsSticky: a Repair that fails with corruption (or returns
// an index that does not match) is called once; every later read of a
// damaged part returns the error without calling it again, and reads of
// intact parts are still served. A Repair that fails otherwise (an I/O
// error reading the data file) is tried again by the next read that needs
// it, which heals once it succeeds.
func TestHealFailureIsSticky(t *testing.T) {
	entries := genSequential(1000)
	data, sum := mustEncode(t, entries, testID)
	intact := mustDecode(t, "i.idx", data, sum, testID)
	bad := bytes.Clone(data)
	for _, k := range []int{1, 6} {
		off, n := blockSpan(intact, k)
		bad = damage(bad, off, n)
	}
	errRepair := errors.New("data file unreadable")
	errCorruptData := corruption.New("d.seg", 7, "data file damaged")
	other, otherSum := mustEncode(t, entries[:999], testID) // same identity, other content
	for name, repair := range map[string]func(error) (*Index, error){
		"error":    func(error) (*Index, error) { return nil, errRepair },
		"damaged":  func(error) (*Index, error) { return nil, errCorruptData },
		"nil":      func(error) (*Index, error) { return nil, nil },
		"mismatch": func(error) (*Index, error) { return Decode(ixPath, other, otherSum, testID) },
		"corrupt":  func(error) (*Index, error) { return Decode(ixPath, bad[:100], sum, testID) },
	} {
		t.Run(name, func(t *testing.T) {
			var calls atomic.Int64
			ix := loadWith(t, bad, sum, testID, func(cause error) (*Index, error) {
				calls.Add(1)
				return repair(cause)
			})
			requireRight(t, ix, entries, 0)
			var wg sync.WaitGroup
			for g := range 4 {
				wg.Go(func() {
					for i := range BlockEntries {
						if _, err := ix.At(BlockEntries + (i+g*31)%BlockEntries); err == nil {
							t.Errorf("reader %d: damaged block read without error", g)
							return
						}
					}
				})
			}
			wg.Wait()
			if name == "error" {
				require.Greater(t, calls.Load(), int64(1), "an I/O error is retried")
			} else {
				require.Equal(t, int64(1), calls.Load())
			}
			for _, i := range []int{BlockEntries + 3, 6*BlockEntries + 3} {
				_, err := ix.At(i)
				ce := testutil.RequireCorrupt(t, err)
				require.Equal(t, ixPath, ce.Path)
				if name == "error" {
					require.ErrorIs(t, err, errRepair)
				}
				_, _, err = ix.Get(probeOf(entries[i].Key))
				testutil.RequireCorrupt(t, err)
				_, err = ix.Search(entries[i].Key)
				testutil.RequireCorrupt(t, err)
			}
			if name != "error" {
				require.Equal(t, int64(1), calls.Load(), "Repair is not called again")
			}
			require.False(t, ix.Healed())
			for _, i := range []int{0, 300, 500, 999} {
				requireRight(t, ix, entries, i)
			}
		})
	}
}

// TestHealKeepsPositions: an iteration by position that runs across a
// damaged block carries on from the rebuilt index at the same positions,
// and the keys it returned before the heal stay valid.
// TestHealRetriesAfterIOError: once the data file reads again, the next
// read of the damaged part heals the index.
func TestHealRetriesAfterIOError(t *testing.T) {
	entries := genSequential(1000)
	data, sum := mustEncode(t, entries, testID)
	intact := mustDecode(t, "i.idx", data, sum, testID)
	off, n := blockSpan(intact, 2)
	bad := damage(data, off, n)
	var failing atomic.Bool
	failing.Store(true)
	errIO := errors.New("EIO")
	ix := loadWith(t, bad, sum, testID, func(cause error) (*Index, error) {
		if failing.Load() {
			return nil, errIO
		}
		return Decode(ixPath, data, sum, testID)
	})
	_, err := ix.At(2*BlockEntries + 1)
	require.ErrorIs(t, err, errIO)
	require.False(t, ix.Healed())
	failing.Store(false)
	requireRight(t, ix, entries, 2*BlockEntries+1)
	require.True(t, ix.Healed())
	checkIndex(t, ix, entries)
}

func TestHealKeepsPositions(t *testing.T) {
	entries := genSequential(1000)
	data, sum := mustEncode(t, entries, testID)
	intact := mustDecode(t, "i.idx", data, sum, testID)
	for _, k := range []int{0, 4, 7} {
		off, n := blockSpan(intact, k)
		var calls atomic.Int64
		ix := loadWith(t, damage(data, off, n), sum, testID, counted(t, &calls, data, sum, testID))
		// Start from a key in the block before the damaged one (or the
		// first), as an iterator does.
		start, err := ix.Search(entries[max(0, k*BlockEntries-50)].Key)
		require.NoError(t, err)
		var seen []Entry
		for i := start; i < ix.Len(); i++ {
			e, err := ix.At(i)
			require.NoError(t, err)
			want, err := intact.At(i)
			require.NoError(t, err)
			require.Equal(t, want, e, "position %d", i)
			seen = append(seen, e)
		}
		require.True(t, ix.Healed())
		require.Equal(t, int64(1), calls.Load())
		for j, e := range seen {
			require.Equal(t, entries[start+j], e, "an entry read before the heal is still valid")
		}
		// And backwards, as a reverse iterator does.
		for i := ix.Len() - 1; i >= 0; i-- {
			e, err := ix.At(i)
			require.NoError(t, err)
			require.Equal(t, entries[i], e)
		}
	}
}
