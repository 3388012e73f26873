package vfs

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestOSZeroFillFallback(t *testing.T) {
	fsys, dir := NewOS(), t.TempDir()
	f := create(t, fsys, filepath.Join(dir, "a"))
	defer f.Close()
	write(t, f, 0, "data")
	of := f.(*osFile)
	require.NoError(t, of.zeroFill(2, 3<<20))
	require.NoError(t, of.zeroFill(0, 2)) // inside: nothing to do
	size, err := f.Size()
	require.NoError(t, err)
	require.EqualValues(t, 2+3<<20, size)
	b := make([]byte, 8)
	_, err = f.ReadAt(b, 0)
	require.NoError(t, err)
	require.Equal(t, "data\x00\x00\x00\x00", string(b))
}

// TestOSStartWriteback: the hint is taken on a real file (sync_file_range
// accepts the range) and changes nothing a read sees; a closed file
// reports its error instead of pretending.
func TestOSStartWriteback(t *testing.T) {
	fsys, dir := NewOS(), t.TempDir()
	f := create(t, fsys, filepath.Join(dir, "a"))
	write(t, f, 0, "some data to write back")
	ws, ok := f.(WritebackStarter)
	require.True(t, ok, "the OS file takes the hint on Linux")
	require.NoError(t, ws.StartWriteback(0, 23))
	require.NoError(t, ws.StartWriteback(5, 1<<20)) // past the end: allowed
	b := make([]byte, 23)
	_, err := f.ReadAt(b, 0)
	require.NoError(t, err)
	require.Equal(t, "some data to write back", string(b))
	require.NoError(t, f.Close())
	require.Error(t, ws.StartWriteback(0, 23))
}
