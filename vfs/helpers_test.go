package vfs

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func seeded(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x5e6)) }

func create(t *testing.T, fsys FS, name string) File {
	t.Helper()
	f, err := fsys.Create(name)
	require.NoError(t, err)
	return f
}

func write(t *testing.T, f File, off int64, s string) {
	t.Helper()
	n, err := f.WriteAt([]byte(s), off)
	require.NoError(t, err)
	require.Equal(t, len(s), n)
}

// readAll reads the whole file through fsys.
func readAll(t *testing.T, fsys FS, name string) string {
	t.Helper()
	f, err := fsys.Open(name)
	require.NoError(t, err)
	defer f.Close()
	size, err := f.Size()
	require.NoError(t, err)
	b := make([]byte, size)
	n, err := f.ReadAt(b, 0)
	if size > 0 {
		require.NoError(t, err)
	}
	require.Equal(t, int(size), n)
	return string(b)
}

// snapshotOf maps every visible file of m to its content.
func snapshotOf(t *testing.T, m *Mem) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, name := range m.FileNames() {
		b, err := m.ReadFile(name)
		require.NoError(t, err)
		out[name] = string(b)
	}
	return out
}
