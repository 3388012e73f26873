package index

import (
	"bytes"
	"errors"
	"io/fs"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/corruption"
	"github.com/segkv/segkv/vfs"
)

const ixPath = "/store/0000000000000001.idx"

func TestWriteLoad(t *testing.T) {
	mem := vfs.NewMem()
	require.NoError(t, mem.MkdirAll("/store"))
	fsys := vfs.NewCounting(mem)
	entries := smallEntries()
	data, sum := mustEncode(t, entries, testID)

	_, err := Load(fsys, ixPath, sum, testID)
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.NotErrorIs(t, err, corruption.ErrCorrupt)

	require.NoError(t, Write(fsys, ixPath, data))
	c := fsys.Counts()
	require.Zero(t, c.Syncs, "the index is a cache: Write never syncs")
	require.Zero(t, c.DirSyncs)
	require.Equal(t, int64(1), c.Writes, "one write")
	ix, err := Load(fsys, ixPath, sum, testID)
	require.NoError(t, err)
	checkIndex(t, ix, entries)

	// A shorter index replaces a longer one completely (truncate on create).
	short, shortSum := mustEncode(t, entries[:1], testID)
	require.NoError(t, Write(fsys, ixPath, short))
	ix, err = Load(fsys, ixPath, shortSum, testID)
	require.NoError(t, err)
	checkIndex(t, ix, entries[:1])

	// A torn file on disk: corruption, not a panic and not a wrong answer.
	require.NoError(t, mem.WriteFile(ixPath, data[:len(data)/2]))
	_, err = Load(fsys, ixPath, sum, testID)
	requireCorrupt(t, err)
	require.NoError(t, mem.WriteFile(ixPath, nil))
	_, err = Load(fsys, ixPath, sum, testID)
	requireCorrupt(t, err)
	require.Zero(t, fsys.Counts().Syncs)
}

func TestWriteErrorsAreWrapped(t *testing.T) {
	mem := vfs.NewMem()
	require.NoError(t, mem.MkdirAll("/store"))
	faulty := vfs.NewFaulty(mem)
	data, _ := mustEncode(t, smallEntries(), testID)

	require.NoError(t, faulty.FailNth(vfs.OpCreate, 1, false))
	err := Write(faulty, ixPath, data)
	require.ErrorIs(t, err, vfs.ErrInjected)
	require.ErrorContains(t, err, "index: create "+ixPath)

	require.NoError(t, faulty.FailNth(vfs.OpWrite, 1, false))
	err = Write(faulty, ixPath, data)
	require.ErrorIs(t, err, vfs.ErrInjected)
	require.ErrorContains(t, err, "index: write "+ixPath)

	_, err = Load(faulty, "/nowhere/x.idx", 0, testID)
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.ErrorContains(t, err, "index: open /nowhere/x.idx")
}

// TestCrashNeverGivesAWrongAnswer writes an index without a sync (as the
// store does), crashes in every mode, and loads it back against both the new
// and the previous content's checksum and identity: the result is the exact
// index or an error (missing or corrupt), never a different index.
func TestCrashNeverGivesAWrongAnswer(t *testing.T) {
	oldEntries := smallEntries()[:3]
	oldID := Identity{DataLength: 1000, DataDigest: 1}
	newEntries := smallEntries()
	newID := Identity{DataLength: 2000, DataDigest: 2}
	oldData, oldSum := mustEncode(t, oldEntries, oldID)
	newData, newSum := mustEncode(t, newEntries, newID)

	var loaded, corrupt, missing int
	modes := []vfs.CrashMode{vfs.CrashDropUnsynced, vfs.CrashTearLast, vfs.CrashRandomSubset, vfs.CrashGarbageTail, vfs.CrashTornSectors}
	for _, mode := range modes {
		for seed := range uint64(50) {
			for _, durableOld := range []bool{false, true} {
				mem := vfs.NewMem()
				require.NoError(t, mem.MkdirAll("/store"))
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
					ix, err := Load(mem, ixPath, c.sum, c.id)
					switch {
					case err == nil:
						loaded++
					case errors.Is(err, corruption.ErrCorrupt):
						corrupt++
						continue
					case errors.Is(err, fs.ErrNotExist):
						missing++
						continue
					default:
						t.Fatalf("%v seed %d: unexpected error %v", mode, seed, err)
					}
					require.True(t, bytes.Equal(c.data, ix.Bytes()), "%v seed %d", mode, seed)
					checkIndex(t, ix, c.entries)
				}
			}
		}
	}
	// Every outcome was reached, so the test checked something real.
	require.Positive(t, loaded)
	require.Positive(t, corrupt)
	require.Positive(t, missing)
	t.Logf("loaded %d, corrupt %d, missing %d", loaded, corrupt, missing)
}
