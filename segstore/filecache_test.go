package segstore

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/vfs"
)

// TestOpenFilesBounded reads from many segments concurrently with a small
// MaxOpenFiles: every read is right and idle files are closed down to the bound.
func TestOpenFilesBounded(t *testing.T) {
	s := mustOpen(t, "/db", &Options{FS: vfs.NewMem(), SegmentSize: 64 << 10, MaxOpenFiles: 4, Merge: MergeOptions{Disable: true}})
	const segs = 20
	for i := 0; i < segs; i++ {
		require.NoError(t, s.Put([]byte(fmt.Sprint("k", i)), []byte(fmt.Sprint("v", i))))
		require.NoError(t, s.Seal())
	}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < 50; r++ {
				i := (g*7 + r) % segs
				v, err := s.Get([]byte(fmt.Sprint("k", i)))
				if err != nil || string(v) != fmt.Sprint("v", i) {
					t.Errorf("get k%d = %q, %v", i, v, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	require.LessOrEqual(t, s.Metrics().OpenFiles, 4)
	checkAndClose(t, s)
}

// TestFileCacheClose: after close the cache opens nothing more, and a
// handle still in use when it closed is closed by its last release, not
// under the reader.
func TestFileCacheClose(t *testing.T) {
	mem := vfs.NewMem()
	require.NoError(t, mem.MkdirAll("/d"))
	require.NoError(t, mem.WriteFile("/d/a", []byte("abc")))
	require.NoError(t, mem.WriteFile("/d/b", []byte("xyz")))
	c := newFileCache(mem, 8)
	busy, err := c.acquire(1, "/d/a")
	require.NoError(t, err)
	idle, err := c.acquire(2, "/d/b")
	require.NoError(t, err)
	c.release(idle)

	require.NoError(t, c.close())
	_, err = c.acquire(2, "/d/b")
	require.ErrorIs(t, err, ErrClosed)
	_, err = c.acquire(3, "/d/a")
	require.ErrorIs(t, err, ErrClosed)
	_, err = idle.f.ReadAt(make([]byte, 1), 0)
	require.Error(t, err, "an idle handle is closed by close")

	buf := make([]byte, 3)
	_, err = busy.f.ReadAt(buf, 0)
	require.NoError(t, err, "a handle in use stays open until its release")
	require.Equal(t, "abc", string(buf))
	c.release(busy)
	_, err = busy.f.ReadAt(buf, 0)
	require.Error(t, err, "the last release closes it")
}
