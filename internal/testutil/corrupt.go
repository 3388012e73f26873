package testutil

import (
	"bytes"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/corruption"
	"github.com/segkv/segkv/vfs"
	"github.com/segkv/segkv/wal"
)

// TB is what both *testing.T and *rapid.T provide.
type TB interface {
	require.TestingT
	Helper()
}

// RequireCorrupt asserts that err is a *corruption.Error matching
// corruption.ErrCorrupt, and returns it.
func RequireCorrupt(t TB, err error, msgAndArgs ...any) *corruption.Error {
	t.Helper()
	require.Error(t, err, msgAndArgs...)
	var ce *corruption.Error
	require.ErrorAs(t, err, &ce, msgAndArgs...)
	require.ErrorIs(t, err, corruption.ErrCorrupt, msgAndArgs...)
	return ce
}

// FlipByte XORs the byte at off of the file at path with mask, in place
// (read, change, write back and sync), as damage on the medium would.
func FlipByte(t TB, fsys vfs.FS, path string, off int64, mask byte) {
	t.Helper()
	f, err := fsys.OpenReadWrite(path)
	require.NoError(t, err)
	b := make([]byte, 1)
	_, err = f.ReadAt(b, off)
	require.NoError(t, err)
	b[0] ^= mask
	_, err = f.WriteAt(b, off)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())
}

// Frames lists the valid frames of data (a file's bytes, named path in
// errors) from start on, up to the first invalid one.
func Frames(t TB, data []byte, path string, start int64) []wal.Frame {
	t.Helper()
	var out []wal.Frame
	_, err := wal.ScanFrames(bytes.NewReader(data), path, start, int64(len(data)), func(fr wal.Frame) error {
		fr.Payload = bytes.Clone(fr.Payload) // the scanner reuses its buffer
		out = append(out, fr)
		return nil
	})
	require.NoError(t, err)
	return out
}
