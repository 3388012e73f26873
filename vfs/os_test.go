package vfs

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestOSFiles(t *testing.T) {
	fsys, dir := NewOS(), t.TempDir()
	name := filepath.Join(dir, "a")
	f := create(t, fsys, name)
	require.Equal(t, name, f.Name())
	write(t, f, 0, "hello")
	write(t, f, 10, "world")
	require.NoError(t, f.Sync())
	require.Equal(t, "hello\x00\x00\x00\x00\x00world", readAll(t, fsys, name))

	b := make([]byte, 8)
	n, err := f.ReadAt(b, 12)
	require.Equal(t, 3, n)
	require.ErrorIs(t, err, io.EOF)

	// Preallocate extends with zeros and never overwrites data.
	require.NoError(t, f.Preallocate(2, 30))
	size, err := f.Size()
	require.NoError(t, err)
	require.EqualValues(t, 32, size)
	require.Equal(t, "hello\x00\x00\x00\x00\x00world"+strings.Repeat("\x00", 17), readAll(t, fsys, name))
	require.NoError(t, f.Preallocate(0, 4))
	size, err = f.Size()
	require.NoError(t, err)
	require.EqualValues(t, 32, size, "preallocating inside the file keeps its size")
	require.Error(t, f.Preallocate(0, 0))

	require.NoError(t, f.Truncate(3))
	require.Equal(t, "hel", readAll(t, fsys, name))
	require.NoError(t, f.Close())

	// Create truncates; OpenReadWrite does not; Open is read-only.
	g, err := fsys.OpenReadWrite(name)
	require.NoError(t, err)
	write(t, g, 3, "p!")
	require.NoError(t, g.Close())
	require.Equal(t, "help!", readAll(t, fsys, name))
	ro, err := fsys.Open(name)
	require.NoError(t, err)
	_, err = ro.WriteAt([]byte("x"), 0)
	require.Error(t, err)
	require.NoError(t, ro.Close())
	require.NoError(t, create(t, fsys, name).Close())
	sz, err := fsys.Stat(name)
	require.NoError(t, err)
	require.Zero(t, sz)
}

// TestOSExtend tests the preallocation of the systems without fallocate
// (prealloc_other.go), here on Linux where the tests run.
func TestOSExtend(t *testing.T) {
	fsys, dir := NewOS(), t.TempDir()
	f := create(t, fsys, filepath.Join(dir, "a"))
	defer f.Close()
	write(t, f, 0, "data")
	of := f.(*osFile)
	require.NoError(t, of.extend(2, 3<<20))
	require.NoError(t, of.extend(0, 2)) // inside: nothing to do, never shrinks
	size, err := f.Size()
	require.NoError(t, err)
	require.EqualValues(t, 2+3<<20, size)
	b := make([]byte, 8)
	_, err = f.ReadAt(b, 0)
	require.NoError(t, err)
	require.Equal(t, "data\x00\x00\x00\x00", string(b))
	_, err = f.ReadAt(b, size-8)
	require.NoError(t, err)
	require.Equal(t, make([]byte, 8), b, "the extension reads as zeros")
}

func TestOSNamespace(t *testing.T) {
	fsys, dir := NewOS(), t.TempDir()
	sub := filepath.Join(dir, "x", "y", "z")
	require.NoError(t, fsys.MkdirAll(sub))
	require.NoError(t, fsys.MkdirAll(sub)) // exists: no-op
	st, err := os.Stat(sub)
	require.NoError(t, err)
	require.True(t, st.IsDir())
	require.Error(t, fsys.MkdirAll(filepath.Join(dir, "x", "y", "z", "\x00")))

	for _, n := range []string{"c", "a", "b"} {
		require.NoError(t, create(t, fsys, filepath.Join(dir, n)).Close())
	}
	names, err := fsys.List(dir)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b", "c", "x"}, names)

	require.NoError(t, fsys.Rename(filepath.Join(dir, "a"), filepath.Join(dir, "b")))
	require.NoError(t, fsys.Remove(filepath.Join(dir, "c")))
	require.NoError(t, fsys.SyncDir(dir))
	names, err = fsys.List(dir)
	require.NoError(t, err)
	require.Equal(t, []string{"b", "x"}, names)

	_, err = fsys.Stat(filepath.Join(dir, "a"))
	require.ErrorIs(t, err, fs.ErrNotExist)
	_, err = fsys.Open(filepath.Join(dir, "a"))
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.ErrorIs(t, fsys.Remove(filepath.Join(dir, "a")), fs.ErrNotExist)
	require.ErrorIs(t, fsys.SyncDir(filepath.Join(dir, "nope")), fs.ErrNotExist)
	_, err = fsys.List(filepath.Join(dir, "nope"))
	require.ErrorIs(t, err, fs.ErrNotExist)
}

func TestOSLock(t *testing.T) {
	fsys, dir := NewOS(), t.TempDir()
	name := filepath.Join(dir, "LOCK")
	l, err := fsys.Lock(name)
	require.NoError(t, err)
	// A second lock in the same process conflicts: flock (and Windows'
	// LockFileEx) lock per open handle, and Lock opens its own.
	_, err = fsys.Lock(name)
	require.ErrorIs(t, err, ErrLocked)
	require.Contains(t, err.Error(), name)
	require.NoError(t, l.Close())
	l, err = fsys.Lock(name)
	require.NoError(t, err)
	require.NoError(t, l.Close())
	_, err = fsys.Lock(filepath.Join(dir, "nope", "LOCK"))
	require.ErrorIs(t, err, fs.ErrNotExist)
}
