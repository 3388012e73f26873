package vfs

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMap: OS and Mem files map their first bytes read-only; the mapping
// outlives the descriptor and reads what was written; bad sizes are errors.
func TestMap(t *testing.T) {
	for name, fsys := range map[string]FS{"os": NewOS(), "mem": NewMem()} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, fsys.MkdirAll(dir))
			path := filepath.Join(dir, "f")
			f, err := fsys.Create(path)
			require.NoError(t, err)
			data := []byte("sealed bytes that never change")
			_, err = f.WriteAt(data, 0)
			require.NoError(t, err)
			require.NoError(t, f.Sync())
			require.NoError(t, f.Close())

			r, err := fsys.Open(path)
			require.NoError(t, err)
			mp, ok := r.(Mapper)
			require.True(t, ok)
			_, _, err = mp.Map(0)
			require.Error(t, err)
			got, unmap, err := mp.Map(int64(len(data) - 6))
			require.NoError(t, err)
			require.NoError(t, r.Close())
			require.Equal(t, data[:len(data)-6], got, "the mapping outlives the descriptor")
			require.NoError(t, unmap())
		})
	}
	t.Run("mem beyond the end", func(t *testing.T) {
		m := NewMem()
		require.NoError(t, m.MkdirAll("/d"))
		f, err := m.Create("/d/f")
		require.NoError(t, err)
		_, _, err = f.(Mapper).Map(1)
		require.Error(t, err)
	})
}
