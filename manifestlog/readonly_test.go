package manifestlog

import (
	"errors"
	"io/fs"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/vfs"
)

// OpenReadOnly reads what Open reads and changes no file: a torn tail stays,
// the report says what Open would truncate, and commits are refused.
func TestOpenReadOnlyChangesNothing(t *testing.T) {
	mem := vfs.NewMem()
	l, _, _ := openLog(t, mem, Options{})
	w := &workload{}
	for range 20 {
		_, err := l.Commit(w.edit())
		require.NoError(t, err)
	}
	want := l.State()
	require.NoError(t, l.Close())
	files := manifestFiles(t, mem)
	require.Len(t, files, 1)
	path := files[0]
	f, err := mem.OpenReadWrite(path)
	require.NoError(t, err)
	size, err := f.Size()
	require.NoError(t, err)
	_, err = f.WriteAt([]byte{0xab, 0xcd, 0xef, 0x01, 0x02}, size) // a torn tail
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())
	before, err := mem.ReadFile(path)
	require.NoError(t, err)

	ro, st, rep, err := OpenReadOnly(mem, testDir, Options{})
	require.NoError(t, err)
	requireStateEqual(t, want, st)
	require.Equal(t, path, rep.TruncatedPath)
	require.NotEmpty(t, rep.Actions)
	_, err = ro.Commit(w.edit())
	require.ErrorIs(t, err, ErrReadOnly)
	require.NoError(t, ro.Close())
	after, err := mem.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, before, after, "a read-only open changed the manifest")

	// Open repairs the same tail and replays the same state.
	l, st, wrep := openLog(t, mem, Options{})
	requireStateEqual(t, want, st)
	require.Equal(t, rep.TruncatedAt, wrep.TruncatedAt)
	require.NoError(t, l.Close())
}

func TestOpenReadOnlyWithoutAManifest(t *testing.T) {
	mem := vfs.NewMem()
	require.NoError(t, mem.MkdirAll(testDir))
	_, _, _, err := OpenReadOnly(mem, testDir, Options{})
	require.True(t, errors.Is(err, fs.ErrNotExist), "%v", err)
	names, err := mem.List(testDir)
	require.NoError(t, err)
	require.Empty(t, names, "a read-only open created a file")
}
