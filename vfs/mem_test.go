package vfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// newDB returns a Mem with a durable /db directory.
func newDB(t *testing.T) *Mem {
	t.Helper()
	m := NewMem()
	require.NoError(t, m.MkdirAll("/db"))
	return m
}

// durableFile creates name with content s, synced and dir-synced.
func durableFile(t *testing.T, m *Mem, name, s string) File {
	t.Helper()
	f := create(t, m, name)
	write(t, f, 0, s)
	require.NoError(t, f.Sync())
	require.NoError(t, m.SyncDir("/db"))
	return f
}

func crashed(t *testing.T, m *Mem) map[string]string {
	t.Helper()
	return snapshotOf(t, m.CrashClone(CrashDropUnsynced, seeded(1)))
}

func TestMemFileDurability(t *testing.T) {
	t.Run("unsynced write is lost, synced write kept", func(t *testing.T) {
		m := newDB(t)
		f := durableFile(t, m, "/db/a", "synced")
		write(t, f, 6, "-unsynced")
		write(t, f, 0, "S")
		require.Equal(t, "Synced-unsynced", readAll(t, m, "/db/a"))
		require.Equal(t, map[string]string{"/db/a": "synced"}, crashed(t, m))
		require.NoError(t, f.Sync())
		require.Equal(t, map[string]string{"/db/a": "Synced-unsynced"}, crashed(t, m))
	})
	t.Run("truncate and preallocate are durable only after sync", func(t *testing.T) {
		m := newDB(t)
		f := durableFile(t, m, "/db/a", "0123456789")
		require.NoError(t, f.Truncate(4))
		require.Equal(t, "0123456789", crashed(t, m)["/db/a"])
		require.NoError(t, f.Sync())
		require.Equal(t, "0123", crashed(t, m)["/db/a"])
		require.NoError(t, f.Preallocate(2, 6))
		size, err := f.Size()
		require.NoError(t, err)
		require.EqualValues(t, 8, size)
		require.Equal(t, "0123\x00\x00\x00\x00", readAll(t, m, "/db/a"))
		require.Equal(t, "0123", crashed(t, m)["/db/a"])
		require.NoError(t, f.Sync())
		require.Equal(t, "0123\x00\x00\x00\x00", crashed(t, m)["/db/a"])
		// Preallocating inside the file changes nothing.
		require.NoError(t, f.Preallocate(0, 3))
		require.Equal(t, "0123\x00\x00\x00\x00", readAll(t, m, "/db/a"))
	})
	t.Run("truncate then regrow reads zeros", func(t *testing.T) {
		m := newDB(t)
		f := create(t, m, "/db/a")
		write(t, f, 0, strings.Repeat("x", 3*pageSize+10))
		require.NoError(t, f.Sync())
		require.NoError(t, f.Truncate(pageSize+5))
		require.NoError(t, f.Truncate(3*pageSize))
		got := readAll(t, m, "/db/a")
		require.Equal(t, strings.Repeat("x", pageSize+5)+strings.Repeat("\x00", 2*pageSize-5), got)
	})
	t.Run("create of an existing file truncates it, not durably", func(t *testing.T) {
		m := newDB(t)
		durableFile(t, m, "/db/a", "old")
		f := create(t, m, "/db/a")
		write(t, f, 0, "n")
		require.Equal(t, "n", readAll(t, m, "/db/a"))
		require.NoError(t, m.SyncDir("/db"))
		require.Equal(t, map[string]string{"/db/a": "old"}, crashed(t, m))
		require.NoError(t, f.Sync())
		require.Equal(t, map[string]string{"/db/a": "n"}, crashed(t, m))
	})
	t.Run("a synced file inherits nothing from other handles' state", func(t *testing.T) {
		m := newDB(t)
		f := durableFile(t, m, "/db/a", "abc")
		g, err := m.OpenReadWrite("/db/a")
		require.NoError(t, err)
		write(t, g, 3, "def")
		// Sync through any handle flushes the inode, as fdatasync does.
		require.NoError(t, f.Sync())
		require.Equal(t, "abcdef", crashed(t, m)["/db/a"])
	})
}

func TestMemDirectoryDurability(t *testing.T) {
	t.Run("created but not dir-synced file is gone", func(t *testing.T) {
		m := newDB(t)
		f := create(t, m, "/db/new")
		write(t, f, 0, "data")
		require.NoError(t, f.Sync())
		require.Equal(t, []string{"/db/new"}, m.FileNames())
		require.Empty(t, crashed(t, m))
		require.NoError(t, m.SyncDir("/db"))
		require.Equal(t, map[string]string{"/db/new": "data"}, crashed(t, m))
	})
	t.Run("dir sync before file sync keeps an empty file", func(t *testing.T) {
		m := newDB(t)
		f := create(t, m, "/db/new")
		require.NoError(t, m.SyncDir("/db"))
		write(t, f, 0, "data")
		require.Equal(t, map[string]string{"/db/new": ""}, crashed(t, m))
	})
	t.Run("rename not dir-synced is reverted", func(t *testing.T) {
		m := newDB(t)
		durableFile(t, m, "/db/tmp", "v2")
		durableFile(t, m, "/db/cur", "v1")
		require.NoError(t, m.Rename("/db/tmp", "/db/cur"))
		require.Equal(t, "v2", readAll(t, m, "/db/cur"))
		require.Equal(t, map[string]string{"/db/tmp": "v2", "/db/cur": "v1"}, crashed(t, m))
		require.NoError(t, m.SyncDir("/db"))
		require.Equal(t, map[string]string{"/db/cur": "v2"}, crashed(t, m))
	})
	t.Run("rename across directories needs both synced", func(t *testing.T) {
		m := newDB(t)
		require.NoError(t, m.MkdirAll("/db/sub"))
		durableFile(t, m, "/db/a", "x")
		require.NoError(t, m.Rename("/db/a", "/db/sub/b"))
		require.NoError(t, m.SyncDir("/db/sub"))
		// The old entry is still durable: both names survive, one inode.
		img := m.CrashClone(CrashDropUnsynced, seeded(1))
		require.Equal(t, map[string]string{"/db/a": "x", "/db/sub/b": "x"}, snapshotOf(t, img))
		require.NoError(t, m.SyncDir("/db"))
		require.Equal(t, map[string]string{"/db/sub/b": "x"}, crashed(t, m))
	})
	t.Run("remove not dir-synced is resurrected with its durable content", func(t *testing.T) {
		m := newDB(t)
		f := durableFile(t, m, "/db/a", "keep")
		write(t, f, 0, "lost")
		require.NoError(t, m.Remove("/db/a"))
		_, err := m.Stat("/db/a")
		require.ErrorIs(t, err, fs.ErrNotExist)
		require.Equal(t, map[string]string{"/db/a": "keep"}, crashed(t, m))
		require.NoError(t, m.SyncDir("/db"))
		require.Empty(t, crashed(t, m))
	})
	t.Run("remove then re-create without dir sync", func(t *testing.T) {
		m := newDB(t)
		durableFile(t, m, "/db/a", "old")
		require.NoError(t, m.Remove("/db/a"))
		f := create(t, m, "/db/a")
		write(t, f, 0, "new")
		require.NoError(t, f.Sync())
		require.Equal(t, map[string]string{"/db/a": "old"}, crashed(t, m))
		require.NoError(t, m.SyncDir("/db"))
		require.Equal(t, map[string]string{"/db/a": "new"}, crashed(t, m))
	})
	t.Run("dir sync covers only its own directory", func(t *testing.T) {
		m := newDB(t)
		require.NoError(t, m.MkdirAll("/db/sub"))
		create(t, m, "/db/a")
		create(t, m, "/db/sub/b")
		require.NoError(t, m.SyncDir("/db/sub"))
		require.Equal(t, map[string]string{"/db/sub/b": ""}, crashed(t, m))
	})
	t.Run("MkdirAll is durable at once", func(t *testing.T) {
		m := NewMem()
		require.NoError(t, m.MkdirAll("/a/b/c"))
		img := m.CrashClone(CrashDropUnsynced, seeded(1))
		names, err := img.List("/a/b")
		require.NoError(t, err)
		require.Equal(t, []string{"c"}, names)
	})
	t.Run("WriteFile is durable at once", func(t *testing.T) {
		m := NewMem()
		require.NoError(t, m.WriteFile("/x/y/f", []byte("raw")))
		require.Equal(t, map[string]string{"/x/y/f": "raw"}, crashed(t, m))
		b, err := m.ReadFile("/x/y/f")
		require.NoError(t, err)
		require.Equal(t, "raw", string(b))
	})
}

// tornSetup leaves /db/a with durable "AAAA" and two unsynced writes after it.
func tornSetup(t *testing.T) *Mem {
	m := newDB(t)
	f := durableFile(t, m, "/db/a", "AAAA")
	write(t, f, 4, "BBBB")
	write(t, f, 8, "CCCCCCCC")
	return m
}

func TestCrashModes(t *testing.T) {
	t.Run("drop unsynced", func(t *testing.T) {
		m := tornSetup(t)
		got := snapshotOf(t, m.CrashClone(CrashDropUnsynced, seeded(1)))
		require.Equal(t, map[string]string{"/db/a": "AAAA"}, got)
	})
	t.Run("tear last: earlier writes whole, last write a strict prefix", func(t *testing.T) {
		m := tornSetup(t)
		seen := map[int]bool{}
		for seed := range uint64(200) {
			got := snapshotOf(t, m.CrashClone(CrashTearLast, seeded(seed)))["/db/a"]
			require.True(t, strings.HasPrefix(got, "AAAABBBB"), got)
			tail := got[8:]
			require.Less(t, len(tail), 8)
			require.Equal(t, strings.Repeat("C", len(tail)), tail)
			seen[len(tail)] = true
		}
		require.Len(t, seen, 8, "every tear point 0..7 occurs")
	})
	t.Run("tear last applies later truncates", func(t *testing.T) {
		m := newDB(t)
		f := durableFile(t, m, "/db/a", "")
		write(t, f, 0, "0123456789")
		require.NoError(t, f.Truncate(20))
		for seed := range uint64(20) {
			got := snapshotOf(t, m.CrashClone(CrashTearLast, seeded(seed)))["/db/a"]
			require.Len(t, got, 20)
			require.Equal(t, strings.Repeat("\x00", 10), got[10:])
		}
	})
	t.Run("random subset: each op independently, in order", func(t *testing.T) {
		m := newDB(t)
		f := durableFile(t, m, "/db/a", "")
		write(t, f, 0, "abcd")
		require.NoError(t, f.Truncate(2))
		counts := map[string]int{}
		for seed := range uint64(400) {
			counts[snapshotOf(t, m.CrashClone(CrashRandomSubset, seeded(seed)))["/db/a"]]++
		}
		// none, write only, truncate only, both (truncate after write).
		require.Len(t, counts, 4, "%q", counts)
		for _, s := range []string{"", "abcd", "\x00\x00", "ab"} {
			require.Greater(t, counts[s], 60, "%q: %v", s, counts)
		}
	})
	t.Run("random subset: single writes survive about half the time", func(t *testing.T) {
		m := newDB(t)
		f := durableFile(t, m, "/db/a", strings.Repeat(".", 8))
		for i := range 8 {
			write(t, f, int64(i), "#")
		}
		hits := make([]int, 8)
		for seed := range uint64(400) {
			got := snapshotOf(t, m.CrashClone(CrashRandomSubset, seeded(seed)))["/db/a"]
			require.Len(t, got, 8)
			for i := range 8 {
				if got[i] == '#' {
					hits[i]++
				}
			}
		}
		for i, h := range hits {
			require.InDelta(t, 200, h, 60, "write %d survived %d/400 times", i, h)
		}
	})
	t.Run("garbage tail", func(t *testing.T) {
		m := newDB(t)
		f := durableFile(t, m, "/db/a", "AAAA")
		write(t, f, 2, "BBBB")                   // half inside the durable size
		write(t, f, 6, "CCCC")                   // wholly beyond it
		require.NoError(t, f.Preallocate(10, 6)) // to 16: zeros
		zeros, junk := 0, 0
		for seed := range uint64(100) {
			got := snapshotOf(t, m.CrashClone(CrashGarbageTail, seeded(seed)))["/db/a"]
			require.Len(t, got, 16)
			require.Equal(t, "AAAA", got[:4], "unsynced data inside the durable size is lost")
			require.Equal(t, strings.Repeat("\x00", 6), got[10:], "preallocated extension reads as zeros")
			for _, r := range []string{got[4:6], got[6:10]} {
				require.NotContains(t, r, "B")
				require.NotEqual(t, "CCCC", r, "the written data itself does not survive")
				if strings.Trim(r, "\x00") == "" {
					zeros++
				} else {
					junk++
				}
			}
		}
		require.Greater(t, zeros, 50)
		require.Greater(t, junk, 50)
	})
	t.Run("garbage tail leaves files without an extension alone", func(t *testing.T) {
		m := newDB(t)
		f := durableFile(t, m, "/db/a", "AAAAAAAA")
		write(t, f, 0, "BB")
		require.NoError(t, f.Truncate(4))
		got := snapshotOf(t, m.CrashClone(CrashGarbageTail, seeded(3)))
		require.Equal(t, map[string]string{"/db/a": "AAAAAAAA"}, got)
	})
	t.Run("deterministic for a seed", func(t *testing.T) {
		m := newDB(t)
		for i := range 5 {
			f := durableFile(t, m, fmt.Sprintf("/db/f%d", i), "base")
			for j := range 6 {
				write(t, f, int64(4+j*7), fmt.Sprintf("w%d-%d..", i, j))
			}
			require.NoError(t, f.Truncate(int64(60+i)))
		}
		for _, mode := range []CrashMode{CrashDropUnsynced, CrashTearLast, CrashRandomSubset, CrashGarbageTail, CrashTornSectors} {
			a := snapshotOf(t, m.CrashClone(mode, seeded(42)))
			b := snapshotOf(t, m.CrashClone(mode, seeded(42)))
			require.Equal(t, a, b, mode.String())
			if mode != CrashDropUnsynced {
				differs := false
				for s := range uint64(20) {
					differs = differs || fmt.Sprint(snapshotOf(t, m.CrashClone(mode, seeded(s)))) != fmt.Sprint(a)
				}
				require.True(t, differs, "%v: the rng matters", mode)
			}
		}
	})
}

func TestCrashCloneLeavesOriginalAlone(t *testing.T) {
	m := newDB(t)
	f := durableFile(t, m, "/db/a", strings.Repeat("d", pageSize+100))
	write(t, f, 10, "unsynced")
	create(t, m, "/db/b")
	before := snapshotOf(t, m)
	first := snapshotOf(t, m.CrashClone(CrashTearLast, seeded(9)))

	img := m.CrashClone(CrashDropUnsynced, seeded(1))
	// Writing to the clone (into pages it shares with m) does not reach m.
	g, err := img.OpenReadWrite("/db/a")
	require.NoError(t, err)
	write(t, g, 0, "CLONE")
	write(t, g, pageSize+50, "CLONE")
	require.NoError(t, g.Sync())
	require.NoError(t, img.Remove("/db/a"))

	require.Equal(t, before, snapshotOf(t, m))
	// m's unsynced history is intact: the same crash gives the same image.
	require.Equal(t, first, snapshotOf(t, m.CrashClone(CrashTearLast, seeded(9))))
	// m's handles still work, and writes to m do not reach the clone.
	write(t, f, 0, "ORIG")
	require.NoError(t, f.Sync())
	_, err = img.Stat("/db/a")
	require.ErrorIs(t, err, fs.ErrNotExist)
	img2 := m.CrashClone(CrashDropUnsynced, seeded(1))
	require.NoError(t, f.Truncate(1))
	require.NoError(t, f.Sync())
	b, err := img2.ReadFile("/db/a")
	require.NoError(t, err)
	require.Equal(t, "ORIG", string(b[:4]))
	require.Len(t, b, pageSize+100)
}

func TestMemCrash(t *testing.T) {
	m := newDB(t)
	f := durableFile(t, m, "/db/a", "kept")
	write(t, f, 4, "lost")
	lock, err := m.Lock("/db/LOCK")
	require.NoError(t, err)
	m.Crash(CrashDropUnsynced, seeded(1))

	_, err = f.ReadAt(make([]byte, 1), 0)
	require.ErrorIs(t, err, ErrCrashed)
	_, err = f.WriteAt([]byte("x"), 0)
	require.ErrorIs(t, err, ErrCrashed)
	require.ErrorIs(t, f.Sync(), ErrCrashed)
	require.ErrorIs(t, lock.Close(), ErrCrashed)

	require.Equal(t, map[string]string{"/db/a": "kept"}, snapshotOf(t, m))
	// The lock died with its holder; LOCK itself was never dir-synced.
	l2, err := m.Lock("/db/LOCK")
	require.NoError(t, err)
	require.NoError(t, l2.Close())
	g, err := m.OpenReadWrite("/db/a")
	require.NoError(t, err)
	write(t, g, 4, "+new")
	require.Equal(t, "kept+new", readAll(t, m, "/db/a"))
}

func TestSyncHook(t *testing.T) {
	m := newDB(t)
	type point struct {
		ev  SyncEvent
		img map[string]string
	}
	var points []point
	m.SetSyncHook(func(ev SyncEvent) {
		// Cloning inside the hook must not deadlock: the hook runs unlocked.
		points = append(points, point{ev, snapshotOf(t, m.CrashClone(CrashDropUnsynced, seeded(1)))})
	})
	f := create(t, m, "/db/a")
	write(t, f, 0, "x")
	require.NoError(t, m.SyncDir("db"))
	require.NoError(t, f.Sync())
	m.SetSyncHook(nil)
	require.NoError(t, f.Sync())

	require.Equal(t, []point{
		{SyncEvent{Kind: DirSync, Name: "/db", Before: true}, map[string]string{}},
		{SyncEvent{Kind: DirSync, Name: "/db"}, map[string]string{"/db/a": ""}},
		{SyncEvent{Kind: FileSync, Name: "/db/a", Before: true}, map[string]string{"/db/a": ""}},
		{SyncEvent{Kind: FileSync, Name: "/db/a"}, map[string]string{"/db/a": "x"}},
	}, points)
	require.Equal(t, "sync", FileSync.String())
	require.Equal(t, "syncdir", DirSync.String())
}

func TestMemNamespace(t *testing.T) {
	m := newDB(t)
	require.NoError(t, m.MkdirAll("/db/sub"))
	for _, n := range []string{"c", "a", "b"} {
		create(t, m, "/db/"+n)
	}
	names, err := m.List("/db")
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b", "c", "sub"}, names)
	require.Equal(t, []string{"/db/a", "/db/b", "/db/c"}, m.FileNames())

	_, err = m.List("/nope")
	require.ErrorIs(t, err, fs.ErrNotExist)
	_, err = m.Stat("/db/nope")
	require.ErrorIs(t, err, fs.ErrNotExist)
	_, err = m.Open("/db/nope")
	require.ErrorIs(t, err, fs.ErrNotExist)
	_, err = m.OpenReadWrite("/db/nope")
	require.ErrorIs(t, err, fs.ErrNotExist)
	_, err = m.Create("/nope/x")
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.ErrorIs(t, m.Remove("/db/nope"), fs.ErrNotExist)
	require.ErrorIs(t, m.Rename("/db/nope", "/db/x"), fs.ErrNotExist)
	require.ErrorIs(t, m.Rename("/db/a", "/nope/x"), fs.ErrNotExist)
	_, err = m.ReadFile("/db/nope")
	require.ErrorIs(t, err, fs.ErrNotExist)
	_, err = m.Create("/db/sub")
	require.Error(t, err)
	require.Error(t, m.MkdirAll("/db/a/b"), "a is a file")
	require.Error(t, m.Remove("/db"), "not empty")
	require.NoError(t, m.Remove("/db/sub"))

	// Relative and unclean paths resolve against the root.
	require.NoError(t, m.WriteFile("db/./x", []byte("1")))
	require.Equal(t, "1", readAll(t, m, "/db/x"))
	size, err := m.Stat("/db//x")
	require.NoError(t, err)
	require.EqualValues(t, 1, size)
}

func TestMemHandles(t *testing.T) {
	m := newDB(t)
	f := durableFile(t, m, "/db/a", "hello")
	require.Equal(t, "/db/a", f.Name())

	ro, err := m.Open("/db/a")
	require.NoError(t, err)
	_, err = ro.WriteAt([]byte("x"), 0)
	require.Error(t, err)
	require.Error(t, ro.Truncate(0))
	require.Error(t, ro.Preallocate(0, 10))

	// ReadAt follows io.ReaderAt.
	b := make([]byte, 10)
	n, err := ro.ReadAt(b, 2)
	require.Equal(t, 3, n)
	require.ErrorIs(t, err, io.EOF)
	_, err = ro.ReadAt(b, 5)
	require.ErrorIs(t, err, io.EOF)
	_, err = ro.ReadAt(b, -1)
	require.Error(t, err)

	// A handle follows its inode across rename and remove, as on POSIX.
	require.NoError(t, m.Rename("/db/a", "/db/b"))
	write(t, f, 0, "J")
	require.Equal(t, "Jello", readAll(t, m, "/db/b"))
	require.NoError(t, m.Remove("/db/b"))
	n, err = ro.ReadAt(b[:5], 0)
	require.NoError(t, err)
	require.Equal(t, "Jello", string(b[:n]))

	require.Error(t, f.Preallocate(0, 0))
	require.Error(t, f.Preallocate(-1, 10))
	require.Error(t, f.Truncate(-1))
	_, err = f.WriteAt([]byte("x"), -1)
	require.Error(t, err)

	require.NoError(t, ro.Close())
	require.ErrorIs(t, ro.Close(), fs.ErrClosed)
	_, err = ro.ReadAt(b, 0)
	require.ErrorIs(t, err, fs.ErrClosed)
}

func TestMemLock(t *testing.T) {
	m := newDB(t)
	l, err := m.Lock("/db/LOCK")
	require.NoError(t, err)
	_, err = m.Lock("/db/LOCK")
	require.ErrorIs(t, err, ErrLocked)
	_, err = m.Lock("db/../db/LOCK")
	require.ErrorIs(t, err, ErrLocked, "same file, other spelling")
	other, err := m.Lock("/db/OTHER")
	require.NoError(t, err)
	require.NoError(t, l.Close())
	require.Error(t, l.Close())
	l, err = m.Lock("/db/LOCK")
	require.NoError(t, err)
	require.NoError(t, l.Close())
	require.NoError(t, other.Close())
	_, err = m.Lock("/nope/LOCK")
	require.ErrorIs(t, err, fs.ErrNotExist)
}

func TestDropUnsynced(t *testing.T) {
	m := newDB(t)
	f := durableFile(t, m, "/db/a", "durable")
	write(t, f, 0, "DIRTY--dirty")
	f.(interface{ DropUnsynced() }).DropUnsynced()
	require.Equal(t, "durable", readAll(t, m, "/db/a"))
	require.NoError(t, f.Sync())
	require.Equal(t, "durable", crashed(t, m)["/db/a"])
}

// TestContentModel checks the paged content against a plain byte slice,
// under random writes, truncates and preallocations crossing page bounds,
// with syncs and crash clones (which share pages) in between.
func TestContentModel(t *testing.T) {
	for seed := range uint64(10) {
		rng := seeded(seed)
		m := newDB(t)
		f := create(t, m, "/db/f")
		require.NoError(t, m.SyncDir("/db"))
		var cur, durable []byte
		var clones []*Mem
		var cloneWant []string
		for range 300 {
			switch op := rng.IntN(10); {
			case op < 5:
				off := rng.Int64N(3 * pageSize)
				b := make([]byte, 1+rng.IntN(pageSize+500))
				for i := range b {
					b[i] = byte(rng.Uint32())
				}
				write(t, f, off, string(b))
				if end := off + int64(len(b)); end > int64(len(cur)) {
					cur = append(cur, make([]byte, end-int64(len(cur)))...)
				}
				copy(cur[off:], b)
			case op < 7:
				size := rng.Int64N(4 * pageSize)
				require.NoError(t, f.Truncate(size))
				if size < int64(len(cur)) {
					cur = cur[:size]
				} else {
					cur = append(cur, make([]byte, size-int64(len(cur)))...)
				}
			case op < 8:
				off, n := rng.Int64N(4*pageSize), 1+rng.Int64N(pageSize)
				require.NoError(t, f.Preallocate(off, n))
				if off+n > int64(len(cur)) {
					cur = append(cur, make([]byte, off+n-int64(len(cur)))...)
				}
			case op < 9:
				require.NoError(t, f.Sync())
				durable = bytes.Clone(cur)
			default:
				clones = append(clones, m.CrashClone(CrashDropUnsynced, rng))
				cloneWant = append(cloneWant, string(durable))
			}
			require.Equal(t, string(cur), readAll(t, m, "/db/f"))
		}
		for i, c := range clones {
			b, err := c.ReadFile("/db/f")
			require.NoError(t, err)
			require.Equal(t, cloneWant[i], string(b), "seed %d clone %d", seed, i)
		}
	}
}

func TestMemConcurrent(t *testing.T) {
	m := newDB(t)
	var images sync.Map
	m.SetSyncHook(func(ev SyncEvent) {
		images.Store(ev, m.CrashClone(CrashRandomSubset, seeded(uint64(len(ev.Name)))))
	})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			name := fmt.Sprintf("/db/f%d", w)
			f, err := m.Create(name)
			if err != nil {
				t.Error(err)
				return
			}
			for i := range 200 {
				if _, err := f.WriteAt([]byte("0123456789"), int64(i*10)); err != nil {
					t.Error(err)
					return
				}
				if i%20 == 0 {
					if err := f.Sync(); err != nil {
						t.Error(err)
					}
					if err := m.SyncDir("/db"); err != nil {
						t.Error(err)
					}
				}
				if _, err := m.List("/db"); err != nil {
					t.Error(err)
				}
				b := make([]byte, 10)
				if _, err := f.ReadAt(b, int64(i*10)); err != nil || string(b) != "0123456789" {
					t.Error("read back", err, string(b))
				}
			}
		})
	}
	wg.Wait()
	for i := range 8 {
		size, err := m.Stat(fmt.Sprintf("/db/f%d", i))
		require.NoError(t, err)
		require.EqualValues(t, 2000, size)
	}
	n := 0
	images.Range(func(_, _ any) bool { n++; return true })
	require.Positive(t, n)
}

func TestCrashModeString(t *testing.T) {
	for _, mode := range []CrashMode{CrashDropUnsynced, CrashTearLast, CrashRandomSubset, CrashGarbageTail, CrashMetadataPrefix, CrashTornSectors, 99} {
		require.NotEmpty(t, mode.String())
	}
	require.True(t, errors.Is(fmt.Errorf("x: %w", ErrCrashed), ErrCrashed))
}

func TestCrashCloneBadInput(t *testing.T) {
	m := tornSetup(t)
	a := snapshotOf(t, m.CrashClone(CrashTearLast, nil))
	require.Equal(t, a, snapshotOf(t, m.CrashClone(CrashTearLast, nil)), "nil rng is a fixed seed")
	require.Equal(t, map[string]string{"/db/a": "AAAA"}, snapshotOf(t, m.CrashClone(CrashMode(99), nil)))
}

func TestCrashMetadataPrefix(t *testing.T) {
	m := newDB(t)
	require.NoError(t, m.MkdirAll("/db/sub"))
	durableFile(t, m, "/db/c", "c")
	durableFile(t, m, "/db/d", "d")
	f := create(t, m, "/db/a")
	write(t, f, 0, "a")
	require.NoError(t, f.Sync())
	g := create(t, m, "/db/sub/b")
	write(t, g, 0, "unsynced data")
	require.NoError(t, m.Remove("/db/c"))
	require.NoError(t, m.Rename("/db/d", "/db/sub/e"))

	outcomes := func() map[string]bool {
		seen := map[string]bool{}
		for seed := range uint64(100) {
			img := m.CrashClone(CrashMetadataPrefix, seeded(seed))
			seen[fmt.Sprint(snapshotOf(t, img))] = true
		}
		return seen
	}
	key := func(files map[string]string) string { return fmt.Sprint(files) }
	require.Equal(t, map[string]bool{
		key(map[string]string{"/db/c": "c", "/db/d": "d"}):                                true,
		key(map[string]string{"/db/a": "a", "/db/c": "c", "/db/d": "d"}):                  true,
		key(map[string]string{"/db/a": "a", "/db/c": "c", "/db/d": "d", "/db/sub/b": ""}): true,
		key(map[string]string{"/db/a": "a", "/db/d": "d", "/db/sub/b": ""}):               true,
		key(map[string]string{"/db/a": "a", "/db/sub/b": "", "/db/sub/e": "d"}):           true,
	}, outcomes(), "exactly the prefixes of the journal; a rename is atomic")

	// Syncing /db/sub makes its half of the journal durable in every image;
	// the rename's other half (removing /db/d) is still pending.
	require.NoError(t, m.SyncDir("/db/sub"))
	require.Equal(t, map[string]bool{
		key(map[string]string{"/db/c": "c", "/db/d": "d", "/db/sub/b": "", "/db/sub/e": "d"}):               true,
		key(map[string]string{"/db/a": "a", "/db/c": "c", "/db/d": "d", "/db/sub/b": "", "/db/sub/e": "d"}): true,
		key(map[string]string{"/db/a": "a", "/db/d": "d", "/db/sub/b": "", "/db/sub/e": "d"}):               true,
		key(map[string]string{"/db/a": "a", "/db/sub/b": "", "/db/sub/e": "d"}):                             true,
	}, outcomes())

	require.NoError(t, m.SyncDir("/db"))
	require.Empty(t, m.nslog, "everything is durable: the journal is empty")
	require.Len(t, outcomes(), 1)

	// WriteFile is durable at once, whatever unsynced change preceded it.
	require.NoError(t, m.Remove("/db/a"))
	require.NoError(t, m.WriteFile("/db/a", []byte("new")))
	for seed := range uint64(10) {
		require.Equal(t, "new", snapshotOf(t, m.CrashClone(CrashMetadataPrefix, seeded(seed)))["/db/a"])
	}
}

func TestMemRefusesHugeFiles(t *testing.T) {
	m := newDB(t)
	f := create(t, m, "/db/a")
	_, err := f.WriteAt([]byte("x"), MaxMemFileSize)
	require.ErrorIs(t, err, syscall.EFBIG)
	require.ErrorIs(t, f.Truncate(MaxMemFileSize+1), syscall.EFBIG)
	require.ErrorIs(t, f.Preallocate(1, 1<<62), syscall.EFBIG)
	require.ErrorIs(t, f.Preallocate(1<<62, 1<<62), syscall.EFBIG, "overflow")
	require.NoError(t, f.Preallocate(0, 1<<20))
	size, err := f.Size()
	require.NoError(t, err)
	require.EqualValues(t, 1<<20, size)
}

// TestCrashTornSectors: each 512-byte sector of an unsynced write survives
// or not on its own, so a later sector can survive an earlier lost one; the
// durable prefix always survives.
func TestCrashTornSectors(t *testing.T) {
	m := newDB(t)
	f := durableFile(t, m, "/db/a", "durable!")
	payload := strings.Repeat("x", 512-8) + strings.Repeat("y", 512) + strings.Repeat("z", 100)
	write(t, f, 8, payload)
	seen := map[string]bool{}
	for seed := range uint64(64) {
		got := snapshotOf(t, m.CrashClone(CrashTornSectors, seeded(seed)))["/db/a"]
		require.True(t, strings.HasPrefix(got, "durable!"), "the synced prefix survives")
		sectors := [3]bool{}
		for i, r := range []struct {
			lo, hi int
			c      byte
		}{{8, 512, 'x'}, {512, 1024, 'y'}, {1024, 1124, 'z'}} {
			if len(got) >= r.hi {
				chunk := got[r.lo:r.hi]
				require.True(t, chunk == strings.Repeat(string(r.c), r.hi-r.lo) || chunk == strings.Repeat("\x00", r.hi-r.lo),
					"a sector survives whole or not at all")
				sectors[i] = chunk[0] == r.c
			}
		}
		seen[fmt.Sprint(sectors)] = true
	}
	require.True(t, seen[fmt.Sprint([3]bool{false, true, true})], "a later sector survives a lost earlier one: %v", seen)
	require.True(t, seen[fmt.Sprint([3]bool{true, true, true})])
}
