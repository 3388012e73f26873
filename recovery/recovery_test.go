package recovery

import (
	"bytes"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/segkv/segkv/corruption"
	"github.com/segkv/segkv/index"
	"github.com/segkv/segkv/manifestlog"
	"github.com/segkv/segkv/segment"
	"github.com/segkv/segkv/vfs"
	"github.com/segkv/segkv/wal"
)

const dir = "/db"

// writeData writes a data file whose frames each hold the given records
// ("key=value"; "key" alone is a delete), optionally starting with a link.
func writeData(t *testing.T, mem *vfs.Mem, id uint64, kind segment.FileKind, link *[2]int64, frames ...[]string) int64 {
	t.Helper()
	b := segment.Header()
	for i, recs := range frames {
		var payload []byte
		if i == 0 && link != nil {
			payload = segment.AppendLink(payload, uint64(link[0]), link[1])
		}
		for _, r := range recs {
			k, v, put := cut(r)
			if put {
				payload = segment.AppendRecord(payload, segment.KindPut, []byte(k), []byte(v))
			} else {
				payload = segment.AppendRecord(payload, segment.KindDelete, []byte(k), nil)
			}
		}
		b = wal.AppendFrame(b, payload, uint64(len(b)))
	}
	require.NoError(t, mem.WriteFile(filepath.Join(dir, segment.DataName(id, kind)), b))
	return int64(len(b))
}

func cut(r string) (string, string, bool) {
	for i := range r {
		if r[i] == '=' {
			return r[:i], r[i+1:], true
		}
	}
	return r, "", false
}

// sealedMeta builds the manifest entry of a sealed data file, writing its index.
func sealedMeta(t *testing.T, mem *vfs.Mem, id uint64, kind segment.FileKind, order uint64) manifestlog.SegmentMeta {
	t.Helper()
	p := filepath.Join(dir, segment.DataName(id, kind))
	size, err := mem.Stat(p)
	require.NoError(t, err)
	b, err := index.Build(mem, p, size)
	require.NoError(t, err)
	require.NoError(t, index.Write(mem, filepath.Join(dir, segment.IndexName(id)), b.Data))
	return manifestlog.SegmentMeta{ID: id, FileKind: kind, Order: order, DataLength: size, DataDigest: b.Digest,
		IndexChecksum: b.Checksum, Records: b.Records, Keys: b.Keys}
}

func newMem(t *testing.T) *vfs.Mem {
	mem := vfs.NewMem()
	require.NoError(t, mem.MkdirAll(dir))
	return mem
}

func liveKeys(t *testing.T, mem *vfs.Mem, state manifestlog.State) (*Result, *Report, map[uint64][]string) {
	t.Helper()
	got := map[uint64][]string{}
	res, rep, err := Run(mem, dir, state, Options{OnLiveRecord: func(id uint64, r segment.Record, off int64, n int) error {
		got[id] = append(got[id], string(r.Key))
		return nil
	}})
	require.NoError(t, err)
	return res, rep, got
}

func TestRemovesOnlyWhatTheManifestDoesNotName(t *testing.T) {
	mem := newMem(t)
	writeData(t, mem, 1, segment.KindLog, nil, []string{"a=1"})
	writeData(t, mem, 2, segment.KindLog, nil, []string{"b=2"})                                // the live file
	writeData(t, mem, 3, segment.KindSeg, nil, []string{"c=3"})                                // uncommitted merge output
	writeData(t, mem, 4, segment.KindLog, nil)                                                 // an unused spare
	require.NoError(t, mem.WriteFile(filepath.Join(dir, "0000000000000009.idx"), []byte("x"))) // stray index
	require.NoError(t, mem.WriteFile(filepath.Join(dir, "NOTES.txt"), []byte("mine")))
	state := manifestlog.State{Segments: map[uint64]manifestlog.SegmentMeta{1: sealedMeta(t, mem, 1, segment.KindLog, 1)}, LiveID: 2, NextID: 5}
	res, rep, keys := liveKeys(t, mem, state)
	require.Len(t, res.Segments, 1)
	require.Len(t, res.Live, 1)
	require.Equal(t, uint64(2), res.Live[0].ID)
	require.Equal(t, []string{"b"}, keys[2])
	require.ElementsMatch(t, []string{
		filepath.Join(dir, "0000000000000003.seg"),
		filepath.Join(dir, "0000000000000004.log"),
		filepath.Join(dir, "0000000000000009.idx"),
	}, rep.RemovedFiles)
	names, err := mem.List(dir)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"0000000000000001.log", "0000000000000001.idx", "0000000000000002.log", "NOTES.txt"}, names)
	require.Equal(t, uint64(9), res.MaxFileID, "ids seen on disk seed the counter")
}

func TestMissingOrShortSegmentIsAnError(t *testing.T) {
	mem := newMem(t)
	writeData(t, mem, 1, segment.KindLog, nil, []string{"a=1", "b=2"})
	writeData(t, mem, 2, segment.KindLog, nil)
	meta := sealedMeta(t, mem, 1, segment.KindLog, 1)
	state := manifestlog.State{Segments: map[uint64]manifestlog.SegmentMeta{1: meta}, LiveID: 2}

	short := meta
	short.DataLength += 10
	_, _, err := Run(mem, dir, manifestlog.State{Segments: map[uint64]manifestlog.SegmentMeta{1: short}, LiveID: 2}, Options{})
	var ce *corruption.Error
	require.ErrorAs(t, err, &ce)
	require.Contains(t, ce.Path, "0000000000000001.log")

	require.NoError(t, mem.Remove(filepath.Join(dir, "0000000000000001.log")))
	_, _, err = Run(mem, dir, state, Options{})
	require.ErrorAs(t, err, &ce)
	require.Contains(t, ce.Reason, "missing")
}

func TestLiveChain(t *testing.T) {
	t.Run("continuation adopted", func(t *testing.T) {
		mem := newMem(t)
		end := writeData(t, mem, 1, segment.KindLog, nil, []string{"a=1"}, []string{"b=2"})
		writeData(t, mem, 3, segment.KindLog, &[2]int64{1, end}, []string{"c=3"})
		res, rep, keys := liveKeys(t, mem, manifestlog.State{LiveID: 1})
		require.Len(t, res.Live, 2)
		require.Equal(t, []string{"a", "b"}, keys[1])
		require.Equal(t, []string{"c"}, keys[3])
		require.Empty(t, rep.DroppedChain)
	})
	t.Run("predecessor torn: continuation dropped", func(t *testing.T) {
		mem := newMem(t)
		end := writeData(t, mem, 1, segment.KindLog, nil, []string{"a=1"}, []string{"b=2"})
		// The predecessor lost its last frame: as after a crash before its sync.
		p := filepath.Join(dir, "0000000000000001.log")
		b, err := mem.ReadFile(p)
		require.NoError(t, err)
		require.NoError(t, mem.WriteFile(p, b[:end-3]))
		writeData(t, mem, 3, segment.KindLog, &[2]int64{1, end}, []string{"c=3"})
		res, rep, keys := liveKeys(t, mem, manifestlog.State{LiveID: 1})
		require.Len(t, res.Live, 1)
		require.Equal(t, []string{"a"}, keys[1])
		require.Empty(t, keys[3], "records of a dropped continuation never reach the caller")
		require.Len(t, rep.DroppedChain, 1)
		require.Len(t, rep.TornTails, 1)
		// The torn tail was cut off durably.
		size, err := mem.Stat(p)
		require.NoError(t, err)
		require.Equal(t, res.Live[0].End, size)
	})
	t.Run("spare is not part of the chain", func(t *testing.T) {
		mem := newMem(t)
		writeData(t, mem, 1, segment.KindLog, nil, []string{"a=1"})
		writeData(t, mem, 2, segment.KindLog, nil)
		res, rep, _ := liveKeys(t, mem, manifestlog.State{LiveID: 1})
		require.Len(t, res.Live, 1)
		require.Len(t, rep.RemovedFiles, 1)
	})
}

func TestIndexRebuiltFromData(t *testing.T) {
	mem := newMem(t)
	writeData(t, mem, 1, segment.KindLog, nil, []string{"a=1", "b=2"}, []string{"a=3", "c"})
	writeData(t, mem, 2, segment.KindLog, nil)
	meta := sealedMeta(t, mem, 1, segment.KindLog, 1)
	state := manifestlog.State{Segments: map[uint64]manifestlog.SegmentMeta{1: meta}, LiveID: 2}
	ixPath := filepath.Join(dir, segment.IndexName(1))
	for name, damage := range map[string]func(){
		"missing": func() { require.NoError(t, mem.Remove(ixPath)) },
		"flipped": func() {
			b, err := mem.ReadFile(ixPath)
			require.NoError(t, err)
			b[len(b)-1] ^= 1
			require.NoError(t, mem.WriteFile(ixPath, b))
		},
		"empty": func() { require.NoError(t, mem.WriteFile(ixPath, nil)) },
	} {
		t.Run(name, func(t *testing.T) {
			damage()
			res, rep, err := Run(mem, dir, state, Options{})
			require.NoError(t, err)
			require.Len(t, rep.RebuiltIndexes, 1)
			ix := res.Segments[0].Index
			pa, pc := index.NewProbe([]byte("a")), index.NewProbe([]byte("c"))
			e, ok, err := ix.Get(&pa)
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, index.KindPut, e.Kind)
			e, ok, err = ix.Get(&pc)
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, index.KindDelete, e.Kind)
			// Written back: the next run finds it intact.
			_, rep, err = Run(mem, dir, state, Options{})
			require.NoError(t, err)
			require.Empty(t, rep.RebuiltIndexes)
		})
	}
	t.Run("damaged data is corruption, not a rebuild", func(t *testing.T) {
		require.NoError(t, mem.Remove(ixPath))
		p := filepath.Join(dir, segment.DataName(1, segment.KindLog))
		b, err := mem.ReadFile(p)
		require.NoError(t, err)
		b[segment.HeaderSize+wal.HeaderSize+2] ^= 0x20
		require.NoError(t, mem.WriteFile(p, b))
		_, _, err = Run(mem, dir, state, Options{})
		require.ErrorIs(t, err, corruption.ErrCorrupt)
	})
}

func TestReportRepaired(t *testing.T) {
	var r Report
	require.False(t, r.Repaired())
	r.RemovedFiles = []string{"x"}
	require.True(t, r.Repaired())
}

// TestEntriesFromMapSorts checks the word-then-key ordering against a plain
// byte comparison, on keys built to tie on words and to be prefixes of each
// other (zero bytes included).
func TestEntriesFromMapSorts(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		prefix := rapid.SliceOfN(rapid.SampledFrom([]byte{0, 1, 'a'}), 0, 10).Draw(t, "prefix")
		keys := rapid.SliceOfNDistinct(rapid.SliceOfN(rapid.SampledFrom([]byte{0, 1, 0xff, 'a'}), 0, 12),
			1, 60, func(b []byte) string { return string(b) }).Draw(t, "keys")
		m := map[string]index.Entry{}
		for i, k := range keys {
			m[string(prefix)+string(k)] = index.Entry{Kind: index.KindPut, Offset: int64(i)}
		}
		entries := index.EntriesFromMap(m)
		if len(entries) != len(m) {
			t.Fatalf("%d entries for %d keys", len(entries), len(m))
		}
		for i := 1; i < len(entries); i++ {
			if bytes.Compare(entries[i-1].Key, entries[i].Key) >= 0 {
				t.Fatalf("out of order at %d: %q >= %q", i, entries[i-1].Key, entries[i].Key)
			}
		}
		for _, e := range entries {
			if m[string(e.Key)].Offset != e.Offset {
				t.Fatalf("entry of %q carries another key's location", e.Key)
			}
		}
	})
}

func TestMissingLiveFileIsCorruption(t *testing.T) {
	mem := newMem(t)
	_, _, err := Run(mem, dir, manifestlog.State{LiveID: 7}, Options{})
	var ce *corruption.Error
	require.ErrorAs(t, err, &ce)
	require.Contains(t, ce.Path, segment.DataName(7, segment.KindLog))
}

// TestSortedEntriesLarge checks the radix sort of search words on sets big
// enough to exercise every byte pass: random keys, keys sharing a long
// prefix, keys that tie on their first 8 bytes after it, and numeric keys
// whose high bytes agree (passes skipped).
func TestSortedEntriesLarge(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	shapes := map[string]func(i int) string{
		"random": func(int) string {
			b := make([]byte, 1+rng.IntN(20))
			for j := range b {
				b[j] = byte(rng.Uint32())
			}
			return string(b)
		},
		"shared prefix": func(i int) string { return fmt.Sprintf("tenant/0042/object/%x", rng.Uint64()) },
		"word ties":     func(i int) string { return fmt.Sprintf("sameword%d", rng.IntN(1<<30)) },
		"numeric":       func(i int) string { return fmt.Sprintf("key-%026d", rng.IntN(1<<40)) },
	}
	for name, gen := range shapes {
		t.Run(name, func(t *testing.T) {
			m := map[string]index.Entry{}
			for i := 0; len(m) < 50_000; i++ {
				k := gen(i)
				m[k] = index.Entry{Kind: index.KindPut, Offset: int64(len(m))}
			}
			entries := index.EntriesFromMap(m)
			want := slices.Sorted(maps.Keys(m))
			require.Len(t, entries, len(want))
			for i, e := range entries {
				require.Equal(t, want[i], string(e.Key), "position %d", i)
				require.Equal(t, m[want[i]].Offset, e.Offset)
			}
		})
	}
}

// BenchmarkSortedEntries: the seal's sort of a live file's key directory
// (500k numeric keys, as in a 64 MiB segment of 100-byte values).
func BenchmarkSortedEntries(b *testing.B) {
	m := map[string]index.Entry{}
	for i := range 500_000 {
		m[fmt.Sprintf("key-%026d", i*7919%1_000_000)] = index.Entry{Kind: index.KindPut, Offset: int64(i)}
	}
	b.ResetTimer()
	for range b.N {
		index.EntriesFromMap(m)
	}
}

// TestOrderedRebuildStreams: a segment whose records are in key order (a
// merge output, with its range tombstones first) is rebuilt by the
// streaming pass, into the same bytes as the in-memory rebuild; one that is
// not is left to the in-memory rebuild, with no file left behind.
func TestOrderedRebuildStreams(t *testing.T) {
	mem := newMem(t)
	p := filepath.Join(dir, segment.DataName(1, segment.KindSeg))
	b := segment.Header()
	var payload []byte
	payload = segment.AppendRecord(payload, segment.KindRangeDelete, []byte("0"), []byte("1"))
	for i := range 1000 {
		k := fmt.Appendf(nil, "key-%05d", i)
		if i%7 == 0 {
			payload = segment.AppendRecord(payload, segment.KindDelete, k, nil)
		} else {
			payload = segment.AppendRecord(payload, segment.KindPut, k, []byte("value"))
		}
		if len(payload) > 4096 {
			b = wal.AppendFrame(b, payload, uint64(len(b)))
			payload = nil
		}
	}
	b = wal.AppendFrame(b, payload, uint64(len(b)))
	require.NoError(t, mem.WriteFile(p, b))
	meta := sealedMeta(t, mem, 1, segment.KindSeg, 1)
	meta.MinKey, meta.MaxKey = []byte("key-00000"), []byte("key-00999")
	ixPath := filepath.Join(dir, segment.IndexName(1))
	want, err := mem.ReadFile(ixPath)
	require.NoError(t, err)

	tmp := ixPath + rebuildSuffix
	streamed, err := rebuildOrdered(mem, dir, meta, tmp)
	require.NoError(t, err)
	require.True(t, streamed)
	got, err := mem.ReadFile(tmp)
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.NoError(t, mem.Remove(tmp))

	// Wrong bounds in the manifest: not streamed, nothing left.
	bad := meta
	bad.MaxKey = []byte("key-00998")
	streamed, err = rebuildOrdered(mem, dir, bad, tmp)
	require.NoError(t, err)
	require.False(t, streamed)
	_, err = mem.Stat(tmp)
	require.ErrorIs(t, err, fs.ErrNotExist)

	// A segment in arrival order: not streamed, nothing left; the file
	// rebuild still puts the right index in place.
	writeData(t, mem, 2, segment.KindLog, nil, []string{"b=1", "a=2"}, []string{"c=3"})
	meta2 := sealedMeta(t, mem, 2, segment.KindLog, 2)
	meta2.MinKey, meta2.MaxKey = []byte("a"), []byte("c")
	ix2 := filepath.Join(dir, segment.IndexName(2))
	want2, err := mem.ReadFile(ix2)
	require.NoError(t, err)
	streamed, err = rebuildOrdered(mem, dir, meta2, ix2+rebuildSuffix)
	require.NoError(t, err)
	require.False(t, streamed)
	_, err = mem.Stat(ix2 + rebuildSuffix)
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.NoError(t, mem.Remove(ix2))
	require.NoError(t, RebuildIndexFile(mem, dir, meta2))
	got2, err := mem.ReadFile(ix2)
	require.NoError(t, err)
	require.Equal(t, want2, got2)

	// A data file that is not what the manifest recorded is corruption.
	wrong := meta
	wrong.DataDigest ^= 1
	_, err = rebuildOrdered(mem, dir, wrong, tmp)
	require.ErrorIs(t, err, corruption.ErrCorrupt)

	// Open removes the temporary file of a rebuild a crash interrupted,
	// and only that.
	require.NoError(t, mem.WriteFile(tmp, []byte("half an index")))
	require.NoError(t, mem.WriteFile(filepath.Join(dir, "notes.rebuild"), []byte("not ours")))
	writeData(t, mem, 3, segment.KindLog, nil)
	state := manifestlog.State{Segments: map[uint64]manifestlog.SegmentMeta{1: meta, 2: meta2}, LiveID: 3}
	_, rep, err := Run(mem, dir, state, Options{})
	require.NoError(t, err)
	require.Equal(t, []string{tmp}, rep.RemovedFiles)
	_, err = mem.Stat(filepath.Join(dir, "notes.rebuild"))
	require.NoError(t, err)
}
