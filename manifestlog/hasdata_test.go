package manifestlog

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/corruption"
	"github.com/segkv/segkv/vfs"
)

// With HasData, Open and OpenReadOnly never create a manifest (none at
// all, or only names the log does not read) and refuse a stray MANIFEST-*
// name, naming it, changing nothing. Without data files a stray is left
// alone and a fresh log is created as before.
func TestHasDataNeverCreates(t *testing.T) {
	for _, stray := range []string{"", "MANIFEST-0000000000000001.bak", "MANIFEST-1", "MANIFEST-backup"} {
		t.Run("stray="+stray, func(t *testing.T) {
			mem := vfs.NewMem()
			require.NoError(t, mem.MkdirAll(testDir))
			if stray != "" {
				require.NoError(t, mem.WriteFile(filepath.Join(testDir, stray), []byte("whatever")))
			}
			before := mem.FileNames()
			for _, ro := range []bool{false, true} {
				open := Open
				if ro {
					open = OpenReadOnly
				}
				_, _, _, err := open(mem, testDir, Options{HasData: true})
				require.ErrorIs(t, err, corruption.ErrCorrupt, "read-only %v", ro)
				if stray != "" {
					require.ErrorContains(t, err, stray, "read-only %v", ro)
				}
				require.Equal(t, before, mem.FileNames(), "read-only %v: changed the directory", ro)
			}
			// No data files: nothing to disown.
			l, _, rep, err := Open(mem, testDir, Options{})
			require.NoError(t, err)
			require.True(t, rep.Created)
			require.NoError(t, l.Close())
		})
	}
}

// A stray beside a valid generation and data files is refused too: Open
// cannot tell which manifest the data files belong to.
func TestHasDataStrayBesideGeneration(t *testing.T) {
	mem := vfs.NewMem()
	l, _, _ := openLog(t, mem, Options{})
	w := &workload{}
	for range 5 {
		_, err := l.Commit(w.edit())
		require.NoError(t, err)
	}
	require.NoError(t, l.Close())
	files := manifestFiles(t, mem)
	require.Len(t, files, 1)
	b, err := mem.ReadFile(files[0])
	require.NoError(t, err)
	require.NoError(t, mem.WriteFile(files[0]+".old", b))
	for _, ro := range []bool{false, true} {
		open := Open
		if ro {
			open = OpenReadOnly
		}
		_, _, _, err := open(mem, testDir, Options{HasData: true})
		require.ErrorIs(t, err, corruption.ErrCorrupt, "read-only %v", ro)
		require.ErrorContains(t, err, files[0]+".old")
		// Without data files the stray is ignored, never read or removed.
		l, _, _, err := open(mem, testDir, Options{})
		require.NoError(t, err, "read-only %v", ro)
		require.NoError(t, l.Close())
		_, err = mem.Stat(files[0] + ".old")
		require.NoError(t, err)
	}
}
