package raftfsm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/segkv/segkv/segstore"
	"github.com/segkv/segkv/vfs"
)

// memSink is a raft.SnapshotSink in memory.
type memSink struct {
	bytes.Buffer
	closed, cancelled bool
}

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Close() error  { s.closed = true; return nil }
func (s *memSink) Cancel() error { s.cancelled = true; return nil }

func openFSM(t *testing.T, fsys vfs.FS, dir string) *FSM {
	t.Helper()
	f, err := Open(dir, &Options{Store: &segstore.Options{FS: fsys, SegmentSize: 16 << 10}})
	require.NoError(t, err)
	return f
}

func cmdLog(index uint64, build func(c *Command)) *raft.Log {
	var c Command
	build(&c)
	return &raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: c.Bytes()}
}

// contents returns every key and value below the reserved prefix.
func contents(t *testing.T, st *segstore.Store) map[string]string {
	t.Helper()
	it, err := st.NewIterator(&segstore.IterOptions{UpperBound: []byte(ReservedPrefix)})
	require.NoError(t, err)
	defer it.Close()
	out := map[string]string{}
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.Value()
		require.NoError(t, err)
		out[string(it.Key())] = string(v)
	}
	require.NoError(t, it.Err())
	return out
}

func TestApply(t *testing.T) {
	mem := vfs.NewMem()
	f := openFSM(t, mem, "/fsm")
	require.Nil(t, f.Apply(cmdLog(1, func(c *Command) {
		c.Put([]byte("a"), []byte("1"))
		c.Put([]byte("b"), []byte("2"))
		c.Put([]byte("c"), []byte("3"))
	})))
	require.Nil(t, f.Apply(cmdLog(2, func(c *Command) {
		c.Delete([]byte("a"))
		c.DeleteRange([]byte("b"), []byte("c"))
		c.Put([]byte("d"), nil)
	})))
	// Raft sends configuration entries too: they only advance the index.
	require.Nil(t, f.Apply(&raft.Log{Index: 3, Type: raft.LogConfiguration, Data: []byte("not a command")}))
	require.Equal(t, map[string]string{"c": "3", "d": ""}, contents(t, f.Store()))
	require.Equal(t, uint64(3), f.AppliedIndex())

	// Refused commands change nothing but the applied index, and say why.
	resp := f.Apply(&raft.Log{Index: 4, Type: raft.LogCommand, Data: []byte{9, 9}})
	require.ErrorIs(t, resp.(error), ErrBadCommand)
	resp = f.Apply(cmdLog(5, func(c *Command) {
		c.Put([]byte("e"), []byte("5"))
		c.Put([]byte(ReservedPrefix+"applied"), []byte("x"))
	}))
	require.ErrorIs(t, resp.(error), ErrReservedKey)
	resp = f.Apply(cmdLog(6, func(c *Command) {
		c.Put([]byte("f"), []byte("6"))
		c.DeleteRange([]byte("z"), []byte("a"))
	}))
	require.ErrorIs(t, resp.(error), segstore.ErrInvalidRange)
	resp = f.Apply(cmdLog(7, func(c *Command) {
		c.Put(make([]byte, segstore.DefaultMaxKeySize+1), nil)
	}))
	require.ErrorIs(t, resp.(error), segstore.ErrKeyTooLarge)
	require.Equal(t, map[string]string{"c": "3", "d": ""}, contents(t, f.Store()))
	require.Equal(t, uint64(7), f.AppliedIndex())

	// A batch: good and bad commands side by side, one atomic write.
	resps := f.ApplyBatch([]*raft.Log{
		cmdLog(8, func(c *Command) { c.Put([]byte("g"), []byte("8")) }),
		{Index: 9, Type: raft.LogCommand, Data: nil},
		cmdLog(10, func(c *Command) { c.Put([]byte("h"), []byte("10")) }),
		// A range over everything, the reserved keys included: they stay.
		cmdLog(11, func(c *Command) {
			c.DeleteRange(nil, []byte("\xff\xff\xff\xff\xff"))
			c.Put([]byte("i"), []byte("11"))
		}),
	})
	require.Len(t, resps, 4)
	require.Nil(t, resps[0])
	require.ErrorIs(t, resps[1].(error), ErrBadCommand)
	require.Nil(t, resps[2])
	require.Nil(t, resps[3])
	require.Equal(t, map[string]string{"i": "11"}, contents(t, f.Store()))
	require.Equal(t, uint64(11), f.AppliedIndex())

	// After a restart, entries already applied are skipped: a replayed
	// put that a later entry overwrote does not come back.
	require.NoError(t, f.Close())
	f = openFSM(t, mem, "/fsm")
	require.Equal(t, uint64(11), f.AppliedIndex())
	f.ApplyBatch([]*raft.Log{
		cmdLog(10, func(c *Command) { c.Put([]byte("h"), []byte("replayed")) }),
		cmdLog(11, func(c *Command) { c.Put([]byte("i"), []byte("replayed")) }),
		cmdLog(12, func(c *Command) { c.Put([]byte("j"), []byte("12")) }),
	})
	require.Equal(t, map[string]string{"i": "11", "j": "12"}, contents(t, f.Store()))
	require.Equal(t, uint64(12), f.AppliedIndex())
	require.NoError(t, f.Close())
}

// After a store write fails, the FSM applies nothing more and refuses to
// snapshot; a reopen resumes after the last entry the store holds.
func TestApplyStopsAfterStoreFailure(t *testing.T) {
	mem := vfs.NewMem()
	faulty := vfs.NewFaulty(mem)
	f := openFSM(t, faulty, "/fsm")
	require.Nil(t, f.Apply(cmdLog(1, func(c *Command) { c.Put([]byte("a"), []byte("1")) })))
	require.NoError(t, faulty.FailNth(vfs.OpFileSync, 1, true))
	resp := f.Apply(cmdLog(2, func(c *Command) { c.Put([]byte("b"), []byte("2")) }))
	require.ErrorIs(t, resp.(error), ErrStopped)
	faulty.Clear()
	resp = f.Apply(cmdLog(3, func(c *Command) { c.Put([]byte("c"), []byte("3")) }))
	require.ErrorIs(t, resp.(error), ErrStopped)
	_, err := f.Snapshot()
	require.ErrorIs(t, err, ErrStopped)
	require.Equal(t, uint64(1), f.AppliedIndex())
	f.Close()
	f = openFSM(t, mem, "/fsm")
	defer f.Close()
	applied := f.AppliedIndex()
	require.Contains(t, []uint64{1, 2}, applied, "entry 2 was not acknowledged: it may or may not have reached the disk")
	require.Nil(t, f.Apply(cmdLog(3, func(c *Command) { c.Put([]byte("c"), []byte("3")) })))
	got := contents(t, f.Store())
	require.Equal(t, "1", got["a"])
	require.Equal(t, "3", got["c"])
}

func TestCommandRoundTrip(t *testing.T) {
	var c Command
	require.Equal(t, 0, c.Len())
	c.Put([]byte("k"), []byte("v"))
	c.Put(nil, nil)
	c.Delete([]byte("gone"))
	c.DeleteRange([]byte("a"), []byte("b"))
	require.Equal(t, 4, c.Len())
	ops, err := parseCommand(c.Bytes())
	require.NoError(t, err)
	require.Equal(t, []op{
		{kind: opPut, key: []byte("k"), value: []byte("v")},
		{kind: opPut, key: []byte{}, value: []byte{}},
		{kind: opDelete, key: []byte("gone")},
		{kind: opDeleteRange, key: []byte("a"), value: []byte("b")},
	}, ops)
	b := c.Bytes()
	for n := 0; n < len(b); n++ {
		_, err := parseCommand(b[:n])
		require.ErrorIs(t, err, ErrBadCommand, "prefix of %d bytes", n)
	}
	_, err = parseCommand(append(b, 0))
	require.ErrorIs(t, err, ErrBadCommand)
	// The version 1 bytes are pinned.
	var g Command
	g.Put([]byte("k"), []byte("v"))
	g.Delete([]byte("d"))
	require.Equal(t, []byte{1, 2, 1, 1, 'k', 1, 'v', 2, 1, 'd'}, g.Bytes())
}

func FuzzParseCommand(f *testing.F) {
	var c Command
	c.Put([]byte("k"), []byte("v"))
	c.DeleteRange([]byte("a"), []byte("b"))
	f.Add(c.Bytes())
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		ops, err := parseCommand(b)
		if err != nil {
			if !errors.Is(err, ErrBadCommand) || ops != nil {
				t.Fatalf("error %v, ops %v", err, ops)
			}
			return
		}
		var again Command
		for _, o := range ops {
			switch o.kind {
			case opPut:
				again.Put(o.key, o.value)
			case opDelete:
				again.Delete(o.key)
			case opDeleteRange:
				again.DeleteRange(o.key, o.value)
			}
		}
		ops2, err := parseCommand(again.Bytes())
		if err != nil || len(ops2) != len(ops) {
			t.Fatalf("re-encoding: %v, %d ops, want %d", err, len(ops2), len(ops))
		}
	})
}

// fill applies n random commands from index from on, some sealed.
func fill(t *testing.T, f *FSM, rng *rand.Rand, from uint64, n int) uint64 {
	t.Helper()
	idx := from
	for range n {
		resp := f.Apply(cmdLog(idx, func(c *Command) {
			for range 1 + rng.IntN(8) {
				k := []byte(fmt.Sprintf("key-%04d", rng.IntN(500)))
				switch r := rng.IntN(10); {
				case r < 7:
					c.Put(k, bytes.Repeat([]byte{byte(idx)}, rng.IntN(300)))
				case r < 9:
					c.Delete(k)
				default:
					c.DeleteRange(k, []byte(fmt.Sprintf("key-%04d", rng.IntN(500)+500)))
				}
			}
		}))
		require.Nil(t, resp)
		idx++
		if rng.IntN(40) == 0 {
			require.NoError(t, f.Store().Seal())
		}
	}
	return idx
}

func persist(t *testing.T, f *FSM) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	require.NoError(t, err)
	defer snap.Release()
	var sink memSink
	require.NoError(t, snap.Persist(&sink))
	require.True(t, sink.closed)
	return sink.Bytes()
}

// Snapshot, Persist and Restore carry a state to another FSM exactly, while
// Apply goes on after Snapshot; the receiving FSM loses every key the
// snapshot does not hold.
func TestSnapshotRestore(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	mem := vfs.NewMem()
	a := openFSM(t, mem, "/a")
	defer a.Close()
	idx := fill(t, a, rng, 1, 300)
	want := contents(t, a.Store())
	snap, err := a.Snapshot()
	require.NoError(t, err)
	// Writes and a merge after the snapshot was taken change nothing in it.
	idx = fill(t, a, rng, idx, 50)
	require.NoError(t, a.Store().Compact(context.Background()))
	var sink memSink
	require.NoError(t, snap.Persist(&sink))
	snap.Release()

	b := openFSM(t, mem, "/b")
	fill(t, b, rand.New(rand.NewPCG(9, 9)), 1, 40) // state the restore must erase
	require.NoError(t, b.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))))
	require.Equal(t, want, contents(t, b.Store()))
	require.Equal(t, uint64(300), b.AppliedIndex())
	require.NoError(t, b.Close())
	b = openFSM(t, mem, "/b")
	defer b.Close()
	require.Equal(t, want, contents(t, b.Store()))
	require.Equal(t, uint64(300), b.AppliedIndex())
	_ = idx
}

// A node restoring a snapshot of its own current state (raft does this at
// every start unless NoSnapshotRestoreOnStart) copies nothing: every segment
// is already local.
func TestRestoreReusesLocalSegments(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	mem := vfs.NewMem()
	counting := vfs.NewCounting(mem)
	f, err := Open("/a", &Options{Store: &segstore.Options{FS: counting, SegmentSize: 16 << 10, Merge: segstore.MergeOptions{Disable: true}}})
	require.NoError(t, err)
	defer f.Close()
	// Three sealed segments at least, whatever the background does.
	idx := uint64(1)
	for range 3 {
		idx = fill(t, f, rng, idx, 70)
		require.NoError(t, f.Store().Seal())
	}
	want := contents(t, f.Store())
	data := persist(t, f)
	ids := func() (out []uint64) {
		for _, sg := range f.Store().Segments() {
			out = append(out, sg.ID)
		}
		return out
	}
	before := ids()
	require.Greater(t, len(before), 2)
	counting.Reset()
	require.NoError(t, f.Restore(io.NopCloser(bytes.NewReader(data))))
	require.Equal(t, want, contents(t, f.Store()))
	require.Equal(t, before, ids(), "the same files, in the same order")
	for name, n := range counting.Counts().BytesWritten {
		require.False(t, strings.HasSuffix(name, ".seg"), "restore copied %d bytes into %s", n, name)
	}
	// Damage in a segment the restore would reuse, not read, is still
	// caught (by the trailer), before anything changes.
	require.Nil(t, f.Apply(cmdLog(f.AppliedIndex()+1, func(c *Command) { c.Put([]byte("later"), []byte("x")) })))
	now := contents(t, f.Store())
	bad := bytes.Clone(data)
	bad[len(bad)/2] ^= 1
	require.ErrorIs(t, f.Restore(io.NopCloser(bytes.NewReader(bad))), ErrBadSnapshot)
	require.Equal(t, now, contents(t, f.Store()))
}

// A damaged or truncated container is refused and the state is unchanged.
func TestRestoreRefusesDamage(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	mem := vfs.NewMem()
	a := openFSM(t, mem, "/a")
	defer a.Close()
	fill(t, a, rng, 1, 120)
	data := persist(t, a)

	b := openFSM(t, mem, "/b")
	defer b.Close()
	fill(t, b, rand.New(rand.NewPCG(7, 7)), 1, 30)
	keep := contents(t, b.Store())
	keepIdx := b.AppliedIndex()
	check := func(what string, d []byte) {
		t.Helper()
		err := b.Restore(io.NopCloser(bytes.NewReader(d)))
		require.Error(t, err, what)
		require.ErrorIs(t, err, ErrBadSnapshot, what)
		require.Equal(t, keep, contents(t, b.Store()), what)
		require.Equal(t, keepIdx, b.AppliedIndex(), what)
	}
	positions := []int{0, 8, 12, 20, 24, 30, len(data) / 2, len(data) - 9, len(data) - 1}
	for range 20 {
		positions = append(positions, rng.IntN(len(data)))
	}
	for _, p := range positions {
		d := bytes.Clone(data)
		d[p] ^= 0x40
		check(fmt.Sprintf("bit flip at %d of %d", p, len(data)), d)
		check(fmt.Sprintf("cut at %d of %d", p, len(data)), data[:p])
	}
	check("trailing byte", append(bytes.Clone(data), 0))
	// And the intact container still restores.
	require.NoError(t, b.Restore(io.NopCloser(bytes.NewReader(data))))
	require.Equal(t, contents(t, a.Store()), contents(t, b.Store()))
}
