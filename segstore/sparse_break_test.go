package segstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/internal/testutil"
	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/vfs"
)

// testdata/denseblockstore was written by 0f073d5 (the commit before block
// files got a sparse index) with a test in its segstore package that
// opened $SEGKV_OLD_DIR on vfs.NewOS() with SegmentSize 1 MiB and merges
// off, put k0000..k0599 = "r<round>-kNNNN-" + "v"*(N%50) in two rounds,
// sealing after each, compacted (segment 5: a block data file, version 3,
// whose index is DENSE, one entry per key, its checksum in the manifest),
// then put every 7th key = "new-kNNNN", sealed (segment 3) and closed. The
// LOCK file is left out.
func denseBlockWant() model {
	m := model{}
	for i := range 600 {
		k := fmt.Sprintf("k%04d", i)
		m[k] = fmt.Sprintf("r1-%s-%s", k, strings.Repeat("v", i%50))
		if i%7 == 0 {
			m[k] = "new-" + k
		}
	}
	return m
}

const denseBlockSeg = 5 // the block file of testdata/denseblockstore

// TestSparseBreakDenseBlockIndexLost: FORMAT.md says the index is a cache
// ("the data file carries every key, and the index can be rebuilt from it
// at any time") and that a dense index of a block file "is still read
// correctly". But a store written before the sparse index records the
// checksum of the dense index of its block files: once that index is
// lost (deleted, cut short, or damaged so that Open or a read must
// rebuild it), the rebuild now always writes the sparse layout, whose
// checksum is not the manifest's, and the segment can no longer be read:
// Open (read-write and read-only) fails, a heal fails, and Check calls the
// untouched store corrupt. index/build.go:73 and index/writer.go:404 take
// the layout from the data file's header alone, and Built.Anchored
// (index/build.go:32, used by recovery/recovery.go:962 and
// segstore/check.go:111) knows only the version 3 checksum of that layout
// and the version 1/2 legacy one, not the dense version 3 layout such a
// manifest recorded.
func TestSparseBreakDenseBlockIndexLost(t *testing.T) {
	osfs := vfs.NewOS()
	o := &Options{FS: osfs, SegmentSize: 1 << 20, Merge: MergeOptions{Disable: true}}

	ip := func(dir string, id uint64) string { return filepath.Join(dir, segment.IndexName(id)) }
	// The way out that works: a merge rewrites the block file with a
	// sparse index, after which losing the index is harmless.
	t.Run("compact-then-delete", func(t *testing.T) {
		dir := copyDir(t, "testdata/denseblockstore")
		s := mustOpen(t, dir, o)
		require.Zero(t, sbBlockFileSegs(s), "the old store's block file has a dense index")
		requireReverseScan(t, s, denseBlockWant())
		require.NoError(t, s.Seal())
		require.NoError(t, s.Compact(context.Background()))
		require.Equal(t, 1, sbBlockFileSegs(s))
		segs := s.Segments()
		require.NoError(t, s.Close())
		require.NoError(t, os.Remove(ip(dir, segs[0].ID)))
		s = mustOpen(t, dir, o)
		require.NoError(t, fullDiff(s, denseBlockWant(), []string{"", "k9999"}))
		checkAndClose(t, s)
	})
	// Read-only, the rebuild is made in memory: the same mismatch.
	t.Run("readonly-delete", func(t *testing.T) {
		dir := copyDir(t, "testdata/denseblockstore")
		require.NoError(t, os.Remove(ip(dir, denseBlockSeg)))
		ro := *o
		ro.ReadOnly = true
		s, err := Open(dir, &ro)
		require.NoError(t, err, "a read-only open of a store whose block file lost its dense index")
		defer s.Close()
		require.NoError(t, fullDiff(s, denseBlockWant(), nil))
	})
	for _, how := range []string{"as-written", "delete", "truncate", "flip-key-block"} {
		t.Run(how, func(t *testing.T) {
			dir := copyDir(t, "testdata/denseblockstore")
			switch how {
			case "as-written":
				// Nothing lost: the dense index reads correctly, and Check
				// (which compares the loaded index with a rebuild) must
				// not call the untouched store corrupt.
			case "delete":
				require.NoError(t, os.Remove(ip(dir, denseBlockSeg)))
			case "truncate":
				require.NoError(t, os.Truncate(ip(dir, denseBlockSeg), 100))
			case "flip-key-block":
				// A byte of the first key block: Open loads the index, the
				// first read of that block heals it.
				testutil.FlipByte(t, osfs, ip(dir, denseBlockSeg), 200, 0xff)
			}
			s, err := Open(dir, o)
			require.NoError(t, err, "a store whose block file lost its dense index does not open")
			defer s.Close()
			require.NoError(t, fullDiff(s, denseBlockWant(), []string{"", "k9999"}))
			require.NoError(t, s.Check())
		})
	}
}

// ---- model check of every reader over sparse-indexed block files ----

// sbUniverse is the key space of the model tests: the empty key, keys that
// are prefixes of each other, keys around NUL and 0xff, and a run of
// numbered keys with a long shared prefix.
func sbUniverse() []string {
	u := []string{"", "\x00", "\x00\x00", "a", "a\x00", "ab", "abc", "abc\x00", "abd", "b", "ba", "z", "\xff", "\xff\x00", "\xff\xff"}
	for i := range 150 {
		u = append(u, fmt.Sprintf("k%03d", i))
	}
	slices.Sort(u)
	return u
}

// sbProbes are keys the model tests seek to and get besides the universe:
// between and around its keys, never written.
var sbProbes = []string{"\x00\x01", "a\x00\x00", "aa", "abb", "abc\x00\x00", "abcd", "k", "k0", "k000\x00", "k05", "k0505", "k149\x00", "k15", "k999", "y", "zz", "\xfe", "\xff\x00\x00", "\xff\xff\x00", "\xff\xff\xff"}

// sbValue is a value of generation gen for key: now and then a large one
// (more than two blocks' worth: a merge gives it a block of its own).
func sbValue(rng *rand.Rand, gen int, key string) string {
	v := fmt.Sprintf("g%d-%q-%d", gen, key, rng.IntN(1000))
	if rng.IntN(12) == 0 {
		v += strings.Repeat("L", 9000+rng.IntN(3000))
	}
	return v
}

// sbCraftStream returns a block data file stream for one generation: a
// block of range tombstones (maybe), then point records of a random subset
// of keys in key order, cut into blocks of 1 to 8 records, each block
// compressed or not at random. It applies the generation to m: the range
// tombstones delete the older segments' keys, then the points are newer.
func sbCraftStream(t *testing.T, rng *rand.Rand, gen int, m model) []byte {
	u := sbUniverse()
	var payloads [][]byte
	if rng.IntN(2) == 0 {
		a, b := rng.IntN(len(u)), rng.IntN(len(u))
		if a > b {
			a, b = b, a
		}
		if a != b {
			payloads = append(payloads, bbRaw(bbRec(segment.KindRangeDelete, u[a], u[b])))
			m.deleteRange(u[a], u[b])
		}
	}
	var recs []byte
	n := 0
	limit := 1 + rng.IntN(8)
	flush := func() {
		if n == 0 {
			return
		}
		codec := segment.CodecNone
		if rng.IntN(2) == 0 {
			codec = segment.CodecS2
		}
		payloads = append(payloads, segment.AppendBlock(nil, recs, codec))
		recs, n, limit = nil, 0, 1+rng.IntN(8)
	}
	for _, k := range u {
		if rng.IntN(5) >= 2 {
			continue
		}
		if rng.IntN(5) == 0 {
			recs = append(recs, bbRec(segment.KindDelete, k, "")...)
			delete(m, k)
		} else {
			v := sbValue(rng, gen, k)
			recs = append(recs, bbRec(segment.KindPut, k, v)...)
			m[k] = v
		}
		if n++; n >= limit {
			flush()
		}
	}
	flush()
	if len(payloads) == 0 {
		payloads = append(payloads, bbRaw(bbRec(segment.KindPut, "k000", "only")))
		m["k000"] = "only"
	}
	return bbStream(payloads...)
}

// sbRefIter is the model's iterator: the sorted keys within the bounds.
type sbRefIter struct {
	keys []string
	pos  int // -1: not valid
}

func newSBRefIter(m model, lower, upper, prefix []byte) *sbRefIter {
	r := &sbRefIter{pos: -1}
	for _, k := range sortedKeys(m) {
		if lower != nil && k < string(lower) || upper != nil && k >= string(upper) || prefix != nil && !strings.HasPrefix(k, string(prefix)) {
			continue
		}
		r.keys = append(r.keys, k)
	}
	return r
}

func (r *sbRefIter) seekGE(k string) bool {
	r.pos, _ = slices.BinarySearch(r.keys, k)
	if r.pos >= len(r.keys) {
		r.pos = -1
	}
	return r.pos >= 0
}

func (r *sbRefIter) seekLT(k *string) bool {
	if k == nil {
		r.pos = len(r.keys) - 1
	} else {
		i, _ := slices.BinarySearch(r.keys, *k)
		r.pos = i - 1
	}
	return r.pos >= 0
}

func (r *sbRefIter) next() bool {
	if r.pos < 0 {
		return false
	}
	if r.pos++; r.pos >= len(r.keys) {
		r.pos = -1
	}
	return r.pos >= 0
}

func (r *sbRefIter) prev() bool {
	if r.pos < 0 {
		return false
	}
	r.pos--
	return r.pos >= 0
}

// sbCheckStore compares Get, full scans both ways, and random walks of
// bounded, prefixed iterators (seeks into the gaps between keys, direction
// switches, steps across block boundaries) with m.
func sbCheckStore(t *testing.T, s *Store, m model, rng *rand.Rand, label string) {
	t.Helper()
	u := sbUniverse()
	for _, k := range append(slices.Clone(u), sbProbes...) {
		got, err := s.Get([]byte(k))
		if want, ok := m[k]; ok {
			require.NoError(t, err, "%s: get %q", label, k)
			require.Equal(t, want, string(got), "%s: get %q", label, k)
		} else {
			require.ErrorIs(t, err, ErrNotFound, "%s: get %q", label, k)
		}
	}
	require.NoError(t, fullDiff(s, m, nil), label)
	requireReverseScan(t, s, m)

	probes := append(slices.Clone(u), sbProbes...)
	pick := func() []byte { return []byte(probes[rng.IntN(len(probes))]) }
	prefixes := []string{"", "a", "ab", "abc", "k", "k0", "k14", "\xff", "\x00", "q"}
	for walk := range 60 {
		var opts IterOptions
		if rng.IntN(3) == 0 {
			opts.LowerBound = pick()
		}
		if rng.IntN(3) == 0 {
			opts.UpperBound = pick()
		}
		if rng.IntN(3) == 0 {
			opts.Prefix = []byte(prefixes[rng.IntN(len(prefixes))])
		}
		it, err := s.NewIterator(&opts)
		require.NoError(t, err)
		lower, upper := opts.LowerBound, opts.UpperBound
		if opts.Prefix != nil {
			if lower == nil || bytes.Compare(opts.Prefix, lower) > 0 {
				lower = opts.Prefix
			}
			if succ := prefixSuccessor(opts.Prefix); succ != nil && (upper == nil || bytes.Compare(succ, upper) < 0) {
				upper = succ
			}
		}
		ref := newSBRefIter(m, lower, upper, nil)
		var trace []string
		for step := range 40 {
			var ok, want bool
			switch op := rng.IntN(10); {
			case op == 0:
				trace = append(trace, "First")
				ok = it.First()
				if lower != nil {
					want = ref.seekGE(string(lower))
				} else {
					want = ref.seekGE("")
				}
			case op == 1:
				trace = append(trace, "Last")
				ok = it.Last()
				if upper != nil {
					u := string(upper)
					want = ref.seekLT(&u)
				} else {
					want = ref.seekLT(nil)
				}
			case op == 2:
				k := pick()
				trace = append(trace, fmt.Sprintf("Seek(%q)", k))
				ok = it.Seek(k)
				if lower != nil && bytes.Compare(k, lower) < 0 {
					k = lower
				}
				want = ref.seekGE(string(k))
			case op == 3:
				k := pick()
				trace = append(trace, fmt.Sprintf("SeekLT(%q)", k))
				ok = it.SeekLT(k)
				if upper != nil && bytes.Compare(k, upper) > 0 {
					k = upper
				}
				ks := string(k)
				want = ref.seekLT(&ks)
			case op < 7:
				trace = append(trace, "Next")
				ok, want = it.Next(), ref.next()
			default:
				trace = append(trace, "Prev")
				ok, want = it.Prev(), ref.prev()
			}
			require.NoError(t, it.Err(), "%s walk %d step %d %v", label, walk, step, trace)
			require.Equal(t, want, ok, "%s walk %d step %d %v opts %q", label, walk, step, trace, opts)
			if !ok {
				continue
			}
			wk := ref.keys[ref.pos]
			require.Equal(t, wk, string(it.Key()), "%s walk %d step %d %v opts %q", label, walk, step, trace, opts)
			if rng.IntN(3) > 0 {
				v, err := it.Value()
				require.NoError(t, err, "%s walk %d step %d %v", label, walk, step, trace)
				require.Equal(t, m[wk], string(v), "%s walk %d step %d %v: value of %q", label, walk, step, trace, wk)
			}
		}
		require.NoError(t, it.Close())
	}
}

// TestSparseBreakModelImportedAndMerged: block files with sparse indexes
// from imports (crafted blocks of 1 to 8 records, compressed or not, point
// tombstones, range tombstones) stacked over plain sealed segments and
// under live writes, several holding the same keys, then merged by
// Compact, reopened, with and without mmap and compression: every Get,
// scan and bounded walk answers as the model does.
func TestSparseBreakModelImportedAndMerged(t *testing.T) {
	for _, c := range []struct {
		name               string
		nommap, nocompress bool
	}{{"mmap-s2", false, false}, {"nommap-raw", true, true}} {
		t.Run(c.name, func(t *testing.T) {
			for seed := uint64(1); seed <= sbSeeds; seed++ {
				t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(seed, 99))
					mem := vfs.NewMem()
					o := &Options{FS: mem, SegmentSize: 1 << 20, DisableMmap: c.nommap, DisableCompression: c.nocompress, Merge: MergeOptions{Disable: true}}
					s := mustOpen(t, "/db", o)
					m := model{}
					u := sbUniverse()
					// Plain sealed segments underneath.
					for range 2 {
						for _, k := range u {
							if rng.IntN(3) == 0 {
								v := sbValue(rng, 0, k)
								require.NoError(t, s.Put([]byte(k), []byte(v)))
								m[k] = v
							}
						}
						require.NoError(t, s.Seal())
					}
					for gen := 1; gen <= 5; gen++ {
						stream := sbCraftStream(t, rng, gen, m)
						_, err := s.Import(context.Background(), bytes.NewReader(stream))
						require.NoError(t, err, "gen %d", gen)
					}
					// Live writes on top.
					for _, k := range u {
						switch rng.IntN(12) {
						case 0:
							require.NoError(t, s.Delete([]byte(k)))
							delete(m, k)
						case 1:
							v := sbValue(rng, 9, k)
							require.NoError(t, s.Put([]byte(k), []byte(v)))
							m[k] = v
						}
					}
					require.GreaterOrEqual(t, sbBlockFileSegs(s), 5, "the imports are block files with sparse indexes")
					sbCheckStore(t, s, m, rng, "imported")
					require.NoError(t, s.Close())
					// Without their indexes: Open rebuilds each, and the
					// rebuild must match the checksum the import recorded.
					names, err := mem.List("/db")
					require.NoError(t, err)
					for _, n := range names {
						if strings.HasSuffix(n, ".idx") {
							require.NoError(t, mem.Remove(filepath.Join("/db", n)))
						}
					}
					s = mustOpen(t, "/db", o)
					sbCheckStore(t, s, m, rng, "imported, reopened")
					require.NoError(t, s.Check())
					require.NoError(t, s.Seal())
					require.NoError(t, s.Compact(context.Background()))
					sbCheckStore(t, s, m, rng, "merged")
					require.NoError(t, s.Check())
					require.NoError(t, s.Close())
					s = mustOpen(t, "/db", o)
					sbCheckStore(t, s, m, rng, "merged, reopened")
					checkAndClose(t, s)
				})
			}
		})
	}
}

// sbSeeds is how many seeds the model tests run.
var sbSeeds = uint64(3)

// sbBlockFileSegs counts the store's segments whose index is that of a
// block file (sparse).
func sbBlockFileSegs(s *Store) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	n := 0
	for _, sg := range s.mu.segs {
		if sg.index().BlockFile() {
			n++
		}
	}
	return n
}

// sbKeysStream is a block data file stream putting value(k) for keys in
// key order, in raw blocks of per records.
func sbKeysStream(keys []string, per int, value func(string) string) []byte {
	var payloads [][]byte
	var recs []byte
	for i, k := range keys {
		recs = append(recs, bbRec(segment.KindPut, k, value(k))...)
		if (i+1)%per == 0 || i == len(keys)-1 {
			payloads = append(payloads, segment.AppendBlock(nil, recs, segment.CodecS2))
			recs = nil
		}
	}
	return bbStream(payloads...)
}

// TestSparseBreakGarbageOfBlockFiles: a merged block file (sparse index)
// that a newer block file (an import, sparse index too) shadows almost
// whole must count as garbage, for both sample shapes (a file of more
// keys than garbageSamples, sampled a few records per block, and a small
// one, every record), and the rewrites that reclaim it must read the
// newer file's blocks to decide, keep what it does not shadow, and leave
// the same answers.
func TestSparseBreakGarbageOfBlockFiles(t *testing.T) {
	for _, n := range []int{2000, 200} {
		t.Run(fmt.Sprint("keys", n), func(t *testing.T) {
			mem := vfs.NewMem()
			o := garbageOpts(mem)
			s := mustOpen(t, "/db", o)
			m := model{}
			var keys []string
			for i := range n {
				k := fmt.Sprintf("key-%04d", i)
				keys = append(keys, k)
				v := fmt.Sprintf("old-%04d-%0100d", i, i)
				require.NoError(t, s.Put([]byte(k), []byte(v)))
				m[k] = v
				if i == n/2 {
					require.NoError(t, s.Seal()) // two segments: Compact merges them
				}
			}
			require.NoError(t, s.Seal())
			require.NoError(t, s.Compact(context.Background()))
			require.Equal(t, 1, sbBlockFileSegs(s))
			require.Zero(t, s.Metrics().GarbageBytes)

			// Every key but each tenth, newer, in a block file.
			var newer []string
			for i, k := range keys {
				if i%10 != 0 {
					newer = append(newer, k)
				}
			}
			stream := sbKeysStream(newer, 7, func(k string) string { return "new-" + k })
			_, err := s.Import(context.Background(), bytes.NewReader(stream))
			require.NoError(t, err)
			for _, k := range newer {
				m[k] = "new-" + k
			}
			require.Equal(t, 2, sbBlockFileSegs(s))
			before := s.Metrics()
			old := s.Segments()[0]
			for _, sg := range s.Segments() {
				if sg.Order < old.Order {
					old = sg
				}
			}
			require.Greater(t, before.GarbageBytes, old.Size/2,
				"the merged file is 90%% shadowed by the import: %+v", before)

			require.Positive(t, mergeSteps(t, s))
			after := s.Metrics()
			require.Less(t, after.SegmentBytes, before.SegmentBytes-old.Size/2, "before %+v after %+v", before, after)
			require.LessOrEqual(t, float64(after.GarbageBytes), 0.2*float64(after.SegmentBytes))
			require.NoError(t, fullDiff(s, m, []string{"key-9999"}))
			checkAndClose(t, s)
			s = mustOpen(t, "/db", o)
			require.NoError(t, fullDiff(s, m, nil))
			checkAndClose(t, s)
		})
	}
}

// sbIndexKeyBlocks returns the offset and length of each key block of the
// index file at path, read from its footer and top block.
func sbIndexKeyBlocks(t *testing.T, path string) [][2]int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	le := binary.LittleEndian
	foot := b[len(b)-32:]
	topOff := int64(le.Uint64(foot))
	top := b[topOff:]
	nb := int(le.Uint32(top[44:]))
	var out [][2]int64
	for i := range nb {
		e := top[112+28*i:]
		out = append(out, [2]int64{int64(le.Uint64(e)), int64(le.Uint32(e[8:]))})
	}
	return out
}

// sbFlipOS flips one byte of the file at path in place (the mapping sees it).
func sbFlipOS(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	var one [1]byte
	_, err = f.ReadAt(one[:], off)
	require.NoError(t, err)
	one[0] ^= 0x5a
	_, err = f.WriteAt(one[:], off)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// TestSparseBreakHealMidIteration: a sparse index of several key blocks
// (an import of two records per block, and a merge's own output) is
// damaged on disk, while mapped, in key blocks that iterators going both
// ways have not read yet; the iterators carry on through the heal with
// the right keys and values, and Get and Check answer right after it.
func TestSparseBreakHealMidIteration(t *testing.T) {
	for _, how := range []string{"import", "merge"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			o := &Options{FS: vfs.NewOS(), SegmentSize: 4 << 20, DisableCompression: true, Merge: MergeOptions{Disable: true}}
			s := mustOpen(t, dir, o)
			m := model{}
			var keys []string
			for i := range 9000 {
				keys = append(keys, fmt.Sprintf("k%05d", i))
			}
			val := func(k string) string { return "v-" + k + strings.Repeat("x", 120) }
			if how == "import" {
				_, err := s.Import(context.Background(), bytes.NewReader(sbKeysStream(keys[:900], 2, val)))
				require.NoError(t, err)
				keys = keys[:900]
			} else {
				for i, k := range keys {
					require.NoError(t, s.Put([]byte(k), []byte(val(k))))
					if i == 4500 {
						require.NoError(t, s.Seal())
					}
				}
				require.NoError(t, s.Seal())
				require.NoError(t, s.Compact(context.Background()))
			}
			for _, k := range keys {
				m[k] = val(k)
			}
			segs := s.Segments()
			require.Len(t, segs, 1)
			require.Equal(t, 1, sbBlockFileSegs(s))
			require.NoError(t, s.Close())
			ip := filepath.Join(dir, segment.IndexName(segs[0].ID))
			kb := sbIndexKeyBlocks(t, ip)
			require.GreaterOrEqual(t, len(kb), 3, "key blocks of the sparse index")

			s = mustOpen(t, dir, o)
			defer s.Close()
			fwd, err := s.NewIterator(nil)
			require.NoError(t, err)
			defer fwd.Close()
			rev, err := s.NewIterator(nil)
			require.NoError(t, err)
			defer rev.Close()
			sorted := sortedKeys(m)
			i := 0
			for ok := fwd.First(); ok && i < 10; ok = fwd.Next() {
				require.Equal(t, sorted[i], string(fwd.Key()))
				i++
			}
			j := len(sorted) - 1
			for ok := rev.Last(); ok && j > len(sorted)-10; ok = rev.Prev() {
				require.Equal(t, sorted[j], string(rev.Key()))
				j--
			}
			// Damage the middle key blocks, which neither has read.
			for b := 1; b < len(kb)-1; b++ {
				sbFlipOS(t, ip, kb[b][0]+kb[b][1]/2)
			}
			for ok := fwd.Valid(); ok; ok = fwd.Next() {
				require.Equal(t, sorted[i], string(fwd.Key()))
				v, err := fwd.Value()
				require.NoError(t, err)
				require.Equal(t, m[sorted[i]], string(v))
				i++
			}
			require.NoError(t, fwd.Err())
			require.Equal(t, len(sorted), i)
			for ok := rev.Valid(); ok; ok = rev.Prev() {
				require.Equal(t, sorted[j], string(rev.Key()))
				v, err := rev.Value()
				require.NoError(t, err)
				require.Equal(t, m[sorted[j]], string(v))
				j--
			}
			require.NoError(t, rev.Err())
			require.Equal(t, -1, j)
			require.Positive(t, s.Metrics().IndexRebuilds)
			for _, k := range append(sorted, "k", "k99999", "") {
				got, err := s.Get([]byte(k))
				if want, ok := m[k]; ok {
					require.NoError(t, err, k)
					require.Equal(t, want, string(got), k)
				} else {
					require.ErrorIs(t, err, ErrNotFound, k)
				}
			}
			require.NoError(t, s.Check())
		})
	}
}

// sbImage is every file of a closed store on a Mem, to start trials from.
type sbImage map[string][]byte

func sbTakeImage(t *testing.T, mem *vfs.Mem) sbImage {
	t.Helper()
	img := sbImage{}
	for _, n := range mem.FileNames() {
		if strings.HasSuffix(n, "LOCK") {
			continue
		}
		b, err := mem.ReadFile(n)
		require.NoError(t, err)
		img[n] = b
	}
	return img
}

func (img sbImage) mem(t *testing.T) *vfs.Mem {
	t.Helper()
	mem := vfs.NewMem()
	require.NoError(t, mem.MkdirAll("/db"))
	for n, b := range img {
		require.NoError(t, mem.WriteFile(n, bytes.Clone(b)))
	}
	return mem
}

// sbAcceptable reports whether err is an answer a damaged store may give:
// typed corruption or an I/O error, never a bare failure.
func sbAcceptable(err error) bool {
	return errors.Is(err, ErrCorrupt)
}

// sbDamageStore is an older plain segment holding every key with a stale
// value, under a block file (an import: raw and S2 blocks of three records)
// holding the fresh value of every key. A damaged block that made a read
// fall through to the older segment would answer the stale value.
func sbDamageStore(t *testing.T, o *Options) (sbImage, model, uint64) {
	t.Helper()
	mem := o.FS.(*vfs.Mem)
	s := mustOpen(t, "/db", o)
	m := model{}
	var keys []string
	for i := range 45 {
		k := fmt.Sprintf("k%03d", i)
		keys = append(keys, k)
		require.NoError(t, s.Put([]byte(k), []byte("stale-"+k)))
	}
	require.NoError(t, s.Put([]byte("other"), []byte("o")))
	m["other"] = "o"
	require.NoError(t, s.Seal())
	var payloads [][]byte
	for i := 0; i < len(keys); i += 3 {
		var recs []byte
		for _, k := range keys[i : i+3] {
			v := "fresh-" + k + strings.Repeat("-", 20)
			recs = append(recs, bbRec(segment.KindPut, k, v)...)
			m[k] = v
		}
		codec := segment.CodecNone
		if i%2 == 0 {
			codec = segment.CodecS2
		}
		payloads = append(payloads, segment.AppendBlock(nil, recs, codec))
	}
	infos, err := s.Import(context.Background(), bytes.NewReader(bbStream(payloads...)))
	require.NoError(t, err)
	require.Len(t, infos, 1)
	require.Equal(t, 1, sbBlockFileSegs(s))
	checkAndClose(t, s)
	return sbTakeImage(t, mem), m, infos[0].ID
}

// sbCheckDamaged requires every answer of a damaged store to be right or
// typed corruption: Get of every key, a forward and a backward scan (which
// may stop at the damage, with ErrCorrupt, but never skip a key silently
// or read a stale value), and Check.
func sbCheckDamaged(t *testing.T, mem *vfs.Mem, o *Options, m model, label string, dataDamaged bool) (damageSeen bool) {
	t.Helper()
	oo := *o
	oo.FS = mem
	s, err := Open("/db", &oo)
	if err != nil {
		require.True(t, sbAcceptable(err), "%s: open: %v", label, err)
		return true
	}
	defer s.Close()
	for _, k := range append(sortedKeys(m), "k999", "") {
		got, err := s.Get([]byte(k))
		want, ok := m[k]
		switch {
		case err == nil:
			require.True(t, ok, "%s: get %q found %q, want not found", label, k, got)
			require.Equal(t, want, string(got), "%s: get %q", label, k)
		case errors.Is(err, ErrNotFound):
			require.False(t, ok, "%s: get %q: not found, want %q", label, k, want)
		default:
			require.True(t, sbAcceptable(err), "%s: get %q: %v", label, k, err)
			damageSeen = true
		}
	}
	for _, reverse := range []bool{false, true} {
		it, err := s.NewIterator(nil)
		require.NoError(t, err)
		keys := sortedKeys(m)
		if reverse {
			slices.Reverse(keys)
		}
		i := 0
		ok := it.First()
		if reverse {
			ok = it.Last()
		}
		for ; ok; i++ {
			require.Less(t, i, len(keys), "%s: scan past the end: %q", label, it.Key())
			require.Equal(t, keys[i], string(it.Key()), "%s: scan (reverse %v) key %d", label, reverse, i)
			v, err := it.Value()
			if err != nil {
				require.True(t, sbAcceptable(err), "%s: value of %q: %v", label, keys[i], err)
				damageSeen = true
			} else {
				require.Equal(t, m[keys[i]], string(v), "%s: value of %q", label, keys[i])
			}
			if reverse {
				ok = it.Prev()
			} else {
				ok = it.Next()
			}
		}
		if err := it.Err(); err != nil {
			require.True(t, sbAcceptable(err), "%s: scan: %v", label, err)
			damageSeen = true
		} else {
			require.Equal(t, len(keys), i, "%s: scan (reverse %v) ended early without an error", label, reverse)
		}
		require.NoError(t, it.Close())
	}
	checkErr := s.Check()
	if checkErr != nil {
		require.True(t, sbAcceptable(checkErr), "%s: check: %v", label, checkErr)
	}
	if dataDamaged {
		require.Error(t, checkErr, "%s: Check finds no damage in the data file", label)
		rep, err := s.Verify(context.Background())
		require.NoError(t, err, label)
		require.NotEmpty(t, rep.Damaged, "%s: Verify finds no damage in the data file", label)
	}
	return damageSeen || checkErr != nil
}

// TestSparseBreakDamageSweep flips a byte at every few offsets of a block
// file and of its sparse index, in turn, and requires every read of every
// key to answer right or fail with ErrCorrupt (never the stale value of
// the older segment below, never a missing key), and Check to report the
// damage a read saw.
func TestSparseBreakDamageSweep(t *testing.T) {
	for _, nommap := range []bool{false, true} {
		t.Run(fmt.Sprint("nommap=", nommap), func(t *testing.T) {
			o := &Options{FS: vfs.NewMem(), SegmentSize: 1 << 20, DisableMmap: nommap, Merge: MergeOptions{Disable: true}}
			img, m, id := sbDamageStore(t, o)
			for _, name := range []string{segment.DataName(id, segment.KindSeg), segment.IndexName(id)} {
				p := filepath.Join("/db", name)
				size := len(img[p])
				for off := 0; off < size; off += 3 {
					label := fmt.Sprintf("%s byte %d/%d", name, off, size)
					mem := img.mem(t)
					b := bytes.Clone(img[p])
					b[off] ^= 0x41
					require.NoError(t, mem.WriteFile(p, b))
					sbCheckDamaged(t, mem, o, m, label, strings.HasSuffix(name, ".seg"))
				}
			}
		})
	}
}

// TestSparseBreakSwappedIndexFiles: index files renamed over one another
// (two block files' sparse indexes, a block file's and a plain segment's)
// or copied over one another are not the indexes the manifest recorded:
// Open rebuilds them and every answer is right, with no damage reported.
func TestSparseBreakSwappedIndexFiles(t *testing.T) {
	o := &Options{FS: vfs.NewMem(), SegmentSize: 1 << 20, Merge: MergeOptions{Disable: true}}
	img, m, idA := sbDamageStore(t, o)
	// A second block file over the first, holding some of its keys.
	mem := img.mem(t)
	oo := *o
	oo.FS = mem
	s := mustOpen(t, "/db", &oo)
	var keys []string
	for i := 0; i < 45; i += 2 {
		keys = append(keys, fmt.Sprintf("k%03d", i))
	}
	infos, err := s.Import(context.Background(), bytes.NewReader(sbKeysStream(keys, 4, func(k string) string { return "second-" + k })))
	require.NoError(t, err)
	for _, k := range keys {
		m[k] = "second-" + k
	}
	idB := infos[0].ID
	var plain uint64
	for _, sg := range s.Segments() {
		if sg.ID != idA && sg.ID != idB {
			plain = sg.ID
		}
	}
	require.Equal(t, 2, sbBlockFileSegs(s))
	checkAndClose(t, s)
	img = sbTakeImage(t, mem)
	ix := func(id uint64) string { return filepath.Join("/db", segment.IndexName(id)) }

	for _, c := range []struct {
		name     string
		from, to uint64
		swap     bool
	}{
		{"swap-block-block", idA, idB, true},
		{"swap-block-plain", idA, plain, true},
		{"copy-block-over-block", idA, idB, false},
		{"copy-block-over-plain", idB, plain, false},
		{"copy-plain-over-block", plain, idA, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			mem := img.mem(t)
			if c.swap {
				require.NoError(t, mem.Rename(ix(c.from), "/db/tmp"))
				require.NoError(t, mem.Rename(ix(c.to), ix(c.from)))
				require.NoError(t, mem.Rename("/db/tmp", ix(c.to)))
			} else {
				b, err := mem.ReadFile(ix(c.from))
				require.NoError(t, err)
				require.NoError(t, mem.Remove(ix(c.to)))
				require.NoError(t, mem.WriteFile(ix(c.to), b))
			}
			require.False(t, sbCheckDamaged(t, mem, o, m, c.name, false), "an index is a cache: no answer may fail")
		})
	}
}

// TestSparseBreakTinyBlockFiles: block files of one to four keys that are
// prefixes of each other (so the index's shared prefix P is long, up to a
// whole key, and the entries' stripped keys empty), cut into blocks every
// possible way, over an older segment holding every probe key with a stale
// value: Get, scans and bounded walks answer as the model does.
func TestSparseBreakTinyBlockFiles(t *testing.T) {
	sets := [][]string{
		{"ab"}, {""}, {"", "\x00"}, {"a", "ab"}, {"a", "ab", "abc"}, {"ab", "ab\x00", "ab\x00\x00", "ab\x01"},
		{"", "a", "ab"}, {"k\xff", "k\xff\xff"}, {"abc", "abd"}, {"\xff", "\xff\xff", "\xff\xff\xff"},
	}
	rng := rand.New(rand.NewPCG(5, 5))
	for si, keys := range sets {
		// Every way to cut the keys into blocks: bit i set ends a block
		// after key i.
		for cuts := 0; cuts < 1<<(len(keys)-1); cuts++ {
			mem := vfs.NewMem()
			o := &Options{FS: mem, Merge: MergeOptions{Disable: true}}
			s := mustOpen(t, "/db", o)
			m := model{}
			for _, k := range append(slices.Clone(sbUniverse()), keys...) {
				require.NoError(t, s.Put([]byte(k), []byte("stale-"+k)))
				m[k] = "stale-" + k
			}
			require.NoError(t, s.Seal())
			var payloads [][]byte
			var recs []byte
			for i, k := range keys {
				if i%2 == 1 && len(keys) > 2 {
					recs = append(recs, bbRec(segment.KindDelete, k, "")...)
					delete(m, k)
				} else {
					recs = append(recs, bbRec(segment.KindPut, k, "fresh-"+k)...)
					m[k] = "fresh-" + k
				}
				if i == len(keys)-1 || cuts&(1<<i) != 0 {
					payloads = append(payloads, segment.AppendBlock(nil, recs, segment.CodecS2))
					recs = nil
				}
			}
			_, err := s.Import(context.Background(), bytes.NewReader(bbStream(payloads...)))
			require.NoError(t, err, "set %d cuts %b", si, cuts)
			sbCheckStore(t, s, m, rng, fmt.Sprintf("set %d %q cuts %b", si, keys, cuts))
			require.NoError(t, s.Check())
			require.NoError(t, s.Close())
			s = mustOpen(t, "/db", o)
			require.NoError(t, s.Compact(context.Background()))
			sbCheckStore(t, s, m, rng, fmt.Sprintf("set %d %q cuts %b, merged", si, keys, cuts))
			checkAndClose(t, s)
		}
	}
}

// TestSparseBreakCloseDuringDroppingBlockMerge: Close while a merge walks
// a large block file whose records a newer range tombstone nearly all
// covers, so that the merge writes (and flushes) almost nothing: the walk
// through the block cursor must still notice the cancellation (nothing is
// committed: the store reopens with both inputs), and the reopened store
// answers as before.
func TestSparseBreakCloseDuringDroppingBlockMerge(t *testing.T) {
	for _, compress := range []bool{true, false} {
		t.Run(fmt.Sprintf("compress=%v", compress), func(t *testing.T) {
			mem := vfs.NewMem()
			o := &Options{FS: mem, SegmentSize: 256 << 20, DisableCompression: !compress, Merge: MergeOptions{Disable: true}}
			s := mustOpen(t, "/db", o)
			m := model{}
			val := strings.Repeat("\x00", 16<<10)
			const n = 4000
			for r := range 2 {
				for i := r; i < n; i += 2 {
					k := fmt.Sprintf("key-%06d", i)
					require.NoError(t, s.Put([]byte(k), []byte(val)))
					m[k] = val
				}
				require.NoError(t, s.Seal())
			}
			require.NoError(t, s.Compact(context.Background()))
			require.Equal(t, 1, sbBlockFileSegs(s))
			last := fmt.Sprintf("key-%06d", n-1)
			require.NoError(t, s.DeleteRange([]byte("key-"), []byte(last)))
			m.deleteRange("key-", last)
			require.NoError(t, s.Seal())
			require.NoError(t, s.Close())

			began := make(chan struct{}, 16)
			o2 := *o
			o2.Events.MergeBegin = func(MergeInfo) { began <- struct{}{} }
			s = mustOpen(t, "/db", &o2)
			require.Len(t, s.Segments(), 2)
			done := make(chan error, 1)
			go func() { done <- s.Compact(context.Background()) }()
			<-began
			require.NoError(t, s.Close())
			err := <-done
			t.Logf("compact: %v", err)
			require.Error(t, err)
			s = mustOpen(t, "/db", o)
			require.Len(t, s.Segments(), 2, "Close waited for the merge to commit (or the merge finished first: make it longer)")
			require.NoError(t, s.Close())
			reopenCheck(t, mem, o, m, []string{"key-000000", last})
		})
	}
}

// TestSparseBreakFollowerOfBlockFiles: a follower mirrors a leader whose
// segments are block files (merged, with tombstones the merge keeps, and
// imported); the follower's copies get sparse indexes of their own, answer
// as the leader does, rebuild them after a reopen without them, and
// follow the leader's next merge.
func TestSparseBreakFollowerOfBlockFiles(t *testing.T) {
	lmem, fmem := vfs.NewMem(), vfs.NewMem()
	leader := mustOpen(t, "/l", unmergedOpts(lmem))
	defer leader.Close()
	rng := rand.New(rand.NewPCG(7, 7))
	m := model{}
	u := sbUniverse()
	for _, k := range u {
		v := sbValue(rng, 0, k)
		require.NoError(t, leader.Put([]byte(k), []byte(v)))
		m[k] = v
	}
	require.NoError(t, leader.Seal())
	require.NoError(t, leader.Compact(context.Background()))
	for gen := 1; gen <= 2; gen++ {
		_, err := leader.Import(context.Background(), bytes.NewReader(sbCraftStream(t, rng, gen, m)))
		require.NoError(t, err)
	}
	require.GreaterOrEqual(t, sbBlockFileSegs(leader), 3)
	fo := unmergedOpts(fmem)
	follower := mustOpen(t, "/f", fo)
	syncFollower(t, leader, follower)
	require.Equal(t, sbBlockFileSegs(leader), sbBlockFileSegs(follower))
	sbCheckStore(t, follower, m, rng, "follower")
	require.NoError(t, follower.Check())
	require.NoError(t, follower.Close())
	for _, n := range fmem.FileNames() {
		if strings.HasSuffix(n, ".idx") {
			require.NoError(t, fmem.Remove(n))
		}
	}
	follower = mustOpen(t, "/f", fo)
	defer follower.Close()
	sbCheckStore(t, follower, m, rng, "follower, indexes rebuilt")
	require.NoError(t, leader.Compact(context.Background()))
	syncFollower(t, leader, follower)
	require.Len(t, follower.Segments(), 1)
	sbCheckStore(t, follower, m, rng, "follower after the leader's merge")
	require.NoError(t, follower.Check())
}

// TestSparseBreakRangeOnlyBlockFile: a block file of range tombstones only
// (its sparse index has no entry, only the range section) deletes the
// older segments' keys for every reader, before and after a merge and a
// rebuild of its index.
func TestSparseBreakRangeOnlyBlockFile(t *testing.T) {
	mem := vfs.NewMem()
	o := &Options{FS: mem, Merge: MergeOptions{Disable: true}}
	s := mustOpen(t, "/db", o)
	m := model{}
	for _, k := range sbUniverse() {
		require.NoError(t, s.Put([]byte(k), []byte("old-"+k)))
		m[k] = "old-" + k
	}
	require.NoError(t, s.Seal())
	stream := bbStream(bbRaw(append(bbRec(segment.KindRangeDelete, "a", "abd"), bbRec(segment.KindRangeDelete, "k010", "k100")...)))
	infos, err := s.Import(context.Background(), bytes.NewReader(stream))
	require.NoError(t, err)
	m.deleteRange("a", "abd")
	m.deleteRange("k010", "k100")
	rng := rand.New(rand.NewPCG(3, 3))
	sbCheckStore(t, s, m, rng, "range-only import")
	require.NoError(t, s.Check())
	require.NoError(t, s.Close())
	require.NoError(t, mem.Remove(filepath.Join("/db", segment.IndexName(infos[0].ID))))
	s = mustOpen(t, "/db", o)
	sbCheckStore(t, s, m, rng, "range-only import, index rebuilt")
	require.NoError(t, s.Compact(context.Background()))
	sbCheckStore(t, s, m, rng, "merged")
	checkAndClose(t, s)
}

// TestSparseBreakValueErrorThenSeek: a value that fails to read does not
// stop Next, and the error is sticky for every other move (Iterator.Err's
// contract): a seek or a turn after it returns false and Err keeps the
// error, so that a caller that ignores Value's error still sees it.
func TestSparseBreakValueErrorThenSeek(t *testing.T) {
	mem := vfs.NewMem()
	o := &Options{FS: mem, DisableMmap: true, Merge: MergeOptions{Disable: true}}
	s := mustOpen(t, "/db", o)
	for i := range 10 {
		k := fmt.Sprintf("k%d", i)
		require.NoError(t, s.Put([]byte(k), []byte("value-of-"+k)))
	}
	require.NoError(t, s.Seal())
	seg := s.Segments()[0]
	require.NoError(t, s.Close())
	// Damage k5's value in the sealed file.
	var path string
	for _, n := range mem.FileNames() {
		if strings.HasSuffix(n, segment.DataName(seg.ID, segment.KindLog)) {
			path = n
		}
	}
	require.NotEmpty(t, path)
	b, err := mem.ReadFile(path)
	require.NoError(t, err)
	i := bytes.Index(b, []byte("value-of-k5"))
	require.Positive(t, i)
	b[i] ^= 0x20
	require.NoError(t, mem.WriteFile(path, b))

	s = mustOpen(t, "/db", o)
	defer s.Close()
	it, err := s.NewIterator(nil)
	require.NoError(t, err)
	defer it.Close()
	require.True(t, it.Seek([]byte("k5")))
	_, err = it.Value()
	require.ErrorIs(t, err, ErrCorrupt)
	require.True(t, it.Next(), "the walk carries on past a value that fails to read")
	require.Equal(t, "k6", string(it.Key()))
	require.False(t, it.Seek([]byte("k2")), "a seek after a value that failed to read")
	require.False(t, it.Valid())
	require.ErrorIs(t, it.Err(), ErrCorrupt)
	require.False(t, it.First())
	require.ErrorIs(t, it.Err(), ErrCorrupt)
}

// TestSparseBreakRawAcrossBlocks: three block files holding the same keys
// with values of the same length (so a record read from the wrong buffer
// would still decode), in blocks of one, two and three records, so that
// every step moves several block cursors across block boundaries at once,
// forward, backward and turning at every key: each value read (Value and
// AppendValue) is the newest file's.
func TestSparseBreakRawAcrossBlocks(t *testing.T) {
	for _, nommap := range []bool{false, true} {
		t.Run(fmt.Sprint("nommap=", nommap), func(t *testing.T) {
			mem := vfs.NewMem()
			o := &Options{FS: mem, DisableMmap: nommap, Merge: MergeOptions{Disable: true}}
			s := mustOpen(t, "/db", o)
			defer s.Close()
			var keys []string
			for i := range 40 {
				keys = append(keys, fmt.Sprintf("k%02d", i))
			}
			for gen, per := range []int{3, 2, 1} {
				stream := sbKeysStream(keys, per, func(k string) string { return fmt.Sprintf("gen%d-%s", gen, k) })
				_, err := s.Import(context.Background(), bytes.NewReader(stream))
				require.NoError(t, err)
			}
			require.Equal(t, 3, sbBlockFileSegs(s))
			want := func(k string) string { return "gen2-" + k }
			it, err := s.NewIterator(nil)
			require.NoError(t, err)
			defer it.Close()
			var buf []byte
			check := func(i int, how string) {
				t.Helper()
				require.Equal(t, keys[i], string(it.Key()), how)
				v, err := it.Value()
				require.NoError(t, err)
				require.Equal(t, want(keys[i]), string(v), how)
				buf, err = it.AppendValue(buf[:0])
				require.NoError(t, err)
				require.Equal(t, want(keys[i]), string(buf), how)
			}
			require.True(t, it.First())
			check(0, "first")
			for i := 1; i < len(keys); i++ {
				require.True(t, it.Next())
				check(i, "next")
				require.True(t, it.Prev())
				check(i-1, "turn back")
				require.True(t, it.Next())
				check(i, "turn forward")
			}
			require.False(t, it.Next())
			require.True(t, it.Last())
			for i := len(keys) - 2; i >= 0; i-- {
				require.True(t, it.Prev())
				check(i, "prev")
				if i%3 == 0 {
					require.True(t, it.Next())
					check(i+1, "turn forward")
					require.True(t, it.Prev())
					check(i, "turn back")
				}
			}
			require.False(t, it.Prev())
			require.NoError(t, it.Err())
		})
	}
}
