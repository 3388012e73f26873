package index

import (
	"errors"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/corruption"
	"github.com/segkv/segkv/internal/testutil"
	"github.com/segkv/segkv/vfs"
)

const ixPath = "/store/0000000000000001.idx"

func newMem(t testing.TB) *vfs.Mem {
	t.Helper()
	mem := vfs.NewMem()
	require.NoError(t, mem.MkdirAll("/store"))
	return mem
}

// loadFS is a file system Load is tried on, and the path of the index in it.
type loadFS struct {
	name string
	fsys vfs.FS
	path string
	maps bool // its files implement vfs.Mapper
}

func loadFSes(t *testing.T) []loadFS {
	dir := t.TempDir()
	return []loadFS{
		{"os", vfs.NewOS(), filepath.Join(dir, "1.idx"), true},
		{"mem", newMem(t), ixPath, true},
		{"counting", vfs.NewCounting(newMem(t)), ixPath, false}, // its files do not map
	}
}

func TestWriteLoad(t *testing.T) {
	mem := newMem(t)
	fsys := vfs.NewCounting(mem)
	entries := smallEntries()
	data, sum := mustEncode(t, entries, testID)

	_, err := Load(fsys, ixPath, sum, testID, LoadOptions{})
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.NotErrorIs(t, err, corruption.ErrCorrupt)

	require.NoError(t, Write(fsys, ixPath, data))
	c := fsys.Counts()
	require.Zero(t, c.Syncs, "the index is a cache: Write never syncs")
	require.Zero(t, c.DirSyncs)
	require.Equal(t, int64(1), c.Writes, "one write")
	ix, err := Load(fsys, ixPath, sum, testID, LoadOptions{})
	require.NoError(t, err)
	checkIndex(t, ix, entries)
	require.NoError(t, ix.Verify())
	require.NoError(t, ix.Close())

	// A shorter index replaces a longer one completely (truncate on create).
	short, shortSum := mustEncode(t, entries[:1], testID)
	require.NoError(t, Write(fsys, ixPath, short))
	ix, err = Load(fsys, ixPath, shortSum, testID, LoadOptions{})
	require.NoError(t, err)
	checkIndex(t, ix, entries[:1])
	require.NoError(t, ix.Close())

	// A torn file on disk: corruption, not a panic and not a wrong answer.
	for _, torn := range [][]byte{data[:len(data)/2], data[:47], data[:1], nil} {
		require.NoError(t, mem.WriteFile(ixPath, torn))
		for _, noMap := range []bool{false, true} {
			_, err = Load(mem, ixPath, sum, testID, LoadOptions{NoMap: noMap})
			testutil.RequireCorrupt(t, err, "%d bytes", len(torn))
		}
	}
	require.Zero(t, fsys.Counts().Syncs)
}

// TestLoad loads through the OS file system and the in-memory one, mapped
// and read into the heap: the same index each time; Close (twice) is fine.
func TestLoad(t *testing.T) {
	entries := genSequential(1000)
	data, sum, err := EncodeWithRanges(entries, testRanges(), testID)
	require.NoError(t, err)
	for _, l := range loadFSes(t) {
		require.NoError(t, Write(l.fsys, l.path, data))
		for _, noMap := range []bool{false, true} {
			t.Run(l.name+map[bool]string{false: "/map", true: "/nomap"}[noMap], func(t *testing.T) {
				ix, err := Load(l.fsys, l.path, sum, testID, LoadOptions{NoMap: noMap})
				require.NoError(t, err)
				checkIndex(t, ix, entries)
				require.NoError(t, ix.Verify())
				require.Equal(t, testRanges().Spans(), ix.Ranges().Spans())
				require.Equal(t, sum, ix.Checksum())
				require.Equal(t, testID, ix.Identity())
				if l.maps && !noMap {
					require.Less(t, ix.HeapBytes(), len(data)/10)
				} else {
					require.GreaterOrEqual(t, ix.HeapBytes(), len(data))
				}
				require.NoError(t, ix.Close())
				require.NoError(t, ix.Close(), "closing twice is harmless")

				// Refused against another checksum or identity, as Decode.
				_, err = Load(l.fsys, l.path, sum^1, testID, LoadOptions{NoMap: noMap})
				testutil.RequireCorrupt(t, err)
				_, err = Load(l.fsys, l.path, sum, Identity{}, LoadOptions{NoMap: noMap})
				ce := testutil.RequireCorrupt(t, err)
				require.Equal(t, l.path, ce.Path)
			})
		}
	}
}

// TestHeapBytes: a mapped index keeps well under a byte per key in the
// heap; one read into the heap holds at least its file.
func TestHeapBytes(t *testing.T) {
	const n = 100_000
	entries := genSequential(n)
	id := Identity{DataLength: 16 + n*150, DataDigest: 3}
	data, sum := mustEncode(t, entries, id)
	for _, l := range loadFSes(t) {
		require.NoError(t, Write(l.fsys, l.path, data))
		mapped, err := Load(l.fsys, l.path, sum, id, LoadOptions{})
		require.NoError(t, err)
		read, err := Load(l.fsys, l.path, sum, id, LoadOptions{NoMap: true})
		require.NoError(t, err)
		if l.maps {
			require.Less(t, mapped.HeapBytes(), n, "%s: %d bytes of heap for %d keys", l.name, mapped.HeapBytes(), n)
			require.Positive(t, mapped.HeapBytes())
		} else {
			require.GreaterOrEqual(t, mapped.HeapBytes(), len(data), l.name)
		}
		require.GreaterOrEqual(t, read.HeapBytes(), len(data), l.name)
		require.Less(t, read.HeapBytes(), len(data)+n, l.name)
		// Reads do not change it.
		before := mapped.HeapBytes()
		for i := range 200 {
			requireRight(t, mapped, entries, i*(n/200))
		}
		require.Equal(t, before, mapped.HeapBytes())
		require.NoError(t, mapped.Close())
		require.NoError(t, read.Close())
	}
}

// mapCountFS wraps a file system whose files map, counting mappings made
// and released.
type mapCountFS struct {
	vfs.FS
	maps, unmaps atomic.Int64
}

type mapCountFile struct {
	vfs.File
	fs *mapCountFS
}

func (m *mapCountFS) Open(name string) (vfs.File, error) {
	f, err := m.FS.Open(name)
	if err != nil {
		return nil, err
	}
	return &mapCountFile{File: f, fs: m}, nil
}

func (f *mapCountFile) Map(size int64) ([]byte, func() error, error) {
	data, unmap, err := f.File.(vfs.Mapper).Map(size)
	if err != nil {
		return nil, nil, err
	}
	f.fs.maps.Add(1)
	var once atomic.Bool
	return data, func() error {
		if !once.CompareAndSwap(false, true) {
			panic("unmapped twice")
		}
		f.fs.unmaps.Add(1)
		return unmap()
	}, nil
}

// TestCloseReleasesTheMapping: Close unmaps once however often it is
// called; a Load that refuses the file releases its mapping itself, and
// NoMap maps nothing.
func TestCloseReleasesTheMapping(t *testing.T) {
	mfs := &mapCountFS{FS: newMem(t)}
	data, sum := mustEncode(t, genSequential(300), testID)
	require.NoError(t, Write(mfs, ixPath, data))

	ix, err := Load(mfs, ixPath, sum, testID, LoadOptions{})
	require.NoError(t, err)
	require.Equal(t, int64(1), mfs.maps.Load())
	require.Zero(t, mfs.unmaps.Load())
	checkIndex(t, ix, genSequential(300))
	require.NoError(t, ix.Close())
	require.NoError(t, ix.Close())
	require.Equal(t, int64(1), mfs.unmaps.Load())

	_, err = Load(mfs, ixPath, sum^1, testID, LoadOptions{})
	testutil.RequireCorrupt(t, err)
	require.Equal(t, int64(2), mfs.maps.Load())
	require.Equal(t, int64(2), mfs.unmaps.Load(), "a refused index is unmapped")

	ix, err = Load(mfs, ixPath, sum, testID, LoadOptions{NoMap: true})
	require.NoError(t, err)
	require.Equal(t, int64(2), mfs.maps.Load())
	require.NoError(t, ix.Close())
	require.Equal(t, int64(2), mfs.unmaps.Load())
}

func TestWriteAndLoadErrorsAreWrapped(t *testing.T) {
	mem := newMem(t)
	faulty := vfs.NewFaulty(mem)
	data, sum := mustEncode(t, smallEntries(), testID)

	require.NoError(t, faulty.FailNth(vfs.OpCreate, 1, false))
	err := Write(faulty, ixPath, data)
	require.ErrorIs(t, err, vfs.ErrInjected)
	require.ErrorContains(t, err, "index: create "+ixPath)

	require.NoError(t, faulty.FailNth(vfs.OpWrite, 1, false))
	err = Write(faulty, ixPath, data)
	require.ErrorIs(t, err, vfs.ErrInjected)
	require.ErrorContains(t, err, "index: write "+ixPath)

	_, err = Load(faulty, "/nowhere/x.idx", 0, testID, LoadOptions{})
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.ErrorContains(t, err, "index: open /nowhere/x.idx")

	// A read error (whole or short) is an I/O error, not damage: the
	// caller may retry rather than rebuild.
	require.NoError(t, Write(faulty, ixPath, data))
	for _, short := range []bool{false, true} {
		require.NoError(t, faulty.Inject(vfs.Fault{Op: vfs.OpRead, Nth: 1, Short: short}))
		_, err = Load(faulty, ixPath, sum, testID, LoadOptions{})
		require.ErrorIs(t, err, vfs.ErrInjected)
		require.NotErrorIs(t, err, corruption.ErrCorrupt)
		require.ErrorContains(t, err, "index: read "+ixPath)
	}
	require.NoError(t, faulty.FailNth(vfs.OpOpen, 1, false))
	_, err = Load(faulty, ixPath, sum, testID, LoadOptions{})
	require.ErrorIs(t, err, vfs.ErrInjected)
	ix, err := Load(faulty, ixPath, sum, testID, LoadOptions{})
	require.NoError(t, err)
	checkIndex(t, ix, smallEntries())
}

// TestCrashNeverGivesAWrongAnswer writes an index without a sync (as the
// store does), crashes in every mode, and loads it back against both the new
// and the previous content's checksum and identity: the result is an error
// (missing or corrupt), or an index whose every read gives the right
// answer or a *corruption.Error (a torn part behind an intact top block is
// found on read), never a different answer; with a Repair every read is
// right.
func TestCrashNeverGivesAWrongAnswer(t *testing.T) {
	oldEntries := genSequential(300)[:200]
	oldID := Identity{DataLength: 100000, DataDigest: 1}
	newEntries := genSequential(400)
	newID := Identity{DataLength: 200000, DataDigest: 2}
	oldData, oldSum := mustEncode(t, oldEntries, oldID)
	newData, newSum := mustEncode(t, newEntries, newID)

	var loaded, lazy, corrupt, missing int
	modes := []vfs.CrashMode{vfs.CrashDropUnsynced, vfs.CrashTearLast, vfs.CrashRandomSubset, vfs.CrashGarbageTail, vfs.CrashTornSectors}
	for _, mode := range modes {
		for seed := range uint64(40) {
			for _, durableOld := range []bool{false, true} {
				mem := newMem(t)
				if durableOld {
					require.NoError(t, mem.WriteFile(ixPath, oldData))
				}
				require.NoError(t, Write(mem, ixPath, newData))
				mem.Crash(mode, rand.New(rand.NewPCG(seed, 7)))

				for _, c := range []struct {
					entries []Entry
					sum     uint64
					id      Identity
					data    []byte
				}{{newEntries, newSum, newID, newData}, {oldEntries, oldSum, oldID, oldData}} {
					var repairs atomic.Int64
					for _, repair := range []bool{false, true} {
						opts := LoadOptions{}
						if repair {
							opts.Repair = func(cause error) (*Index, error) {
								repairs.Add(1)
								return Decode(ixPath, c.data, c.sum, c.id)
							}
						}
						ix, err := Load(mem, ixPath, c.sum, c.id, opts)
						switch {
						case err == nil:
						case errors.Is(err, corruption.ErrCorrupt):
							corrupt++
							continue
						case errors.Is(err, fs.ErrNotExist):
							missing++
							continue
						default:
							t.Fatalf("%v seed %d: unexpected error %v", mode, seed, err)
						}
						if repair {
							checkIndex(t, ix, c.entries)
						} else if readsNeverLie(t, ix, c.entries) > 0 {
							lazy++
						} else {
							loaded++
						}
						require.NoError(t, ix.Close())
					}
					if repairs.Load() > 0 {
						require.Equal(t, int64(1), repairs.Load(), "%v seed %d: one repair", mode, seed)
					}
				}
			}
		}
	}
	// Every outcome was reached, so the test checked something real.
	require.Positive(t, loaded)
	require.Positive(t, corrupt)
	require.Positive(t, missing)
	t.Logf("loaded %d, found damaged on read %d, corrupt %d, missing %d", loaded, lazy, corrupt, missing)
}
