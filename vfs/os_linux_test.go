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
