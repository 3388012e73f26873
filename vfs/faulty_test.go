package vfs

import (
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

func newFaultyDB(t *testing.T) (*Faulty, *Mem) {
	t.Helper()
	m := newDB(t)
	return NewFaulty(m), m
}

// outcomes runs op n times and returns which calls failed ("." ok, "x"
// injected failure).
func outcomes(t *testing.T, n int, op func(i int) error) string {
	t.Helper()
	var sb strings.Builder
	for i := range n {
		err := op(i)
		switch {
		case err == nil:
			sb.WriteByte('.')
		case errors.Is(err, ErrInjected):
			sb.WriteByte('x')
		default:
			t.Fatalf("call %d: unexpected error %v", i, err)
		}
	}
	return sb.String()
}

func TestFaultyNth(t *testing.T) {
	cases := []struct {
		op  Op
		run func(t *testing.T, fy *Faulty, f File, i int) error
	}{
		{OpWrite, func(t *testing.T, fy *Faulty, f File, i int) error {
			_, err := f.WriteAt([]byte{'0' + byte(i)}, int64(i))
			return err
		}},
		{OpFileSync, func(t *testing.T, fy *Faulty, f File, i int) error { return f.Sync() }},
		{OpDirSync, func(t *testing.T, fy *Faulty, f File, i int) error { return fy.SyncDir("/db") }},
		{OpTruncate, func(t *testing.T, fy *Faulty, f File, i int) error { return f.Truncate(int64(i)) }},
		{OpPreallocate, func(t *testing.T, fy *Faulty, f File, i int) error { return f.Preallocate(0, int64(i+1)) }},
		{OpCreate, func(t *testing.T, fy *Faulty, f File, i int) error {
			_, err := fy.Create(fmt.Sprintf("/db/c%d", i))
			return err
		}},
		{OpRename, func(t *testing.T, fy *Faulty, f File, i int) error {
			return fy.Rename(fmt.Sprintf("/db/x%d", i), fmt.Sprintf("/db/y%d", i))
		}},
		{OpRemove, func(t *testing.T, fy *Faulty, f File, i int) error {
			return fy.Remove(fmt.Sprintf("/db/x%d", i))
		}},
	}
	for _, c := range cases {
		for _, persistent := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v persistent=%v", c.op, persistent), func(t *testing.T) {
				fy, m := newFaultyDB(t)
				for i := range 6 {
					require.NoError(t, m.WriteFile(fmt.Sprintf("/db/x%d", i), nil))
				}
				f, err := fy.Create("/db/f")
				require.NoError(t, err)
				require.NoError(t, fy.FailNth(c.op, 3, persistent))
				got := outcomes(t, 6, func(i int) error { return c.run(t, fy, f, i) })
				if persistent {
					require.Equal(t, "..xxxx", got)
				} else {
					require.Equal(t, "..x...", got)
				}
				st := fy.Stats()
				require.EqualValues(t, strings.Count(got, "x"), st.Injected[c.op])
				require.EqualValues(t, strings.Count(got, "x"), st.Total())
				require.GreaterOrEqual(t, st.Seen[c.op], int64(6))
			})
		}
	}
}

// TestFaultyFailureHasNoEffect checks that an injected failure stops the
// operation before it reaches the inner FS.
func TestFaultyFailureHasNoEffect(t *testing.T) {
	fy, m := newFaultyDB(t)
	require.NoError(t, m.WriteFile("/db/a", []byte("abc")))
	f, err := fy.OpenReadWrite("/db/a")
	require.NoError(t, err)
	for _, op := range []Op{OpWrite, OpTruncate, OpPreallocate, OpRename, OpRemove, OpCreate, OpFileSync, OpDirSync} {
		require.NoError(t, fy.FailNth(op, 1, false))
	}
	_, err = f.WriteAt([]byte("X"), 0)
	require.ErrorIs(t, err, ErrInjected)
	require.ErrorIs(t, f.Truncate(0), ErrInjected)
	require.ErrorIs(t, f.Preallocate(0, 100), ErrInjected)
	require.ErrorIs(t, fy.Rename("/db/a", "/db/b"), ErrInjected)
	require.ErrorIs(t, fy.Remove("/db/a"), ErrInjected)
	_, err = fy.Create("/db/c")
	require.ErrorIs(t, err, ErrInjected)
	require.Equal(t, []string{"/db/a"}, m.FileNames())
	require.Equal(t, "abc", readAll(t, m, "/db/a"))

	g := create(t, fy, "/db/d")
	write(t, g, 0, "d")
	require.ErrorIs(t, g.Sync(), ErrInjected)
	require.ErrorIs(t, fy.SyncDir("/db"), ErrInjected)
	// Neither barrier took effect: a crash loses /db/d.
	require.Equal(t, map[string]string{"/db/a": "abc"}, crashed(t, m))
	require.NoError(t, g.Sync())
	require.NoError(t, fy.SyncDir("/db"))
	require.Equal(t, map[string]string{"/db/a": "abc", "/db/d": "d"}, crashed(t, m))
}

func TestFaultySyncKindsCountSeparately(t *testing.T) {
	fy, _ := newFaultyDB(t)
	f := create(t, fy, "/db/a")
	// Syncs in order: file, dir, file, dir, ...
	seq := func() string {
		return outcomes(t, 6, func(i int) error {
			if i%2 == 0 {
				return f.Sync()
			}
			return fy.SyncDir("/db")
		})
	}
	require.NoError(t, fy.FailNth(OpDirSync, 2, false))
	require.Equal(t, "...x..", seq(), "second dir sync")
	require.NoError(t, fy.FailNth(OpFileSync, 2, false))
	require.Equal(t, "..x...", seq(), "second file sync")
	require.NoError(t, fy.FailNth(OpAnySync, 2, false))
	require.Equal(t, ".x....", seq(), "second sync of either kind")
	st := fy.Stats()
	require.EqualValues(t, 9, st.Seen[OpFileSync])
	require.EqualValues(t, 9, st.Seen[OpDirSync])
	require.EqualValues(t, 18, st.Seen[OpAnySync])
	require.EqualValues(t, 3, st.Total())
}

func TestFaultyMatchAndClear(t *testing.T) {
	fy, _ := newFaultyDB(t)
	a, b := create(t, fy, "/db/MANIFEST"), create(t, fy, "/db/data")
	require.NoError(t, fy.Inject(Fault{Op: OpFileSync, Nth: 2, Persistent: true,
		Match: func(p string) bool { return strings.HasSuffix(p, "MANIFEST") }}))
	got := outcomes(t, 8, func(i int) error {
		if i%2 == 0 {
			return a.Sync()
		}
		return b.Sync()
	})
	require.Equal(t, "..x.x.x.", got, "only MANIFEST syncs count and fail")
	fy.Clear()
	require.NoError(t, a.Sync())

	require.Error(t, fy.FailNth(OpWrite, 0, false))
	require.Error(t, fy.FailNth(Op(-1), 1, false))
	require.Error(t, fy.Inject(Fault{Op: numOps, Nth: 1}))
	require.Equal(t, "Op(99)", Op(99).String())
}

func TestFaultyENOSPC(t *testing.T) {
	fy, m := newFaultyDB(t)
	f := create(t, fy, "/db/a")
	fy.SetSpaceLimit(10)
	write(t, f, 0, "012345")
	n, err := f.WriteAt([]byte("6789ab"), 6)
	require.Equal(t, 4, n, "the bytes that fit are written")
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.ErrorIs(t, err, ErrInjected)
	n, err = f.WriteAt([]byte("x"), 10)
	require.Zero(t, n)
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.ErrorIs(t, f.Preallocate(0, 100), syscall.ENOSPC)
	require.NoError(t, f.Preallocate(0, 5), "no growth, no space needed")
	// Reads keep working.
	require.Equal(t, "0123456789", readAll(t, fy, "/db/a"))
	require.Equal(t, "0123456789", readAll(t, m, "/db/a"))
	require.EqualValues(t, 3, fy.Stats().ENOSPC)

	fy.SetSpaceLimit(-1) // space returns
	write(t, f, 10, "ab")
	require.NoError(t, f.Preallocate(0, 100))

	fy.SetSpaceLimit(50)
	require.NoError(t, f.Preallocate(0, 140), "grows by 40")
	require.ErrorIs(t, f.Preallocate(0, 151), syscall.ENOSPC, "would grow by 11, 10 left")
	fy.Clear()
	require.NoError(t, f.Preallocate(0, 1000))
}

func TestFaultyLinuxFsync(t *testing.T) {
	for _, stacked := range []bool{false, true} {
		t.Run(fmt.Sprintf("through Counting=%v", stacked), func(t *testing.T) {
			m := newDB(t)
			var inner FS = m
			if stacked {
				inner = NewCounting(m)
			}
			fy := NewFaulty(inner)
			fy.SetLinuxFsync(true)
			f := create(t, fy, "/db/wal")
			require.NoError(t, fy.SyncDir("/db"))
			write(t, f, 0, "acked")
			require.NoError(t, f.Sync())
			write(t, f, 5, "+lost")
			require.NoError(t, fy.FailNth(OpFileSync, 1, true))
			require.ErrorIs(t, f.Sync(), ErrInjected)
			// The kernel dropped the dirty pages...
			require.Equal(t, "acked", readAll(t, m, "/db/wal"))
			// ...and the retried fsync reports success even though the
			// fault is persistent: the error was already reported once.
			require.NoError(t, f.Sync())
			require.Equal(t, map[string]string{"/db/wal": "acked"}, crashed(t, m))
			// The one after that is subject to the rules again.
			require.ErrorIs(t, f.Sync(), ErrInjected)
			st := fy.Stats()
			require.EqualValues(t, 2, st.Dropped)
			require.EqualValues(t, 2, st.Injected[OpFileSync])
		})
	}
	t.Run("off: data stays and can be synced later", func(t *testing.T) {
		fy, m := newFaultyDB(t)
		f := create(t, fy, "/db/wal")
		write(t, f, 0, "data")
		require.NoError(t, fy.FailNth(OpFileSync, 1, false))
		require.ErrorIs(t, f.Sync(), ErrInjected)
		require.Equal(t, "data", readAll(t, m, "/db/wal"))
		require.NoError(t, f.Sync())
		require.NoError(t, fy.SyncDir("/db"))
		require.Equal(t, "data", crashed(t, m)["/db/wal"])
		require.Zero(t, fy.Stats().Dropped)
	})
}

func TestFaultyPassThrough(t *testing.T) {
	fy, m := newFaultyDB(t)
	require.NoError(t, fy.MkdirAll("/db/sub"))
	l, err := fy.Lock("/db/LOCK")
	require.NoError(t, err)
	_, err = fy.Lock("/db/LOCK")
	require.ErrorIs(t, err, ErrLocked)
	require.NoError(t, l.Close())
	require.NoError(t, m.WriteFile("/db/a", []byte("xy")))
	names, err := fy.List("/db")
	require.NoError(t, err)
	require.Equal(t, []string{"LOCK", "a", "sub"}, names)
	size, err := fy.Stat("/db/a")
	require.NoError(t, err)
	require.EqualValues(t, 2, size)
	_, err = fy.Stat("/db/nope")
	require.ErrorIs(t, err, fs.ErrNotExist)
	_, err = fy.Open("/db/nope")
	require.ErrorIs(t, err, fs.ErrNotExist)
	_, err = fy.OpenReadWrite("/db/nope")
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.Equal(t, "xy", readAll(t, fy, "/db/a"))
}

// TestFaultyConcurrent arms and clears faults while other goroutines do I/O.
func TestFaultyConcurrent(t *testing.T) {
	fy, _ := newFaultyDB(t)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_ = fy.FailNth(Op(i%int(numOps)), int64(1+i%5), i%3 == 0)
			fy.SetSpaceLimit(int64(i%7) * 1000)
			if i%10 == 0 {
				fy.Clear()
			}
			_ = fy.Stats()
		}
	})
	var ops sync.WaitGroup
	for w := range 4 {
		ops.Go(func() {
			for i := range 200 {
				f, err := fy.Create(fmt.Sprintf("/db/f%d-%d", w, i%5))
				if err != nil {
					continue
				}
				_, _ = f.WriteAt(make([]byte, 100), 0)
				_ = f.Sync()
				_ = fy.SyncDir("/db")
				_ = f.Close()
			}
		})
	}
	ops.Wait()
	close(stop)
	wg.Wait()
	require.Positive(t, fy.Stats().Seen[OpWrite])
}

// TestFaultyReads fails the Nth read and open of matching files, and gives
// short reads that a caller cannot mistake for the end of the file.
func TestFaultyReads(t *testing.T) {
	fy, m := newFaultyDB(t)
	require.NoError(t, m.WriteFile("/db/a", []byte("0123456789")))
	require.NoError(t, m.WriteFile("/db/b", []byte("abcdefghij")))
	isA := func(p string) bool { return strings.HasSuffix(p, "/a") }

	require.NoError(t, fy.Inject(Fault{Op: OpRead, Nth: 2, Match: isA}))
	fa, err := fy.Open("/db/a")
	require.NoError(t, err)
	fb, err := fy.Open("/db/b")
	require.NoError(t, err)
	buf := make([]byte, 4)
	got := outcomes(t, 3, func(i int) error {
		if _, err := fb.ReadAt(buf, 0); err != nil { // never selected
			return err
		}
		_, err := fa.ReadAt(buf, int64(i))
		return err
	})
	require.Equal(t, ".x.", got)
	require.EqualValues(t, 1, fy.Stats().Injected[OpRead])

	// A short read returns half of what was asked and an error that says
	// so; it is not io.EOF.
	require.NoError(t, fy.Inject(Fault{Op: OpRead, Nth: 1, Short: true}))
	buf = make([]byte, 6)
	n, err := fa.ReadAt(buf, 2)
	require.Equal(t, 3, n)
	require.Equal(t, "234", string(buf[:n]))
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	require.ErrorIs(t, err, ErrInjected)
	require.NotErrorIs(t, err, io.EOF)
	n, err = fa.ReadAt(buf, 2) // the fault fired once
	require.NoError(t, err)
	require.Equal(t, 6, n)

	require.Error(t, fy.Inject(Fault{Op: OpWrite, Nth: 1, Short: true}), "Short is for reads only")

	// Opens fail through both Open and OpenReadWrite.
	require.NoError(t, fy.Inject(Fault{Op: OpOpen, Nth: 1, Persistent: true, Match: isA}))
	_, err = fy.Open("/db/a")
	require.ErrorIs(t, err, ErrInjected)
	_, err = fy.OpenReadWrite("/db/a")
	require.ErrorIs(t, err, ErrInjected)
	f, err := fy.Open("/db/b")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, fa.Close())
	require.NoError(t, fb.Close())
	fy.Clear()
	_, isMapper := any(f).(Mapper)
	require.False(t, isMapper, "a faulty file must not offer a mapping that bypasses its read faults")
}
