package vfs

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSmokeMem(t *testing.T) {
	m := NewMem()
	require.NoError(t, m.MkdirAll("/db"))
	f, err := m.Create("/db/a")
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("hello"), 0)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.NoError(t, m.SyncDir("/db"))
	c := m.CrashClone(CrashDropUnsynced, nil)
	b, err := c.ReadFile("/db/a")
	require.NoError(t, err)
	require.Equal(t, "hello", string(b))
}
