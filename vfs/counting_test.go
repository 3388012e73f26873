package vfs

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCountingCounts(t *testing.T) {
	m := NewMem()
	c := NewCounting(m)
	require.NoError(t, c.MkdirAll("/db"))
	f := create(t, c, "/db/000003.log")
	write(t, f, 0, "0123456789")
	write(t, f, 10, "abc")
	require.NoError(t, f.Preallocate(0, 64))
	require.NoError(t, f.Truncate(20))
	require.NoError(t, f.Sync())
	require.NoError(t, f.Sync())
	require.NoError(t, c.SyncDir("/db"))
	g := create(t, c, "/db/x.idx")
	write(t, g, 0, "ix")
	require.NoError(t, c.Rename("/db/x.idx", "/db/y.idx"))
	require.NoError(t, c.Remove("/db/y.idx"))
	require.Error(t, c.Remove("/db/y.idx"), "failed calls count too")

	// Reads, opens and stats are not counted.
	r, err := c.Open("/db/000003.log")
	require.NoError(t, err)
	_, err = r.ReadAt(make([]byte, 4), 0)
	require.NoError(t, err)
	_, err = c.Stat("/db/000003.log")
	require.NoError(t, err)
	_, err = c.List("/db")
	require.NoError(t, err)

	got := c.Counts()
	require.Equal(t, Counts{
		Syncs: 2, DirSyncs: 1, Renames: 1, Creates: 2, Removes: 2, Writes: 3, Truncates: 1, Preallocates: 1, Mkdirs: 1,
		BytesWritten: map[string]int64{"/db/000003.log": 13, "/db/x.idx": 2},
		SyncsByFile:  map[string]int64{"/db/000003.log": 2},
	}, got)

	// Counts is a copy.
	got.BytesWritten["/db/000003.log"] = 0
	require.EqualValues(t, 13, c.Counts().BytesWritten["/db/000003.log"])

	c.Reset()
	require.Equal(t, Counts{BytesWritten: map[string]int64{}, SyncsByFile: map[string]int64{}}, c.Counts())
	require.NoError(t, f.Sync())
	require.EqualValues(t, 1, c.Counts().Syncs)
}

func TestCountingLog(t *testing.T) {
	m := NewMem()
	c := NewCounting(m)
	require.NoError(t, c.MkdirAll("/db"))
	f := create(t, c, "/db/000003.log")
	require.Nil(t, c.StopLog(), "nothing logged before StartLog")

	c.SetLogBase("/db")
	c.StartLog()
	write(t, f, 0, "0123456789abcdef0123456789abcdef")
	require.NoError(t, f.Preallocate(0, 64<<20))
	require.NoError(t, f.Sync())
	require.NoError(t, c.SyncDir("/db"))
	g := create(t, c, "/db/a")
	_, err := g.ReadAt(make([]byte, 1), 0) // not logged
	require.Error(t, err)
	require.NoError(t, g.Truncate(7))
	require.NoError(t, c.Rename("/db/a", "/db/b"))
	require.NoError(t, c.Remove("/db/b"))
	require.Error(t, c.Remove("/db/b"))
	require.NoError(t, c.MkdirAll("/other"))
	l, err := c.Lock("/db/LOCK")
	require.NoError(t, err)
	require.NoError(t, l.Close())
	require.Equal(t, []string{
		"write 000003.log off=0 len=32",
		"prealloc 000003.log off=0 len=67108864",
		"sync 000003.log",
		"syncdir .",
		"create a",
		"truncate a size=7",
		"rename a b",
		"remove b",
		"remove b (error)",
		"mkdirall /other",
		"lock LOCK",
	}, c.StopLog())

	require.NoError(t, f.Sync())
	require.Nil(t, c.StopLog(), "stopped")
	c.SetLogBase("")
	c.StartLog()
	require.NoError(t, f.Sync())
	require.Equal(t, []string{"sync /db/000003.log"}, c.StopLog())
}

func TestCountingConcurrent(t *testing.T) {
	m := NewMem()
	c := NewCounting(m)
	require.NoError(t, c.MkdirAll("/db"))
	c.StartLog()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			f, err := c.Create(fmt.Sprintf("/db/f%d", w))
			if err != nil {
				t.Error(err)
				return
			}
			for i := range 100 {
				if _, err := f.WriteAt([]byte("abcd"), int64(4*i)); err != nil {
					t.Error(err)
				}
				if err := f.Sync(); err != nil {
					t.Error(err)
				}
				_ = c.Counts()
			}
		})
	}
	wg.Wait()
	k := c.Counts()
	require.EqualValues(t, 800, k.Writes)
	require.EqualValues(t, 800, k.Syncs)
	require.EqualValues(t, 8, k.Creates)
	for w := range 8 {
		require.EqualValues(t, 400, k.BytesWritten[fmt.Sprintf("/db/f%d", w)])
		require.EqualValues(t, 100, k.SyncsByFile[fmt.Sprintf("/db/f%d", w)])
	}
	require.Len(t, c.StopLog(), 8+800+800)
}

func TestCountingOverOS(t *testing.T) {
	dir := t.TempDir()
	c := NewCounting(NewOS())
	c.SetLogBase(dir)
	c.StartLog()
	f := create(t, c, dir+"/a")
	write(t, f, 0, "x")
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())
	require.NoError(t, c.SyncDir(dir))
	require.Equal(t, []string{"create a", "write a off=0 len=1", "sync a", "syncdir ."}, c.StopLog())
	require.Equal(t, "x", readAll(t, c, dir+"/a"))
}
